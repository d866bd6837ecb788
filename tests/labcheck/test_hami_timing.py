"""GPU checks against HAMi's timing: registrations read on a 15 s tick (D4), the webhook
Service without endpoints right after install (T11), and the node-lock budget (D5)."""

from __future__ import annotations

import pytest

from labcheck.checks.gpu import ENDPOINTS_CAUSE, _pending_cause, _ready_addresses
from labcheck.result import Status
from labcheck.spec import SpecError, parse_spec
from tests.support.labcheck_fakes import run_lab, standard_lab

UNSCHEDULABLE_UNREGISTERED = (
    "Unschedulable: 0/1 nodes are available: 1 node unregistered. preemption: 0/1 nodes are "
    "available: 1 No preemption victims found for incoming pod."
)


def spy_creates(server):
    """Record (pod name, time) of every pod creation on a fake server."""
    seen: list[tuple[str, float]] = []
    orig = server.create_pod

    def spy(ns, body):
        seen.append((body["metadata"]["name"], server.clock.now()))
        return orig(ns, body)

    server.create_pod = spy
    return seen


# D4 ---------------------------------------------------------------------------------------
@pytest.mark.upstream(
    "hami-registration-read-on-add-and-tick",
    "kube-scheduler-extender-failed-node-message",
    "kube-scheduler-parks-unschedulable-pods",
)
def test_pod_rejected_as_node_unregistered_is_recreated_after_a_register_tick():
    """D4: right after a re-join HAMi rejects the node until its next 15 s tick, and
    kube-scheduler parks the pod for 5 min; labcheck re-creates it once, 16 s after the first
    try, and passes."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.registration_read_at = 12  # the worker re-joined just before this run
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.PASS, res
    assert res.evidence == (
        "schedulerName hami-scheduler; lc-t1-webhook allocated on tenant-a-worker-1; "
        "re-created ['lc-t1-webhook']: HAMi has not read the node's registration yet "
        "(15 s tick); retried"
    )
    assert creates == [("lc-t1-webhook", 0.0), ("lc-t1-webhook", 16.0)]


@pytest.mark.upstream("hami-registration-read-on-add-and-tick")
def test_every_pod_of_a_batch_is_recreated_once():
    """D4: a multi-pod check (binpack sharing, 3 pods) recovers each parked pod."""
    lab = standard_lab()
    b = lab.tenant("tenant-b")
    b.knobs.registration_read_at = 10
    creates = spy_creates(b)
    _, r = run_lab(lab, only=["gpu.sharing"])
    assert r[("gpu.sharing", "tenant-b")].status is Status.PASS
    names = [n for n, _ in creates]
    assert names == ["lc-t1-share-0", "lc-t1-share-1", "lc-t1-share-2"] * 2
    assert all(t >= 16 for _, t in creates[3:])


@pytest.mark.upstream(
    "hami-registration-read-on-add-and-tick", "kube-scheduler-extender-failed-node-message"
)
def test_node_unregistered_that_persists_is_named_as_the_cause():
    """D4: when HAMi still has not read the node after the retry, the cause says so
    instead of blaming a dead hami-scheduler."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.registration_read_at = 10_000
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert creates == [("lc-t1-webhook", 0.0), ("lc-t1-webhook", 16.0)]  # once, not again
    assert res.status is Status.FAIL
    assert res.seen == (
        f"lc-t1-webhook: phase Pending on -, {UNSCHEDULABLE_UNREGISTERED}, bind-phase -"
    )
    assert res.cause == (
        "HAMi has not read the node's registration yet (15 s tick); retried 16s after the "
        "first try and it persists: the extender is not the leader, or cannot parse the "
        "node's hami.io/node-nvidia-register annotation"
    )
    assert "hami-scheduler down" not in res.cause


@pytest.mark.upstream("hami-registration-read-on-add-and-tick")
def test_the_retry_waits_a_full_tick_past_the_registration_being_written():
    """D4: HAMi can only read a registration that exists; when the agent writes it after the
    pod was created, the re-creation waits a tick past that write, not past the creation."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    node = a.nodes["tenant-a-worker-1"]["metadata"]["annotations"]
    register = node.pop("hami.io/node-nvidia-register")
    a.knobs.registration_read_at = 20  # the first tick after the write at 10 s

    def agent_writes_at_10(name, args):
        if a.clock.now() >= 10:
            node.setdefault("hami.io/node-nvidia-register", register)

    a.hook = agent_writes_at_10
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook"])
    assert r[("hami.webhook", "tenant-a")].status is Status.PASS
    assert creates == [("lc-t1-webhook", 0.0), ("lc-t1-webhook", 26.0)]


def test_no_registration_at_all_blames_the_registering_side():
    """D4: rejected as unregistered while no node carries the annotation: nothing to retry."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    del a.nodes["tenant-a-worker-1"]["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert res.cause == (
        "HAMi rejects the node as unregistered and it has no hami.io/node-nvidia-register "
        "annotation: GPU agent (simulated) or device plugin (real) not registering cards"
    )
    assert creates == [("lc-t1-webhook", 0.0)]


def test_a_wait_shorter_than_the_tick_says_the_retry_never_came():
    """D4: podSeconds below 16 s ends before the retry; the cause says that, not 'down'."""
    lab = standard_lab()
    lab.spec["timeouts"]["podSeconds"] = 10
    lab.tenant("tenant-a").knobs.registration_read_at = 10_000
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert res.cause == (
        "HAMi has not read the node's registration yet (15 s tick); retried only after 16s, "
        "beyond this wait"
    )


def test_with_the_agents_requeue_no_pod_is_recreated():
    """D4: when something touches the parked pod once HAMi has read the node (the lab
    agent does), kube-scheduler retries it and labcheck re-creates nothing."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.registration_read_at = 5
    a.knobs.requeue_unregistered = True
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.PASS
    assert creates == [("lc-t1-webhook", 0.0)]
    assert "re-created" not in res.evidence


@pytest.mark.upstream("kube-scheduler-extender-failed-node-message")
def test_unregistered_text_maps_to_its_own_cause_before_any_other():
    """D4: the exact condition text kube-scheduler writes never reads as 'scheduler down'."""
    seen = f"phase Pending on -, {UNSCHEDULABLE_UNREGISTERED}, bind-phase -"
    assert _pending_cause(seen).startswith("HAMi has not read the node's registration yet")
    assert _pending_cause("phase Pending on -, bind-phase -") == (
        "not scheduled: hami-scheduler down or its extender unreachable"
    )


# T11 --------------------------------------------------------------------------------------
@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_first_gpu_check_waits_for_the_webhook_endpoint():
    """T11: the Service has no endpoint until the extender labels itself leader; a pod created
    before that skips the webhook (failurePolicy Ignore), so labcheck waits first."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.endpoints_at = 12
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook", "gpu.sharing"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.PASS, res
    assert res.evidence.endswith("; webhook endpoint ready after 12s")
    assert creates[0] == ("lc-t1-webhook", 12.0)
    # Waited for once: the next GPU check of the tenant does not look again.
    slices = [i for i, (name, _) in enumerate(a.calls) if name == "list_endpoint_slices"]
    first_create = next(i for i, (name, _) in enumerate(a.calls) if name == "create_pod")
    assert slices and max(slices) < first_create
    assert r[("gpu.sharing", "tenant-a")].status is Status.PASS


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_webhook_endpoint_that_never_comes_is_the_stated_cause():
    """T11: no endpoint within two register ticks fails hami.webhook with that cause, before
    any GPU pod is created, and blocks the tenant's other GPU checks."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.endpoints_at = None
    creates = spy_creates(a)
    _, r = run_lab(lab, only=["hami.webhook", "gpu.sharing"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert res.expected == "a ready endpoint of Service kube-system/hami-scheduler within 30s"
    assert res.seen == "1 EndpointSlice(s) of kube-system/hami-scheduler, no ready endpoint"
    assert res.cause == ENDPOINTS_CAUSE
    assert "hami.io/scheduler-role=leader" in res.cause and "fails open" in res.cause
    assert creates == []
    assert r[("gpu.sharing", "tenant-a")].evidence == "blocked: hami.webhook (tenant-a) fail"
    assert r[("hami.webhook", "tenant-b")].status is Status.PASS


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_ready_addresses_follow_the_endpointslice_conditions():
    """T11: EndpointSlice `ready` unset means ready; false is not; no endpoints is none."""
    slices = [
        {"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {}}]},
        {"endpoints": [{"addresses": ["10.0.0.2"], "conditions": {"ready": False}}]},
        {"endpoints": None},
    ]
    assert _ready_addresses(slices) == ["10.0.0.1"]
    assert _ready_addresses([{"endpoints": None}]) == []


# D5 ---------------------------------------------------------------------------------------
def _timeouts(**kw):
    spec = standard_lab().spec
    spec["timeouts"] = kw
    return parse_spec(spec).timeouts


@pytest.mark.upstream("hami-burst-bind-throughput")
def test_lock_burst_budget_scales_with_the_pod_count():
    """D5: omitted, lockBurstSeconds is 5 s per pod (never below 60 s); 20 pods get 100 s,
    which the measured 53 s (tuned) and 82-86 s (chart default) bursts both fit."""
    assert _timeouts().lock_burst_seconds == 60
    assert _timeouts(lockBurstPods=12).lock_burst_seconds == 60
    assert _timeouts(lockBurstPods=20).lock_burst_seconds == 100
    assert _timeouts(lockBurstPods=50).lock_burst_seconds == 250
    assert _timeouts(lockBurstPods=20, lockBurstSeconds=100).lock_burst_seconds == 100


@pytest.mark.upstream("hami-burst-bind-throughput")
def test_lock_burst_budget_below_five_seconds_a_pod_names_the_key():
    """D5: an explicit budget that cannot fit the burst is a spec error on that key."""
    spec = standard_lab().spec
    spec["timeouts"] = {"lockBurstPods": 20, "lockBurstSeconds": 60}
    with pytest.raises(
        SpecError,
        match=r"timeouts\.lockBurstSeconds: Value error, must be at "
        r"least 5 s per pod of lockBurstPods \(100 s for 20 pods\)",
    ):
        parse_spec(spec)


def test_invalid_lock_burst_pods_is_reported_alone():
    """D5: a bad pod count is one error on its key, not a second one on the budget."""
    spec = standard_lab().spec
    spec["timeouts"] = {"lockBurstPods": 0}
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    lines = str(err.value).splitlines()[1:]
    assert lines == ["  timeouts.lockBurstPods: Input should be greater than or equal to 2"]
