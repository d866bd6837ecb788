"""The GPUs of each node as HAMi describes them: type (its card name), devmem MB, devcore %."""

from __future__ import annotations

from labconfig.gpu_models import GpuModel


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
