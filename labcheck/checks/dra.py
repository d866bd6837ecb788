"""A DRA tenant's cards: each worker publishes them as shareable devices; and one GPU-sharing
mode per tenant (HAMi-DRA in a DRA tenant only, HAMi in a HAMi tenant only)."""

from __future__ import annotations

from ..cluster import ClusterError
from ..context import RunContext
from ..dra import DRIVER, GROUP, VERSION, capacity, devices_by_node
from ..hami import ANN_REGISTER
from ..result import CheckFailed, Evidence
from ..spec import Tenant

GATE_CAUSE = (
    "the tenant's API server drops allowMultipleAllocations and requestPolicy while "
    "DRAConsumableCapacity is off (v1.34-v1.35: the TenantControlPlane's extraArgs)"
)
PLUGIN_CAUSE = "HAMi-DRA's fake kubelet plugin is not running on the node, or its config lacks it"


def _slices(ctx: RunContext, t: Tenant) -> list[dict]:
    try:
        return ctx.tenant(t).list_custom(GROUP, VERSION, "resourceslices")
    except ClusterError as exc:
        if exc.status == 404:  # resource.k8s.io/v1 not served (before v1.34): no slices
            return []
        raise


def slices(ctx: RunContext, t: Tenant) -> Evidence:
    published = devices_by_node(_slices(ctx, t))
    lines = []
    for node in t.nodes:
        cards = t.gpus.get(node, [])
        devices = published.get(node, [])
        if len(devices) != len(cards):
            raise CheckFailed(
                f"{node}: {len(cards)} device(s) of {DRIVER}",
                f"{len(devices)} published",
                PLUGIN_CAUSE,
            )
        for card, device in zip(cards, devices, strict=True):
            name = device.get("name", "?")
            if device.get("allowMultipleAllocations") is not True:
                raise CheckFailed(
                    f"{node}/{name} shareable", "allowMultipleAllocations unset", GATE_CAUSE
                )
            memory_mb, cores = capacity(device, "memory") // 2**20, capacity(device, "cores")
            if (memory_mb, cores) != (card.devmem, card.devcore):
                raise CheckFailed(
                    f"{node}/{name}: {card.devmem} MB, {card.devcore} % cores",
                    f"{memory_mb} MB, {cores} % cores",
                    "the fake plugin's config differs from the stack's gpus",
                )
            lines.append(f"{node}/{name}: {memory_mb} MB, {cores} % cores, shareable")
    foreign = sorted(set(published) - set(t.nodes))
    if foreign:
        raise CheckFailed(f"devices on {t.nodes} only", f"also on {foreign}", PLUGIN_CAUSE)
    return Evidence(f"{len(lines)} card(s) published as shareable devices", lines)


def one_mode(ctx: RunContext, t: Tenant) -> str:
    if t.gpu_sharing == "dra":
        registered = [
            n["metadata"]["name"]
            for n in ctx.tenant(t).list_nodes()
            if ANN_REGISTER in ((n.get("metadata") or {}).get("annotations") or {})
        ]
        if registered:
            raise CheckFailed(
                "no HAMi device registration in a DRA tenant",
                f"HAMi registered cards on {registered}",
                "HAMi's device plugin runs beside HAMi-DRA; HAMi asks for one mode per cluster",
            )
        return "no HAMi device registration on any node"
    published = sorted(devices_by_node(_slices(ctx, t)))
    if published:
        raise CheckFailed(
            f"no {DRIVER} devices in a HAMi tenant",
            f"published on {published}",
            "HAMi-DRA's plugin runs beside HAMi; HAMi asks for one mode per cluster",
        )
    return f"no {DRIVER} devices published"
