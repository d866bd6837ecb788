"""A GPU pod created right after its worker re-joined is not stranded (issue 9, item 3; D4).

HAMi reads a node's registration only on a node ADDED event and on its 15 s tick, and writes
nothing then, so kube-scheduler has no event to retry a pod the extender rejected with "node
unregistered" meanwhile: it waits up to 5 min. Once HAMi has surely read the registration, the
agent touches the node (an annotation change is a Node update event) if such a pod waits.
"""

from __future__ import annotations

import dataclasses

import pytest

from gpu_agent import Agent, AuthError, TransientError, parse_config, required_rbac_rules
from gpu_agent.agent import REQUEUE_ANNOTATION
from tests.support.fake_kube import Clock, FakeKube, SchedulerSim, rejected, rejoin_latency

A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}
NODE = "tenant-a-worker-1"


@pytest.fixture
def config():
    return parse_config({"resyncSeconds": 2, "nodes": {NODE: [A100]}})


def registered_at(kube: FakeKube, config, clock: Clock) -> Agent:
    agent = Agent(kube, config, clock)
    assert agent.step().registered == [NODE]
    agent.follow("nodes", 0)
    agent.follow("pods", 0)
    kube.calls.clear()
    return agent


@pytest.mark.upstream("hami-registration-read-on-tick", "kube-scheduler-extender-requeue")
@pytest.mark.parametrize("first_tick", [5.0, 14.9])
def test_pod_created_before_hami_read_the_node_is_allocated_soon(config, first_tick):
    """Created 0.5 s after the re-join: allocated at the agent's touch (17 s after its
    registration), not after kube-scheduler's 5 min unschedulable timeout."""
    latency = rejoin_latency(config, first_tick=first_tick, create_at=0.5)
    assert latency is not None and 16.0 <= latency <= 17.5
    without = dataclasses.replace(config, requeue_after_register_seconds=0)
    stranded = rejoin_latency(without, first_tick=first_tick, create_at=0.5)
    assert stranded is not None and stranded > 300  # only flushUnschedulablePodsLeftover


@pytest.mark.upstream("hami-registration-read-on-tick")
def test_pod_created_after_hami_read_the_node_needs_no_touch(config):
    # bound at the scheduler's next 0.25 s step, completed by the agent in the same step
    assert rejoin_latency(config, first_tick=3.0, create_at=4.0) == 0.25


@pytest.mark.upstream("kube-scheduler-extender-requeue")
def test_the_touch_is_a_node_annotation_change_the_scheduler_sees():
    """Only a Node update that changes a scheduling property requeues: annotations count."""
    kube = FakeKube()
    kube.add_node(NODE, **{"hami.io/node-nvidia-register": "[]"})
    sim = SchedulerSim(kube, first_tick=1000.0)
    kube.add_pod("team-a", "p")
    sim.run_until(0.0)  # rejected: HAMi has not read the node (no allocatable GPUs either)
    sim.run_until(5.0)  # its own condition write moved it once; rejected again
    assert sim.queue[("team-a", "p")].where == "unschedulable"
    node = kube.nodes[NODE]
    node["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "t1"}]
    kube._bump(node)
    node["status"]["conditions"] = [{"type": "Ready", "lastHeartbeatTime": "t2"}]
    kube._bump(node)  # a heartbeat only: not a scheduling change
    sim.run_until(20.0)
    assert sim.queue[("team-a", "p")].where == "unschedulable"
    kube.foreign_node_write(NODE, **{REQUEUE_ANNOTATION: "1"})
    sim.run_until(20.0)
    assert sim.queue[("team-a", "p")].where == "backoff"


def test_touch_only_when_a_pod_was_rejected_as_unregistered(config):
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    rejected(kube, "other-reason", "0/1 nodes are available: 1 Insufficient nvidia.com/gpumem.")
    clock.t += 16.9
    assert agent.step().actions == 0 and kube.calls == []  # HAMi may not have read it yet
    clock.t += 0.1
    assert agent.step().requeued == []
    assert [(c.method, c.verb) for c in kube.calls] == [("list_pods", "list")]
    assert kube.writes() == []
    assert agent.next_due() == agent.relist_due  # nothing left but the periodic relist


def test_touch_once_for_all_pods_rejected_meanwhile(config):
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    rejected(kube, "b")
    rejected(kube, "a")
    clock.t += 17
    s = agent.step()
    assert s.requeued == ["team-a/a", "team-a/b"]
    assert [c.method for c in kube.writes()] == ["patch_node_metadata"]
    granted = {
        (v, r) for rule in required_rbac_rules() for r in rule["resources"] for v in rule["verbs"]
    }
    assert {(c.verb, c.resource) for c in kube.calls} == {("list", "pods"), ("patch", "nodes")}
    assert {(c.verb, c.resource) for c in kube.calls} <= granted  # no new RBAC
    annotations = kube.nodes[NODE]["metadata"]["annotations"]
    assert REQUEUE_ANNOTATION in annotations
    assert "hami.io/node-nvidia-register" in annotations  # a merge patch: nothing else moved
    agent.follow("nodes", 0)
    clock.t += 60  # the periodic relist: no second touch
    agent.follow("pods", 0)
    assert agent.step().actions == 0


def test_failed_look_is_retried_after_resync(config):
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    rejected(kube, "a")
    kube.fail_next("list_pods", TransientError(503, "etcd leader changed"))
    clock.t += 17
    s = agent.step()
    assert s.requeued == [] and s.errors == [f"requeue after {NODE}: HTTP 503: etcd leader changed"]
    clock.t += config.resync_seconds
    assert agent.step().requeued == ["team-a/a"]


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_a_refused_look_stays_due(config):
    """Seen against a real kube-apiserver (tests/real/test_agent_real.py): its look came right
    after an API server restart and was refused (403 until RBAC synced); the agent retried the
    pass but had already dropped the due look, so the rejected pod was never retried."""
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    rejected(kube, "p")
    clock.t += 17
    kube.fail_next("list_pods", AuthError(403, "RBAC: clusterrole not found"))
    with pytest.raises(AuthError):
        agent.step()
    assert agent.step().requeued == ["team-a/p"]
    assert REQUEUE_ANNOTATION in kube.nodes[NODE]["metadata"]["annotations"]


def test_no_look_without_a_registration_write_or_when_turned_off(config):
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    clock.t += 17
    agent.step()
    kube.calls.clear()
    rejected(kube, "a")  # nothing was written since: no reason to think HAMi lags
    clock.t += 17
    agent.follow("pods", 0)
    assert agent.step().actions == 0
    assert [c.method for c in kube.calls] == ["watch_pods"]
    off = dataclasses.replace(config, requeue_after_register_seconds=0)
    kube.remove_registration(NODE)
    agent = Agent(kube, off, clock)
    assert agent.step().registered == [NODE]
    clock.t += 60
    assert agent.next_due() == pytest.approx(clock.t)  # only the relist is due
    assert not agent.requeue_at


@pytest.mark.upstream("hami-v2.10-bind-writes")
def test_a_lock_first_seen_in_the_touchs_response_is_still_released(config):
    """Seen against the real kube-apiserver (tests/real/test_agent_real.py, after a restart):
    the pod's bind event came before the node's lock event, so the completion's release found
    no lock in the cached node. The touch then cached a newer copy of the node, lock included;
    the lock's own event, older than that copy, was dropped, and the lock stayed until HAMi's
    own expiry, holding the node for every other GPU pod. A lock a write's response shows
    must be judged like one an event shows."""
    kube = FakeKube()
    kube.add_node(NODE)
    clock = Clock()
    agent = registered_at(kube, config, clock)
    kube.add_pod("team-a", "p1")
    assert kube.schedule("team-a", "p1", NODE) == "bound"  # HAMi: lock, then bind
    agent.follow("pods", 0)  # the node's watch lags behind
    first = agent.step()
    assert first.completed == ["team-a/p1"] and first.released == []
    rejected(kube, "waiting")
    clock.t += 17  # HAMi has read the registration: the touch is due
    second = agent.step()
    assert second.requeued == ["team-a/waiting"]
    assert second.released == [f"{NODE} team-a/p1 owner-allocated"]
    assert kube.lock(NODE) is None
    agent.follow("nodes", 0)  # the late lock event is older than the touch: dropped
    assert agent.step().released == [] and kube.lock(NODE) is None
