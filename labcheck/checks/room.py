"""Whether the tenant's own GPU pods leave a check room for its pods.

labcheck's GPU checks place pods of their own and expect HAMi to allocate them. On a lab where
the user's workloads already hold the cards (the README's examples fill tenant-a's A100), a
check whose pods cannot be placed beside them proves nothing about HAMi: it is skipped, naming
the pods that hold the room, instead of failing on a healthy lab. A check whose pods fit runs
as usual; so does any check on cards that only labcheck's own pods hold (a failure there is the
lab's)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from ..cluster import Obj
from ..hami import (
    ANN_GPU_POLICY,
    RES_CORES,
    RES_GPU,
    RES_MEM,
    CardState,
    apply_usage,
    holds_slices_on,
    node_cards,
    quantity_int,
    take_cards,
)
from ..result import CheckSkipped
from ..spec import Tenant

SHOWN_HOLDERS = 3


@dataclass(frozen=True)
class Ask:
    """What one of a check's pods asks HAMi for, and where it may go."""

    mem_mb: int
    cores: int
    gpus: int
    nodes: tuple[str, ...]
    policy: str  # the card policy HAMi applies to it: binpack or spread


def ask_of(body: Obj, nodes: Sequence[str], default_policy: str) -> Ask:
    """The ask of a pod labcheck builds (labcheck.objects.gpu_pod): one container's limits."""
    limits = body["spec"]["containers"][0]["resources"]["limits"]
    wanted = (body["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
    policy = (body["metadata"].get("annotations") or {}).get(ANN_GPU_POLICY, default_policy)
    return Ask(
        mem_mb=quantity_int(limits.get(RES_MEM, 0)),
        cores=quantity_int(limits.get(RES_CORES, 0)),
        gpus=quantity_int(limits.get(RES_GPU, 1)),
        nodes=(wanted,) if wanted else tuple(nodes),
        policy=policy,
    )


def all_placed(cards: dict[str, list[CardState]], asks: Sequence[Ask], *, one_card: bool) -> bool:
    """Whether every ask finds its cards, in order, on the cards as they are used now (HAMi's
    own fit rules, labcheck.hami.CardState.fits); with `one_card`, all on the same card."""
    taken: set[str] = set()
    for ask in asks:
        ids = _first_node_with_room(cards, ask)
        if not ids:
            return False
        taken.update(ids)
    return not one_card or len(taken) <= 1


def _first_node_with_room(cards: dict[str, list[CardState]], ask: Ask) -> list[str]:
    for node in ask.nodes:
        if node in cards and (
            ids := take_cards(cards[node], ask.mem_mb, ask.cores, ask.gpus, ask.policy)
        ):
            return ids
    return []


def _is_labchecks(pod: Obj) -> bool:
    labels = pod.get("metadata", {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE


def holders(pods: Sequence[Obj], nodes: Sequence[str]) -> list[str]:
    """namespace/name of every pod not labcheck's own that holds slices on the nodes' cards."""
    return [
        f"{p['metadata'].get('namespace', '')}/{p['metadata']['name']}"
        for p in pods
        if not _is_labchecks(p) and any(holds_slices_on(p, n) for n in nodes)
    ]


def skip_unless_room(
    t: Tenant, get_node: Callable[[str], Obj], pods: Sequence[Obj], bodies: Sequence[Obj], *,
    one_card: bool = False,
) -> None:  # fmt: skip
    """Raise CheckSkipped when the tenant's own GPU pods hold the room `bodies` need. The
    tenant's GPU nodes are read (`get_node`) only when pods not labcheck's hold slices there."""
    nodes = t.gpu_nodes()
    held_by = holders(pods, nodes)
    if not held_by:
        return
    cards = {}
    for name in nodes:
        cards[name] = node_cards(get_node(name))
        apply_usage(cards[name], list(pods), name)
    asks = [ask_of(b, nodes, t.scheduler_policy.gpu) for b in bodies]
    if all_placed(cards, asks, one_card=one_card):
        return
    shown = ", ".join(held_by[:SHOWN_HOLDERS])
    more = f" and {len(held_by) - SHOWN_HOLDERS} more" if len(held_by) > SHOWN_HOLDERS else ""
    where = "on one card " if one_card else ""
    raise CheckSkipped(
        f"{len(held_by)} GPU pod(s) of yours hold the room: delete them to rerun "
        f"({shown}{more}); this check's {len(bodies)} pod(s) do not fit {where}beside them on "
        f"{t.name}'s cards"
    )
