"""HAMi v2.10 wire formats the agent reads and writes (checked against upstream v2.10.0)."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable
from typing import Any

from .config import Card

# Node
REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
LOCK_ANNOTATION = "hami.io/mutex.lock"
GPU_RESOURCE = "nvidia.com/gpu"
# Pod
NODE_ANNOTATION = "hami.io/vgpu-node"
TO_ALLOCATE_ANNOTATION = "hami.io/vgpu-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"  # scheduler accounting: never written
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
PHASE_ALLOCATING = "allocating"
PHASE_SUCCESS = "success"
PHASE_FAILED = "failed"
DEVICE_WORD = "NVIDIA"  # a to-allocate value still needs work while it contains this

# Fixed namespace so a card's id only depends on (node, index): re-registering after a
# node comes back yields the same ids, and the scheduler's accounting still matches.
_CARD_NAMESPACE = uuid.UUID("5b1f3d0e-7c1a-4e53-9a43-6b616d616a69")


@functools.lru_cache(maxsize=4096)  # recomputed every pass otherwise (a SHA-1 each)
def card_id(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(_CARD_NAMESPACE, f'{node}/{index}')}"


def register_cards(node: str, cards: Iterable[Card]) -> list[dict[str, Any]]:
    """One object per card, the field set of HAMi's DeviceInfo JSON (>= 2.8)."""
    return [
        {
            "id": card_id(node, i),
            "index": i,
            "count": c.count,
            "devmem": c.devmem,
            "devcore": c.devcore,
            "type": c.type,
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
        for i, c in enumerate(cards)
    ]


def encode_register(cards: list[dict[str, Any]]) -> str:
    return json.dumps(cards, separators=(",", ":"))


@functools.lru_cache(maxsize=256)  # judged on every event of the node otherwise
def register_value(node: str, cards: tuple[Card, ...]) -> str:
    """The annotation value as the agent writes it."""
    return encode_register(register_cards(node, cards))


def decode_register(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None  # garbage is simply "not registered": we overwrite it


def needs_allocation(to_allocate: str) -> bool:
    return DEVICE_WORD in to_allocate


def erase_to_allocate(to_allocate: str) -> str:
    """Every container slot emptied, as the device plugin leaves it after Allocate.

    Upstream decodes the value split on ';' (keeping empty slots, trailing one included)
    and re-encodes each slot followed by ';'. With every slot empty that is one ';' per
    slot: a one-container pod 'UUID,NVIDIA,1024,10:;' becomes ';;'.
    """
    return ";" * (to_allocate.count(";") + 1)


def lock_owner(value: str) -> tuple[str, str] | None:
    """(namespace, pod) of a '<RFC3339>,<ns>,<pod>' lock; None for legacy/malformed values."""
    parts = value.split(",")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def owns_lock(value: str, namespace: str, pod: str) -> bool:
    # Upstream's owner test: the value has a separator and ends with ',<ns>,<pod>'.
    return "," in value and value.endswith(f",{namespace},{pod}")
