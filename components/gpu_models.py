"""GPU models the lab knows by name, with the memory nvidia-smi reports for them.

HAMi accounts memory in MB exactly as the device plugin reads it from NVML, so a simulated
card must report the same figure a real one would, not the marketing size.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuModel:
    product: str  # the name nvidia-smi prints (NVML device name)
    memory_mb: int  # total memory as NVML reports it, in MiB
    cores: int = 100  # HAMi counts compute in percent of one card


KNOWN_GPU_MODELS: dict[str, GpuModel] = {
    "A100-40GB": GpuModel("NVIDIA A100-SXM4-40GB", 40960),
    "A100-80GB": GpuModel("NVIDIA A100-SXM4-80GB", 81920),
    "H100-80GB": GpuModel("NVIDIA H100 80GB HBM3", 81559),
    "L4": GpuModel("NVIDIA L4", 23034),
    "L40S": GpuModel("NVIDIA L40S", 46068),
    "T4": GpuModel("Tesla T4", 15360),
}


def lookup_model(name: str) -> GpuModel | None:
    """Finds a built-in model by name, ignoring case (``a100-80gb`` works too)."""
    folded = name.casefold()
    for key, model in KNOWN_GPU_MODELS.items():
        if key.casefold() == folded:
            return model
    return None


def hami_card_type(product: str) -> str:
    """The type HAMi's device plugin registers: the NVML name, `NVIDIA-` prefixed if it lacks it."""
    return product if product.startswith("NVIDIA") else f"NVIDIA-{product}"


def node_inventory(cards: list[GpuModel], nodes: list[str]) -> dict[str, list[dict[str, object]]]:
    """Per node, the cards as HAMi describes them (type, devmem in MB, devcore in %)."""
    described = [
        {"type": hami_card_type(card.product), "devmem": card.memory_mb, "devcore": card.cores}
        for card in cards
    ]
    return {node: [dict(card) for card in described] for node in nodes}
