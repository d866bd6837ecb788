"""How one tenant's GPU pods look to capacity, per GPU-sharing mode.

- HAMi (`gpuSharing: hami`): the pod's and node's annotations (capacity.records, labcheck.hami).
- DRA (`gpuSharing: dra`): HAMi-DRA's webhook turns the pod's GPU limits into a ResourceClaim and
  kube-scheduler allocates it a share of a device its plugin publishes; the cards are the
  driver's ResourceSlices, a pod's slices its claims' allocation results (device, consumed
  memory and cores: fact `dra-consumable-capacity-allocation`), its bind time the PodScheduled
  condition's transition.

A view is one reading of a tenant beside its pods (none for HAMi; its claims and slices for DRA).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Protocol

from labcheck import dra
from labcheck.cluster import Cluster, ClusterError, Obj
from labcheck.hami import ANN_ALLOCATED, Slice, node_cards, pending_reason, pod_slices
from labcheck.placement import TenantMap, dra_tenant_map, tenant_map

from .records import bind_time, is_placed, unfit_message


class RegisteredCard(NamedTuple):
    node: str
    uuid: str
    type: str
    devmem: int


class SharingView(Protocol):
    mode: str

    def asks(self, pod: Obj) -> bool: ...  # a pod of this mode's cards (else not counted)
    def placed(self, pod: Obj) -> bool: ...
    def slices(self, pod: Obj) -> list[Slice]: ...
    def unfit(self, pod: Obj) -> str: ...
    def waiting(self, pod: Obj) -> str: ...  # why a pod that is neither is still pending
    def start(self, pod: Obj) -> float | str: ...  # when it got its slices, or why it has none
    def tenant_map(self, tenant: str, nodes: list[Obj], pods: list[Obj]) -> TenantMap: ...
    def cards(self, nodes: list[Obj]) -> list[RegisteredCard]: ...


class HamiView:
    mode = "hami"

    def asks(self, pod: Obj) -> bool:
        return bool((pod.get("metadata", {}).get("annotations") or {}).get(ANN_ALLOCATED))

    def placed(self, pod: Obj) -> bool:
        return is_placed(pod)

    def slices(self, pod: Obj) -> list[Slice]:
        return pod_slices(pod)

    def unfit(self, pod: Obj) -> str:
        return unfit_message(pod)

    def waiting(self, pod: Obj) -> str:
        return pending_reason(pod, []) or "no scheduling verdict yet"

    def start(self, pod: Obj) -> float | str:
        if not self.asks(pod):
            return "no slices allocated by HAMi"
        if not is_placed(pod):
            return "not bound with bind-phase success"
        start = bind_time(pod)
        return "no hami.io/bind-time" if start is None else float(start)

    def tenant_map(self, tenant: str, nodes: list[Obj], pods: list[Obj]) -> TenantMap:
        return tenant_map(tenant, nodes, pods)

    def cards(self, nodes: list[Obj]) -> list[RegisteredCard]:
        return [
            RegisteredCard(n.get("metadata", {}).get("name", ""), c.id, c.type, c.devmem)
            for n in nodes
            for c in node_cards(n)
        ]


def _key(obj: Obj) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass
class DraView:
    claims: list[Obj] = field(default_factory=list)
    resource_slices: list[Obj] = field(default_factory=list)
    mode = "dra"

    def __post_init__(self) -> None:
        self._claims = {_key(c): c for c in self.claims}
        self._cards = dra.cards(self.resource_slices)

    def _pod_claims(self, pod: Obj) -> list[Obj]:
        namespace = pod.get("metadata", {}).get("namespace", "")
        return [self._claims.get(f"{namespace}/{n}", {}) for n in dra.claim_names(pod)]

    def asks(self, pod: Obj) -> bool:
        return bool(dra.claim_names(pod))

    def placed(self, pod: Obj) -> bool:
        return dra.placed(pod, self._pod_claims(pod))

    def slices(self, pod: Obj) -> list[Slice]:
        return [s for c in self._pod_claims(pod) for s in dra.claim_slices(c, self._cards)]

    def unfit(self, pod: Obj) -> str:
        """The scheduler's "cannot allocate all claims", when no card has room for the pod's
        claims either ("" when a card still has room: kube-scheduler retries such a pod only
        when a claim or slice changes, so it waits, and is not a verdict on the cards); or a
        GPU resource the webhook does not convert (a percentage of a card), which no node has."""
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = str(cond.get("message", ""))
                if dra.UNFIT_MESSAGE in message and not self.room_for(pod):
                    return message
                if left := dra.unconverted(pod):
                    # kube-scheduler's NodeResourcesFit: "Insufficient <resource>" on every
                    # node, for a resource no node has; it never changes.
                    return f"{message} (HAMi-DRA's webhook leaves {', '.join(left)} on the pod)"
        return ""

    def waiting(self, pod: Obj) -> str:
        reason = pending_reason(pod, []) or "no scheduling verdict yet"
        if dra.UNFIT_MESSAGE in reason and (room := self.room_for(pod)):
            reason += (
                f" (yet {', '.join(room)} {'has' if len(room) == 1 else 'have'} room: "
                "kube-scheduler tries the pod again when a claim or slice changes)"
            )
        return reason

    def room_for(self, pod: Obj) -> list[str]:
        """The cards with the memory and cores every claim of the pod asks for, one device per
        request counted (what the lab's pods ask); empty when none has."""
        used: dict[str, list[int]] = {}
        for claim in self._claims.values():
            for s in dra.claim_slices(claim, self._cards):
                held = used.setdefault(s.uuid, [0, 0])
                held[0] += s.mem_mb
                held[1] += s.cores
        fits = []
        for card in self._cards.values():
            mem, cores = used.get(card.uuid, [0, 0])
            free_mb, free_cores = card.memory_mb - mem, card.cores - cores
            if all(
                ask_mb <= free_mb and ask_cores <= free_cores
                for ask_mb, ask_cores in self._asked(pod, card)
            ):
                fits.append(f"{card.node}/{card.name}")
        return fits

    def _asked(self, pod: Obj, card: dra.Card) -> list[tuple[int, int]]:
        """(MiB, cores) each request of the pod's claims asks of a card (a request without
        memory takes all of it, as the device's request policy defaults)."""
        out = []
        for claim in self._pod_claims(pod):
            for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                asks = ((request.get("exactly") or {}).get("capacity") or {}).get("requests") or {}
                mem = dra.quantity(asks["memory"]) // 2**20 if "memory" in asks else card.memory_mb
                cores = dra.quantity(asks["cores"]) if "cores" in asks else 0
                out.append((mem, cores))
        return out

    def start(self, pod: Obj) -> float | str:
        if not self.asks(pod):
            return "no ResourceClaim"
        if not self.placed(pod):
            return "not bound with its claims allocated"
        for cond in pod.get("status", {}).get("conditions") or []:
            scheduled = cond.get("type") == "PodScheduled" and cond.get("status") == "True"
            if scheduled and (stamp := cond.get("lastTransitionTime")):
                return _stamp(stamp)
        return "no PodScheduled time"

    def tenant_map(self, tenant: str, nodes: list[Obj], pods: list[Obj]) -> TenantMap:
        return dra_tenant_map(tenant, self.resource_slices, pods, self._claims)

    def cards(self, nodes: list[Obj]) -> list[RegisteredCard]:
        return [
            RegisteredCard(c.node, c.uuid, c.product, c.memory_mb) for c in self._cards.values()
        ]


HAMI = HamiView()


def read_view(mode: str, cl: Cluster, namespace: str | None = None) -> SharingView:
    """The tenant's view for its mode: for DRA, its claims (in `namespace`, or all) and slices."""
    if mode != "dra":
        return HAMI
    claims = cl.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS, namespace)
    return DraView(claims, read_slices(cl))


def read_slices(cl: Cluster) -> list[Obj]:
    try:
        return cl.list_custom(dra.GROUP, dra.VERSION, dra.SLICES)
    except ClusterError as exc:
        if exc.status == 404:  # resource.k8s.io/v1 not served: no cards
            return []
        raise
