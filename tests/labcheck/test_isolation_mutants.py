"""Issue 13: the evidence the isolation checks report, pinned exactly (refusal tally per HTTP
code, the paths probed and leaked, the failure cause), so that a mutant of
labcheck/checks/isolation.py that drops or alters it fails a test."""

from __future__ import annotations

from typing import Any

from labcheck.cluster import ClusterError
from labcheck.result import Status
from tests.support.labcheck_fakes import (
    FOREIGN_ANSWERS,
    FakeLab,
    check_result,
    hami_pod,
    standard_lab,
)

# The admin reads a foreign identity must be refused, in the order the check probes them.
ADMIN_READS = [
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/secrets",
    "/api/v1/pods",
    "/apis/apps/v1/deployments",
]
UNKNOWN = "credentials unknown there"
RBAC = "credentials authenticated there, RBAC denies the reads"
INCONCLUSIVE = "target API unreachable, so isolation could not be tested"
PLACEMENT_CAUSE = (
    "HAMi scheduler of this tenant sees another tenant's nodes "
    "(shared extender or wrong kubeconfig)"
)


class ScriptedCluster:
    """An API server that answers each read path as scripted: 200 = the read succeeds,
    0 = no answer at all, any other code = that HTTP error."""

    def __init__(self, answers: dict[str, int]) -> None:
        self.answers = answers
        self.reads: list[str] = []

    def get_raw(self, path: str, query: list[tuple[str, str]] | None = None) -> str:
        self.reads.append(path)
        status = self.answers[path]
        if status == 200:
            return '{"items": []}'
        if status == 0:
            raise ClusterError(0, "ConnectTimeoutError: timed out")
        raise ClusterError(status, FOREIGN_ANSWERS.get(status, "Internal error"))


def script(lab: FakeLab, label: str, answers: dict[str, int]) -> ScriptedCluster:
    """Answer the credentials `label` names (e.g. 'tenant-a-creds@tenant-b') as scripted."""
    scripted = ScriptedCluster(answers)
    factory = lab.factory

    def scripted_factory(kc: dict[str, Any], got: str) -> Any:
        return scripted if got == label else factory(kc, got)

    lab.factory = scripted_factory
    return scripted


# isolation.cross-tenant ---------------------------------------------------------------------
def test_cross_tenant_pass_tallies_each_pairs_refusals_by_code():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.foreign_answer = 403
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.PASS
    assert res.evidence == "2 ordered pair(s): every read refused with 401/403"
    assert res.detail == (
        f"tenant-a-creds@tenant-b: 401 x5 ({UNKNOWN})",
        f"tenant-b-creds@tenant-a: 403 x5 ({RBAC})",
    )


def test_cross_tenant_probes_every_admin_read_on_the_target_with_the_other_credentials():
    lab = standard_lab()
    check_result(lab, "isolation.cross-tenant", "")
    reads = [("get_raw", (path,)) for path in ADMIN_READS]
    assert lab.tenant("tenant-b").foreign_calls == reads
    assert lab.tenant("tenant-a").foreign_calls == reads
    assert lab.created_clusters == ["tenant-a-creds@tenant-b", "tenant-b-creds@tenant-a"]


def test_cross_tenant_checks_every_ordered_pair_of_three_tenants():
    lab = standard_lab()
    lab.add_tenant("tenant-c", "172.30.255.202", [])
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.PASS
    assert res.evidence == "6 ordered pair(s): every read refused with 401/403"
    assert [line.split(":")[0] for line in res.detail] == [
        "tenant-a-creds@tenant-b",
        "tenant-a-creds@tenant-c",
        "tenant-b-creds@tenant-a",
        "tenant-b-creds@tenant-c",
        "tenant-c-creds@tenant-a",
        "tenant-c-creds@tenant-b",
    ]


def test_mixed_refusals_are_tallied_per_code_in_code_order():
    lab = standard_lab()
    statuses = [403, 401, 403, 401, 403]
    script(lab, "tenant-a-creds@tenant-b", dict(zip(ADMIN_READS, statuses, strict=True)))
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.PASS
    assert res.detail == (
        f"tenant-a-creds@tenant-b: 401 x2 ({UNKNOWN}), 403 x3 ({RBAC})",
        f"tenant-b-creds@tenant-a: 401 x5 ({UNKNOWN})",
    )


def test_every_read_leaking_means_shared_credentials_and_names_the_paths():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.accept_foreign = True
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a credentials refused by tenant-b"
    assert res.seen == f"tenant-a read tenant-b {ADMIN_READS}"
    assert res.cause == "tenants share a CA or the same admin credentials"


def test_some_reads_leaking_blames_an_rbac_binding_on_the_target():
    lab = standard_lab()
    scripted = script(
        lab,
        "tenant-a-creds@tenant-b",
        {path: 403 for path in ADMIN_READS} | {"/api/v1/secrets": 200},
    )
    res = check_result(lab, "isolation.cross-tenant", "")
    assert scripted.reads == ADMIN_READS
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a credentials refused by tenant-b"
    assert res.seen == "tenant-a read tenant-b ['/api/v1/secrets']"
    assert res.cause == (
        "tenant-b authenticates tenant-a's credentials (a shared CA or token) and an RBAC "
        "binding there lets that identity read"
    )


def test_unanswered_reads_are_listed_and_refusals_beside_them_do_not_pass():
    """Issue 13: one path without an HTTP answer makes the pair inconclusive."""
    lab = standard_lab()
    statuses = [401, 0, 401, 500, 401]
    script(lab, "tenant-a-creds@tenant-b", dict(zip(ADMIN_READS, statuses, strict=True)))
    res = check_result(lab, "isolation.cross-tenant", "")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a-creds@tenant-b: HTTP 401/403 on every read"
    assert res.seen == (
        "/api/v1/nodes: ConnectTimeoutError: timed out; /api/v1/pods: HTTP 500: Internal error"
    )
    assert res.cause == INCONCLUSIVE


def test_cross_tenant_runs_with_exactly_two_tenants_and_skips_with_one():
    lab = FakeLab()
    lab.add_tenant("solo", "172.30.255.205", [])
    res = check_result(lab, "isolation.cross-tenant", "")
    assert (res.status, res.evidence) == (Status.SKIP, "only one tenant configured")
    assert lab.created_clusters == []


# isolation.management -----------------------------------------------------------------------
def test_management_pass_tallies_the_refusals_of_the_management_api():
    lab = standard_lab()
    lab.mgmt.knobs.foreign_answer = 403
    res = check_result(lab, "isolation.management")
    assert res.status is Status.PASS
    assert res.evidence == "management API refused 5 reads with tenant-a credentials"
    assert res.detail == (f"tenant-a-creds@management: 403 x5 ({RBAC})",)
    # once per tenant: tenant-a's credentials, then tenant-b's
    assert lab.mgmt.foreign_calls == [("get_raw", (path,)) for path in ADMIN_READS] * 2
    assert lab.created_clusters == ["tenant-a-creds@management", "tenant-b-creds@management"]


def test_management_leak_names_the_paths_read():
    lab = standard_lab()
    script(
        lab,
        "tenant-a-creds@management",
        {path: 401 for path in ADMIN_READS} | {"/api/v1/nodes": 200, "/api/v1/pods": 200},
    )
    res = check_result(lab, "isolation.management")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-a credentials refused by the management API"
    assert res.seen == "read ['/api/v1/nodes', '/api/v1/pods']"
    assert res.cause == "tenant kubeconfig carries management credentials"


def test_management_unanswered_read_names_the_pair_and_the_path():
    lab = standard_lab()
    statuses = [401, 401, 401, 401, 0]
    script(lab, "tenant-b-creds@management", dict(zip(ADMIN_READS, statuses, strict=True)))
    res = check_result(lab, "isolation.management", "tenant-b")
    assert res.status is Status.FAIL
    assert res.expected == "tenant-b-creds@management: HTTP 401/403 on every read"
    assert res.seen == "/apis/apps/v1/deployments: ConnectTimeoutError: timed out"
    assert res.cause == INCONCLUSIVE


# isolation.gpu-placement --------------------------------------------------------------------
def live_pods(lab: FakeLab, pods: list[dict[str, Any]]) -> None:
    """Make tenant-a's API list exactly these pods (the fake's scheduler would bind them)."""
    lab.tenant("tenant-a").list_pods = lambda namespace=None, label_selector="": pods


def gpu_pod(name: str, vgpu_node: str, node_name: str | None) -> dict[str, Any]:
    """A GPU pod HAMi placed on `vgpu_node`, bound to `node_name` (None: not bound yet)."""
    pod = hami_pod("default", name, vgpu_node, "GPU-0,NVIDIA,8192,25:;")
    if node_name is None:
        del pod["spec"]["nodeName"]
    else:
        pod["spec"]["nodeName"] = node_name
    return pod


def test_placement_counts_live_gpu_pods_and_ignores_pods_without_the_annotation():
    lab = standard_lab()
    live_pods(
        lab,
        [
            {"metadata": {"name": "plain"}, "spec": {"nodeName": "x"}},
            {"metadata": {"name": "nulls", "annotations": None}, "spec": {"nodeName": "x"}},
            gpu_pod("bound", "tenant-a-worker-1", "tenant-a-worker-1"),
            gpu_pod("pending", "tenant-a-worker-1", None),  # allocated, not bound yet
        ],
    )
    res = check_result(lab, "isolation.gpu-placement")
    assert res.status is Status.PASS
    assert res.evidence == "2 GPU pod placement(s), all on ['tenant-a-worker-1']"


def test_placement_on_a_foreign_vgpu_node_fails_even_when_bound_at_home():
    lab = standard_lab()
    live_pods(
        lab,
        [
            gpu_pod("stray", "tenant-b-worker-1", "tenant-a-worker-1"),
            gpu_pod("stray-pending", "tenant-b-worker-1", None),
        ],
    )
    res = check_result(lab, "isolation.gpu-placement")
    assert res.status is Status.FAIL
    assert res.expected == "GPU pods only on ['tenant-a-worker-1']"
    assert res.seen == (
        "[('stray', 'tenant-b-worker-1', 'tenant-a-worker-1'), "
        "('stray-pending', 'tenant-b-worker-1', '')]"
    )
    assert res.cause == PLACEMENT_CAUSE


def test_placement_bound_to_a_foreign_node_fails_and_shows_at_most_three_pods():
    lab = standard_lab()
    away = [gpu_pod(f"away-{i}", "tenant-a-worker-1", "tenant-b-worker-1") for i in range(4)]
    live_pods(lab, [gpu_pod("home", "tenant-a-worker-1", "tenant-a-worker-1"), *away])
    res = check_result(lab, "isolation.gpu-placement")
    assert res.status is Status.FAIL
    assert res.seen == str(
        [(f"away-{i}", "tenant-a-worker-1", "tenant-b-worker-1") for i in range(3)]
    )
    assert res.cause == PLACEMENT_CAUSE
