"""Issue 13: the verdicts and evidence of labcheck/checks/gpu.py pinned exactly (the asks the
checks derive from the inventory, the bounds they wait for, every branch of their verdicts), so
that a mutant of gpu.py that changes one of them fails a test."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from labcheck import CHECK_LABEL, MANAGED_BY_LABEL, RUN_ID_LABEL
from labcheck.checks.gpu import (
    ENDPOINTS_CAUSE,
    _allocated,
    _check_scheduler,
    _gpu_summary,
    _ready_addresses,
    gpu_pods,
)
from labcheck.cluster import ClusterError
from labcheck.context import RunContext
from labcheck.objects import gpu_pod
from labcheck.result import CheckFailed, Status
from labcheck.spec import Tenant, parse_spec
from tests.support.labcheck_fakes import (
    A100,
    L4,
    FakeLab,
    FakeServer,
    _node,
    check_result,
    fail_call,
    hami_pod,
    placement_lab,
    run_lab,
    standard_lab,
)

Obj = dict[str, Any]
REGISTER = "hami.io/node-nvidia-register"
BIND_CAUSE_START = "allocation never finished: the node lock or bind-phase"


def spy_creates(server: FakeServer) -> list[Obj]:
    """Record the body of every pod creation on a fake server."""
    bodies: list[Obj] = []
    orig = server.create_pod

    def spy(ns: str, body: Obj) -> Obj:
        bodies.append(copy.deepcopy(body))
        return orig(ns, body)

    server.create_pod = spy
    return bodies


def names(bodies: list[Obj]) -> list[str]:
    return [b["metadata"]["name"] for b in bodies]


def limits(body: Obj) -> dict[str, str]:
    return body["spec"]["containers"][0]["resources"]["limits"]


def assert_run_pods(
    bodies: list[Obj],
    check: str,
    node: str | None,
    image: str = "registry.k8s.io/pause:3.10",
) -> None:
    """Every pod a check creates carries the run's labels with its check, its image, and is
    pinned to the node under test (`node`), or left to HAMi's choice (None)."""
    assert bodies
    for b in bodies:
        assert b["metadata"]["labels"] == {
            MANAGED_BY_LABEL: "labcheck",
            RUN_ID_LABEL: "t1",
            CHECK_LABEL: check,
        }
        assert b["spec"]["containers"][0]["image"] == image
        pinned = {"kubernetes.io/hostname": node} if node else None
        assert b["spec"].get("nodeSelector") == pinned


def mixed_lab(**kw: Any) -> FakeLab:
    """One tenant whose only node holds an A100 and an L4: min and max of the inventory differ."""
    lab = FakeLab()
    lab.add_tenant("tenant-m", "172.30.255.206", [A100, L4], **kw)
    return lab


def add_gpu_node(lab: FakeLab, server: FakeServer, node: str, cards: list[Obj]) -> None:
    """Add `node` to the tenant `server` serves, last of its nodes, registering `cards`
    (each split 10 ways)."""
    full = [{**c, "count": 10} for c in cards]
    server.nodes[node] = _node(node, full)
    tenant = next(t for t in lab.spec["tenants"] if t["name"] == server.name)
    tenant["nodes"].append(node)
    tenant["gpus"][node] = full


def after_get_pod(server: FakeServer, change: Callable[[Obj], None]) -> None:
    """Let `change` edit each pod get_pod returns (after the fake scheduled it), and store it."""
    orig = server.get_pod

    def get_pod(namespace: str, name: str) -> Obj:
        orig(namespace, name)  # the fake's scheduler tick
        change(server.pods[(namespace, name)])
        return copy.deepcopy(server.pods[(namespace, name)])

    server.get_pod = get_pod


# _check_scheduler, _ready_addresses ---------------------------------------------------------
def test_a_created_pod_without_scheduler_name_reads_as_the_default_scheduler():
    for created in ({"spec": {}}, {}):
        with pytest.raises(CheckFailed) as err:
            _check_scheduler(created)
        assert err.value.seen == "schedulerName is default-scheduler"
        assert err.value.expected == "schedulerName hami-scheduler"
    _check_scheduler({"spec": {"schedulerName": "hami-scheduler"}})  # no exception


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_ready_addresses_of_endpoints_without_conditions_or_addresses():
    """EndpointSlice: an endpoint without `conditions` is ready; one without addresses adds none."""
    slices = [
        {"endpoints": [{"addresses": ["10.0.0.3"]}, {"conditions": {"ready": True}}]},
        {},
    ]
    assert _ready_addresses(slices) == ["10.0.0.3"]


# the webhook's endpoint wait ----------------------------------------------------------------
@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_endpoint_wait_is_measured_from_its_own_start():
    """The note states the seconds waited, not the clock's reading."""
    lab = standard_lab()
    lab.clock.t = 1000.0
    lab.tenant("tenant-a").knobs.endpoints_at = 1012.0
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.PASS
    assert res.evidence.endswith("allocated on tenant-a-worker-1; webhook endpoint ready after 12s")


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_endpoint_ready_after_one_poll_is_noted():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.endpoints_at = 1.0
    res = check_result(lab, "hami.webhook")
    assert res.evidence.endswith("; webhook endpoint ready after 1s")


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_endpoint_wait_is_bounded_by_pod_seconds_when_shorter_than_two_ticks():
    lab = standard_lab()
    lab.spec["timeouts"]["podSeconds"] = 20
    lab.tenant("tenant-a").knobs.endpoints_at = None
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.expected == "a ready endpoint of Service kube-system/hami-scheduler within 20s"
    assert lab.clock.t == 20.0


@pytest.mark.upstream("hami-webhook-service-selects-the-leader")
def test_a_failed_endpoint_wait_fails_the_tenants_next_gpu_check_without_waiting_again():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.endpoints_at = None
    _, r = run_lab(lab, only=["gpu.sharing", "gpu.quota"])
    for check in ("gpu.sharing", "gpu.quota"):
        res = r[(check, "tenant-a")]
        assert res.status is Status.FAIL, check
        assert res.expected == "a ready endpoint of Service kube-system/hami-scheduler within 30s"
        assert res.cause == ENDPOINTS_CAUSE
    names = [name for name, _ in a.calls]
    quota_read = names.index("get_resource_quota")
    assert "list_endpoint_slices" in names[:quota_read]
    assert "list_endpoint_slices" not in names[quota_read:]
    assert not a.pods and "create_pod" not in names


# waiting for allocation ---------------------------------------------------------------------
def test_a_gpu_pod_that_completes_is_a_failure_not_an_allocation():
    lab = standard_lab()

    def completes(pod: Obj) -> None:
        if pod["spec"].get("nodeName"):
            pod["status"]["phase"] = "Succeeded"

    after_get_pod(lab.tenant("tenant-a"), completes)
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.seen == (
        "pod lc-t1-webhook ended: phase Succeeded on tenant-a-worker-1, bind-phase success"
    )
    assert res.expected == "GPU pod lc-t1-webhook Running and allocated"
    assert res.cause == "container exited; check the image and its command"


@pytest.mark.upstream("hami-registration-read-on-add-and-tick")
def test_a_wait_ending_at_the_recreation_says_the_pod_was_recreated():
    """podSeconds 16: the probe that re-creates the pod is the last one."""
    lab = standard_lab()
    lab.spec["timeouts"]["podSeconds"] = 16
    lab.tenant("tenant-a").knobs.registration_read_at = 10_000
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.seen == (
        "lc-t1-webhook: phase Pending on -, Unschedulable: 0/1 nodes are available: 1 node "
        "unregistered. preemption: 0/1 nodes are available: 1 No preemption victims found for "
        "incoming pod., bind-phase -; re-created after 16s"
    )
    assert res.cause.endswith(
        "retried 16s after the first try and it persists: the extender "
        "is not the leader, or cannot parse the node's hami.io/node-nvidia-register annotation"
    )


def test_partial_pod_objects_read_as_not_allocated():
    assert not _allocated({})
    assert not _allocated({"status": {"phase": "Running"}})
    assert not _allocated({"metadata": {"annotations": {"hami.io/bind-phase": "success"}}})
    assert _allocated(
        {
            "status": {"phase": "Running"},
            "metadata": {"annotations": {"hami.io/bind-phase": "success"}},
        }
    )
    assert _gpu_summary({}) == "phase ? on -, bind-phase -"


def test_a_pod_pending_for_another_reason_than_unregistered_is_never_recreated():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.scheduler = False
    creates = spy_creates(a)
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.cause == "not scheduled: hami-scheduler down or its extender unreachable"
    assert names(creates) == ["lc-t1-webhook"]


@pytest.mark.upstream("hami-registration-read-on-add-and-tick")
def test_a_bound_pod_is_never_recreated_whatever_condition_it_still_carries():
    """Requeued once HAMi read the node, bound, but its allocation never finishes: the pod
    keeps its stale 'node unregistered' condition; being bound, it is not re-created."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.registration_read_at = 5
    a.knobs.requeue_unregistered = True
    a.knobs.finish_alloc = False
    creates = spy_creates(a)
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.seen == "lc-t1-webhook: phase Pending on tenant-a-worker-1, bind-phase allocating"
    assert res.cause.startswith(BIND_CAUSE_START)
    assert names(creates) == ["lc-t1-webhook"]


@pytest.mark.upstream("hami-registration-read-on-add-and-tick")
def test_a_pinned_pod_waits_for_its_own_nodes_registration_not_another_nodes():
    """gpu.memory-limit pins its pod to the tenant's first GPU node; that node registers no
    cards while a second node does: nothing to retry, and the cause names the registration."""
    lab = FakeLab()
    s = lab.add_tenant("gpu-host", "172.30.255.202", [A100], gpu_mode="real")
    s.knobs.registration_read_at = 10_000
    del s.nodes["gpu-host-worker-1"]["metadata"]["annotations"][REGISTER]
    add_gpu_node(lab, s, "gpu-host-worker-2", [A100])
    creates = spy_creates(s)
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    assert res.status is Status.FAIL
    assert res.cause == (
        "HAMi rejects the node as unregistered and it has no hami.io/node-nvidia-register "
        "annotation: GPU agent (simulated) or device plugin (real) not registering cards"
    )
    assert names(creates) == ["lc-t1-smi"]


# gpu_pods, called directly ------------------------------------------------------------------
def direct(lab: FakeLab) -> tuple[RunContext, Tenant]:
    ctx = RunContext(spec=parse_spec(lab.spec), factory=lab.factory, clock=lab.clock, run_id="d1")
    return ctx, ctx.spec.tenants[0]


def body(name: str) -> Obj:
    return gpu_pod(name, "registry.k8s.io/pause:3.10", {"app": "x"}, mem_mb=1024)


def test_without_waiting_gpu_pods_yields_what_the_api_server_returned():
    lab = standard_lab()
    ctx, t = direct(lab)
    with gpu_pods(ctx, t, [body("p0"), body("p1")], wait=False) as pods:
        assert [p["metadata"]["name"] for p in pods] == ["p0", "p1"]
        assert [p["spec"]["schedulerName"] for p in pods] == ["hami-scheduler"] * 2
        assert [p["status"] for p in pods] == [{"phase": "Pending"}] * 2
    assert not lab.tenant("tenant-a").pods


def test_outside_a_check_the_snapshot_is_labelled_a_gpu_check():
    lab = standard_lab()
    ctx, t = direct(lab)
    with gpu_pods(ctx, t, [body("p0")]) as pods:
        assert pods[0]["metadata"]["annotations"]["hami.io/bind-phase"] == "success"
    assert ctx.peak_maps["tenant-a"].during == "a GPU check"


def test_a_failed_delete_leaves_the_pod_tracked_and_raises_nothing():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    ctx, t = direct(lab)

    def hook(name: str, args: tuple) -> None:
        if name == "delete_pod":
            raise ClusterError(500, "etcdserver: request timed out")

    with gpu_pods(ctx, t, [body("p0")]):
        a.hook = hook
    assert [(i.kind, i.name) for i in ctx.tracker.items] == [
        ("namespace", "labcheck-d1"),
        ("pod", "p0"),
    ]
    assert ("labcheck-d1", "p0") in a.pods


def test_a_pod_that_never_goes_away_leaves_it_tracked_and_raises_nothing():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    ctx, t = direct(lab)
    with gpu_pods(ctx, t, [body("p0")]):
        a.delete_pod = lambda namespace, name: None  # accepted, never removed
    assert lab.clock.t == 90.0  # waited podSeconds for it to go
    assert [i.name for i in ctx.tracker.items] == ["labcheck-d1", "p0"]


# the snapshot for gpu.placement -------------------------------------------------------------
def corrupt_registration_while(server: FakeServer, prefix: str, value: str) -> None:
    """list_nodes shows `value` as every register annotation while pods named `prefix`* exist."""
    orig = server.list_nodes

    def list_nodes() -> list[Obj]:
        nodes = orig()
        if any(name.startswith(prefix) for _, name in server.pods):
            for n in nodes:
                if REGISTER in n["metadata"]["annotations"]:
                    n["metadata"]["annotations"][REGISTER] = value
        return nodes

    server.list_nodes = list_nodes


def test_an_unreadable_registration_during_a_check_is_noted_for_gpu_placement():
    lab = standard_lab()
    corrupt_registration_while(lab.tenant("tenant-b"), "lc-t1-share-", "not json")
    _, res = run_lab(lab, only=("hami.webhook", "gpu.sharing", "gpu.placement"))
    assert res[("gpu.sharing", "tenant-b")].status is Status.PASS
    r = res[("gpu.placement", "tenant-b")]
    assert r.status is Status.PASS
    assert r.evidence.startswith("during hami.webhook: ")
    assert r.detail[-1] == (
        "cards not read during gpu.sharing: JSONDecodeError: Expecting value: line 1 column 1 "
        "(char 0)"
    )


@pytest.mark.parametrize(
    ("registration", "seen"),
    [
        ('[{"id": "GPU-0"}]', "KeyError: 'type'"),
        ("[null]", "TypeError: 'NoneType' object is not subscriptable"),
        ('{"id": "GPU-0"}', "ValueError: register annotation is not a JSON array"),
    ],
)
def test_gpu_placement_fails_on_a_registration_hami_cannot_read(registration, seen):
    lab = placement_lab()
    node = lab.tenant("tenant-b").nodes["tenant-b-worker-1"]
    node["metadata"]["annotations"][REGISTER] = registration
    r = check_result(lab, "gpu.placement", "tenant-b")
    assert r.status is Status.FAIL
    assert (r.expected, r.seen) == (
        "every hami.io/node-nvidia-register a JSON array of cards",
        seen,
    )
    assert r.cause == (
        "GPU agent (simulated) or device plugin (real) wrote a registration HAMi cannot read"
    )


# hami.webhook -------------------------------------------------------------------------------
def test_webhook_asks_a_tenth_of_the_smallest_card():
    lab = mixed_lab()
    bodies = spy_creates(lab.tenant("tenant-m"))
    res = check_result(lab, "hami.webhook", "tenant-m")
    assert res.status is Status.PASS
    assert [limits(b) for b in bodies] == [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2303"}]
    assert_run_pods(bodies, "hami-webhook", None)


# gpu.inventory ------------------------------------------------------------------------------
def test_inventory_pass_counts_cards_and_slots_per_node():
    _, r = run_lab(standard_lab(), only=["gpu.inventory"])
    assert r[("gpu.inventory", "tenant-a")].evidence == (
        "tenant-a-worker-1: 1 card(s), nvidia.com/gpu=10"
    )
    assert r[("gpu.inventory", "tenant-b")].evidence == (
        "tenant-b-worker-1: 2 card(s), nvidia.com/gpu=20"
    )


@pytest.mark.parametrize(
    "path", [("status", "allocatable", "nvidia.com/gpu"), ("status", "allocatable"), ("status",)]
)
def test_inventory_without_allocatable_gpus_says_so(path):
    lab = standard_lab()
    holder = lab.tenant("tenant-a").nodes["tenant-a-worker-1"]
    for key in path[:-1]:
        holder = holder[key]
    del holder[path[-1]]
    res = check_result(lab, "gpu.inventory")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == (
        "tenant-a-worker-1 allocatable nvidia.com/gpu=10 (cards x split)",
        "None",
    )
    assert res.cause == (
        "node capacity not patched (simulated agent) or device plugin not running; re-apply "
        "after a node re-registers"
    )


def test_inventory_registering_other_cards_than_configured_fails():
    lab = standard_lab()
    ann = lab.tenant("tenant-a").nodes["tenant-a-worker-1"]["metadata"]["annotations"]
    cards = json.loads(ann[REGISTER])
    cards[0]["devmem"] = 40960
    ann[REGISTER] = json.dumps(cards)
    res = check_result(lab, "gpu.inventory")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a-worker-1 registers [('NVIDIA A100-SXM4-80GB', 81920, 100, 10)]"
    assert res.seen == "[('NVIDIA A100-SXM4-80GB', 40960, 100, 10)]"
    assert res.cause == "register annotation differs from the configured inventory"


# gpu.sharing --------------------------------------------------------------------------------
def test_sharing_on_cards_split_in_two_runs_two_pods():
    lab = FakeLab()
    lab.add_tenant("tenant-s", "172.30.255.207", [{**L4, "count": 2}])
    res = check_result(lab, "gpu.sharing", "tenant-s")
    assert res.status is Status.PASS
    # 23034 // 3 MB and 100 // 3 % each
    assert (
        res.evidence == "2 pods share GPU-tenant-s-worker-1-0 on tenant-s-worker-1: 7678MB/33% each"
    )


def test_sharing_sizes_its_slices_from_the_smallest_card():
    lab = mixed_lab(policy=("spread", "spread"))
    bodies = spy_creates(lab.tenant("tenant-m"))
    res = check_result(lab, "gpu.sharing", "tenant-m")
    assert res.status is Status.PASS
    assert res.evidence.endswith(" on tenant-m-worker-1: 5758MB/25% each")  # 23034 // 4, 100 // 4
    assert [b["metadata"]["annotations"] for b in bodies] == [
        {"hami.io/gpu-scheduler-policy": "binpack", "hami.io/node-scheduler-policy": "spread"}
    ] * 3
    assert_run_pods(bodies, "gpu-sharing", "tenant-m-worker-1")


# gpu.policy ---------------------------------------------------------------------------------
def test_policy_pass_names_both_policies_in_order_with_the_configured_one():
    res = check_result(standard_lab(), "gpu.policy", "tenant-b")
    assert res.evidence == (
        "tenant-b-worker-1: spread: different cards, binpack: same card "
        "(configured gpu policy spread)"
    )


@pytest.mark.parametrize(
    ("configured", "evidence"),
    [
        ("binpack", "binpack: same card, spread: different cards"),
        ("topology-aware", "spread: different cards, binpack: same card"),
    ],
)
def test_policy_tests_the_configured_policy_first_and_both_always(configured, evidence):
    lab = FakeLab()
    lab.add_tenant("tenant-p", "172.30.255.208", [L4, L4], policy=("binpack", configured))
    res = check_result(lab, "gpu.policy", "tenant-p")
    assert res.status is Status.PASS
    assert res.evidence == f"tenant-p-worker-1: {evidence} (configured gpu policy {configured})"


def test_policy_asks_a_quarter_of_the_smallest_card_with_the_tenants_node_policy():
    lab = mixed_lab(policy=("spread", "spread"))
    bodies = spy_creates(lab.tenant("tenant-m"))
    res = check_result(lab, "gpu.policy", "tenant-m")
    assert res.status is Status.PASS
    assert [limits(b)["nvidia.com/gpumem"] for b in bodies] == ["5758"] * 4
    assert [b["metadata"]["annotations"] for b in bodies] == [
        {"hami.io/gpu-scheduler-policy": pol, "hami.io/node-scheduler-policy": "spread"}
        for pol in ("spread", "spread", "binpack", "binpack")
    ]
    assert_run_pods(bodies, "gpu-policy", "tenant-m-worker-1")


def test_spread_predicts_one_card_when_the_other_is_already_fuller():
    """A workload (5800 MB) on the second L4: spread puts the first pod (5758 MB) on the empty
    card and the second there too, as that card is still the less used; the prediction
    counts each pod as asking no cores, like the pods themselves."""
    lab = FakeLab()
    s = lab.add_tenant("tenant-p", "172.30.255.208", [L4, L4])
    node = "tenant-p-worker-1"
    s.add_placed_pod(hami_pod("apps", "w", node, f"GPU-{node}-1,NVIDIA,5800,0:;"))
    res = check_result(lab, "gpu.policy", "tenant-p")
    assert res.status is Status.PASS
    assert res.evidence == (
        "tenant-p-worker-1: spread: same card, binpack: same card (configured gpu policy spread)"
    )


def test_spread_ignored_by_the_scheduler_fails_with_the_prediction():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.ignore_policy = "binpack"
    res = check_result(lab, "gpu.policy", "tenant-b")
    assert res.status is Status.FAIL
    card0, card1 = "GPU-tenant-b-worker-1-0", "GPU-tenant-b-worker-1-1"
    assert res.expected == f"spread: 2 pods on different cards (predicted ['{card1}', '{card0}'])"
    assert res.seen == f"cards ['{card1}', '{card1}']"
    assert res.cause == "spread policy not applied by the HAMi scheduler"


def test_policy_pods_allocated_without_a_device_annotation_fail():
    lab = standard_lab()

    def no_devices(pod: Obj) -> None:
        pod["metadata"]["annotations"].pop("hami.io/vgpu-devices-allocated", None)

    after_get_pod(lab.tenant("tenant-b"), no_devices)
    res = check_result(lab, "gpu.policy", "tenant-b")
    assert res.status is Status.FAIL
    assert res.seen == "cards ['', '']"


def test_policy_skips_without_a_node_of_two_cards():
    res = check_result(standard_lab(), "gpu.policy")
    assert res.status is Status.SKIP
    assert res.evidence == "card placement policy needs 2+ cards on one node; none configured"


def two_node_lab() -> FakeLab:
    """tenant-p: worker-1 with one L4, worker-2 with two."""
    lab = FakeLab()
    s = lab.add_tenant("tenant-p", "172.30.255.208", [L4])
    add_gpu_node(lab, s, "tenant-p-worker-2", [L4, L4])
    return lab


def test_inventory_covers_every_gpu_node():
    res = check_result(two_node_lab(), "gpu.inventory", "tenant-p")
    assert res.status is Status.PASS
    assert res.evidence == (
        "tenant-p-worker-1: 1 card(s), nvidia.com/gpu=10; "
        "tenant-p-worker-2: 2 card(s), nvidia.com/gpu=20"
    )


def test_policy_picks_the_first_node_with_two_cards():
    lab = two_node_lab()
    res = check_result(lab, "gpu.policy", "tenant-p")
    assert res.status is Status.PASS
    assert res.evidence.startswith("tenant-p-worker-2: spread: different cards")


# gpu.oversubscription -----------------------------------------------------------------------
NO_CARD = (
    "Unschedulable: 0/1 nodes are available: 1 1/1 CardInsufficientMemory. preemption: 0/1 "
    "nodes are available: 1 No preemption victims found for incoming pod."
)


def test_oversubscription_probe_asks_one_mb_more_than_any_card_has_left():
    """60 % of the A100 filled (49152 MB): the probe asks 32768 + 1 MB; the reason is cut at
    120 characters."""
    res = check_result(standard_lab(), "gpu.oversubscription")
    assert res.status is Status.PASS
    assert res.evidence == f"32769MB (> 32768MB left on any card) stays Pending: {NO_CARD[:120]}"


def test_oversubscription_fills_every_card_once_with_spread():
    lab = standard_lab()
    bodies = spy_creates(lab.tenant("tenant-b"))
    res = check_result(lab, "gpu.oversubscription", "tenant-b")
    assert res.status is Status.PASS
    fillers = [b for b in bodies if b["metadata"]["name"].startswith("lc-t1-fill-")]
    assert names(fillers) == ["lc-t1-fill-0", "lc-t1-fill-1"]
    for b in fillers:  # int(23034 * 0.6) MB each, one per card
        assert limits(b) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "13820"}
        assert b["metadata"]["annotations"] == {"hami.io/gpu-scheduler-policy": "spread"}
    assert_run_pods(bodies, "gpu-oversubscription", "tenant-b-worker-1")
    assert res.evidence.startswith("9215MB (> 9214MB left on any card) stays Pending: ")


def test_oversubscription_sizes_fillers_from_the_smallest_card():
    lab = mixed_lab()
    bodies = spy_creates(lab.tenant("tenant-m"))
    res = check_result(lab, "gpu.oversubscription", "tenant-m")
    assert res.status is Status.PASS
    assert [limits(b)["nvidia.com/gpumem"] for b in bodies[:2]] == ["13820", "13820"]
    # the A100 keeps 81920 - 13820 MB free
    assert res.evidence.startswith("68101MB (> 68100MB left on any card) stays Pending: ")


def test_oversubscription_skips_when_the_fillers_use_nothing_visible():
    """Fillers whose slices the pod list does not show leave every card free: a probe above
    any card's free memory would be above the card itself, which proves nothing."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.list_pods = lambda namespace=None, label_selector="": []
    res = check_result(lab, "gpu.oversubscription")
    assert res.status is Status.SKIP
    assert res.evidence == "cannot build a fair probe: 81921MB exceeds every card"


def test_oversubscription_probe_as_large_as_a_whole_card_is_still_fair():
    """1 MB seen used on the A100: the probe asks the whole card (81920 MB) and runs."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    node = "tenant-a-worker-1"
    used = hami_pod("apps", "w", node, f"GPU-{node}-0,NVIDIA,1,0:;")
    a.list_pods = lambda namespace=None, label_selector="": [copy.deepcopy(used)]
    res = check_result(lab, "gpu.oversubscription")
    assert res.status is Status.PASS
    assert res.evidence.startswith("81920MB (> 81919MB left on any card) stays Pending: ")


@pytest.mark.upstream("kube-scheduler-extender-failed-node-message")
@pytest.mark.parametrize(
    ("condition", "event"),
    [
        ("1 NodeInsufficientDevice", ""),
        ("1 NodeUnfitPod", ""),
        ("1 AllocatedCardsInsufficientRequest", ""),
        ("1 node(s) didn't match the extender", "FilteringFailed"),
    ],
)
def test_oversubscription_accepts_each_hami_no_room_reason(condition, event):
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    message = f"0/1 nodes are available: {condition}."

    def rejected(pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if name == "lc-t1-over" and not pod["spec"].get("nodeName"):
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
            if event:
                a.events[("labcheck-t1", name)] = [{"reason": event, "message": "no node fits"}]

    after_get_pod(a, rejected)
    res = check_result(lab, "gpu.oversubscription")
    assert res.status is Status.PASS
    tail = f" | {event}: no node fits" if event else ""
    assert res.evidence == (
        f"32769MB (> 32768MB left on any card) stays Pending: Unschedulable: {message}{tail}"
    )


# gpu.quota ----------------------------------------------------------------------------------
QUOTA_NOT_FIT = (
    "Unschedulable: 0/1 nodes are available: 1 1/1 ResourceQuotaNotFit. preemption: 0/1 "
    "nodes are available: 1 No preemption victims found for incoming pod."
)


@pytest.mark.upstream("kube-scheduler-extender-failed-node-message")
def test_quota_held_pending_evidence_cuts_the_reason_at_100_characters():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    a.knobs.quota_in_filter = True
    bodies = spy_creates(a)
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.PASS
    assert [limits(b)["nvidia.com/gpumem"] for b in bodies] == ["81921"]
    assert_run_pods(bodies, "gpu-quota", None)
    assert res.evidence == (
        f"81921MB in gpu-workloads admitted but held Pending: {QUOTA_NOT_FIT[:100]}"
    )


def test_quota_not_enforced_shows_the_whole_pending_reason():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.quota_admission = False
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.seen == NO_CARD


def test_quota_pod_pending_without_any_reason_shows_the_pod():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    a.knobs.scheduler = False
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.expected == "Pending with one of ['ResourceQuotaNotFit']"
    assert res.seen == "phase Pending on -, bind-phase -"


@pytest.mark.parametrize(
    ("quota", "seen"),
    [({"spec": {"hard": {"limits.nvidia.com/gpumem": "40960"}}}, "40960"), ({}, "None")],
)
def test_quota_object_with_another_or_no_gpu_memory_limit_fails(quota, seen):
    lab = standard_lab()
    lab.tenant("tenant-a").quotas[("gpu-workloads", "gpu-quota")] = quota
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == ("limits.nvidia.com/gpumem=81920", seen)
    assert res.cause == "quota object differs from the configuration"


@pytest.mark.upstream("hami-webhook-quota-denial")
@pytest.mark.parametrize(
    ("status", "message", "cause"),
    [
        (
            403,
            'pods "lc-t1-quota" is forbidden: User "tenant-a" cannot create resource "pods"',
            "RBAC forbids the request for this user",
        ),
        (422, "exceeded quota: pod-count, requested: pods=1", "unexpected API error"),
    ],
)
def test_a_refused_quota_pod_that_is_not_a_quota_denial_names_the_api_cause(status, message, cause):
    lab = standard_lab()
    fail_create_in(lab.tenant("tenant-a"), "gpu-workloads", status, message)
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.expected == (
        'HTTP 403 \'admission webhook "vgpu.hami.io" denied the request: exceeding resource '
        "quota', or Pending with ResourceQuotaNotFit"
    )
    assert (res.seen, res.cause) == (f"HTTP {status}: {message}", cause)


def fail_create_in(server: FakeServer, namespace: str, status: int, message: str) -> None:
    fail_call(server, "create_pod", status, message, when=lambda args: args[0] == namespace)


# gpu.node-lock ------------------------------------------------------------------------------
def test_node_lock_burst_of_exactly_the_nodes_slots_runs():
    lab = standard_lab()
    lab.spec["timeouts"] = {"lockBurstPods": 10}
    res = check_result(lab, "gpu.node-lock")
    assert res.status is Status.PASS
    assert res.evidence == (
        "10 pods back to back on tenant-a-worker-1 allocated in 0.0s (bound 60s); "
        "no hami.io/mutex.lock on tenant-a-worker-1 0s after the last bind"
    )


def test_node_lock_times_the_burst_from_its_own_start():
    lab = standard_lab()
    lab.clock.t = 1000.0
    lab.tenant("tenant-a").knobs.lock_hold_seconds = 2
    res = check_result(lab, "gpu.node-lock")
    assert res.status is Status.PASS
    assert res.evidence == (
        "5 pods back to back on tenant-a-worker-1 allocated in 8.0s (bound 60s); "
        "no hami.io/mutex.lock on tenant-a-worker-1 2s after the last bind"
    )


def test_webhook_on_a_tiny_card_asks_one_mb():
    lab = FakeLab()
    lab.add_tenant("tenant-t", "172.30.255.209", [{**L4, "devmem": 8}])
    bodies = spy_creates(lab.tenant("tenant-t"))
    res = check_result(lab, "hami.webhook", "tenant-t")
    assert res.status is Status.PASS
    assert [limits(b)["nvidia.com/gpumem"] for b in bodies] == ["1"]


def test_node_lock_on_a_tiny_card_asks_one_mb_a_pod_so_all_fit():
    lab = FakeLab()
    lab.add_tenant("tenant-t", "172.30.255.209", [{**L4, "devmem": 8}])
    bodies = spy_creates(lab.tenant("tenant-t"))
    res = check_result(lab, "gpu.node-lock", "tenant-t")
    assert res.status is Status.PASS
    assert [limits(b)["nvidia.com/gpumem"] for b in bodies] == ["1"] * 5
    assert_run_pods(bodies, "gpu-lock", "tenant-t-worker-1")


# gpu.memory-limit ---------------------------------------------------------------------------
SMI_QUERY = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]


def real_lab(cards: list[Obj], smi: str | None = None) -> tuple[FakeLab, FakeServer, list]:
    """A real-GPU tenant; `smi`: what nvidia-smi prints in the pod (else the slice's MB)."""
    lab = FakeLab()
    s = lab.add_tenant("gpu-host", "172.30.255.202", cards, gpu_mode="real")
    execs: list[tuple[str, str, list[str]]] = []
    orig = s.exec_pod

    def exec_pod(namespace: str, name: str, command: list[str]) -> str:
        execs.append((namespace, name, command))
        out = orig(namespace, name, command)
        return out if smi is None else smi

    s.exec_pod = exec_pod
    return lab, s, execs


def test_memory_limit_runs_nvidia_smi_in_a_sleeping_smi_pod_sized_from_the_largest_card():
    lab, s, execs = real_lab([L4, A100])
    bodies = spy_creates(s)
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    assert res.status is Status.PASS
    assert res.evidence == "nvidia-smi reports 20480 MiB for a 20480 MiB slice of 81920 MiB"
    assert execs == [("labcheck-t1", "lc-t1-smi", SMI_QUERY)]
    assert_run_pods(
        bodies,
        "gpu-memory-limit",
        "gpu-host-worker-1",
        image="nvidia/cuda:12.4.1-base-ubuntu22.04",
    )
    container = bodies[0]["spec"]["containers"][0]
    assert (container["image"], container["command"]) == (
        "nvidia/cuda:12.4.1-base-ubuntu22.04",
        ["sleep", "3600"],
    )
    assert container["resources"]["limits"]["nvidia.com/gpumem"] == "20480"


@pytest.mark.parametrize(
    ("devmem", "seen", "passes"),
    [
        (81920, 20480 + 409, True),  # tolerance ask // 50 = 409 MiB
        (81920, 20480 - 409, True),
        (81920, 20480 + 410, False),
        (81920, 20480 - 410, False),
        (2048, 512 + 16, True),  # at least 16 MiB
        (2048, 512 + 17, False),
    ],
)
def test_memory_limit_tolerance(devmem, seen, passes):
    lab, _, _ = real_lab([{**A100, "devmem": devmem}], smi=f"{seen}\n")
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    ask = devmem // 4
    if passes:
        assert res.status is Status.PASS
        assert (
            res.evidence == f"nvidia-smi reports {seen} MiB for a {ask} MiB slice of {devmem} MiB"
        )
    else:
        assert res.status is Status.FAIL
        assert (res.expected, res.seen) == (f"memory.total ~= {ask} MiB (the slice)", f"{seen} MiB")
        assert res.cause == "HAMi-core (libvgpu) not injected: the container sees the whole card"


def test_memory_limit_reads_the_first_card_of_nvidia_smis_output():
    lab, _, _ = real_lab([A100], smi=" 20480 MiB\n81920 MiB\n")
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    assert res.status is Status.PASS
    assert res.evidence.startswith("nvidia-smi reports 20480 MiB ")


NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
    "that the latest NVIDIA driver is installed and running.\n"
)


@pytest.mark.parametrize("out", ["", "\n", "N/A\n", NO_DRIVER])
def test_memory_limit_unparsable_output_blames_the_image_or_driver(out):
    """The output is shown up to 120 characters."""
    lab, _, _ = real_lab([A100], smi=out)
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == ("nvidia-smi memory.total in MiB", repr(out[:120]))
    assert res.cause == "nvidia-smi missing from the image or driver not injected"


def test_memory_limit_exec_failure_names_the_tunnel():
    lab, s, _ = real_lab([A100])
    s.knobs.konnectivity = False
    res = check_result(lab, "gpu.memory-limit", "gpu-host")
    assert res.status is Status.FAIL
    assert res.expected == "nvidia-smi runs in the pod"
    assert res.seen == "HTTP 500: error dialing backend: No agent available"
    assert res.cause.startswith("Konnectivity: no agent connected")


def test_inventory_of_a_node_without_registration_names_the_registering_side():
    lab = standard_lab()
    del lab.tenant("tenant-b").nodes["tenant-b-worker-1"]["metadata"]["annotations"][REGISTER]
    res = check_result(lab, "gpu.inventory", "tenant-b")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == (
        "register annotation on tenant-b-worker-1",
        "no hami.io/node-nvidia-register",
    )
    assert res.cause == "GPU agent (simulated) or device plugin (real) not registering cards"


@pytest.mark.parametrize(
    ("skew", "seen"),
    [
        ("node", "('some-other-node', 'tenant-b-worker-1')"),
        ("slice", "[Slice(uuid='GPU-tenant-b-worker-1-1', mem_mb=2879, cores=25)]"),
        ("uuid", "GPU-unknown"),
    ],
)
def test_sharing_shows_the_allocation_that_disagrees(skew, seen):
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.allocation_skew = skew
    res = check_result(lab, "gpu.sharing", "tenant-b")
    assert res.status is Status.FAIL
    assert res.seen == seen


def test_overcommitted_probe_names_the_pod_and_both_ways_round_hami():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.ignore_memory = True
    res = check_result(lab, "gpu.oversubscription")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == ("lc-t1-over stays Pending", "bound to tenant-a-worker-1")
    assert res.cause == (
        "HAMi over-committed the card (accounting lost, or the pod bypassed hami-scheduler)"
    )


def test_unreadable_quota_object_shows_the_api_error():
    lab = standard_lab()

    def hook(name: str, args: tuple) -> None:
        if name == "get_resource_quota":
            raise ClusterError(403, "resourcequotas is forbidden")

    lab.tenant("tenant-a").hook = hook
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.seen == "HTTP 403: resourcequotas is forbidden"


@pytest.mark.upstream("hami-webhook-quota-denial")
def test_a_long_quota_denial_is_cut_at_140_characters_in_the_evidence():
    lab = standard_lab()
    denial = (
        'pods "lc-t1-quota" is forbidden: admission webhook "vgpu.hami.io" denied the request: '
        "exceeding resource quota; requested limits.nvidia.com/gpumem=81921, limited 81920"
    )
    fail_create_in(lab.tenant("tenant-a"), "gpu-workloads", 403, denial)
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.PASS
    assert res.evidence == f"81921MB pod in gpu-workloads rejected at admission: {denial[:140]}"
    assert len(denial) > 140
