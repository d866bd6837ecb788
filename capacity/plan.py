"""Pure planning: the pods a mix asks for, their manifests and the order they are created in."""

from __future__ import annotations

from dataclasses import dataclass

from labcheck.cluster import Obj
from labcheck.hami import RES_CORES, RES_GPU, RES_MEM

from . import ENTRY_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RUN_ID_LABEL
from .mix import Entry, Mix
from .records import RES_MEM_PERCENT


@dataclass(frozen=True)
class PlannedPod:
    tenant: str
    entry: str
    name: str
    gpus: int
    duration: int | None  # seconds the mix says the pod runs; None: as long as it lives


def run_labels(run_id: str, entry: str = "") -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, RUN_ID_LABEL: run_id}
    if entry:
        labels[ENTRY_LABEL] = entry
    return labels


def namespace_name(run_id: str) -> str:
    return f"capacity-{run_id}"


# The pods' one container. In a DRA tenant its name ends each claim's name (fact
# `hami-dra-webhook-claim`): `<namespace>-<pod>-slice`.
CONTAINER = "slice"


def pod_name(run_id: str, entry: str, i: int, shared: bool = False) -> str:
    """`<entry>-<i>` in the run's own namespace (`capacity-<run>` names the run), so that in a
    DRA tenant every claim name `<namespace>-<pod>-slice` stays within the API server's 63
    characters for every entry name the mix allows; `cap-<run>-<entry>-<i>` in a namespace
    shared with other runs (--namespace), where the run id keeps them apart."""
    return f"cap-{run_id}-{entry}-{i}" if shared else f"{entry}-{i}"


def plan_pods(mix: Mix, run_id: str, shared: bool = False) -> list[PlannedPod]:
    """Every pod of the mix, in creation order: entry by entry, as the file lists them; in a
    comparison (Mix.in_tenants) each pod in every tenant in turn, so each tenant sees the same
    pace of creates. `shared`: the pods go to a namespace of the user's (--namespace)."""
    width = len(mix.compared) or 1
    groups = [mix.entries[i : i + width] for i in range(0, len(mix.entries), width)]
    return [
        PlannedPod(e.tenant, e.name, pod_name(run_id, e.name, i, shared), e.gpus, e.duration)
        for group in groups
        for i in range(group[0].count)
        for e in group
    ]


def limits(entry: Entry) -> dict[str, str]:
    """The container's HAMi limits (HAMi reads limits first, then requests)."""
    out = {RES_GPU: str(entry.gpus)}
    if entry.gpumem.percent is not None:
        out[RES_MEM_PERCENT] = str(entry.gpumem.percent)
    else:
        out[RES_MEM] = str(entry.gpumem.mb)
    if entry.gpucores:
        out[RES_CORES] = str(entry.gpucores)
    return out


# HAMi v2.10's Bind waits for a held node lock (polling, up to --node-lock-retry-timeout) only
# for pods with this label; any other pod's Bind fails at once and waits out kube-scheduler's
# error backoff (up to 10 s a try), which made the last pod of a burst take 30-50 s
# (facts `hami-v2.10-pod-group-bind-waits-for-lock`, `kube-scheduler-bind-error-backoff`;
# docs/placement-time.md). kube-scheduler itself ignores the label without the coscheduling
# plugin, which HAMi's scheduler does not run. The tenant's API server gives the same wait to
# GPU pods without a group (builders/lock_wait_policy.py); this one keeps the run's pods apart
# on tenants without that policy.
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def pod_manifest(entry: Entry, name: str, run_id: str, image: str) -> Obj:
    """A pause pod holding the entry's slices; it does no work, it only occupies the cards.
    The run's pods form one pod group, so a burst binds as fast as HAMi's lock allows."""
    labels = {**run_labels(run_id, entry.name), POD_GROUP_LABEL: f"capacity-{run_id}"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {"name": CONTAINER, "image": image, "resources": {"limits": limits(entry)}}
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,  # gone at once on cleanup: the slices free up
            "automountServiceAccountToken": False,
        },
    }
