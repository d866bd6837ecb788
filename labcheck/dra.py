"""What a DRA tenant's cards look like to the API: HAMi-DRA's driver and the slices it publishes
(builders/hami_dra.py writes them; a test keeps the two in step)."""

from __future__ import annotations

from typing import Any

GROUP, VERSION = "resource.k8s.io", "v1"
DRIVER = "hami-core-gpu.project-hami.io"
_BINARY = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(text: str) -> int:
    """An integral Kubernetes quantity (`81920Mi`, `80Gi`, `20971520k`, `100`) as a number."""
    for suffix, factor in {**_BINARY, **_DECIMAL}.items():
        if suffix and text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def devices_by_node(slices: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The driver's devices per node, from its node-local slices."""
    found: dict[str, list[dict[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec", {})
        if spec.get("driver") == DRIVER and spec.get("nodeName"):
            found.setdefault(spec["nodeName"], []).extend(spec.get("devices") or [])
    return found


def capacity(device: dict[str, Any], name: str) -> int:
    value = (device.get("capacity") or {}).get(name, {}).get("value")
    return quantity(value) if value is not None else 0
