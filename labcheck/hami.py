"""HAMi knowledge: annotation formats and the placement rules of lab-facts 6.2/6.3."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .cluster import Obj

RES_GPU = "nvidia.com/gpu"
RES_MEM = "nvidia.com/gpumem"
RES_CORES = "nvidia.com/gpucores"
ANN_NODE = "hami.io/vgpu-node"
ANN_ALLOCATED = "hami.io/vgpu-devices-allocated"
ANN_BIND_PHASE = "hami.io/bind-phase"
ANN_LOCK = "hami.io/mutex.lock"
ANN_REGISTER = "hami.io/node-nvidia-register"
ANN_NODE_POLICY = "hami.io/node-scheduler-policy"
ANN_GPU_POLICY = "hami.io/gpu-scheduler-policy"
QUOTA_MEM_KEY = "limits.nvidia.com/gpumem"
SCHEDULER = "hami-scheduler"

# The chart's Service "<fullname>-scheduler" (release "hami": "hami-scheduler") in the release
# namespace (spec hamiNamespace) serves the webhook. It selects only the pod labelled
# hami.io/scheduler-role=leader, which the extender sets on its register tick
# (charts/hami/templates/scheduler/service.yaml, pkg/scheduler/scheduler.go register).
SCHEDULER_SERVICE = "hami-scheduler"
# The extender re-reads node registrations only on node add and on this tick
# (pkg/scheduler/scheduler.go RegisterFromNodeAnnotations); until then its filter fails a node
# with this text, which kube-scheduler puts in the PodScheduled condition as
# "0/1 nodes are available: 1 node unregistered. preemption: ...".
REGISTER_TICK_SECONDS = 15
NODE_UNREGISTERED = "node unregistered"
# HAMi's webhook denies a pod over a GPU quota with admission.Denied (HTTP 403); the API server
# wraps it as 'pods "<name>" is forbidden: admission webhook "vgpu.hami.io" denied the request:
# exceeding resource quota'. Kubernetes' own quota admission says "exceeded quota" instead.
WEBHOOK_NAME = "vgpu.hami.io"
QUOTA_DENIAL = f'admission webhook "{WEBHOOK_NAME}" denied the request: exceeding resource quota'

# Filter failure reasons HAMi reports when no card has room (pkg/device/common), plus its event
# reason. NODE_UNREGISTERED is not one of them: it says nothing about the cards.
PENDING_REASONS = (
    "CardInsufficientMemory",
    "CardInsufficientCore",
    "NodeInsufficientDevice",
    "AllocatedCardsInsufficientRequest",
    "NodeUnfitPod",
    "CardTimeSlicingExhausted",
    "ResourceQuotaNotFit",
    "FilteringFailed",
)


@dataclass(frozen=True)
class Slice:
    uuid: str
    mem_mb: int
    cores: int


def parse_allocated(value: str) -> list[list[Slice]]:
    """`UUID,NVIDIA,<MB>,<cores>:` per device, `;` per container -> slices per container."""
    containers: list[list[Slice]] = []
    for part in value.split(";"):
        devs: list[Slice] = []
        for dev in part.split(":"):
            fields = dev.strip().split(",")
            if len(fields) < 4 or not fields[0]:
                continue
            try:
                devs.append(Slice(fields[0], int(fields[2]), int(fields[3])))
            except ValueError:
                continue
        containers.append(devs)
    while containers and not containers[-1]:
        containers.pop()
    return containers


def pod_slices(pod: Obj) -> list[Slice]:
    ann = pod.get("metadata", {}).get("annotations") or {}
    return [s for c in parse_allocated(ann.get(ANN_ALLOCATED, "")) for s in c]


@dataclass
class CardState:
    id: str
    type: str
    devmem: int
    devcore: int
    count: int
    used: int = 0
    usedmem: int = 0
    usedcores: int = 0

    def score(self) -> float:
        return 10 * (
            self.used / self.count + self.usedcores / self.devcore + self.usedmem / self.devmem
        )

    def fits(self, mem: int, cores: int) -> bool:
        if self.used >= self.count or self.devmem - self.usedmem < mem:
            return False
        if self.devcore - self.usedcores < cores:
            return False
        if cores >= 100 and self.used > 0:  # a whole-card core request needs an idle card
            return False
        return not (cores == 0 and self.usedcores >= self.devcore)

    def largest_free_mb(self) -> int:
        """The most memory the next pod can still get on this card: its free memory while a
        slot is left and the cores are not all taken (a 0-core pod needs that too), else 0."""
        free = self.devmem - self.usedmem
        return free if self.fits(free, 0) else 0

    def take(self, mem: int, cores: int) -> None:
        self.used += 1
        self.usedmem += mem
        self.usedcores += cores


def parse_register(value: str) -> list[CardState]:
    """The node register annotation (HAMi >= 2.8: JSON array of cards)."""
    data: Any = json.loads(value)
    if not isinstance(data, list):
        raise ValueError("register annotation is not a JSON array")
    cards = []
    for d in data:
        cards.append(
            CardState(
                str(d["id"]), str(d["type"]), int(d["devmem"]), int(d["devcore"]), int(d["count"])
            )
        )
    return cards


def node_cards(node: Obj) -> list[CardState]:
    ann = node.get("metadata", {}).get("annotations") or {}
    raw = ann.get(ANN_REGISTER)
    return parse_register(raw) if raw else []


def holds_slices_on(pod: Obj, node: str) -> bool:
    """Whether HAMi's scheduler cache counts the pod's slices on `node`: it carries the node
    annotation and has not ended. A terminating pod (deletionTimestamp) still counts until it
    is gone or ends."""
    ann = pod.get("metadata", {}).get("annotations") or {}
    return ann.get(ANN_NODE) == node and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def apply_usage(cards: list[CardState], pods: list[Obj], node: str) -> None:
    """Count the slices on `node` as used, the way the scheduler's cache does."""
    by_id = {c.id: c for c in cards}
    for p in pods:
        if not holds_slices_on(p, node):
            continue
        for s in pod_slices(p):
            if s.uuid in by_id:
                by_id[s.uuid].take(s.mem_mb, s.cores)


def pick_card(cards: list[CardState], mem: int, cores: int, policy: str) -> CardState | None:
    """Predict the card HAMi chooses (binpack: most used, spread: least used; ties: last)."""
    fitting = [(i, c) for i, c in enumerate(cards) if c.fits(mem, cores)]
    if not fitting:
        return None
    sign = 1 if policy == "binpack" else -1
    # Highest key wins; the index breaks ties toward the card listed last.
    return max(fitting, key=lambda ic: (sign * ic[1].score(), ic[0]))[1]


def take_cards(cards: list[CardState], mem: int, cores: int, gpus: int, policy: str) -> list[str]:
    """Predict the `gpus` distinct cards HAMi gives a container (each fitting its slice) and
    take them; their ids, or [] with nothing taken when fewer fit."""
    left: list[CardState] = list(cards)
    chosen: list[CardState] = []
    for _ in range(gpus):
        card = pick_card(left, mem, cores, policy)
        if card is None:
            return []
        chosen.append(card)
        left.remove(card)
    for card in chosen:
        card.take(mem, cores)
    return [c.id for c in chosen]


@dataclass
class Prediction:
    cards: list[str] = field(default_factory=list)  # card id per pod, "" when none fits


def predict(cards: list[CardState], requests: list[tuple[int, int]], policy: str) -> Prediction:
    out = Prediction()
    for mem, cores in requests:
        c = pick_card(cards, mem, cores, policy)
        out.cards.append(c.id if c else "")
        if c:
            c.take(mem, cores)
    return out


def pending_reason(pod: Obj, events: list[Obj]) -> str:
    """The scheduling failure text seen for a pending pod (conditions, then events)."""
    texts = []
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            texts.append(f"{cond.get('reason', '')}: {cond.get('message', '')}")
    for ev in events:
        texts.append(f"{ev.get('reason', '')}: {ev.get('message', '')}")
    return " | ".join(t for t in texts if t.strip(": "))


def is_hami_reason(text: str) -> bool:
    return any(r in text for r in PENDING_REASONS)


def quantity_int(value: Any) -> int:
    """Integer extended-resource quantities ('10', 10); other suffixes are not expected."""
    s = str(value).strip()
    if s.endswith("k"):
        return int(s[:-1]) * 1000
    return int(float(s))
