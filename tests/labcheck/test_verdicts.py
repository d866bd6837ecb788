"""Issue 13: every verdict of hami.webhook, gpu.quota, gpu.node-lock and the isolation checks
(pass, fail, inconclusive, skip, error), each with the cause it states."""

from __future__ import annotations

import json

import pytest

from labcheck.cluster import ClusterError
from labcheck.result import Status
from tests.support.labcheck_fakes import FakeLab, check_result, fail_call, run_lab, standard_lab

HAMI_DENIAL = (
    'pods "lc-t1-quota" is forbidden: admission webhook "vgpu.hami.io" denied the request: '
    "exceeding resource quota"
)


# hami.webhook -------------------------------------------------------------------------------
def test_webhook_pass_names_the_scheduler_and_the_node():
    res = check_result(standard_lab(), "hami.webhook")
    assert res.status is Status.PASS
    assert res.evidence == (
        "schedulerName hami-scheduler; lc-t1-webhook allocated on tenant-a-worker-1"
    )


def test_webhook_with_no_room_on_any_card_blames_the_inventory():
    lab = standard_lab()
    node = lab.tenant("tenant-a").nodes["tenant-a-worker-1"]
    cards = json.loads(node["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    cards[0]["devmem"] = 1024  # smaller than the 8192 MB probe
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = json.dumps(cards)
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert "1 1/1 CardInsufficientMemory" in res.seen
    assert res.cause == (
        "HAMi found no card with room (leftover GPU pods, or inventory smaller than configured)"
    )


def test_webhook_pod_that_ends_blames_the_container():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.container_exits = True
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert res.seen.startswith("pod lc-t1-webhook ended: phase Failed")
    assert res.cause == "container exited; check the image and its command"


def test_webhook_pod_bound_but_never_started_points_at_its_events():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.image_pull_fails = True
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.FAIL
    assert "ImagePullBackOff" in res.seen and "bind-phase success" in res.seen
    assert res.cause == "pod did not start; see its events"


def test_webhook_api_error_is_an_error_verdict_with_its_cause():
    lab = standard_lab()
    fail_call(lab.tenant("tenant-a"), "create_pod", 500, "etcdserver: request timed out")
    res = check_result(lab, "hami.webhook")
    assert res.status is Status.ERROR
    assert res.seen == "HTTP 500: etcdserver: request timed out"
    assert res.cause == "API server or an aggregated/proxied backend failed"


def test_webhook_skips_a_tenant_without_gpus():
    lab = FakeLab()
    lab.add_tenant("cpu-only", "172.30.255.203", [])
    res = check_result(lab, "hami.webhook", "cpu-only")
    assert res.status is Status.SKIP
    assert res.evidence == "no GPU nodes configured for this tenant"


# gpu.quota ----------------------------------------------------------------------------------
@pytest.mark.upstream("hami-webhook-quota-denial")
def test_quota_rejection_by_hamis_webhook_passes():
    """The 403 HAMi's webhook answers, with its webhook name, is quota enforcement."""
    res = check_result(standard_lab(), "gpu.quota")
    assert res.status is Status.PASS
    assert res.evidence == (f"81921MB pod in gpu-workloads rejected at admission: {HAMI_DENIAL}")


@pytest.mark.upstream("hami-webhook-quota-denial")
def test_another_resource_quota_is_not_counted_as_gpu_quota_enforcement():
    """Issue 13: a 403 from Kubernetes' quota admission ('exceeded quota') must not pass."""
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    a.knobs.pods_quota_full = True
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert "exceeded quota: pod-count" in res.seen
    assert res.cause == (
        "another ResourceQuota in the namespace rejected the pod first, so HAMi's GPU "
        "memory quota was not what refused it"
    )


@pytest.mark.upstream("hami-webhook-quota-denial")
def test_a_400_is_not_quota_enforcement_even_with_the_words():
    """Issue 13: only HTTP 403 with HAMi's denial counts; a 400 is an API failure."""
    lab = standard_lab()
    fail_call(
        lab.tenant("tenant-a"),
        "create_pod",
        400,
        'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota',
        when=lambda args: args[0] == "gpu-workloads",
    )
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.seen.startswith("HTTP 400:")
    assert res.cause == "unexpected API error"


def test_quota_held_pending_by_the_scheduler_passes():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    a.knobs.quota_in_filter = True
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.PASS
    assert res.evidence.startswith("81921MB in gpu-workloads admitted but held Pending: ")
    assert "1 1/1 ResourceQuotaNotFit" in res.evidence


def test_quota_not_enforced_at_all_names_the_extender():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.quota_admission = False
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.expected == "Pending with one of ['ResourceQuotaNotFit']"
    assert "CardInsufficientMemory" in res.seen
    assert res.cause == "hami-scheduler extender not consulted (pod Pending for another reason)"


def test_quota_pod_bound_anyway_is_an_overcommit():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    a.knobs.ignore_memory = True
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.seen == "bound to tenant-a-worker-1"
    assert res.cause.startswith("HAMi over-committed the card")


def test_quota_object_that_differs_is_a_configuration_failure():
    lab = standard_lab()
    lab.tenant("tenant-a").quotas[("gpu-workloads", "gpu-quota")]["spec"]["hard"] = {}
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert (res.expected, res.seen) == ("limits.nvidia.com/gpumem=81920", "None")
    assert res.cause == "quota object differs from the configuration"


def test_quota_object_unreadable_is_a_failure_with_the_api_cause():
    lab = standard_lab()
    fail_call(lab.tenant("tenant-a"), "get_resource_quota", 403, "resourcequotas is forbidden")
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.FAIL
    assert res.expected == "ResourceQuota gpu-workloads/gpu-quota"
    assert res.cause == "RBAC forbids the request for this user"


def test_quota_wait_hitting_an_api_error_is_an_error_not_a_quota_failure():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.knobs.quota_admission = False
    fail_call(a, "get_pod", 500, "etcdserver: leader changed")
    res = check_result(lab, "gpu.quota")
    assert res.status is Status.ERROR
    assert res.cause == "API server or an aggregated/proxied backend failed"


def test_quota_skips_without_a_configured_quota():
    lab = FakeLab()
    lab.add_tenant(
        "no-quota", "172.30.255.204", [{"type": "NVIDIA L4", "devmem": 23034, "devcore": 100}]
    )
    res = check_result(lab, "gpu.quota", "no-quota")
    assert res.status is Status.SKIP
    assert res.evidence == "no GPU ResourceQuota configured for this tenant"


# gpu.node-lock ------------------------------------------------------------------------------
def test_node_lock_contention_beyond_the_budget_names_the_lock():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.lock_hold_seconds = 20  # 5 pods x 20 s > 60 s
    res = check_result(lab, "gpu.node-lock")
    assert res.status is Status.FAIL
    assert res.expected == "5 GPU pod(s) Running with bind-phase success"
    assert "node lock contention" in res.seen
    assert res.cause.startswith("allocation never finished: the node lock or bind-phase")


def test_node_lock_skips_a_burst_larger_than_the_slots():
    lab = standard_lab()
    lab.spec["timeouts"] = {"lockBurstPods": 20}  # budget scales to 100 s
    res = check_result(lab, "gpu.node-lock")
    assert res.status is Status.SKIP
    assert res.evidence == "20 pods exceed the 10 slots on tenant-a-worker-1"


def test_node_lock_api_error_is_an_error_verdict():
    lab = standard_lab()
    fail_call(lab.tenant("tenant-a"), "get_node", 503, "the server is currently unable")
    res = check_result(lab, "gpu.node-lock")
    assert res.status is Status.ERROR
    assert res.cause == "API server or an aggregated/proxied backend failed"


# isolation ----------------------------------------------------------------------------------
INCONCLUSIVE = "target API unreachable, so isolation could not be tested"


def test_cross_tenant_refusals_pass_with_401_and_anonymous_403():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.foreign_answer = 403  # unknown cert -> system:anonymous
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.PASS
    assert res.evidence == "2 ordered pair(s): every read refused with 401/403"


def test_unreachable_target_is_inconclusive_never_refused():
    """Issue 13: an API that does not answer proves nothing about isolation."""
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.reachable = False
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a-creds@tenant-b: HTTP 401/403 on every read"
    assert res.seen.startswith("/api/v1/namespaces: ConnectTimeoutError")
    assert res.cause == INCONCLUSIVE


def test_unreachable_management_api_is_inconclusive():
    lab = standard_lab()
    lab.mgmt.knobs.reachable = False
    res = check_result(lab, "isolation.management")
    assert res.status is Status.FAIL
    assert res.cause == INCONCLUSIVE


def test_a_server_error_is_not_a_refusal():
    lab = standard_lab()
    lab.mgmt.knobs.foreign_answer = 500
    res = check_result(lab, "isolation.management")
    assert res.status is Status.FAIL
    assert "HTTP 500" in res.seen and res.cause == INCONCLUSIVE


def test_foreign_reads_are_leaks_with_their_cause():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.accept_foreign = True
    lab.mgmt.knobs.accept_foreign = True
    _, r = run_lab(lab, only=["isolation.*"])
    cross = r[("isolation.cross-tenant", "")]
    assert cross.status is Status.FAIL
    assert cross.cause == "tenants share a CA or the same admin credentials"
    mgmt = r[("isolation.management", "tenant-a")]
    assert mgmt.status is Status.FAIL
    assert mgmt.cause == "tenant kubeconfig carries management credentials"


def test_management_refusal_passes():
    res = check_result(standard_lab(), "isolation.management")
    assert res.status is Status.PASS
    assert res.evidence == "management API refused 5 reads with tenant-a credentials"


def test_isolation_skips_with_one_tenant_and_errors_on_an_unusable_kubeconfig():
    lab = FakeLab()
    lab.add_tenant("solo", "172.30.255.205", [])
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.SKIP and res.evidence == "only one tenant configured"

    lab = standard_lab()
    factory = lab.factory

    def broken(kc, label):
        if label.endswith("@management"):
            raise ClusterError(0, f"{label}: unusable kubeconfig: no server")
        return factory(kc, label)

    lab.factory = broken
    res = check_result(lab, "isolation.management")
    assert res.status is Status.ERROR
    assert res.seen == "tenant-a-creds@management: unusable kubeconfig: no server"
    assert res.cause.startswith("API server unreachable")


def test_gpu_placement_pass_skip_and_error():
    lab = standard_lab()
    _, r = run_lab(lab, only=["hami.webhook", "isolation.gpu-placement"])
    res = r[("isolation.gpu-placement", "tenant-a")]
    assert res.status is Status.PASS
    assert res.evidence == "1 GPU pod placement(s), all on ['tenant-a-worker-1']"

    res = check_result(standard_lab(), "isolation.gpu-placement")
    assert res.status is Status.SKIP
    assert res.evidence == "no GPU pod was placed in this tenant during the run"

    lab = standard_lab()
    fail_call(lab.tenant("tenant-a"), "list_pods", 500, "boom")
    res = check_result(lab, "isolation.gpu-placement")
    assert res.status is Status.ERROR
    assert res.cause == "API server or an aggregated/proxied backend failed"


# gpu.sharing --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("skew", "expected", "cause"),
    [
        (
            "node",
            "vgpu-node and nodeName tenant-b-worker-1",
            "scheduler accounting and binding disagree",
        ),
        (
            "slice",
            "one slice 5758MB/25% on lc-t1-share-0",
            "HAMi ignored the gpumem/gpucores limits",
        ),
        (
            "uuid",
            "a card registered on tenant-b-worker-1",
            "allocation names a card the node does not register",
        ),
    ],
)
def test_sharing_rejects_allocations_that_disagree_with_the_bind(skew, expected, cause):
    """Issue 13: each of gpu.sharing's verdicts on the pods' allocation annotations."""
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.allocation_skew = skew
    res = check_result(lab, "gpu.sharing", "tenant-b")
    assert res.status is Status.FAIL
    assert (res.expected, res.cause) == (expected, cause)


def test_sharing_with_binpack_ignored_spreads_over_cards():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.ignore_policy = "spread"
    res = check_result(lab, "gpu.sharing", "tenant-b")
    assert res.status is Status.FAIL
    assert res.expected == "3 binpack pods share one card"
    assert res.seen == "cards ['GPU-tenant-b-worker-1-0', 'GPU-tenant-b-worker-1-1']"
    assert res.cause == "binpack annotation ignored (webhook/extender version mismatch?)"


def test_sharing_pass_names_the_shared_card_and_the_slices():
    res = check_result(standard_lab(), "gpu.sharing", "tenant-b")
    assert res.status is Status.PASS
    assert res.evidence == (
        "3 pods share GPU-tenant-b-worker-1-1 on tenant-b-worker-1: 5758MB/25% each"
    )
