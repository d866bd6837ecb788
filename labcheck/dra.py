"""What a DRA tenant's cards look like to the API: HAMi-DRA's driver and the slices it publishes
(builders/hami_dra.py writes them; a test keeps the two in step)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .hami import Slice

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


# kube-scheduler's DynamicResources plugin, when no node has devices for a pod's claims
# (fact `dra-consumable-capacity-allocation`): the pod's PodScheduled=False message names it.
UNFIT_MESSAGE = "cannot allocate all claims"
CLAIMS, SLICES = "resourceclaims", "resourceslices"
# What HAMi-DRA's webhook turns into a claim; any other nvidia.com/ limit (gpumem-percentage)
# stays on the pod as an extended resource no node has (fact `hami-dra-webhook-claim`).
CONVERTED = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")
# The webhook names a pod's claim in its spec.resourceClaims, which the API server limits to a
# DNS label: a longer claim name refuses the pod, after the webhook made the claim.
CLAIM_NAME_LIMIT = 63


def webhook_claim_name(namespace: str, pod: str, container: str) -> str:
    """The claim HAMi-DRA v0.2.0's webhook makes for a container that asks `nvidia.com/gpu`:
    `<namespace>-<pod>-<container>`, never shortened (fact `hami-dra-webhook-claim`)."""
    return f"{namespace}-{pod}-{container}"


def webhook_claim_names(namespace: str, pod: dict[str, Any]) -> list[str]:
    """The claims the webhook makes for a pod that has its name (not a generateName)."""
    return [
        webhook_claim_name(namespace, pod["metadata"]["name"], c["name"])
        for c in pod.get("spec", {}).get("containers") or []
        if CONVERTED[0] in ((c.get("resources") or {}).get("limits") or {})
    ]


@dataclass(frozen=True)
class Card:
    """One device of the driver as its node-local slice publishes it."""

    node: str
    pool: str
    name: str
    uuid: str
    product: str
    memory_mb: int
    cores: int


def _attribute(device: dict[str, Any], name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(value.get("string", ""))


def cards(slices: list[dict[str, Any]]) -> dict[tuple[str, str], Card]:
    """Every device of the driver by (pool, device name), the key an allocation result uses."""
    found: dict[tuple[str, str], Card] = {}
    for item in slices:
        spec = item.get("spec", {})
        if spec.get("driver") != DRIVER or not spec.get("nodeName"):
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            name = device.get("name", "")
            found[(pool, name)] = Card(
                node=spec["nodeName"],
                pool=pool,
                name=name,
                uuid=_attribute(device, "uuid") or f"{pool}/{name}",
                product=_attribute(device, "productName"),
                memory_mb=capacity(device, "memory") // 2**20,
                cores=capacity(device, "cores"),
            )
    return found


def claim_names(pod: dict[str, Any]) -> list[str]:
    """The claims a pod uses: named in its spec, or (from a template) in its status."""
    named = [
        c["resourceClaimName"]
        for c in pod.get("spec", {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    generated = [
        s["resourceClaimName"]
        for s in pod.get("status", {}).get("resourceClaimStatuses") or []
        if s.get("resourceClaimName")
    ]
    return list(dict.fromkeys(named + generated))


def allocation_results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    """The driver's devices the scheduler allocated to a claim (empty: not allocated)."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
    return [r for r in results.get("results") or [] if r.get("driver") == DRIVER]


def claim_slices(claim: dict[str, Any], known: dict[tuple[str, str], Card]) -> list[Slice]:
    """A claim's shares of cards as HAMi's slices: card UUID, MiB and cores consumed (a device
    allocated without consumed capacity is held whole)."""
    out = []
    for result in allocation_results(claim):
        card = known.get((result.get("pool", ""), result.get("device", "")))
        consumed = result.get("consumedCapacity") or {}
        uuid = card.uuid if card else f"{result.get('pool')}/{result.get('device')}"
        whole_mb, whole_cores = (card.memory_mb, card.cores) if card else (0, 0)
        mem = quantity(consumed["memory"]) // 2**20 if "memory" in consumed else whole_mb
        cores = quantity(consumed["cores"]) if "cores" in consumed else whole_cores
        out.append(Slice(uuid, mem, cores))
    return out


def placed(pod: dict[str, Any], claims: list[dict[str, Any]]) -> bool:
    """Bound to a node with every claim it uses allocated (`claims`: the pod's, read back)."""
    return (
        bool(pod.get("spec", {}).get("nodeName"))
        and bool(claims)
        and all(allocation_results(c) for c in claims)
    )


def unconverted(pod: dict[str, Any]) -> list[str]:
    """The nvidia.com/ limits HAMi-DRA's webhook left on a pod it rewrote."""
    left: set[str] = set()
    for container in pod.get("spec", {}).get("containers") or []:
        limits = (container.get("resources") or {}).get("limits") or {}
        left |= {k for k in limits if k.startswith("nvidia.com/") and k not in CONVERTED}
    return sorted(left)
