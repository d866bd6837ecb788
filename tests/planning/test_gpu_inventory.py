"""The GPUs per node as HAMi describes them (planning/gpu_inventory.py)."""

from __future__ import annotations

from labconfig.gpu_models import GpuModel
from planning.gpu_inventory import hami_card_type, node_inventory


def test_card_types_as_hami_registers_them():
    assert hami_card_type("NVIDIA L4") == "NVIDIA L4"
    assert hami_card_type("Tesla T4") == "NVIDIA-Tesla T4"


def test_every_node_carries_all_the_cards_as_its_own_copy():
    l4 = GpuModel(product="NVIDIA L4", memory_mb=23034)
    t4 = GpuModel(product="Tesla T4", memory_mb=15360, cores=50)
    inventory = node_inventory([l4, t4], ["w1", "w2"])
    assert inventory == {
        node: [
            {"type": "NVIDIA L4", "devmem": 23034, "devcore": 100},
            {"type": "NVIDIA-Tesla T4", "devmem": 15360, "devcore": 50},
        ]
        for node in ("w1", "w2")
    }
    inventory["w1"][0]["devmem"] = 1  # the agent edits a node's list; the other keeps its own
    assert inventory["w2"][0]["devmem"] == 23034
