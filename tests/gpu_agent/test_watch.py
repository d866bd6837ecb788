"""The long-running loop: LIST once, then WATCH events drive the work; relists repair."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpu_agent import Agent, AuthError, Gone, TransientError, parse_config, run
from gpu_agent import agent as agent_module
from gpu_agent.agent import EXIT_AUTH, EXIT_OK
from tests.support.fake_kube import Clock, FakeKube, bind, drain

A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}
NODE = "tenant-a-worker-1"
OTHER = "tenant-b-w"
RESYNC, RELIST = 2.0, 60.0


@pytest.fixture
def config():
    return parse_config(
        {
            "resyncSeconds": RESYNC,
            "relistSeconds": RELIST,
            "nodes": {NODE: [A100], OTHER: [A100]},
        }
    )


@pytest.fixture
def kube():
    k = FakeKube()
    for name in (NODE, OTHER, "mgmt-control-plane"):
        k.add_node(name)
    return k


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def agent(kube, config, clock):
    """Listed and registered; the registration's own events are drained."""
    a = Agent(kube, config, clock)
    assert a.step().registered == [NODE, OTHER]
    drain(a)
    kube.calls.clear()
    kube.events_sent.clear()
    return a


def phase(kube: FakeKube, name: str, ns: str = "team-a") -> str | None:
    return kube.pod_annotations(ns, name).get("hami.io/bind-phase")


def test_events_drive_completion_without_relisting(kube, agent):
    for i in range(20):
        kube.add_pod("team-a", f"p{i:02d}")
    rounds = 0
    while any(not p["spec"].get("nodeName") for p in kube.pods.values()):
        rounds += 1
        assert rounds <= 20
        assert kube.schedule_pending(NODE) == 1  # the node lock admits one bind per round
        s = drain(agent)
        assert len(s.completed) == 1 and len(s.released) == 1 and not s.errors
    assert {phase(kube, f"p{i:02d}") for i in range(20)} == {"success"}
    assert kube.lock(NODE) is None and kube.contention > 0
    assert kube.count("list") == 0 and kube.count("get") == 0
    # per allocation: the two streams (re-opened per round here), one pod and one node patch
    assert [c.method for c in kube.calls[:4]] == [
        "watch_nodes",
        "watch_pods",
        "patch_pod",
        "patch_node_metadata",
    ]
    assert len(kube.calls) == 4 * 20
    # per round and stream: the previous round's own write, the scheduler's, a bookmark
    # (the last round's own writes are still unread)
    assert kube.events_sent == {"watch_nodes": 3 * 20 - 1, "watch_pods": 3 * 20 - 1}
    assert agent.step().actions == 0  # nothing left over


def test_a_resumed_stream_starts_where_the_last_one_ended(kube, agent):
    versions = []
    kube.before_call = lambda method, args: method == "watch_pods" and versions.append(args[0])
    bind(kube, "p1")
    agent.follow("nodes", 0)
    agent.follow("pods", 0)
    bookmark = agent.version["pods"]
    assert agent.step().completed == ["team-a/p1"]
    bind(kube, "p2")
    assert drain(agent).completed == ["team-a/p2"]
    # the second stream resumes at the first one's closing bookmark, not at the list
    assert versions[1] == bookmark and int(bookmark) > int(versions[0])
    assert kube.count("list") == 0


def test_node_events_repair_registration_without_relisting(kube, agent):
    kube.remove_registration(NODE)
    s = drain(agent)
    assert s.registered == s.capacity == [NODE]
    assert kube.nodes[NODE]["metadata"]["labels"]["gpu"] == "on"
    assert kube.nodes[NODE]["status"]["capacity"]["nvidia.com/gpu"] == "10"
    kube.recreate_node(OTHER)  # DELETED then ADDED
    s = drain(agent)
    assert s.registered == s.capacity == [OTHER]
    assert kube.count("list") == 0


@pytest.mark.upstream("k8s-resource-version-comparable")
def test_echo_of_an_earlier_write_does_not_roll_the_cache_back(kube, config, clock):
    """D2: registering a node is a metadata patch, then a status patch; the cache holds the
    status patch's response. If the main loop judges right after the metadata patch's echo
    (older, without the capacity), it must not take that echo and write the capacity again."""
    a = Agent(kube, config, clock)
    assert a.step().capacity == [NODE, OTHER]
    writes = len(kube.writes())
    kube.drop_next_watch("watch_nodes", after=1)  # the loop wakes after the first event
    assert a.follow("nodes", 0) == 1
    assert a.step().actions == 0
    assert drain(a).actions == 0
    assert len(kube.writes()) == writes == 4
    assert a.nodes[NODE]["status"]["capacity"]["nvidia.com/gpu"] == "10"


@pytest.mark.upstream("k8s-resource-version-comparable")
def test_a_status_write_seen_after_the_completion_does_not_complete_again(kube, agent):
    """D2/D3, as the real kube-apiserver showed it (tests/real/test_agent_real.py): the agent
    acts on the bind event; kwok/the kubelet writes the pod's status before the agent's patch
    lands, and that event (still `allocating`) arrives after it. The cache holds the patch's
    response, so the event is older and dropped: no second patch, 422 and GET."""
    bind(kube, "p1")
    agent.follow("nodes", 0)
    kube.drop_next_watch("watch_pods", after=1)  # the loop wakes after the bind event
    assert agent.follow("pods", 0) == 1
    kube.set_pod_phase("team-a", "p1", "Running")  # the kubelet, before the agent's patch
    assert agent.step().completed == ["team-a/p1"]
    kube.drop_next_watch("watch_pods", after=1)  # the loop wakes after the kubelet's event
    assert agent.follow("pods", 0) == 1
    assert agent.step().actions == 0
    assert drain(agent).actions == 0
    assert [c.method for c in kube.calls if c.verb != "watch"] == [
        "patch_pod",
        "patch_node_metadata",
    ]
    assert phase(kube, "p1") == "success" and kube.lock(NODE) is None


@pytest.mark.upstream("k8s-resource-version-comparable")
@pytest.mark.parametrize(
    ("event_rv", "cached_rv", "older"),
    [
        ("1009", "1010", True),
        ("1010", "1010", True),  # the echo of exactly what we hold
        ("1011", "1010", False),
        ("999", "1000", True),  # numerically, not as text
        ("1000", "999", False),
        ("opaque-b", "opaque-a", False),  # not an integer: accept, as before
        ("1011", None, False),
    ],
)
def test_older_compares_resource_versions_as_integers(event_rv, cached_rv, older):
    event = {"metadata": {"resourceVersion": event_rv}}
    cached = None if cached_rv is None else {"metadata": {"resourceVersion": cached_rv}}
    assert agent_module._older(event, cached) is older


def test_a_newer_node_event_replaces_the_cache(kube, agent, clock):
    """D2, the other way: a foreign write newer than our cache is taken and judged."""
    lock = kube.lock_value("team-a", "gone")
    kube.foreign_node_write(NODE, **{"hami.io/mutex.lock": lock})
    assert drain(agent).actions == 0  # an unseen owner is given resyncSeconds to bind
    assert agent.nodes[NODE]["metadata"]["annotations"]["hami.io/mutex.lock"] == lock
    clock.advance(RESYNC)
    assert agent.step().released == [f"{NODE} team-a/gone owner-gone"]


def test_error_410_event_triggers_relist_and_converges(kube, agent, clock):
    bind(kube, "p1")
    kube.compact()  # the agent's version is now too old for a watch
    assert agent.follow("nodes", 0) == 1  # just the ERROR event
    assert not agent.synced["nodes"]
    assert agent.follow("nodes", 0) == 0  # no watching until the relist
    clock.advance(RESYNC)  # a relist on demand waits resyncSeconds after the last one
    s = agent.step()
    assert kube.count("list") == 2
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None
    bind(kube, "p2", OTHER)  # and the watches carry on from the new list
    assert drain(agent).completed == ["team-a/p2"]
    assert kube.count("list") == 2


def test_http_410_on_watch_triggers_relist_and_converges(kube, agent, clock):
    kube.fail_next("watch_pods", Gone(410, "too old resource version"))
    bind(kube, "p1")
    agent.follow("nodes", 0)
    assert agent.follow("pods", 0) == 0 and not agent.synced["pods"]
    assert agent.next_due() == clock() + RESYNC
    clock.advance(RESYNC)
    s = agent.step()
    assert kube.count("list") == 2
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None


def test_relists_on_demand_are_spaced_by_resync(kube, agent, clock):
    for i in range(3):  # a server that answers 410 to every watch
        kube.fail_next("watch_pods", Gone(410, "too old resource version"))
        agent.follow("pods", 0)
        agent.step()  # too soon after the last list: judges what it has
        agent.step()
        assert kube.count("list") == 2 * i
        clock.advance(RESYNC)
        agent.step()
        assert kube.count("list") == 2 * (i + 1)  # one relist per resyncSeconds


def test_dropped_stream_resumes_from_the_last_event(kube, agent):
    versions = []
    kube.before_call = lambda method, args: method == "watch_pods" and versions.append(args[0])
    bind(kube, "p1")
    bind(kube, "p2", OTHER)
    kube.drop_next_watch("watch_pods", after=1)  # the connection dies after one event
    agent.follow("nodes", 0)
    assert agent.follow("pods", 0) == 1
    first_event_version = agent.version["pods"]
    assert agent.step().completed == ["team-a/p1"]
    assert drain(agent).completed == ["team-a/p2"]
    assert versions[1] == first_event_version  # resumed, nothing replayed or skipped
    assert kube.lock(NODE) is None and kube.lock(OTHER) is None
    assert kube.count("list") == 0


def test_missed_event_is_repaired_by_the_periodic_relist(kube, agent, clock):
    with kube.silent():  # the watch never hears of these
        bind(kube, "p1")
        kube.remove_registration(OTHER)
    assert drain(agent).actions == 0
    assert phase(kube, "p1") == "allocating" and kube.lock(NODE) is not None
    clock.advance(RELIST)
    agent.follow("nodes", 0)
    s = agent.step()  # due: full relist
    # nodes and pods, then the start-up registration's look for pods rejected meanwhile
    lists = [c.method for c in kube.calls if c.verb == "list"]
    assert lists == ["list_nodes", "list_pods", "list_pods"]
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None
    assert s.registered == [OTHER]


def test_deleted_pod_event_frees_its_lock(kube, agent):
    bind(kube, "p1")
    kube.delete_pod("team-a", "p1")
    s = drain(agent)
    assert s.released == [f"{NODE} team-a/p1 owner-gone"]
    assert [c.method for c in kube.calls if c.verb == "get"] == ["get_pod"]  # 404 confirms
    assert kube.count("list") == 0


def test_finished_pod_leaving_the_watch_frees_its_lock(kube, agent):
    bind(kube, "p1")
    drain(agent)
    kube.foreign_node_write(NODE, **{"hami.io/mutex.lock": kube.lock_value("team-a", "p2")})
    bind_unlocked = kube.add_pod("team-a", "p2")
    bind_unlocked["spec"]["nodeName"] = NODE
    kube.set_pod_phase("team-a", "p2", "Running")  # bound, no HAMi allocation
    drain(agent)
    assert kube.lock(NODE) is not None  # its owner is alive
    kube.set_pod_phase("team-a", "p2", "Succeeded")  # DELETED from the watch's view
    s = drain(agent)
    assert s.released == [f"{NODE} team-a/p2 owner-finished"]


def test_unseen_lock_owner_is_looked_up_after_resync(kube, agent, clock):
    kube.add_pod("team-b", "mid-bind")  # not bound: outside the pod watch
    kube.foreign_node_write(OTHER, **{"hami.io/mutex.lock": kube.lock_value("team-b", "mid-bind")})
    held = kube.lock(OTHER)
    drain(agent)
    assert kube.count("get") == 0  # its bind event is normally on the way: no GET yet
    clock.advance(RESYNC)
    drain(agent)
    assert [c.target for c in kube.calls if c.verb == "get"] == ["team-b/mid-bind"]
    assert kube.lock(OTHER) == held  # alive: never touched
    kube.delete_pod("team-b", "mid-bind")  # no pod event: it was never bound
    clock.advance(RESYNC)
    s = drain(agent)
    assert s.released == [f"{OTHER} team-b/mid-bind owner-gone"]
    assert kube.count("list") == 0


def test_failed_write_is_retried_after_resync_without_relisting(kube, agent, clock):
    bind(kube, "p1")
    kube.fail_next("patch_pod", TransientError(503, "etcd leader changed"))
    s = drain(agent)
    assert s.errors and phase(kube, "p1") == "allocating"
    assert drain(agent).actions == 0  # not before resyncSeconds
    clock.advance(RESYNC)
    s = drain(agent)
    assert s.completed == ["team-a/p1"] and kube.lock(NODE) is None
    assert kube.count("list") == 0


# ------------------------------------------------------------------ failed allocations
# HAMi's device plugin releases the node lock whatever became of the allocation; the agent,
# standing in for it, must leave no lock behind an allocation that cannot finish.


def before_calls(kube: FakeKube, **actions: Callable[[], None]) -> None:
    """Run actions[method] (another writer) once, just before the agent's next such call."""

    def hook(method: str, args: tuple[Any, ...]) -> None:
        action = actions.pop(method, None)
        if action is not None:
            action()

    kube.before_call = hook


@pytest.mark.upstream("hami-v2.10-allocation-failure-releases-the-lock")
def test_a_pod_gone_between_the_422_and_the_reread_frees_its_lock(kube, agent):
    """The completion patch meets a changed allocation (422) and the re-read finds the pod
    deleted: the allocation cannot finish, so its lock goes at once."""
    bind(kube, "p1")

    def reallocate() -> None:  # the `test` op on the to-allocate value fails
        ann = kube.pods[("team-a", "p1")]["metadata"]["annotations"]
        ann["hami.io/vgpu-devices-to-allocate"] = "GPU-other,NVIDIA,1024,10:;"
        kube._bump(kube.pods[("team-a", "p1")])

    before_calls(kube, patch_pod=reallocate, get_pod=lambda: kube.delete_pod("team-a", "p1"))
    s = drain(agent)
    assert [c.method for c in kube.calls if c.verb in ("get", "patch")] == [
        "patch_pod",
        "get_pod",
        "patch_node_metadata",
    ]
    assert kube.lock(NODE) is None and s.completed == [] and s.errors == []
    assert s.released == [f"{NODE} team-a/p1 allocated"]


@pytest.mark.upstream("hami-v2.10-allocation-failure-releases-the-lock")
def test_a_failed_completion_of_a_pod_then_deleted_frees_the_lock_at_its_delete(kube, agent, clock):
    """The completion patch fails (503): the owner still needs its lock, which stays for the
    retry. The pod is then deleted: its DELETED event frees the lock, before any retry."""
    bind(kube, "p1")
    kube.fail_next("patch_pod", TransientError(503, "etcd leader changed"))
    s = drain(agent)
    assert s.errors == ["complete team-a/p1: HTTP 503: etcd leader changed"]
    assert kube.lock(NODE) == kube.lock_value("team-a", "p1")
    kube.delete_pod("team-a", "p1")
    s = drain(agent)  # no clock advance: the retry is not due yet
    assert s.released == [f"{NODE} team-a/p1 owner-gone"] and kube.lock(NODE) is None
    clock.advance(RESYNC)
    kube.calls.clear()
    assert drain(agent).actions == 0 and kube.writes() == []  # the retry finds nothing to do


@pytest.mark.upstream("hami-v2.10-allocation-failure-releases-the-lock")
def test_a_completion_whose_answer_was_lost_still_frees_the_lock(kube, agent, clock):
    """The patch lands but its answer does not (a timeout): the pod's own event shows it
    finished, and the lock goes with that event, not with HAMi's 5 min expiry."""
    bind(kube, "p1")

    def lands() -> None:
        ann = kube.pods[("team-a", "p1")]["metadata"]["annotations"]
        ann.update({"hami.io/vgpu-devices-to-allocate": ";;", "hami.io/bind-phase": "success"})
        kube._bump(kube.pods[("team-a", "p1")])

    before_calls(kube, patch_pod=lands)
    kube.fail_next("patch_pod", TransientError(0, "PATCH pods/p1: timed out"))
    s = drain(agent)
    assert s.errors and s.released == []
    s = drain(agent)
    assert s.released == [f"{NODE} team-a/p1 owner-allocated"] and kube.lock(NODE) is None
    assert [c.method for c in kube.writes()] == ["patch_pod", "patch_node_metadata"]
    clock.advance(RESYNC)
    assert drain(agent).actions == 0  # the retry neither patches the pod again nor re-releases


@pytest.mark.upstream("hami-v2.10-allocation-failure-releases-the-lock")
def test_a_failed_release_behind_a_vanished_pod_is_done_at_its_delete_event(kube, agent):
    """The pod is gone when the completion patch arrives (404) and the release then fails
    (503): the pod's DELETED event judges the lock again and frees it."""
    bind(kube, "p1")
    before_calls(kube, patch_pod=lambda: kube.delete_pod("team-a", "p1"))
    kube.fail_next("patch_node_metadata", TransientError(503, "etcd leader changed"))
    s = drain(agent)
    assert s.released == [] and s.errors == ["complete team-a/p1: HTTP 503: etcd leader changed"]
    assert kube.lock(NODE) == kube.lock_value("team-a", "p1")
    s = drain(agent)
    assert s.released == [f"{NODE} team-a/p1 owner-gone"] and kube.lock(NODE) is None


def test_unconfigured_node_events_are_ignored(kube, agent):
    kube.foreign_node_write(
        "mgmt-control-plane", **{"hami.io/mutex.lock": kube.lock_value("ops", "gone")}
    )
    kube.remove_registration("mgmt-control-plane")
    assert drain(agent).actions == 0
    assert kube.writes() == [] and kube.count("get") == 0
    assert "mgmt-control-plane" not in agent.nodes


def wait_for(predicate, kube: FakeKube, seconds: float = 30.0) -> None:
    """Poll until `predicate` holds (under the fake's lock). The bound is generous: the agent's
    thread shares two cores with the other test workers, and a passing run returns at once."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with kube.mutex:
            if predicate():
                return
        time.sleep(0.005)
    raise AssertionError("timed out")


def start(kube: FakeKube, config):
    stop = threading.Event()
    result = []
    thread = threading.Thread(target=lambda: result.append(run(kube, config, stop)))
    thread.start()
    return stop, thread, result


def finish(kube, stop, thread, result):
    stop.set()
    thread.join(10)
    kube.close_watches()
    assert not thread.is_alive()
    return result[0]


def test_run_follows_watches_without_relisting(kube, config):
    stop, thread, result = start(kube, config)
    try:
        wait_for(lambda: kube.nodes[NODE]["metadata"]["labels"].get("gpu") == "on", kube)
        for i in range(5):
            with kube.mutex:
                bind(kube, f"p{i}", NODE if i % 2 else OTHER)
            wait_for(lambda i=i: phase(kube, f"p{i}") == "success", kube)
        wait_for(lambda: kube.lock(NODE) is None and kube.lock(OTHER) is None, kube)
    finally:
        code = finish(kube, stop, thread, result)
    assert code == EXIT_OK
    assert kube.count("list") == 2  # the start-up list only
    assert kube.count("watch") >= 2


def test_run_relists_after_410_and_converges(kube, config):
    config = dataclasses.replace(config, resync_seconds=0.05)
    stop, thread, result = start(kube, config)
    try:
        wait_for(lambda: kube.nodes[NODE]["metadata"]["labels"].get("gpu") == "on", kube)
        with kube.mutex:  # the watches fall behind and that history is compacted
            bind(kube, "p1")
            kube.compact()
        wait_for(lambda: phase(kube, "p1") == "success" and kube.lock(NODE) is None, kube)
    finally:
        code = finish(kube, stop, thread, result)
    assert code == EXIT_OK
    assert kube.count("list") >= 4


def test_run_exits_on_lasting_forbidden_watch(kube, config, monkeypatch):
    monkeypatch.setattr(agent_module, "AUTH_GRACE_SECONDS", 0.0)  # the first refusal is final
    kube.fail_next("watch_pods", AuthError(403, 'cannot watch resource "pods"'))
    _, thread, result = start(kube, config)
    thread.join(10)
    kube.close_watches()
    assert result == [EXIT_AUTH]


@pytest.mark.upstream("k8s-apiserver-403-until-rbac-synced")
def test_run_retries_a_watch_refused_while_the_api_server_starts(kube, config):
    config = dataclasses.replace(config, resync_seconds=0.05)
    kube.fail_next("watch_pods", AuthError(403, "RBAC: clusterrole not found"), times=2)
    stop, thread, result = start(kube, config)
    try:
        wait_for(lambda: kube.nodes[NODE]["metadata"]["labels"].get("gpu") == "on", kube)
        wait_for(lambda: kube.count("watch") >= 4, kube)  # the refused two, then streams
        with kube.mutex:
            bind(kube, "p1")
        wait_for(lambda: phase(kube, "p1") == "success" and kube.lock(NODE) is None, kube)
    finally:
        code = finish(kube, stop, thread, result)
    assert code == EXIT_OK
