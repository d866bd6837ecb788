"""Bursts of GPU pods on one node through the real kube-scheduler: as a user creates them, and
as the capacity tool does.

The real kube-scheduler v1.35.4 with the profile and extender HAMi v2.10.0's chart renders, an
extender in Python that plays HAMi's Filter, node lock and Bind as its source does, with HAMi's
one rate-limited client and its calls per poll, per lock and per Bind (hami_extender.py), the
real gpu_agent process completing allocations and freeing the lock (as the lab deploys it,
test_agent_real.start_agent), kwok as the kubelet, and the real kube-apiserver with the flags and
the admission policy the program gives a tenant. tenant-b's node: two L4 cards.

HAMi takes the node lock in Bind, not Filter; a Bind that meets a held lock fails, which
kube-scheduler treats as an error: the pod waits out its backoff (1 s, doubling, up to 10 s) in
the error backoff queue, which no cluster event shortens (fact
``kube-scheduler-bind-error-backoff``). A PodGroup member's Bind instead waits for the lock
(``hami-v2.10-pod-group-bind-waits-for-lock``), and the tenant's API server makes every GPU pod
HAMi places a member (builders/lock_wait_policy.py). docs/placement-time.md has the
measurements.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Iterator

import pytest
from controlplane import ControlPlane, ControlPlaneError, wait_until
from hami_extender import POD_GROUP_LABEL
from hami_placement import PlacementLab, delete_all_pods, placement_lab_on_new_plane, report
from test_agent_real import (
    GPU_NODE,
    LOCK,
    PHASE,
    PROCESS_TENANT,
    WORK_NS,
    annotations,
    gpu_pod,
)

from builders.lock_wait_policy import POD_GROUP_VALUE, policy_manifests
from capacity.mix import parse_mix
from capacity.plan import pod_manifest

# What a user's burst may cost on one node with the program's settings. The real HAMi met
# median <= 2 s, last <= 5 s for 20 pods and last <= 12 s for 50 (docs/placement-time.md); the
# stand-in's 20-pod median gets 0.5 s more for a 2-core machine with its other core busy
# (measured: 0.7-1.3 s idle, 1.9 s at load 5.5). Without the policy the last of 20 comes after
# 30-53 s, and at HAMi's former 50/100 the last of 50 after 14-18 s: both fail these.
TARGETS = {20: (2.5, 5.0), 50: (None, 12.0)}
# Without the pod-group wait some of 20 pods still wait at 8 s (measured: the last after 30-53 s).
FEW_SECONDS = 8.0
LARGE_BURST = 50
LARGE_SPLIT = 25  # slots per card, so that 50 pods fit the node's two cards


@dataclasses.dataclass
class Burst:
    size: int
    placed: list[float]  # seconds from the burst's start to each placed pod's Binding
    contended: int  # Bind attempts that met a held lock
    requests: int  # requests HAMi's client sent during the burst
    throttled: float  # seconds its callers waited on its token bucket, summed
    load: str  # /proc/loadavg's 1-minute average at the end

    @property
    def median(self) -> float:
        return statistics.median(self.placed) if self.placed else float("nan")

    @property
    def last(self) -> float:
        return max(self.placed, default=float("nan"))

    def line(self, what: str) -> str:
        return (
            f"{what}: {len(self.placed)}/{self.size} placed, median {self.median:.1f} s,"
            f" last {self.last:.1f} s; {self.contended} binds met a held lock; HAMi's client"
            f" sent {self.requests} requests, waited {self.throttled:.1f} s on its bucket;"
            f" load {self.load}"
        )


@contextlib.contextmanager
def lock_wait_policy(plane: ControlPlane) -> Iterator[None]:
    """The program's admission policy on the plane while the block runs."""
    manifests = policy_manifests(PROCESS_TENANT)
    for manifest in manifests:
        plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    probe = gpu_pod("policy-probe")

    def labelled() -> bool:
        return POD_GROUP_LABEL in (plane.admitted(probe)["metadata"].get("labels") or {})

    wait_until(labelled, "the lock-wait policy in effect", 30)
    try:
        yield
    finally:
        for manifest in reversed(manifests):
            plane.kubectl("delete", manifest["kind"], manifest["metadata"]["name"])


@pytest.fixture(scope="module")
def burst_lab(start_control_plane) -> Iterator[PlacementLab]:
    with placement_lab_on_new_plane(start_control_plane, "burst") as lab:
        yield lab


@pytest.fixture(scope="module")
def large_lab(start_control_plane) -> Iterator[PlacementLab]:
    with (
        placement_lab_on_new_plane(
            start_control_plane, "burst-large", split_count=LARGE_SPLIT
        ) as lab,
        lock_wait_policy(lab.plane),
    ):
        yield lab


def burst_pod(name: str, run_id: str | None, mem_mb: int, cores: int) -> dict:
    """A user's GPU pod; with a run id, the labels the capacity run gives its pods
    (capacity/plan.py), so the burst is placed as a capacity run's is."""
    pod = gpu_pod(name)
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits |= {"nvidia.com/gpumem": str(mem_mb), "nvidia.com/gpucores": str(cores)}
    if run_id:
        mix = parse_mix({"entries": [{"tenant": "t", "name": "burst", "count": 1, "gpumem": 1}]})
        labels = pod_manifest(mix.entries[0], name, run_id, "pause")["metadata"]["labels"]
        assert labels.get(POD_GROUP_LABEL)
        pod["metadata"]["labels"] = labels
    return pod


def run_burst(
    lab: PlacementLab,
    prefix: str,
    *,
    size: int = 20,
    run_id: str | None = None,
    wait: float = 40.0,
    mem_mb: int = 1024,
    cores: int = 10,
) -> Burst:
    """Create ``size`` pods at once; wait until all are placed or ``wait`` s have passed."""
    names = [f"{prefix}-{i:02d}" for i in range(size)]
    requests_before = sum(lab.extender.api.requests.values())
    throttled_before = lab.extender.api.bucket.waited
    started = time.monotonic()
    for name in names:
        body = burst_pod(name, run_id, mem_mb, cores)
        lab.admin.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", body)
    deadline = started + wait
    while time.monotonic() < deadline:
        if not lab.scheduler.running():
            raise ControlPlaneError(f"kube-scheduler exited:\n{lab.scheduler.log_tail()}")
        records = lab.extender.snapshot()
        if len(records) == len(names) and all(r.placed_at for r in records.values()):
            break
        time.sleep(0.05)
    records = lab.extender.snapshot()
    placed = sorted(r.placed_at - started for r in records.values() if r.placed_at)
    return Burst(
        size=size,
        placed=placed,
        contended=sum(r.contended for r in records.values()),
        requests=sum(lab.extender.api.requests.values()) - requests_before,
        throttled=lab.extender.api.bucket.waited - throttled_before,
        load=f"{os.getloadavg()[0]:.2f}",
    )


def stored_labels(lab: PlacementLab) -> list[str | None]:
    pods = lab.admin.call("GET", f"/api/v1/namespaces/{WORK_NS}/pods")["items"]
    return [(p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) for p in pods]


def all_completed(lab: PlacementLab, size: int) -> bool:
    pods = lab.admin.call("GET", f"/api/v1/namespaces/{WORK_NS}/pods")["items"]
    done = [p for p in pods if annotations(p).get(PHASE) == "success"]
    return len(done) == size and LOCK not in annotations(lab.admin.node(GPU_NODE))


def meets(burst: Burst, what: str) -> None:
    target_median, target_last = TARGETS[burst.size]
    assert len(burst.placed) == burst.size, burst.line(f"{what}: not all placed")
    assert burst.contended > 0, burst.line(f"{what}: no Bind waited for the lock: nothing shown")
    if target_median is not None:
        assert burst.median <= target_median, burst.line(f"{what}: median too slow")
    assert burst.last <= target_last, burst.line(f"{what}: last too slow")


def completed(lab: PlacementLab, burst: Burst) -> None:
    wait_until(lambda: all_completed(lab, burst.size), "every allocation completed", 30)


@pytest.mark.upstream("hami-v2.10-one-rate-limited-client")
def test_one_pod_costs_the_calls_hami_makes_for_it(burst_lab):
    """A pod alone on the node: Filter's pod patch, the free lock's four calls (LockNode's GET,
    SetNodeLock's GET, its retried GET and the patch), Bind's pod patch and Binding, and an
    event each for Filter and Bind, all through HAMi's one client."""
    before = burst_lab.extender.api.requests.copy()
    burst_lab.admin.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", gpu_pod("alone"))
    try:
        wait_until(lambda: all_completed(burst_lab, 1), "the pod allocated", 30)
        expected = {
            "PATCH pods": 2,
            "GET nodes": 3,
            "PATCH nodes": 1,
            "POST pods/binding": 1,
            "POST events": 2,
        }

        def counted() -> dict[str, int]:
            return dict(burst_lab.extender.api.requests - before)

        wait_until(lambda: counted() == expected, f"HAMi's calls {expected}", 10)
    finally:
        delete_all_pods(burst_lab)


@pytest.mark.upstream("kube-scheduler-bind-error-backoff")
def test_without_a_pod_group_a_burst_waits_out_the_backoff(burst_lab, capsys):
    """The tail reproduced on a tenant without the policy: Binds meet the lock the previous
    pod's allocation holds, and the pods wait out kube-scheduler's backoff."""
    burst = run_burst(burst_lab, "plain", wait=FEW_SECONDS)
    report(capsys, burst.line(f"20 pods, no pod group, first {FEW_SECONDS:.0f} s"))
    try:
        assert burst.contended > 0
        assert len(burst.placed) < burst.size, burst.line("expected a backoff tail")
        assert set(stored_labels(burst_lab)) == {None}
    finally:
        delete_all_pods(burst_lab)


@pytest.mark.upstream(
    "hami-v2.10-pod-group-bind-waits-for-lock", "hami-v2.10-one-rate-limited-client"
)
def test_a_users_burst_is_placed_in_a_few_seconds(burst_lab, capsys):
    """Pods as a user creates them: the tenant's API server labels them, so HAMi's Bind waits
    for the lock (100 ms polls) instead of failing into kube-scheduler's backoff."""
    with lock_wait_policy(burst_lab.plane):
        burst = run_burst(burst_lab, "user")
    report(capsys, burst.line("20 pods as a user creates them"))
    try:
        assert set(stored_labels(burst_lab)) == {POD_GROUP_VALUE}
        meets(burst, "a user's 20 pods")
        completed(burst_lab, burst)
    finally:
        delete_all_pods(burst_lab)


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_a_capacity_runs_burst_is_placed_in_a_few_seconds(burst_lab, capsys):
    """The capacity tool's pods carry their run's pod group, which the policy leaves as it is."""
    with lock_wait_policy(burst_lab.plane):
        burst = run_burst(burst_lab, "grouped", run_id="1a2b3c4d")
    report(capsys, burst.line("20 pods of a capacity run"))
    try:
        assert set(stored_labels(burst_lab)) == {"capacity-1a2b3c4d"}
        meets(burst, "a capacity run's 20 pods")
        completed(burst_lab, burst)
    finally:
        delete_all_pods(burst_lab)


@pytest.mark.upstream("hami-v2.10-one-rate-limited-client")
def test_a_users_burst_of_50_is_placed_within_its_target(large_lab, capsys):
    """50 pods (400 MB / 4 % each) on the node's two cards at 25 slots each: 49 Binds poll the
    lock at once, two GETs each per 100 ms, through HAMi's one token bucket."""
    burst = run_burst(large_lab, "large", size=LARGE_BURST, mem_mb=400, cores=4, wait=40)
    report(capsys, burst.line("50 pods as a user creates them"))
    try:
        meets(burst, "a user's 50 pods")
        completed(large_lab, burst)
    finally:
        delete_all_pods(large_lab)
