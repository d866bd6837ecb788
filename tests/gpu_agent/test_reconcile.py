"""Agent behaviour against the in-memory API and HAMi scheduler stand-in."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading

import pytest

from gpu_agent import (
    AuthError,
    TransientError,
    parse_config,
    reconcile_once,
    run,
)
from gpu_agent import agent as agent_module
from gpu_agent.agent import EXIT_AUTH, EXIT_BUG, EXIT_OK
from tests.support.fake_kube import FakeKube

A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}
L4 = {"type": "NVIDIA L4", "devmem": 23034, "devcore": 100, "count": 4}
NODE = "tenant-a-worker-1"
ACCOUNTING = (
    "hami.io/vgpu-devices-allocated",
    "hami.io/vgpu-node",
    "hami.io/vgpu-time",
    "hami.io/bind-time",
)


@pytest.fixture
def config():
    return parse_config(
        {"splitCount": 10, "resyncSeconds": 0.01, "nodes": {NODE: [A100, L4], "tenant-b-w": [A100]}}
    )


@pytest.fixture
def kube():
    k = FakeKube()
    k.add_node(NODE)
    k.add_node("tenant-b-w")
    k.add_node("mgmt-control-plane")  # not in config
    return k


def registered(kube: FakeKube, config) -> FakeKube:
    reconcile_once(kube, config)
    kube.calls.clear()
    return kube


def bind_one(kube: FakeKube, name: str, ns: str = "team-a", node: str = NODE) -> None:
    kube.add_pod(ns, name)
    assert kube.schedule(ns, name, node) == "bound"


def test_registration_sets_annotation_label_and_capacity(kube, config):
    s = reconcile_once(kube, config)
    node = kube.nodes[NODE]
    cards = json.loads(node["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    assert [c["count"] for c in cards] == [10, 4]
    assert [c["type"] for c in cards] == ["NVIDIA A100-SXM4-80GB", "NVIDIA L4"]
    assert all(c["id"].startswith("GPU-") and c["health"] for c in cards)
    assert node["metadata"]["labels"]["gpu"] == "on"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "14"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "14"
    assert sorted(s.registered) == sorted(s.capacity) == sorted([NODE, "tenant-b-w"])
    assert not s.errors


def test_registration_is_idempotent(kube, config):
    registered(kube, config)
    s = reconcile_once(kube, config)
    assert kube.writes() == []
    assert s.actions == 0
    assert [c.method for c in kube.calls] == ["list_nodes", "list_pods"]


@pytest.mark.parametrize("how", ["remove", "recreate"])
def test_registration_survives_removal(kube, config, how):
    registered(kube, config)
    before = kube.nodes[NODE]["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    getattr(kube, f"{how}_registration" if how == "remove" else "recreate_node")(NODE)
    assert "gpu" not in kube.nodes[NODE]["metadata"]["labels"]
    s = reconcile_once(kube, config)
    node = kube.nodes[NODE]
    # Same ids after re-registration: the scheduler's accounting still matches.
    assert node["metadata"]["annotations"]["hami.io/node-nvidia-register"] == before
    assert node["metadata"]["labels"]["gpu"] == "on"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "14"
    assert s.registered == s.capacity == [NODE]


def test_only_wrong_capacity_is_rewritten(kube, config):
    registered(kube, config)
    kube.nodes[NODE]["status"]["capacity"]["nvidia.com/gpu"] = "0"  # kubelet restart zeroes it
    s = reconcile_once(kube, config)
    assert [(c.method, c.target) for c in kube.writes()] == [("patch_node_status", NODE)]
    assert kube.nodes[NODE]["status"]["capacity"]["nvidia.com/gpu"] == "14"
    assert s.capacity == [NODE] and s.registered == []


def test_one_allocation_completes_and_frees_lock(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    before = kube.pod_annotations("team-a", "p1")
    assert "NVIDIA" in before["hami.io/vgpu-devices-to-allocate"]
    s = reconcile_once(kube, config)
    after = kube.pod_annotations("team-a", "p1")
    assert after["hami.io/bind-phase"] == "success"
    assert after["hami.io/vgpu-devices-to-allocate"] == ";;"
    assert kube.lock(NODE) is None
    assert s.completed == ["team-a/p1"]
    assert s.released == [f"{NODE} team-a/p1 allocated"]
    assert [c.method for c in kube.calls] == [
        "list_nodes",
        "list_pods",
        "patch_pod",
        "patch_node_metadata",
    ]


def test_multi_container_pod_is_fully_erased(kube, config):
    registered(kube, config)
    kube.add_pod("team-a", "two", containers=2)
    kube.schedule("team-a", "two", NODE)
    reconcile_once(kube, config)
    assert kube.pod_annotations("team-a", "two")["hami.io/vgpu-devices-to-allocate"] == ";;;"


def test_already_erased_value_is_left_alone(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.pods[("team-a", "p1")]["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = (
        ";;"
    )
    reconcile_once(kube, config)
    ann = kube.pod_annotations("team-a", "p1")
    assert (
        ann["hami.io/vgpu-devices-to-allocate"] == ";;" and ann["hami.io/bind-phase"] == "success"
    )


def test_burst_of_20_pods_on_one_node(kube, config):
    registered(kube, config)
    for i in range(20):
        kube.add_pod("team-a", f"p{i:02d}")
    rounds = 0
    while rounds < 50:
        rounds += 1
        kube.schedule_pending(NODE)
        reconcile_once(kube, config)
        if all(p["spec"].get("nodeName") for p in kube.pods.values()):
            break
    phases = {kube.pod_annotations("team-a", f"p{i:02d}")["hami.io/bind-phase"] for i in range(20)}
    assert phases == {"success"}
    assert kube.lock(NODE) is None
    assert kube.contention > 0  # the lock really serialised the burst
    assert rounds == 20


def test_lock_of_another_live_pod_is_never_touched(kube, config):
    registered(kube, config)
    bind_one(kube, "holder")
    kube.pods[("team-a", "holder")]["metadata"]["annotations"]["hami.io/bind-phase"] = "x"
    # A different pod, mid-bind elsewhere, owns the lock on tenant-b-w (not yet bound).
    kube.add_pod("team-b", "mid-bind")
    kube.foreign_node_write(
        "tenant-b-w", **{"hami.io/mutex.lock": kube.lock_value("team-b", "mid-bind")}
    )
    held_a, held_b = kube.lock(NODE), kube.lock("tenant-b-w")
    for _ in range(3):
        reconcile_once(kube, config)
    assert kube.lock(NODE) == held_a
    assert kube.lock("tenant-b-w") == held_b
    assert not [c for c in kube.writes() if c.method == "patch_node_metadata"]


def test_completion_never_releases_a_lock_it_does_not_own(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    other = kube.lock_value("team-a", "p1x")  # ends in 'p1' but not in ',team-a,p1'
    kube.add_pod("team-a", "p1x")
    kube.foreign_node_write(NODE, **{"hami.io/mutex.lock": other})
    reconcile_once(kube, config)
    assert kube.pod_annotations("team-a", "p1")["hami.io/bind-phase"] == "success"
    assert kube.lock(NODE) == other


def test_conflict_is_retried_after_reread(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.race_next_node_patch(NODE, times=2)
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None
    assert s.released and not s.errors
    assert [c.method for c in kube.calls][2:] == [
        "patch_pod",
        "patch_node_metadata",
        "get_node",
        "patch_node_metadata",
        "get_node",
        "patch_node_metadata",
    ]


def test_endless_conflicts_are_bounded_and_converge_later(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.race_next_node_patch(NODE, times=99)
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is not None and s.errors
    assert len([c for c in kube.calls if c.method == "patch_node_metadata"]) == 5
    kube._racers.clear()
    s = reconcile_once(kube, config)  # next pass: pod is 'success', its lock is stale
    assert kube.lock(NODE) is None
    assert s.released == [f"{NODE} team-a/p1 owner-allocated"]


@pytest.mark.upstream("hami-v2.10-allocation-failure-releases-the-lock")
def test_an_allocation_marked_failed_whose_release_was_lost_frees_the_lock(kube, config):
    """HAMi's device plugin wrote bind-phase `failed` but its lock release did not land: the
    next pass frees the lock and leaves the failed pod as it is."""
    registered(kube, config)
    bind_one(kube, "p1")
    kube.pods[("team-a", "p1")]["metadata"]["annotations"]["hami.io/bind-phase"] = "failed"
    kube._bump(kube.pods[("team-a", "p1")])
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None
    assert s.released == [f"{NODE} team-a/p1 owner-allocated"] and s.completed == []
    assert [c.method for c in kube.writes()] == ["patch_node_metadata"]  # the pod is left alone
    assert kube.pod_annotations("team-a", "p1")["hami.io/bind-phase"] == "failed"


@pytest.mark.upstream("k8s-json-patch-test-op-422")
def test_kubelet_status_write_before_the_pod_patch_costs_no_retry(kube, config):
    """D3: the kubelet writes pod status right after the Binding, while the agent acts on the
    bind event. The patch tests only the annotations it judged, so it still lands at once
    (a resourceVersion precondition made this a 409, a GET and a second PATCH)."""
    registered(kube, config)
    bind_one(kube, "p1")

    def kubelet_writes_status(method, args):
        if method == "patch_pod":
            kube.before_call = None
            kube.set_pod_phase("team-a", "p1", "Running")

    kube.before_call = kubelet_writes_status
    s = reconcile_once(kube, config)
    assert [c.method for c in kube.calls] == [
        "list_nodes",
        "list_pods",
        "patch_pod",
        "patch_node_metadata",
    ]
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None
    assert kube.pods[("team-a", "p1")]["status"]["phase"] == "Running"
    assert kube.pod_annotations("team-a", "p1")["hami.io/bind-phase"] == "success"


@pytest.mark.upstream("k8s-json-patch-test-op-422")
def test_bind_phase_change_before_the_pod_patch_is_not_overwritten(kube, config):
    """D3: the scheduler's Bind failure path sets bind-phase `failed` between the agent's read
    and its patch: the `test` op fails (422), the agent re-reads and leaves the pod alone."""
    registered(kube, config)
    bind_one(kube, "p1")

    def scheduler_fails_the_bind(method, args):
        if method == "patch_pod":
            kube.before_call = None
            kube.pods[("team-a", "p1")]["metadata"]["annotations"]["hami.io/bind-phase"] = "failed"
            kube._bump(kube.pods[("team-a", "p1")])

    kube.before_call = scheduler_fails_the_bind
    s = reconcile_once(kube, config)
    assert [c.method for c in kube.calls][2:4] == ["patch_pod", "get_pod"]
    assert kube.count("patch") == 2  # the rejected pod patch and the lock release
    ann = kube.pod_annotations("team-a", "p1")
    assert ann["hami.io/bind-phase"] == "failed"
    assert "NVIDIA" in ann["hami.io/vgpu-devices-to-allocate"]
    assert s.completed == [] and not s.errors
    assert s.released == [f"{NODE} team-a/p1 allocated"]


@pytest.mark.upstream("k8s-status-merge-patch-keeps-siblings")
def test_capacity_write_keeps_kubelet_resources_on_a_node_without_status(config):
    """D1: a Node created before its kubelet wrote status is listed with no status; the
    kubelet writes cpu/memory/pods just before the agent's capacity write. A JSON Patch
    `add /status {}` replaced that status; the merge patch adds nvidia.com/gpu beside it."""
    kube = FakeKube()
    kube.add_node(NODE, status=False)
    kube.add_node("tenant-b-w")

    def kubelet_first(method, args):
        if method == "patch_node_status" and args[0] == NODE:
            kube.before_call = None
            kube.kubelet_status_write(NODE)

    kube.before_call = kubelet_first
    s = reconcile_once(kube, config)
    status = kube.nodes[NODE]["status"]
    for part in ("capacity", "allocatable"):
        assert status[part] == {
            "cpu": "4",
            "memory": "16310856Ki",
            "pods": "110",
            "nvidia.com/gpu": "14",
        }
    assert NODE in s.capacity and not s.errors


def test_capacity_patch_sets_only_the_gpu_count():
    """D1: the status body names nvidia.com/gpu alone, so it can never drop a sibling."""
    status = {"capacity": {"cpu": "4", "nvidia.com/gpu": "0"}, "allocatable": {"cpu": "4"}}
    assert agent_module._capacity_patch(status, "14") == {
        "status": {
            "capacity": {"nvidia.com/gpu": "14"},
            "allocatable": {"nvidia.com/gpu": "14"},
        }
    }
    assert agent_module._capacity_patch(None, "2") == {
        "status": {"capacity": {"nvidia.com/gpu": "2"}, "allocatable": {"nvidia.com/gpu": "2"}}
    }
    done = {"capacity": {"nvidia.com/gpu": "14"}, "allocatable": {"nvidia.com/gpu": "14"}}
    assert agent_module._capacity_patch(done, "14") is None


def test_pod_deleted_before_pass_frees_lock(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.delete_pod("team-a", "p1")
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None
    assert s.released == [f"{NODE} team-a/p1 owner-gone"]
    # the scheduler can lock the node again straight away
    bind_one(kube, "p2")


def test_pod_deleted_mid_allocation_frees_lock(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")

    def delete_first(method, args):
        if method == "patch_pod":
            kube.before_call = None
            kube.delete_pod("team-a", "p1")

    kube.before_call = delete_first
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None and not s.errors
    assert s.completed == [] and s.released == [f"{NODE} team-a/p1 allocated"]


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_lock_of_finished_pod_is_freed(kube, config, phase):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.set_pod_phase("team-a", "p1", phase)
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None
    assert s.completed == []  # finished pods are not completed, only unlocked
    assert s.released == [f"{NODE} team-a/p1 owner-finished"]


def test_restart_mid_way_converges(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    # First process: pod patched, then the lock release fails and the process dies.
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    s = reconcile_once(kube, config)
    assert s.completed == ["team-a/p1"] and s.errors and kube.lock(NODE) is not None
    # New process: fresh config object, no shared state.
    fresh = parse_config(
        {"splitCount": 10, "resyncSeconds": 0.01, "nodes": {NODE: [A100, L4], "tenant-b-w": [A100]}}
    )
    s = reconcile_once(kube, fresh)
    assert kube.lock(NODE) is None and s.released == [f"{NODE} team-a/p1 owner-allocated"]
    assert reconcile_once(kube, fresh).actions == 0


def test_accounting_annotations_untouched(kube, config):
    registered(kube, config)
    for i in range(3):
        kube.add_pod("team-a", f"p{i}", containers=i + 1)
    snapshot = {}
    for _ in range(5):
        kube.schedule_pending(NODE)
        for key, pod in kube.pods.items():
            if pod["spec"].get("nodeName"):  # the scheduler is done with it: freeze
                ann = pod["metadata"]["annotations"]
                snapshot.setdefault(key, {k: ann.get(k) for k in ACCOUNTING})
        reconcile_once(kube, config)
    for (ns, name), pod in kube.pods.items():
        ann = pod["metadata"]["annotations"]
        assert ann["hami.io/bind-phase"] == "success"
        assert {k: ann.get(k) for k in ACCOUNTING} == snapshot[(ns, name)]
        assert None not in snapshot[(ns, name)].values()
    pod_patches = [c for c in kube.writes() if c.resource == "pods"]
    assert len(pod_patches) == 3


def test_patch_bodies_only_touch_owned_keys(kube, config):
    registered(kube, config)
    bodies = []

    def spy(method, args):
        if method.startswith("patch"):
            bodies.append((method, args[-1]))

    kube.before_call = spy
    bind_one(kube, "p1")
    reconcile_once(kube, config)
    pod_ops = next(b for m, b in bodies if m == "patch_pod")
    uid = kube.pods[("team-a", "p1")]["metadata"]["uid"]
    allocate = "/metadata/annotations/hami.io~1vgpu-devices-to-allocate"
    phase = "/metadata/annotations/hami.io~1bind-phase"
    value = next(op["value"] for op in pod_ops if op["op"] == "test" and op["path"] == allocate)
    assert "NVIDIA" in value
    assert pod_ops == [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": phase, "value": "allocating"},
        {"op": "test", "path": allocate, "value": value},
        {"op": "replace", "path": allocate, "value": ";;"},
        {"op": "replace", "path": phase, "value": "success"},
    ]
    node_body = next(b for m, b in bodies if m == "patch_node_metadata")
    assert node_body["metadata"]["annotations"] == {"hami.io/mutex.lock": None}
    assert node_body["metadata"]["resourceVersion"]


def test_unconfigured_node_is_never_touched(kube, config):
    kube.add_pod("ops", "gpu-on-mgmt")
    kube.nodes["mgmt-control-plane"]["metadata"]["annotations"]["hami.io/node-nvidia-register"] = (
        json.dumps([{"id": "GPU-x", "count": 1, "devmem": 1, "devcore": 100, "type": "NVIDIA X"}])
    )
    for part in ("capacity", "allocatable"):
        kube.nodes["mgmt-control-plane"]["status"][part]["nvidia.com/gpu"] = "1"
    assert kube.schedule("ops", "gpu-on-mgmt", "mgmt-control-plane") == "bound"
    lock = kube.lock("mgmt-control-plane")
    kube.delete_pod("ops", "gpu-on-mgmt")  # even an orphaned lock there is not ours
    for _ in range(2):
        reconcile_once(kube, config)
    assert kube.lock("mgmt-control-plane") == lock
    assert "gpu" not in kube.nodes["mgmt-control-plane"]["metadata"]["labels"]
    assert all(c.target != "mgmt-control-plane" for c in kube.calls)


def test_missing_configured_node_is_skipped(config):
    kube = FakeKube()
    kube.add_node(NODE)  # tenant-b-w has not joined yet
    s = reconcile_once(kube, config)
    assert s.registered == [NODE] and not s.errors


def test_unbound_or_foreign_pods_are_ignored(kube, config):
    registered(kube, config)
    kube.add_pod("team-a", "filtered-only")
    kube.foreign_node_write(NODE, **{"hami.io/mutex.lock": kube.lock_value("team-a", "other")})
    kube.add_pod("team-a", "other")
    assert kube.schedule("team-a", "filtered-only", NODE) == "node lock contention"
    reconcile_once(kube, config)
    ann = kube.pod_annotations("team-a", "filtered-only")
    assert "hami.io/bind-phase" not in ann and "NVIDIA" in ann["hami.io/vgpu-devices-to-allocate"]
    assert not [c for c in kube.writes() if c.resource == "pods"]


def test_transient_list_error_is_retried_by_run(kube, config):
    # The loop watches between relists; a short relist period brings the 4th list soon.
    config = dataclasses.replace(config, relist_seconds=0.05)
    kube.fail_next("list_nodes", TransientError(503, "unavailable"), times=2)
    stop = threading.Event()
    passes = []

    def count(method, args):
        if method == "list_nodes":
            passes.append(1)
            if len(passes) == 4:
                stop.set()

    kube.before_call = count
    assert run(kube, config, stop) == EXIT_OK
    kube.close_watches()
    assert kube.nodes[NODE]["metadata"]["labels"]["gpu"] == "on"


def ticking_clock(step: float = 5.0):
    """Each read is `step` seconds later: a refusal outlasts the grace in a few passes."""
    ticks = itertools.count(100.0, step)
    return lambda: next(ticks)


@pytest.mark.parametrize("status", [401, 403])
def test_lasting_auth_error_exits_non_zero_after_the_grace(kube, config, status):
    kube.fail_next("list_nodes", AuthError(status, "forbidden"), times=99)
    assert run(kube, config, threading.Event(), clock=ticking_clock()) == EXIT_AUTH
    lists = kube.count("list")
    assert 2 <= lists < 99  # retried, then gave up


def test_lasting_auth_error_mid_pass_exits_non_zero(kube, config):
    registered(kube, config)
    bind_one(kube, "p1")
    kube.fail_next("patch_pod", AuthError(403, 'cannot patch resource "pods"'), times=99)
    assert run(kube, config, threading.Event(), clock=ticking_clock()) == EXIT_AUTH


def test_tls_failure_exits_at_once(kube, config):
    kube.fail_next("list_nodes", AuthError(0, "TLS verification failed"))
    assert run(kube, config, threading.Event(), clock=ticking_clock()) == EXIT_AUTH
    assert kube.count("list") == 1


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_a_refusal_while_the_api_server_starts_is_retried(kube, config):
    """A restarted kube-apiserver answers 403 until its RBAC caches synced (seen in
    tests/real/test_agent_real.py: the agent used to exit 3 there). Refusals shorter than
    the grace are retried; the pass then converges and the loop goes on."""
    registered(kube, config)
    bind_one(kube, "p1")
    kube.fail_next("list_nodes", AuthError(403, 'clusterrole "hami-simulated-gpu-agent" not found'))
    kube.fail_next("patch_pod", AuthError(403, "RBAC: clusterrole not found"))
    stop = threading.Event()

    def done(method, args):
        if (
            kube.pods[("team-a", "p1")]["metadata"]["annotations"]["hami.io/bind-phase"]
            == "success"
        ):
            stop.set()

    kube.before_call = done
    assert run(kube, config, stop) == EXIT_OK
    kube.close_watches()
    assert kube.lock(NODE) is None


def test_unexpected_exception_exits_non_zero(kube, config):
    kube.fail_next("list_pods", RuntimeError("bug"))
    assert run(kube, config, threading.Event()) == EXIT_BUG
