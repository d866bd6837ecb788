"""What mutation testing found unpinned in gpu_agent/agent.py (issue 13).

The three behaviours the issue named come first: a release that hits a conflict re-judges
the lock it re-read (never deletes one another pod has just taken); a transient watch error
only pauses a watch thread; a failed registration, completion-release or lock check is
retried after resyncSeconds without a relist. Then the details the mutants showed unpinned.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gpu_agent import (
    Agent,
    AuthError,
    Config,
    Gone,
    TransientError,
    hami,
    parse_config,
    reconcile_once,
    run,
)
from gpu_agent import agent as agent_module
from gpu_agent.agent import EXIT_OK
from tests.support.fake_kube import Clock, FakeKube, bind, drain, rejected

A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}
NODE = "tenant-a-worker-1"
OTHER = "tenant-b-w"
LOCK = "hami.io/mutex.lock"
RESYNC, RELIST = 2.0, 60.0


def make_config(**overrides: Any) -> Config:
    raw: dict[str, Any] = {
        "resyncSeconds": RESYNC,
        "relistSeconds": RELIST,
        "nodes": {NODE: [A100], OTHER: [A100]},
    }
    raw.update(overrides)
    return parse_config(raw)


@pytest.fixture
def config() -> Config:
    return make_config()


@pytest.fixture
def kube() -> FakeKube:
    k = FakeKube()
    for name in (NODE, OTHER, "mgmt-control-plane"):
        k.add_node(name)
    return k


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def agent(kube: FakeKube, config: Config, clock: Clock) -> Agent:
    """Listed and registered; the registration's own events are drained."""
    a = Agent(kube, config, clock)
    assert a.step().registered == [NODE, OTHER]
    drain(a)
    kube.calls.clear()
    return a


def before_first(kube: FakeKube, method: str, action: Callable[[], None]) -> None:
    """Run `action` (another writer) just before the agent's next `method` call."""

    def hook(called: str, args: tuple[Any, ...]) -> None:
        if called == method:
            kube.before_call = None
            action()

    kube.before_call = hook


def _ann(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def methods_after(kube: FakeKube, first: str) -> list[str]:
    names = [c.method for c in kube.calls]
    return names[names.index(first) :]


# ---------------------------------------------------------------- a lock taken meanwhile
@pytest.mark.upstream("hami-v2.10-bind-writes")
def test_completion_release_spares_a_lock_another_pod_took_before_the_conflict(kube, agent):
    """p1 completes; before its lock release lands, that lock is gone and p2 (mid-bind)
    holds the node: the release's 409 makes the agent re-read, and the re-read lock is not
    p1's, so it stays (deleting it would let a third pod onto the node beside p2)."""
    bind(kube, "p1")

    def p2_takes_the_node() -> None:
        kube.add_pod("team-a", "p2")
        kube.foreign_node_write(NODE, **{LOCK: kube.lock_value("team-a", "p2")})

    before_first(kube, "patch_node_metadata", p2_takes_the_node)
    s = drain(agent)
    assert s.completed == ["team-a/p1"]
    assert s.released == [] and s.errors == []
    assert kube.lock(NODE) == kube.lock_value("team-a", "p2")
    assert methods_after(kube, "patch_pod") == ["patch_pod", "patch_node_metadata", "get_node"]


@pytest.mark.upstream("hami-v2.10-bind-writes")
def test_orphan_release_spares_a_new_lock_seen_after_the_conflict(kube, config):
    """The lock of a finished pod is stale; just before its release lands the scheduler
    expired it and p2 locked the node: after the 409 the value differs, so nothing goes."""
    reconcile_once(kube, config)
    bind(kube, "p1")
    kube.set_pod_phase("team-a", "p1", "Succeeded")
    kube.add_pod("team-a", "p2")
    kube.calls.clear()
    before_first(
        kube,
        "patch_node_metadata",
        lambda: kube.foreign_node_write(NODE, **{LOCK: kube.lock_value("team-a", "p2")}),
    )
    s = reconcile_once(kube, config)
    assert s.released == [] and s.errors == []
    assert kube.lock(NODE) == kube.lock_value("team-a", "p2")
    assert [(c.method, c.target) for c in kube.calls] == [
        ("list_nodes", "*"),
        ("list_pods", "*"),
        ("get_pod", "team-a/p1"),
        ("patch_node_metadata", NODE),
        ("get_node", NODE),
    ]


def test_orphan_release_after_a_conflict_still_frees_the_same_stale_lock(kube, config):
    """The conflict was only a heartbeat: the re-read lock is the same stale value, so the
    second patch, with the new resourceVersion, frees it."""
    reconcile_once(kube, config)
    bind(kube, "p1")
    kube.delete_pod("team-a", "p1")
    kube.race_next_node_patch(NODE)
    kube.calls.clear()
    s = reconcile_once(kube, config)
    assert kube.lock(NODE) is None and s.errors == []
    assert s.released == [f"{NODE} team-a/p1 owner-gone"]
    assert [c.method for c in kube.calls] == [
        "list_nodes",
        "list_pods",
        "get_pod",
        "patch_node_metadata",
        "get_node",
        "patch_node_metadata",
    ]


# ---------------------------------------------------------------- watch threads (pump)
class Stop(threading.Event):
    """A stop event that records each pause instead of sleeping; set after `pauses` of them."""

    def __init__(self, pauses: int = 1_000) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self.pauses = pauses

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self.pauses:
            self.set()
        return self.is_set()


def stop_at_watch(kube: FakeKube, stop: threading.Event, method: str, n: int) -> list[str]:
    """Set `stop` as the `n`th `method` call is made (it is still served); returns the
    resourceVersion each call resumed from."""
    versions: list[str] = []

    def hook(called: str, args: tuple[Any, ...]) -> None:
        if called == method:
            versions.append(args[0])
            if len(versions) == n:
                stop.set()

    kube.before_call = hook
    return versions


@pytest.mark.parametrize("resource", ["nodes", "pods"])
def test_a_transient_watch_error_pauses_the_watch_thread_then_it_resumes(
    kube, agent, resource, caplog
):
    """pump(): a 503 on WATCH is logged, waited out for resyncSeconds, and the watch is
    opened again from the same version (no relist, no event lost); its events are applied."""
    kube.close_watches()  # streams end when caught up
    if resource == "nodes":
        kube.foreign_node_write(NODE, **{"team/note": "x"})
    else:
        bind(kube, "p1")
    stop = Stop()
    versions = stop_at_watch(kube, stop, f"watch_{resource}", 2)
    kube.fail_next(f"watch_{resource}", TransientError(503, "etcd leader changed"))
    with caplog.at_level(logging.WARNING, logger="gpu_agent"):
        agent.pump(resource, stop)
    assert stop.waits == [RESYNC]
    assert versions[0] == versions[1] != ""
    assert agent.failure is None and kube.count("list") == 0
    if resource == "nodes":
        assert _ann(agent.nodes[NODE])["team/note"] == "x"
    else:
        assert ("team-a", "p1") in agent.pods
    assert [r.getMessage() for r in caplog.records] == [
        f"watch {resource} failed, resuming: HTTP 503: etcd leader changed"
    ]


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_a_refused_watch_is_retried_and_its_refusal_forgotten_once_accepted(
    kube, agent, clock, caplog
):
    kube.close_watches()
    stop = Stop()
    seen: list[dict[str, float]] = []
    stop_at_watch(kube, stop, "watch_pods", 2)
    kube.fail_next("watch_pods", AuthError(403, "RBAC: clusterrole not found"))
    real_wait = stop.wait

    def wait(timeout: float | None = None) -> bool:
        seen.append(dict(agent.refused_since))
        return real_wait(timeout)

    stop.wait = wait  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="gpu_agent"):
        agent.pump("pods", stop)
    assert stop.waits == [RESYNC]
    assert seen == [{"watch pods": clock()}]  # the grace runs per source
    assert agent.refused_since == {}  # the next WATCH got through
    assert agent.failure is None
    assert [r.getMessage() for r in caplog.records] == [
        "watch pods refused, retrying: HTTP 403: RBAC: clusterrole not found"
    ]


def test_a_bug_in_a_watch_thread_is_handed_to_the_main_loop(kube, agent):
    bug = RuntimeError("bug")
    kube.fail_next("watch_nodes", bug)
    agent.pump("nodes", Stop())
    assert agent.failure is bug
    with pytest.raises(RuntimeError, match="bug"):
        agent.step()


def empty_streams(kube: FakeKube, stop: threading.Event, n: int, events: int = 0) -> list[int]:
    """watch_pods answers streams of `events` bookmarks; `stop` is set at the `n`th."""
    opened: list[int] = []

    def watch_pods(version: str, timeout: float, selector: str | None = None):
        opened.append(1)
        if len(opened) == n:
            stop.set()
        return iter(
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": version}}}] * events
        )

    kube.watch_pods = watch_pods  # type: ignore[method-assign]
    return opened


def test_a_stream_that_ends_at_once_empty_is_reopened_only_after_resync(kube, agent):
    stop = Stop(pauses=2)
    opened = empty_streams(kube, stop, n=99)
    agent.pump("pods", stop)
    assert stop.waits == [RESYNC, RESYNC]
    assert len(opened) == 2


def test_a_stream_with_events_is_reopened_at_once(kube, agent):
    stop = Stop()
    opened = empty_streams(kube, stop, n=3, events=1)
    agent.pump("pods", stop)
    assert stop.waits == [] and len(opened) == 3


def test_an_empty_stream_that_lasted_a_second_is_reopened_at_once(kube, config):
    ticks = iter(range(0, 100))  # each clock read is one second later
    agent = Agent(kube, config, lambda: float(next(ticks)))
    agent.relist()
    stop = Stop()
    opened = empty_streams(kube, stop, n=3)
    agent.pump("pods", stop)
    assert stop.waits == [] and len(opened) == 3


class CountingCondition(threading.Condition):
    """Records each wait (without waiting); `then` runs at the `at`th one."""

    def __init__(self, at: int, then: Callable[[], None]) -> None:
        super().__init__()
        self.waits: list[float | None] = []
        self.at, self.then = at, then

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) == self.at:
            self.then()
        if len(self.waits) > self.at + 2:
            raise AssertionError("still waiting after the stop")
        return False


def never(*_: Any) -> float:
    raise AssertionError("the watch thread went on after it was stopped")


@pytest.mark.parametrize("how", ["stop", "close"])
def test_a_watch_thread_waiting_for_a_list_looks_each_second_and_ends_when_told(kube, config, how):
    """Before the first list a watch thread waits, waking every second so that a stop
    request (which does not notify it) is seen soon; stopped or closed, it opens nothing."""
    agent = Agent(kube, config, never)
    stop = threading.Event()
    agent.cond = CountingCondition(2, stop.set if how == "stop" else agent.close)
    agent.pump("pods", stop)
    assert agent.cond.waits == [1.0, 1.0]
    assert kube.calls == []


def test_a_closed_agent_opens_no_more_watches(kube, agent):
    agent.close()
    assert agent.follow("pods", 0) == 0
    assert agent.follow("nodes", 0) == 0
    assert kube.calls == []


# ---------------------------------------------------------------- retried after resync
def test_a_failed_registration_is_retried_after_resync_without_relisting(
    kube, agent, clock, caplog
):
    kube.remove_registration(NODE)
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    with caplog.at_level(logging.WARNING, logger="gpu_agent"):
        s = drain(agent)
    assert [r.getMessage() for r in caplog.records] == [
        f"register {NODE} failed, retrying later: HTTP 503: etcd leader changed"
    ]
    assert s.registered == []
    assert s.errors == [f"register {NODE}: HTTP 503: etcd leader changed"]
    assert "hami.io/node-nvidia-register" not in _ann(kube.nodes[NODE])
    assert agent.retry == {("node", NODE): clock() + RESYNC}
    kube.calls.clear()
    clock.advance(RESYNC - 0.01)
    assert drain(agent).actions == 0 and kube.writes() == []  # not before resyncSeconds
    clock.advance(0.01)
    s = drain(agent)
    assert s.registered == [NODE] and s.capacity == [NODE] and s.errors == []
    assert "hami.io/node-nvidia-register" in _ann(kube.nodes[NODE])
    assert kube.count("list") == 0


def test_a_failed_release_after_completion_is_retried_after_resync(kube, agent, clock):
    bind(kube, "p1")
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    s = drain(agent)
    assert s.completed == ["team-a/p1"] and s.released == []
    assert s.errors == ["complete team-a/p1: HTTP 503: etcd leader changed"]
    assert kube.lock(NODE) == kube.lock_value("team-a", "p1")
    assert agent.retry == {("pod", ("team-a", "p1")): clock() + RESYNC}
    kube.calls.clear()
    kube.foreign_node_write(OTHER, **{"fake/heartbeat": "1"})  # an unrelated event
    assert drain(agent).actions == 0 and kube.writes() == []  # not before resyncSeconds
    clock.advance(RESYNC)
    kube.calls.clear()
    s = drain(agent)
    assert s.released == [f"{NODE} team-a/p1 owner-allocated"] and s.errors == []
    assert kube.lock(NODE) is None
    assert [c.method for c in kube.writes()] == ["patch_node_metadata"]  # no second completion
    assert kube.count("list") == 0


def test_a_failed_lock_check_is_retried_after_resync_with_a_lookup(kube, agent, clock):
    """A lock of a pod mid-allocation that is not ours to complete (no NVIDIA to-allocate
    value); the pod is deleted and the release fails; after resyncSeconds the node is judged
    again and its owner, no longer cached, is looked up (404) before the lock goes."""
    bind(kube, "p1", node=OTHER)
    pod = kube.pods[("team-a", "p1")]
    del pod["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]
    kube._bump(pod)
    assert drain(agent).actions == 0  # its owner is alive and allocating: the lock stays
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"), times=1)
    kube.delete_pod("team-a", "p1")
    s = drain(agent)
    assert s.released == []
    assert s.errors == [f"lock check {OTHER}: HTTP 503: etcd leader changed"]
    assert agent.retry == {("node", OTHER): clock() + RESYNC}
    clock.advance(RESYNC)
    kube.calls.clear()
    s = drain(agent)
    assert s.released == [f"{OTHER} team-a/p1 owner-gone"] and s.errors == []
    assert kube.lock(OTHER) is None
    assert [(c.method, c.target) for c in kube.calls if c.verb != "watch"] == [
        ("get_pod", "team-a/p1"),
        ("patch_node_metadata", OTHER),
    ]


# ---------------------------------------------------------------- reading one stream (follow)
class Stream:
    """A watch stream over `events`; runs `during` before the first one; records close()."""

    def __init__(self, events: list[dict[str, Any]], during: Callable[[], None] = lambda: None):
        self.events, self.during, self.closed = events, during, False

    def __iter__(self):
        self.during()
        yield from self.events

    def close(self) -> None:
        self.closed = True


def pod_events(kube: FakeKube, agent: Agent) -> list[dict[str, Any]]:
    """The pod events after the agent's version, as the fake's watch sends them."""
    kube.close_watches()
    return list(kube.watch_pods(agent.version["pods"], 0, "spec.nodeName!="))


def test_follow_returns_how_many_events_it_applied_and_closes_the_stream(kube, agent):
    bind(kube, "p1")
    bind(kube, "p2", node=OTHER)
    events = pod_events(kube, agent)
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    stream = Stream(events)
    kube.watch_pods = lambda *args: stream  # type: ignore[method-assign]
    assert agent.follow("pods", 0) == 3
    assert stream.closed
    assert set(agent.pods) == {("team-a", "p1"), ("team-a", "p2")}


@pytest.mark.parametrize("meanwhile", ["relisted", "closed"])
def test_a_stream_on_replaced_caches_or_a_closed_agent_is_dropped(kube, agent, meanwhile):
    """A relist (or close) while a stream is read: its events belong to the old caches and
    are not applied; the stream is closed and follow() reports 0 applied."""
    bind(kube, "p1")
    events = pod_events(kube, agent)
    stream = Stream(events, agent.relist if meanwhile == "relisted" else agent.close)
    kube.watch_pods = lambda *args: stream  # type: ignore[method-assign]
    assert agent.follow("pods", 0) == 0
    assert stream.closed
    assert agent.dirty_pods == {}
    if meanwhile == "relisted":  # the relist's own caches, which it judged
        assert list(agent.pods) == [("team-a", "p1")]
        assert kube.pod_annotations("team-a", "p1")["hami.io/bind-phase"] == "success"
    else:
        assert agent.pods == {}


@pytest.mark.upstream("k8s-watch-too-old-resource-version")
def test_a_410_on_watch_is_logged_and_asks_for_a_relist(kube, agent, caplog):
    kube.fail_next("watch_pods", Gone(410, "too old resource version: 1 (1234)"))
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        assert agent.follow("pods", 0) == 0
    assert agent.synced == {"nodes": True, "pods": False}
    assert [r.getMessage() for r in caplog.records] == [
        "watch pods: HTTP 410: too old resource version: 1 (1234); relisting"
    ]


@pytest.mark.upstream("k8s-watch-too-old-resource-version")
def test_an_error_event_is_logged_with_its_message_and_asks_for_a_relist(kube, agent, caplog):
    kube.foreign_node_write(NODE, **{"team/note": "x"})
    kube.compact()  # the agent's version is now too old: an ERROR 410 event
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        assert agent.follow("nodes", 0) == 1
    assert agent.synced == {"nodes": False, "pods": True}
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith("watch nodes: too old resource version: ")
    assert messages[0].endswith("; relisting")


def test_an_error_event_without_a_message_is_logged_whole(agent, caplog):
    status = {"kind": "Status", "code": 500}
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        agent.apply("pods", {"type": "ERROR", "object": status})
    assert [r.getMessage() for r in caplog.records] == [f"watch pods: {status}; relisting"]


# ---------------------------------------------------------------- refusals (401/403)
@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_a_refusal_grace_starts_over_once_that_source_got_through(agent, clock):
    refused = AuthError(403, "RBAC: clusterrole not found")
    assert not agent.refused_for_good(refused, "pass")
    assert agent.refused_since == {"pass": clock()}
    clock.advance(29)
    assert not agent.refused_for_good(refused, "watch pods")  # another source: its own grace
    agent.accepted("pass")
    assert agent.refused_since == {"watch pods": clock()}
    clock.advance(29)
    assert not agent.refused_for_good(refused, "pass")  # 58 s after the first: starts over
    clock.advance(1)
    assert agent.refused_for_good(refused, "watch pods")  # 30 s without getting through


def test_an_accepted_watch_forgets_its_refusal(kube, agent, clock):
    assert not agent.refused_for_good(AuthError(401, "Unauthorized"), "watch nodes")
    kube.close_watches()
    assert agent.follow("nodes", 0) == 1  # a bookmark: the WATCH got through
    assert agent.refused_since == {}


# ---------------------------------------------------------------- node and pod events (apply)
def delete_node(kube: FakeKube, name: str) -> None:
    kube._delete(kube.nodes.pop(name))


def allocating_on(kube: FakeKube, node: str, name: str = "p1", ns: str = "team-a") -> None:
    """A pod HAMi bound to `node` while the agent could not see that node."""
    pod = kube.add_pod(ns, name)
    pod["metadata"]["annotations"].update(
        {
            "hami.io/vgpu-node": node,
            "hami.io/vgpu-devices-to-allocate": "GPU-x,NVIDIA,1024,10:;",
            "hami.io/bind-phase": "allocating",
        }
    )
    pod["spec"]["nodeName"] = node
    kube._bump(pod)


def test_a_deleted_node_leaves_the_cache_and_is_not_written(kube, agent):
    delete_node(kube, OTHER)
    s = drain(agent)
    assert OTHER not in agent.nodes and NODE in agent.nodes
    assert s.actions == 0 and s.errors == [] and kube.writes() == []


def test_a_rejoined_node_completes_the_allocations_that_waited_for_it(kube, agent):
    """A pod bound to a node the agent had seen deleted is not ours to judge yet; the node's
    ADDED event marks it again, so it completes without waiting for a relist."""
    delete_node(kube, OTHER)
    drain(agent)
    allocating_on(kube, OTHER)
    assert drain(agent).actions == 0  # its node is not (yet) ours
    bind(kube, "elsewhere")  # a pod on another node: completed on its own event
    drain(agent)
    kube.add_node(OTHER)
    kube.calls.clear()
    s = drain(agent)
    assert s.registered == [OTHER]
    assert s.completed == ["team-a/p1"]
    assert kube.pod_annotations("team-a", "p1")["hami.io/bind-phase"] == "success"
    assert kube.count("list") == 0
    assert [c.target for c in kube.calls if c.method == "patch_pod"] == ["team-a/p1"]


@pytest.mark.parametrize("resource", ["nodes", "pods"])
def test_a_deletion_whose_creation_was_missed_is_taken_calmly(kube, agent, resource):
    """A missed event (the periodic relist repairs those): the DELETED of an object the agent
    never saw changes nothing and does not end the watch."""
    if resource == "nodes":
        delete_node(kube, OTHER)
        drain(agent)
    with kube.silent():
        if resource == "nodes":
            kube.add_node(OTHER)
        else:
            bind(kube, "p1")
    if resource == "nodes":
        delete_node(kube, OTHER)
    else:
        kube.delete_pod("team-a", "p1")
    assert agent.follow(resource, 0) == 2  # the DELETED and a bookmark
    assert list(agent.nodes) == ([NODE] if resource == "nodes" else [NODE, OTHER])
    assert agent.pods == {}


# ---------------------------------------------------------------- lock owners
def test_a_live_cached_lock_owner_is_never_looked_up(kube, agent, clock):
    """A lock whose owner the pod watch shows alive (allocating, not ours to complete): no
    GET of it, now or after resyncSeconds."""
    bind(kube, "p1", node=OTHER)
    pod = kube.pods[("team-a", "p1")]
    del pod["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]
    kube._bump(pod)
    held = kube.lock(OTHER)
    assert drain(agent).actions == 0
    clock.advance(RESYNC)
    assert drain(agent).actions == 0
    assert agent.owner_wait == {}
    assert kube.count("get") == 0 and kube.lock(OTHER) == held


# ---------------------------------------------------------------- the requeue touch


@pytest.mark.upstream("kube-scheduler-extender-requeue")
def test_each_requeue_touch_writes_the_nodes_current_version(kube, clock, caplog):
    """The touch must change the annotation to be a Node update event: it writes the node's
    resourceVersion, so a second touch later is one too. Only unscheduled pending pods are
    listed for it."""
    agent = Agent(kube, make_config(nodes={NODE: [A100]}), clock)
    assert agent.step().registered == [NODE]
    drain(agent)
    lists: list[str | None] = []
    kube.before_call = lambda m, a: lists.append(a[0]) if m == "list_pods" else None
    rejected(kube, "a")
    clock.advance(17)  # requeueAfterRegisterSeconds after the registration
    before = kube.nodes[NODE]["metadata"]["resourceVersion"]
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        s = agent.step()
    assert s.requeued == ["team-a/a"]
    first = _ann(kube.nodes[NODE])["gpu-agent.lab/requeue-after-register"]
    assert first == before
    assert lists == ["spec.nodeName=,status.phase=Pending"]
    assert f"requeued pods rejected as unregistered node={NODE} pods=team-a/a" in [
        r.getMessage() for r in caplog.records
    ]
    kube.remove_registration(NODE)  # registered again, then a pod is rejected again
    drain(agent)
    rejected(kube, "b")
    drain(agent)
    clock.advance(17)
    again = kube.nodes[NODE]["metadata"]["resourceVersion"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        s = drain(agent)
    assert s.requeued == ["team-a/a", "team-a/b"]
    assert f"requeued pods rejected as unregistered node={NODE} pods=team-a/a,team-a/b" in [
        r.getMessage() for r in caplog.records
    ]
    second = _ann(kube.nodes[NODE])["gpu-agent.lab/requeue-after-register"]
    assert second == again != first


# ---------------------------------------------------------------- run()
def test_run_logs_its_start_and_stop(kube, config, caplog):
    stop = threading.Event()
    stop.set()
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        assert run(kube, config, stop) == EXIT_OK
    assert [r.getMessage() for r in caplog.records] == [
        f"gpu agent started nodes={[NODE, OTHER]} relist=60.0s",
        "gpu agent stopping",
    ]


def test_run_reads_each_watch_in_a_named_daemon_thread(kube, config):
    """Daemons: a watch stuck on a dead connection cannot keep the process from exiting."""
    stop = threading.Event()
    seen: dict[str, bool] = {}

    def look(method: str, args: tuple[Any, ...]) -> None:
        if method == "list_nodes":
            seen.update({t.name: t.daemon for t in threading.enumerate()})
            stop.set()

    kube.before_call = look
    try:
        assert run(kube, config, stop) == EXIT_OK
    finally:
        kube.close_watches()
    assert {name: seen[name] for name in seen if name.startswith("watch-")} == {
        "watch-nodes": True,
        "watch-pods": True,
    }


def test_run_times_the_relist_by_the_clock_it_is_given(kube, config):
    now = [100.0]
    stop = threading.Event()
    lists: list[float] = []

    def tick(method: str, args: tuple[Any, ...]) -> None:
        if method == "list_nodes":
            lists.append(now[0])
            now[0] += RELIST  # the periodic relist is due by the given clock
            if len(lists) == 2:
                stop.set()

    kube.before_call = tick
    thread = threading.Thread(target=run, args=(kube, config, stop, lambda: now[0]))
    thread.start()
    thread.join(10)
    stop.set()
    kube.close_watches()
    thread.join(10)
    assert lists == [100.0, 100.0 + RELIST]


# ---------------------------------------------------------------- the log of a pass
def test_a_pass_logs_each_write_it_makes(kube, config, caplog):
    """The operator's record: one line per registration, capacity, completion and release,
    naming the node, the pod and why."""
    with caplog.at_level(logging.INFO, logger="gpu_agent"):
        reconcile_once(kube, config)
        bind(kube, "p1")
        bind(kube, "gone", node=OTHER)

        def delete_gone(method: str, args: tuple[Any, ...]) -> None:
            if method == "patch_pod" and args[1] == "gone":
                kube.before_call = None
                kube.delete_pod("team-a", "gone")

        kube.before_call = delete_gone
        reconcile_once(kube, config)
    assert [r.getMessage() for r in caplog.records] == [
        f"registered node={NODE} cards=1 set=['annotations', 'labels']",
        f"set capacity node={NODE} nvidia.com/gpu=10",
        f"registered node={OTHER} cards=1 set=['annotations', 'labels']",
        f"set capacity node={OTHER} nvidia.com/gpu=10",
        f"completed allocation pod=team-a/p1 node={NODE}",
        f"released lock node={NODE} owner=team-a/p1 reason=allocated",
        f"pod gone before completion pod=team-a/gone node={OTHER}",
        f"released lock node={OTHER} owner=team-a/gone reason=allocated",
    ]


# ---------------------------------------------------------------- completion after a 422
def reallocate(kube: FakeKube, name: str, card: str, ns: str = "team-a") -> None:
    """The scheduler rewrites a pod's allocation (another card) while it stays allocating."""
    pod = kube.pods[(ns, name)]
    value = f"{card},NVIDIA,1024,10:;"
    pod["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = value
    kube._bump(pod)


@pytest.mark.upstream("k8s-json-patch-test-op-422")
def test_a_rewritten_allocation_is_reread_and_completed_in_the_same_pass(kube, agent):
    """The `test` op fails (422) because the to-allocate value changed; the re-read pod
    still needs completing, so the second patch, built from it, lands."""
    bind(kube, "p1")
    before_first(kube, "patch_pod", lambda: reallocate(kube, "p1", "GPU-other"))
    s = drain(agent)
    assert s.completed == ["team-a/p1"] and s.errors == []
    assert s.released == [f"{NODE} team-a/p1 allocated"]
    assert [(c.method, c.target) for c in kube.calls if c.verb != "watch"] == [
        ("patch_pod", "team-a/p1"),
        ("get_pod", "team-a/p1"),
        ("patch_pod", "team-a/p1"),
        ("patch_node_metadata", NODE),
    ]
    ann = kube.pod_annotations("team-a", "p1")
    assert ann["hami.io/bind-phase"] == "success"
    assert ann["hami.io/vgpu-devices-to-allocate"] == ";;"


@pytest.mark.upstream("k8s-json-patch-test-op-422")
def test_an_allocation_that_keeps_changing_is_given_up_for_this_pass(kube, agent, clock):
    """Five 422s in a row: the pass stops trying (a 409 in its errors), keeps the lock of the
    still-allocating pod, and tries again after resyncSeconds."""
    bind(kube, "p1")
    cards = iter(range(100))
    kube.before_call = lambda m, a: (
        reallocate(kube, "p1", f"GPU-{next(cards)}") if m == "patch_pod" else None
    )
    s = drain(agent)
    assert s.completed == [] and s.released == []
    assert s.errors == ["complete team-a/p1: HTTP 409: pod team-a/p1 kept changing"]
    assert kube.count("patch") == 5 and kube.count("get") == 5
    assert kube.lock(NODE) == kube.lock_value("team-a", "p1")
    assert agent.retry == {("pod", ("team-a", "p1")): clock() + RESYNC}
    kube.before_call = None
    clock.advance(RESYNC)
    s = drain(agent)
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None


def test_annotation_paths_escape_tilde_before_slash():
    """RFC 6901: '~' becomes '~0' first, so the '~1' written for '/' is not escaped again."""
    assert agent_module._annotation_path("a~b/c") == "/metadata/annotations/a~0b~1c"
    assert agent_module._annotation_path("hami.io/bind-phase") == (
        "/metadata/annotations/hami.io~1bind-phase"
    )


def test_a_lock_that_keeps_changing_is_given_up_with_a_409(kube, agent, clock):
    bind(kube, "p1")
    kube.race_next_node_patch(NODE, times=5)
    s = drain(agent)
    assert s.completed == ["team-a/p1"] and s.released == []
    assert s.errors == [f"complete team-a/p1: HTTP 409: lock on {NODE} kept changing"]
    assert [c.method for c in kube.writes()].count("patch_node_metadata") == 5


@pytest.mark.parametrize(
    ("status", "candidate"),
    [
        ({"phase": "Running"}, True),
        ({"phase": "Pending"}, True),
        (None, True),  # no status written yet
        ({"phase": "Succeeded"}, False),
        ({"phase": "Failed"}, False),
    ],
)
def test_a_finished_pod_is_never_completed_even_if_still_marked_allocating(
    kube, config, status, candidate
):
    """The watch drops finished pods, but complete() re-reads a pod by GET after a 422: one
    that finished meanwhile (a kubelet admission failure, say) is left alone."""
    pod: dict[str, Any] = {
        "metadata": {
            "namespace": "team-a",
            "name": "p1",
            "annotations": {
                "hami.io/vgpu-node": NODE,
                "hami.io/bind-phase": "allocating",
                "hami.io/vgpu-devices-to-allocate": "GPU-x,NVIDIA,1024,10:;",
            },
        },
        "spec": {"nodeName": NODE},
    }
    if status is not None:
        pod["status"] = status
    p = agent_module._Pass(kube, config, {NODE: kube.nodes[NODE]}, {})
    assert p.is_candidate(pod) is candidate


# ---------------------------------------------------------------- registration
def test_each_node_registers_card_ids_of_its_own(kube, config):
    """Card ids derive from (node, index): two nodes never announce the same GPU to HAMi."""
    reconcile_once(kube, config)
    ids = {
        name: [c["id"] for c in json.loads(_ann(kube.nodes[name])["hami.io/node-nvidia-register"])]
        for name in (NODE, OTHER)
    }
    assert ids == {NODE: [hami.card_id(NODE, 0)], OTHER: [hami.card_id(OTHER, 0)]}
    assert ids[NODE] != ids[OTHER]


def test_a_registration_in_another_writers_formatting_is_left_alone(kube, config):
    """Same cards, other JSON formatting (another agent version, a hand edit): not rewritten."""
    reconcile_once(kube, config)
    cards = hami.register_cards(NODE, config.nodes[NODE])
    kube.foreign_node_write(
        NODE, **{"hami.io/node-nvidia-register": json.dumps(cards, indent=2, sort_keys=True)}
    )
    kube.calls.clear()
    s = reconcile_once(kube, config)
    assert s.registered == [] and kube.writes() == []
    wrong = [{**cards[0], "count": 3}]  # other content: rewritten
    kube.foreign_node_write(NODE, **{"hami.io/node-nvidia-register": json.dumps(wrong)})
    assert reconcile_once(kube, config).registered == [NODE]
    assert _ann(kube.nodes[NODE])["hami.io/node-nvidia-register"] == hami.register_value(
        NODE, config.nodes[NODE]
    )


# ---------------------------------------------------------------- run(): the main loop
def run_in_thread(
    kube: FakeKube, config: Config, stop: threading.Event, clock: Callable[[], float] | None
) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    args = (kube, config, stop) if clock is None else (kube, config, stop, clock)
    thread = threading.Thread(target=lambda: result.append(run(*args)), name="main-loop")
    thread.start()
    return thread, result


def finish(kube: FakeKube, stop: threading.Event, thread: threading.Thread) -> bool:
    """Wait for run() to end by itself; then make sure it ends. True if it ended by itself."""
    thread.join(10)
    ended = not thread.is_alive()
    stop.set()
    kube.close_watches()
    thread.join(10)
    return ended


def on_list_nodes(kube: FakeKube, action: Callable[[int], None]) -> None:
    """Run action(n) as the agent's nth list_nodes call is made (a fault it adds applies)."""
    n = [0]

    def hook(method: str, args: tuple[Any, ...]) -> None:
        if method == "list_nodes":
            n[0] += 1
            action(n[0])

    kube.before_call = hook


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_run_relists_after_a_refused_pass_and_a_later_refusal_has_a_new_grace(kube, caplog):
    """Refused, then through: the refusal is over. A refusal 100 s later is a new one, not
    one lasting 100 s, so the agent retries instead of exiting."""
    config = make_config(resyncSeconds=0.01)
    now = [100.0]
    stop = threading.Event()
    refused = AuthError(403, "RBAC: clusterrole not found")

    def script(n: int) -> None:
        if n in (1, 3):
            kube.fail_next("list_nodes", refused)
        if n == 2:
            now[0] += 100  # the periodic relist is due next
        if n == 4:
            stop.set()

    on_list_nodes(kube, script)
    with caplog.at_level(logging.WARNING, logger="gpu_agent"):
        thread, result = run_in_thread(kube, config, stop, lambda: now[0])
        assert finish(kube, stop, thread)
    assert result == [EXIT_OK]
    assert [r.getMessage() for r in caplog.records] == [
        "refused, relisting: HTTP 403: RBAC: clusterrole not found"
    ] * 2
    assert _ann(kube.nodes[NODE])["hami.io/node-nvidia-register"]


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_run_relists_at_once_after_a_write_was_refused(kube):
    """The marks of a refused pass are lost: the next step is a whole relist, not a wait for
    the periodic one."""
    config = make_config(resyncSeconds=0.01)
    stop = threading.Event()
    kube.fail_next("patch_node_metadata", AuthError(403, "RBAC: clusterrole not found"))
    on_list_nodes(kube, lambda n: stop.set() if n == 2 else None)
    thread, result = run_in_thread(kube, config, stop, None)
    assert finish(kube, stop, thread)
    assert result == [EXIT_OK]
    assert _ann(kube.nodes[NODE])["hami.io/node-nvidia-register"]
    assert kube.count("list") == 4  # nodes and pods, twice


def test_run_exits_at_once_when_a_watch_was_refused_for_good(kube, caplog):
    """The watch's own grace is over: the main loop does not start a grace of its own."""
    config = make_config(resyncSeconds=0.01)
    now = [100.0]
    stop = threading.Event()
    kube.fail_next("watch_pods", AuthError(403, "forbidden"), times=2)
    watches = [0]

    def hook(method: str, args: tuple[Any, ...]) -> None:
        if method == "watch_pods":
            watches[0] += 1
            if watches[0] == 2:
                now[0] += agent_module.AUTH_GRACE_SECONDS

    kube.before_call = hook
    with caplog.at_level(logging.ERROR, logger="gpu_agent"):
        thread, result = run_in_thread(kube, config, stop, lambda: now[0])
        assert finish(kube, stop, thread)
    assert result == [agent_module.EXIT_AUTH]
    assert [r.getMessage() for r in caplog.records] == ["fatal, exiting: HTTP 403: forbidden"]


def test_run_logs_a_failed_pass_and_retries_it(kube, caplog):
    config = make_config(resyncSeconds=0.01)
    stop = threading.Event()
    kube.fail_next("list_nodes", TransientError(503, "unavailable"))
    on_list_nodes(kube, lambda n: stop.set() if n == 2 else None)
    with caplog.at_level(logging.WARNING, logger="gpu_agent"):
        assert run(kube, config, stop) == EXIT_OK
    kube.close_watches()
    assert [r.getMessage() for r in caplog.records] == [
        "pass failed, retrying: HTTP 503: unavailable"
    ]


def test_run_logs_a_bug_with_its_traceback_and_exits(kube, caplog):
    bug = RuntimeError("bug")
    kube.fail_next("list_pods", bug)
    with caplog.at_level(logging.ERROR, logger="gpu_agent"):
        assert run(kube, make_config(), threading.Event()) == agent_module.EXIT_BUG
    kube.close_watches()
    assert [(r.getMessage(), r.exc_info and r.exc_info[1]) for r in caplog.records] == [
        ("unexpected error, exiting", bug)
    ]


class MainLoopWaits(threading.Condition):
    """Records the main loop's waits; at the first one it stops run() instead of sleeping."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__()
        self.stop = stop
        self.main: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread().name != "main-loop":
            return super().wait(timeout)
        self.main.append(timeout)
        self.stop.set()
        return False


@pytest.mark.parametrize(
    ("failing", "expected"),
    [
        (False, 1.0),  # idle, next due in 17 s: a 1 s nap, so a stop request is seen soon
        (True, 0.25),  # a failed write is retried in resyncSeconds: sleep just that long
    ],
)
def test_run_sleeps_until_the_next_due_work_but_a_second_at_most(
    kube, monkeypatch, failing, expected
):
    config = make_config(resyncSeconds=0.25)
    stop = threading.Event()
    waits = MainLoopWaits(stop)

    class Recorded(Agent):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.cond = waits

    monkeypatch.setattr(agent_module, "Agent", Recorded)
    if failing:
        kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    thread, result = run_in_thread(kube, config, stop, lambda: 100.0)
    assert finish(kube, stop, thread)
    assert result == [EXIT_OK]
    assert waits.main == [expected]


# ---------------------------------------------------------------- flush and relist details
@pytest.mark.upstream("k8s-watch-too-old-resource-version")
def test_a_failed_relist_is_retried_at_the_next_step_after_resync(kube, agent, clock):
    """A watch asked for a relist (410) and that LIST failed: still asked for, so the next
    step after resyncSeconds lists again (not the periodic relist 60 s later), and no watch
    resumes from the old version meanwhile."""
    kube.fail_next("watch_pods", Gone(410, "too old resource version"))
    assert agent.follow("pods", 0) == 0
    clock.advance(RESYNC)
    kube.fail_next("list_nodes", TransientError(503, "unavailable"))
    with pytest.raises(TransientError):
        agent.step()
    assert agent.synced == {"nodes": False, "pods": False}
    assert agent.follow("nodes", 0) == 0 and agent.follow("pods", 0) == 0
    kube.calls.clear()
    clock.advance(RESYNC)
    agent.step()
    assert [c.method for c in kube.calls] == ["list_nodes", "list_pods"]


def test_a_failed_requeue_look_is_not_retried_before_resync(kube, clock):
    agent = Agent(kube, make_config(nodes={NODE: [A100]}), clock)
    agent.step()
    drain(agent)
    rejected(kube, "a")
    drain(agent)
    clock.advance(17)
    kube.fail_next("list_pods", TransientError(503, "etcd leader changed"))
    assert agent.step().requeued == []
    kube.calls.clear()
    clock.advance(RESYNC - 0.01)
    assert agent.step().actions == 0 and kube.calls == []
    clock.advance(0.01)
    assert agent.step().requeued == ["team-a/a"]


def test_a_lock_already_judged_does_not_stop_the_judging_of_other_nodes(kube, agent):
    """p1's completion cannot release its lock (503); the lock loop then skips that node
    and still frees the lock on the next node, whose owner was deleted."""
    bind(kube, "p2", node=OTHER)
    pod = kube.pods[("team-a", "p2")]
    del pod["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]  # not ours
    kube._bump(pod)
    assert drain(agent).actions == 0
    bind(kube, "p1")
    kube.delete_pod("team-a", "p2")
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    s = drain(agent)
    assert s.completed == ["team-a/p1"]
    assert s.errors == ["complete team-a/p1: HTTP 503: etcd leader changed"]
    assert s.released == [f"{OTHER} team-a/p2 owner-gone"]
    assert kube.lock(NODE) == kube.lock_value("team-a", "p1") and kube.lock(OTHER) is None


def unseen_lock(kube: FakeKube, node: str = OTHER) -> None:
    kube.add_pod("team-b", "mid-bind")  # not bound: outside the pod watch
    kube.foreign_node_write(node, **{LOCK: kube.lock_value("team-b", "mid-bind")})


def test_a_busy_node_does_not_delay_the_lookup_of_its_unseen_lock_owner(kube, agent, clock):
    """The owner is looked up resyncSeconds after the lock was first seen, not after the
    node's last event, and not before."""
    unseen_lock(kube)
    drain(agent)
    assert drain(agent).actions == 0 and kube.count("get") == 0  # not at once
    for _ in range(3):
        clock.advance(RESYNC / 4)
        kube.foreign_node_write(OTHER, **{"fake/heartbeat": str(clock())})
        drain(agent)
    assert kube.count("get") == 0
    clock.advance(RESYNC / 4)
    drain(agent)
    assert [c.target for c in kube.calls if c.verb == "get"] == ["team-b/mid-bind"]


def test_a_node_deleted_while_its_lock_owner_was_awaited_is_forgotten(kube, agent, clock):
    unseen_lock(kube)
    drain(agent)
    assert list(agent.owner_wait) == [OTHER]
    delete_node(kube, OTHER)
    drain(agent)
    clock.advance(RESYNC)
    s = drain(agent)
    assert s.errors == [] and agent.owner_wait == {}
    assert kube.count("get") == 0


def test_a_new_agent_is_due_at_once_and_its_first_step_lists(kube, config, clock):
    agent = Agent(kube, config, clock)
    assert agent.next_due() == float("-inf")
    assert agent.follow("pods", 0) == 0 and kube.calls == []  # no watch before a list
    agent.step()
    assert [c.method for c in kube.calls][:2] == ["list_nodes", "list_pods"]
