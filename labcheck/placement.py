"""The placement model: what HAMi placed on each card, from pods and nodes as the API sends them.

Pure: the check reads the objects, the picture and the reports only draw this model. Parsing and
HAMi's counting rules are labcheck.hami's (the annotations of lab-facts 6.1/6.2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import dra
from .cluster import Obj
from .hami import CardState, holds_slices_on, node_cards, pod_slices


@dataclass(frozen=True)
class Segment:
    """One pod's share of one card (its containers' slices on that card added up)."""

    pod: str  # namespace/name
    mem_mb: int
    cores: int  # HAMi's gpucores: percent of the card's compute, 0 = no limit asked


@dataclass(frozen=True)
class CardMap:
    node: str
    index: int  # position in the node's registration
    id: str
    type: str
    devmem: int
    devcore: int
    count: int  # split count: how many slices the card takes (0: no limit, a DRA device)
    segments: tuple[Segment, ...]
    used_mb: int
    used_cores: int
    slots_used: int
    largest_free_mb: int  # what the next pod can still get here (0: no slot or no cores left)

    @property
    def free_mb(self) -> int:
        return self.devmem - self.used_mb

    @property
    def no_room(self) -> str:
        """Why the next pod gets nothing here ("" while it can get something)."""
        if self.largest_free_mb:
            return ""
        if self.free_mb <= 0:
            return "memory full"
        if self.count and self.slots_used >= self.count:
            return f"all {self.count} slots taken"
        return "cores all taken"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "index": self.index,
            "id": self.id,
            "type": self.type,
            "devmem": self.devmem,
            "devcore": self.devcore,
            "count": self.count,
            "usedMb": self.used_mb,
            "freeMb": self.free_mb,
            "usedCores": self.used_cores,
            "slotsUsed": self.slots_used,
            "largestFreeMb": self.largest_free_mb,
            "segments": [
                {"pod": s.pod, "memMb": s.mem_mb, "cores": s.cores} for s in self.segments
            ],
        }


@dataclass(frozen=True)
class TenantMap:
    tenant: str
    cards: tuple[CardMap, ...]
    # Slices on a card no node registers: "namespace/name on <uuid>" (accounting broken).
    stray: tuple[str, ...] = ()
    # The check whose pods were all allocated when this was read; None: read live, at the end.
    during: str | None = None

    @property
    def source(self) -> str:
        return f"during {self.during}" if self.during else "live"

    @property
    def segment_count(self) -> int:
        return sum(len(c.segments) for c in self.cards)

    @property
    def pods(self) -> tuple[str, ...]:
        return tuple(sorted({s.pod for c in self.cards for s in c.segments}))

    @property
    def allocated_mb(self) -> int:
        return sum(c.used_mb for c in self.cards)

    @property
    def total_mb(self) -> int:
        return sum(c.devmem for c in self.cards)

    @property
    def largest_free_mb(self) -> int:
        """The largest pod (one card) the tenant can still place."""
        return max((c.largest_free_mb for c in self.cards), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "cards": [c.to_json() for c in self.cards],
            "pods": len(self.pods),
            "allocatedMb": self.allocated_mb,
            "totalMb": self.total_mb,
            "largestFreeMb": self.largest_free_mb,
            "stray": list(self.stray),
            "during": self.during,
        }


def pod_key(pod: Obj) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _node_cards(
    node: str, cards: list[CardState], pods: list[Obj], stray: list[str]
) -> list[CardMap]:
    by_id = {c.id: c for c in cards}
    shares: dict[str, dict[str, list[int]]] = {c.id: {} for c in cards}
    for pod in sorted(pods, key=pod_key):
        if not holds_slices_on(pod, node):
            continue
        for s in pod_slices(pod):
            card = by_id.get(s.uuid)
            if card is None:
                stray.append(f"{pod_key(pod)} on {s.uuid}")
                continue
            card.take(s.mem_mb, s.cores)
            share = shares[card.id].setdefault(pod_key(pod), [0, 0])
            share[0] += s.mem_mb
            share[1] += s.cores
    return [
        CardMap(
            node=node,
            index=i,
            id=c.id,
            type=c.type,
            devmem=c.devmem,
            devcore=c.devcore,
            count=c.count,
            segments=tuple(Segment(p, m, k) for p, (m, k) in shares[c.id].items()),
            used_mb=c.usedmem,
            used_cores=c.usedcores,
            slots_used=c.used,
            largest_free_mb=c.largest_free_mb(),
        )
        for i, c in enumerate(cards)
    ]


def tenant_map(tenant: str, nodes: list[Obj], pods: list[Obj]) -> TenantMap:
    """Every registered card of every node, split into the slices live pods hold on it."""
    cards: list[CardMap] = []
    stray: list[str] = []
    for node in sorted(nodes, key=lambda n: n.get("metadata", {}).get("name", "")):
        name = node.get("metadata", {}).get("name", "")
        cards += _node_cards(name, node_cards(node), pods, stray)
    return TenantMap(tenant, tuple(cards), tuple(stray))


def dra_tenant_map(
    tenant: str, slices: list[Obj], pods: list[Obj], claims: dict[str, Obj]
) -> TenantMap:
    """A DRA tenant's cards from its driver's slices, split into the shares the scheduler
    allocated to the claims of live pods (`claims` by "namespace/name"). A device has no slot
    count; the next pod gets its free memory (one asking no cores takes none, as in HAMi)."""
    known = dra.cards(slices)
    shares: dict[str, dict[str, list[int]]] = {c.uuid: {} for c in known.values()}
    stray: list[str] = []
    for pod in sorted(pods, key=pod_key):
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        namespace = pod.get("metadata", {}).get("namespace", "")
        for name in dra.claim_names(pod):
            for s in dra.claim_slices(claims.get(f"{namespace}/{name}", {}), known):
                if s.uuid not in shares:
                    stray.append(f"{pod_key(pod)} on {s.uuid}")
                    continue
                share = shares[s.uuid].setdefault(pod_key(pod), [0, 0])
                share[0] += s.mem_mb
                share[1] += s.cores
    cards = []
    ordered = sorted(known.values(), key=lambda c: c.node)  # stable: published order per node
    for c in ordered:
        held = shares[c.uuid]
        used_mb = sum(m for m, _ in held.values())
        index = [k for k in ordered if k.node == c.node].index(c)
        cards.append(
            CardMap(
                node=c.node,
                index=index,
                id=c.uuid,
                type=c.product,
                devmem=c.memory_mb,
                devcore=c.cores,
                count=0,
                segments=tuple(Segment(p, m, k) for p, (m, k) in held.items()),
                used_mb=used_mb,
                used_cores=sum(k for _, k in held.values()),
                slots_used=len(held),
                largest_free_mb=max(c.memory_mb - used_mb, 0),
            )
        )
    return TenantMap(tenant, tuple(cards), tuple(stray))
