"""What HAMi v2.10.0 writes on a pod that capacity reads, beyond labcheck.hami's annotations.

Sources (Project-HAMi/HAMi v2.10.0, docs/upstream-facts/capacity.md):
- `nvidia.com/gpumem-percentage`: charts/hami/values.yaml:27 (resourceMemPercentage), read in
  pkg/device/nvidia/device.go:552; the MB a card gives is `Totalmem * pct / 100` (:780-783).
- `hami.io/bind-time`, `hami.io/vgpu-time`: pkg/util/types.go:20-22, written as Unix seconds
  by Bind (pkg/scheduler/scheduler.go:1031-1034) and Filter (:1126).
- the Filter reasons: pkg/device/common/common.go:25-44 (GenReason: "<n>/<cards> <Reason>").
"""

from __future__ import annotations

from labcheck.cluster import Obj
from labcheck.hami import ANN_BIND_PHASE, PENDING_REASONS

RES_MEM_PERCENT = "nvidia.com/gpumem-percentage"
ANN_BIND_TIME = "hami.io/bind-time"
ANN_FILTER_TIME = "hami.io/vgpu-time"
BIND_SUCCESS = "success"

# Every per-card reason HAMi's NVIDIA Fit can count (common.go), labcheck's list included: a
# pod whose PodScheduled message names one was judged by HAMi's filter, so it did not fit.
FIT_REASONS = tuple(
    dict.fromkeys(
        (
            *PENDING_REASONS,
            "CardTypeMismatch",
            "CardUuidMismatch",
            "CardComputeUnitsExhausted",
            "CardNotHealth",
            "CardCordoned",
            "NumaNotFit",
            "ExclusiveDeviceAllocateConflict",
            "CardNotFoundCustomFilterRule",
            "CardMigTopologyInfeasible",
            "ModeNotFit",
        )
    )
)


def annotations(pod: Obj) -> dict[str, str]:
    return pod.get("metadata", {}).get("annotations") or {}


def bind_time(pod: Obj) -> int | None:
    """When HAMi bound the pod (Unix seconds), or None when it never did (or wrote garbage)."""
    raw = annotations(pod).get(ANN_BIND_TIME, "")
    try:
        return int(raw)
    except ValueError:
        return None


def is_placed(pod: Obj) -> bool:
    """Bound to a node and its devices allocated (bind-phase success, set when the device plugin
    or the lab's agent has handed the slices to the container)."""
    return bool(pod.get("spec", {}).get("nodeName")) and (
        annotations(pod).get(ANN_BIND_PHASE) == BIND_SUCCESS
    )


def unfit_message(pod: Obj) -> str:
    """The PodScheduled=False message when HAMi's filter judged the pod ("" otherwise: still
    waiting, or rejected for a reason that says nothing about the cards)."""
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            message = str(cond.get("message", ""))
            if any(reason in message for reason in FIT_REASONS):
                return message
    return ""
