"""labcheck against two real control planes, one per tenant, each with its own token users
(issue 10), the way Kamaji gives every tenant its own API server and credentials.

The spec is the program's own ``labcheckSpec`` (the mocks harness renders the ``lab`` stack),
with each tenant's kubeconfig replaced by an admin kubeconfig of its real plane (token user in
``system:masters``, CA inline as in ``admin.conf``); a third, API-only plane plays the management
cluster. labcheck runs through its real client (``labcheck.kube``), its runner and its checks.
The servers are kube-apiserver v1.35.4 (the only 1.35 patch the Go proxy serves; the lab's
tenants default to v1.35.0).

Which check proves what about the GPU-memory quota (issue 10; docs/validation.md):
- the real kube-apiserver *accepts* the ResourceQuota the program declares
  (``limits.nvidia.com/gpumem``) and *ignores* it: its quota evaluators take extended resources
  only as ``requests.<name>``, so a pod asking for more is admitted and the quota never gets a
  usage figure (``test_the_declared_gpu_quota_is_accepted_and_ignored_by_the_native_quota``);
- only HAMi's webhook enforces that key, so labcheck's ``gpu.quota`` passes only on HAMi's own
  denial (or HAMi's ``ResourceQuotaNotFit``), and fails here, where HAMi is absent, with the cause
  that names the webhook; a native ``requests.*`` quota refusing first is named as such.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, admin_conf, free_port, on_the_planes_version

from labcheck import RUN_ID_LABEL
from labcheck.checks import ALL_CHECKS
from labcheck.checks.gpu import LOCK_WAIT_CAUSE, WEBHOOK_CAUSE
from labcheck.checks.isolation import PROBE_PATHS
from labcheck.cluster import NO_SERVICE_ACCOUNT_CAUSE, ClusterError
from labcheck.context import RunContext
from labcheck.hami import QUOTA_DENIAL, QUOTA_MEM_KEY, SCHEDULER_SERVICE
from labcheck.kube import KubeCluster
from labcheck.kube import factory as kube_factory
from labcheck.node_files import files_pod
from labcheck.objects import gpu_pod, run_labels
from labcheck.result import Result, Status
from labcheck.runner import Check, RunOutcome, run_checks
from labcheck.spec import parse_spec
from labcheck.waiting import SystemClock
from tests.support.pulumi_harness import ProgramRun, Registration, run_program, stack_config

TENANTS = ("tenant-a", "tenant-b")
ISOLATION = ["isolation.cross-tenant", "isolation.management"]
KONNECTIVITY = ("konnectivity.logs", "konnectivity.exec", "konnectivity.port-forward")
UNREACHABLE_CAUSE = "target API unreachable, so isolation could not be tested"
SHARED_CREDENTIALS_CAUSE = "tenants share a CA or the same admin credentials"
FOREIGN_QUOTA_CAUSE = (
    "another ResourceQuota in the namespace rejected the pod first, so HAMi's GPU "
    "memory quota was not what refused it"
)
# How labcheck describes five refused probes: unknown credentials, or known ones RBAC stops.
UNKNOWN_THERE = "401 x5 (credentials unknown there)"
AUTHENTICATED_THERE = "403 x5 (credentials authenticated there, RBAC denies the reads)"
NATIVE_GPUMEM_KEY = "requests.nvidia.com/gpumem"  # the only form the native quota counts


def admin_user(tenant: str) -> str:
    return f"{tenant}-admin"


# --- the program's declarations ------------------------------------------------------------


@pytest.fixture(scope="module")
def lab_program() -> ProgramRun:
    return run_program(on_the_planes_version(stack_config("lab")), stack="lab")


def provider_name(registration: Registration) -> str:
    # ...::pulumi:providers:kubernetes::tenant-a-provider::<id>
    return registration.provider.rsplit("::", 2)[1]


def declared(run: ProgramRun, type_: str, tenant: str) -> list[dict[str, Any]]:
    """The tenant provider's objects of one type, as pulumi-kubernetes sends them."""
    kind = type_.rsplit(":", 1)[1]
    return [
        {**r.inputs, "apiVersion": "v1", "kind": kind}
        for r in run.of_type(type_)
        if provider_name(r) == f"{tenant}-provider"
    ]


# --- planes and the spec ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def planes(start_control_plane) -> Iterator[dict[str, ControlPlane]]:
    """One full plane per tenant (the namespace, quota and RBAC aggregation controllers are
    needed) and an API-only management plane; stopped when the module ends."""
    started = {
        t: start_control_plane(f"lc-{t}", users={admin_user(t): ("system:masters",)})
        for t in TENANTS
    }
    started["management"] = start_control_plane("lc-management", full=False)
    try:
        yield started
    finally:
        for plane in started.values():
            plane.stop()


def lab_spec(
    run: ProgramRun, planes: dict[str, ControlPlane], **kubeconfigs: dict
) -> dict[str, Any]:
    """The program's labcheckSpec, pointed at the real planes; `kubeconfigs` overrides one
    tenant's (keyword: the tenant name with '_' for '-')."""
    spec = json.loads(run.outputs["labcheckSpec"])
    assert [t["name"] for t in spec["tenants"]] == list(TENANTS)
    spec["management"]["kubeconfig"] = yaml.safe_dump(admin_conf(planes["management"]))
    for tenant in spec["tenants"]:
        name = tenant["name"]
        doc = kubeconfigs.get(name.replace("-", "_")) or admin_conf(planes[name], admin_user(name))
        tenant["kubeconfig"] = yaml.safe_dump(doc)
    # Short pod waits: nothing here schedules a GPU pod, so a wait only delays a failure.
    spec["timeouts"] = {**spec["timeouts"], "podSeconds": 20}
    return spec


class ResultHook:
    """labcheck's Reporter protocol; `on_finish` sees each result as it arrives (before the
    run's cleanup, for all but the last)."""

    def __init__(self, on_finish: Callable[[Result], None] | None = None) -> None:
        self.on_finish = on_finish

    def start(self, check: Check, tenant: str) -> None:
        pass

    def finish(self, result: Result) -> None:
        if self.on_finish:
            self.on_finish(result)


def run_labcheck(
    spec: dict[str, Any],
    only: list[str],
    on_finish: Callable[[Result], None] | None = None,
    run_id: str = "",
) -> tuple[dict[tuple[str, str], Result], str]:
    """Run the selected checks as `python -m labcheck` does; results by (check, tenant)."""
    parsed = parse_spec(json.dumps(spec))
    run_id = run_id or secrets.token_hex(4)
    ctx = RunContext(
        spec=parsed,
        factory=kube_factory(parsed.timeouts.api_seconds),
        clock=SystemClock(),
        run_id=run_id,
        poll_seconds=0.5,
    )
    outcome: RunOutcome = run_checks(ctx, ALL_CHECKS, ResultHook(on_finish), only=only)
    assert outcome.interrupted is None
    return {(r.check, r.tenant): r for r in outcome.results}, run_id


def verdict(result: Result) -> tuple[str, str, str, str]:
    return result.status.value, result.expected, result.seen, result.cause


# --- what the real servers saw -------------------------------------------------------------


class AuditLog:
    """The plane's audit events from the moment this object is made."""

    def __init__(self, plane: ControlPlane) -> None:
        self.path = plane.audit_log
        self.offset = self.path.stat().st_size

    def events(self) -> list[dict[str, Any]]:
        with self.path.open("rb") as log:
            log.seek(self.offset)
            return [json.loads(line) for line in log.read().splitlines() if line.strip()]

    def answers(self, paths: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
        """(user, HTTP code) of every request to `paths`, per path (blocking log backend: an
        event is written before its response is)."""
        seen: dict[str, list[tuple[str, int]]] = {p: [] for p in paths}
        for event in self.events():
            if event["requestURI"] in seen:
                user = event.get("user", {}).get("username", "")
                seen[event["requestURI"]].append((user, event["responseStatus"]["code"]))
        return seen

    def creations(self, run_id: str, user: str) -> list[tuple[str, str, int]]:
        """(resource, namespace/name, code) of every create by `user` (labcheck's credentials)
        of an object named for the run; the scheduler's events about its pods are not its."""
        out = []
        for event in self.events():
            ref = event.get("objectRef") or {}
            by = event.get("user", {}).get("username")
            if event["verb"] == "create" and by == user and run_id in ref.get("name", ""):
                where = f"{ref.get('namespace', '')}/{ref['name']}"
                out.append((ref["resource"], where, event["responseStatus"]["code"]))
        return sorted(out)


def labelled_objects(plane: ControlPlane, run_id: str) -> list[str]:
    """Every object of every listable kind on the plane that carries the run's id label."""
    kinds = plane.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    found = plane.kubectl(
        "get", ",".join(kinds), "-A", "-l", f"{RUN_ID_LABEL}={run_id}", "-o", "name"
    )
    return sorted(found.stdout.split())


def assert_nothing_left(planes: dict[str, ControlPlane], run_id: str, timeout: float = 60) -> None:
    """Bounded: a deleted namespace stays Terminating until the namespace controller empties it."""
    deadline = time.monotonic() + timeout
    left = {t: labelled_objects(planes[t], run_id) for t in TENANTS}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(1)
        left = {t: labelled_objects(planes[t], run_id) for t in TENANTS}
    assert left == {t: [] for t in TENANTS}


# --- 1. isolation ----------------------------------------------------------------------------


@pytest.mark.upstream("kube-apiserver-audits-failed-authentication")
def test_cross_tenant_reads_are_refused_by_authentication(lab_program, planes):
    """Each tenant's admin token, presented to the other tenant's API server (with that server's
    CA, so TLS holds), is unknown there: every probe read gets 401 from authentication, which the
    target's audit log records (failed-authentication audit), and labcheck passes both checks."""
    audits = {name: AuditLog(plane) for name, plane in planes.items()}
    results, _ = run_labcheck(lab_spec(lab_program, planes), ISOLATION)

    assert verdict(results[("isolation.cross-tenant", "")]) == ("pass", "", "", "")
    cross = results[("isolation.cross-tenant", "")]
    assert (cross.evidence, cross.detail) == (
        "2 ordered pair(s): every read refused with 401/403",
        (f"tenant-a-creds@tenant-b: {UNKNOWN_THERE}", f"tenant-b-creds@tenant-a: {UNKNOWN_THERE}"),
    )
    for tenant in TENANTS:
        management = results[("isolation.management", tenant)]
        assert (management.status, management.evidence, management.detail) == (
            Status.PASS,
            f"management API refused {len(PROBE_PATHS)} reads with {tenant} credentials",
            (f"{tenant}-creds@management: {UNKNOWN_THERE}",),
        )
    assert results[("cleanup", "")].evidence == "deleted 0 object(s) by name"
    # No user: the token is unknown to the server, so no identity was ever established.
    once, twice = [("", 401)], [("", 401)] * 2
    assert audits["tenant-a"].answers(PROBE_PATHS) == {p: once for p in PROBE_PATHS}
    assert audits["tenant-b"].answers(PROBE_PATHS) == {p: once for p in PROBE_PATHS}
    assert audits["management"].answers(PROBE_PATHS) == {p: twice for p in PROBE_PATHS}


BORROWED = ("default", "lc-borrowed")  # a ServiceAccount of tenant-b whose token tenant-a holds
BORROWED_USER = "system:serviceaccount:default:lc-borrowed"


def tenant_a_holding_a_tenant_b_token(planes: dict[str, ControlPlane]) -> dict:
    """tenant-a's admin kubeconfig whose credentials are a token tenant-b issued."""
    b = planes["tenant-b"]
    b.kubectl("create", "serviceaccount", BORROWED[1], "-n", BORROWED[0])
    doc = admin_conf(planes["tenant-a"], admin_user("tenant-a"))
    doc["users"][0]["user"]["token"] = b.service_account_token(*BORROWED)
    return doc


def wait_can_i(plane: ControlPlane, user: str, verb: str, resource: str, want: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = plane.kubectl("auth", "can-i", verb, resource, "-A", f"--as={user}", check=False)
        if answer.stdout.strip() == want:
            return
        time.sleep(0.3)
    raise AssertionError(f"{user} can-i {verb} {resource}: never {want}")


@pytest.mark.upstream("kube-rbac-view-reads")
def test_a_token_the_target_issued_is_refused_by_rbac_until_a_binding_lets_it_read(
    lab_program, planes
):
    """Break isolation on purpose: tenant-a's kubeconfig holds a token tenant-b's server issued
    (a ServiceAccount's). The reads are then refused by RBAC (403 for that identity), not by
    authentication; labcheck still passes (no read succeeds) but says that the target
    authenticated the credentials. A ClusterRoleBinding to `view` lets that identity read:
    labcheck FAILS and names exactly the reads `view` allows (namespaces, pods, deployments;
    not nodes, not secrets). Bound to cluster-admin (one admin credential valid in two tenants)
    it FAILS naming every read."""
    b = planes["tenant-b"]
    try:
        spec = lab_spec(lab_program, planes, tenant_a=tenant_a_holding_a_tenant_b_token(planes))
        audit = AuditLog(b)
        results, _ = run_labcheck(spec, ["isolation.cross-tenant"])
        cross = results[("isolation.cross-tenant", "")]
        assert (cross.status, cross.detail) == (
            Status.PASS,
            (
                f"tenant-a-creds@tenant-b: {AUTHENTICATED_THERE}",
                f"tenant-b-creds@tenant-a: {UNKNOWN_THERE}",
            ),
        )
        assert audit.answers(PROBE_PATHS) == {p: [(BORROWED_USER, 403)] for p in PROBE_PATHS}

        b.kubectl("create", "clusterrolebinding", "lc-view", "--clusterrole=view",
                  f"--serviceaccount={':'.join(BORROWED)}")  # fmt: skip
        wait_can_i(b, BORROWED_USER, "list", "deployments", "yes")
        results, _ = run_labcheck(spec, ["isolation.cross-tenant"])
        assert verdict(results[("isolation.cross-tenant", "")]) == (
            "fail",
            "tenant-a credentials refused by tenant-b",
            "tenant-a read tenant-b ['/api/v1/namespaces', '/api/v1/pods', "
            "'/apis/apps/v1/deployments']",
            "tenant-b authenticates tenant-a's credentials (a shared CA or token) and an RBAC "
            "binding there lets that identity read",
        )

        b.kubectl("create", "clusterrolebinding", "lc-admin", "--clusterrole=cluster-admin",
                  f"--serviceaccount={':'.join(BORROWED)}")  # fmt: skip
        wait_can_i(b, BORROWED_USER, "list", "secrets", "yes")
        results, _ = run_labcheck(spec, ["isolation.cross-tenant"])
        assert verdict(results[("isolation.cross-tenant", "")]) == (
            "fail",
            "tenant-a credentials refused by tenant-b",
            f"tenant-a read tenant-b {list(PROBE_PATHS)}",
            SHARED_CREDENTIALS_CAUSE,
        )
    finally:
        b.kubectl("delete", "clusterrolebinding", "lc-view", "lc-admin", "--ignore-not-found")
        b.kubectl("delete", "serviceaccount", BORROWED[1], "-n", BORROWED[0], "--ignore-not-found")


def nothing_listening(planes: dict[str, ControlPlane]) -> dict:
    doc = admin_conf(planes["tenant-b"], admin_user("tenant-b"))
    doc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    return doc


def foreign_ca(planes: dict[str, ControlPlane]) -> dict:
    return admin_conf(planes["tenant-b"], admin_user("tenant-b"), ca_from=planes["tenant-a"])


@pytest.mark.parametrize(
    ("make_kubeconfig", "error"),
    [(nothing_listening, "Connection refused"), (foreign_ca, "CERTIFICATE_VERIFY_FAILED")],
    ids=["nothing-listening", "tls-not-verified"],
)
def test_an_unreachable_target_is_inconclusive_not_refused(
    lab_program, planes, make_kubeconfig, error
):
    """No HTTP answer (nothing listens, or TLS does not verify) proves nothing about isolation:
    the check fails as inconclusive, naming every probe, instead of counting it as refused."""
    audit = AuditLog(planes["tenant-b"])
    spec = lab_spec(lab_program, planes, tenant_b=make_kubeconfig(planes))
    results, _ = run_labcheck(spec, ["isolation.cross-tenant"])

    status, expected, seen, cause = verdict(results[("isolation.cross-tenant", "")])
    assert (status, expected, cause) == (
        "fail",
        "tenant-a-creds@tenant-b: HTTP 401/403 on every read",
        UNREACHABLE_CAUSE,
    )
    probes = seen.split("; ")
    assert [p.split(":", 1)[0] for p in probes] == list(PROBE_PATHS)
    assert all(error in p for p in probes), seen
    assert audit.answers(PROBE_PATHS) == {p: [] for p in PROBE_PATHS}  # never reached


# --- 2. the GPU-memory quota ---------------------------------------------------------------


@pytest.fixture(scope="module")
def declared_quotas(lab_program, planes) -> dict[str, dict[str, Any]]:
    """The quota namespace and GPU-memory ResourceQuota each tenant's provider declares,
    server-side applied to that tenant's plane as pulumi-kubernetes applies them."""
    quotas = {}
    for tenant in TENANTS:
        (quota,) = declared(lab_program, "kubernetes:core/v1:ResourceQuota", tenant)
        namespaces = declared(lab_program, "kubernetes:core/v1:Namespace", tenant)
        (namespace,) = [
            n for n in namespaces if n["metadata"]["name"] == quota["metadata"]["namespace"]
        ]
        for manifest in (namespace, quota):
            planes[tenant].kubectl(
                "apply", "--server-side", "--field-manager=pulumi-kubernetes", "-f", "-",
                input=json.dumps(manifest),
            )  # fmt: skip
        # Pod admission needs the namespace's default ServiceAccount (the controller manager
        # makes it); in the lab the namespace is long there when labcheck runs.
        planes[tenant].wait_for_object(
            "serviceaccount", "default", "-n", namespace["metadata"]["name"],
            condition=lambda _: True, what="the quota namespace's default ServiceAccount",
        )  # fmt: skip
        quotas[tenant] = quota
    return quotas


def wait_for_quota_status(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    """The quota once the resource-quota controller has synced it (status.hard set)."""
    return plane.wait_for_object(
        "resourcequota", name, "-n", namespace,
        condition=lambda q: q.get("status", {}).get("hard") == q["spec"]["hard"],
        what=f"resourcequota {namespace}/{name} synced by the quota controller",
    )  # fmt: skip


def tenant_cluster(plane: ControlPlane, tenant: str) -> KubeCluster:
    return KubeCluster(admin_conf(plane, admin_user(tenant)), tenant, timeout=10)


@pytest.mark.upstream("kube-quota-extended-resources-requests-only", "hami-quota-limits-keys")
def test_the_declared_gpu_quota_is_accepted_and_ignored_by_the_native_quota(
    lab_program, planes, declared_quotas
):
    """The real API server accepts the program's `limits.nvidia.com/gpumem` quota (a qualified
    name passes ResourceQuota validation) and the quota controller syncs it, but no evaluator
    counts that key: status.used stays empty, and a pod asking gpumemMB + 1 is admitted (HAMi's
    webhook, which would refuse it, is not here). A `requests.nvidia.com/gpumem` quota, the
    only form the native quota counts for extended resources, is tracked from its first sync and
    refuses the same pod: the native quota admission is on, it just does not read HAMi's key."""
    plane, spec = planes["tenant-a"], json.loads(lab_program.outputs["labcheckSpec"])
    limit = spec["tenants"][0]["quota"]["gpumemMB"]
    for tenant in TENANTS:
        quota = declared_quotas[tenant]
        stored = planes[tenant].get_json(
            "resourcequota", quota["metadata"]["name"], "-n", quota["metadata"]["namespace"]
        )
        assert stored["spec"]["hard"] == quota["spec"]["hard"]
        assert list(stored["spec"]["hard"]) == [QUOTA_MEM_KEY]

    namespace, name = declared_quotas["tenant-a"]["metadata"].values()
    synced = wait_for_quota_status(plane, namespace, name)
    assert synced["status"] == {"hard": {QUOTA_MEM_KEY: str(limit)}}  # no `used` at all
    cluster = tenant_cluster(plane, "tenant-a")
    labels = run_labels("native-quota", "gpu.quota")
    over = gpu_pod("lc-native-over", "registry.k8s.io/pause:3.10", labels, mem_mb=limit + 1)
    created = cluster.create_pod(namespace, over)
    try:
        assert created["spec"]["schedulerName"] == "default-scheduler"
        assert created["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpumem"] == (
            str(limit + 1)
        )  # defaulted from the limit: extended resources cannot overcommit
    finally:
        cluster.delete_pod(namespace, "lc-native-over")

    contrast = "lc-native-gpumem"
    plane.create_namespace(contrast)
    try:
        plane.kubectl("create", "quota", "native-gpumem", "-n", contrast,
                      f"--hard={NATIVE_GPUMEM_KEY}={limit}")  # fmt: skip
        native = wait_for_quota_status(plane, contrast, "native-gpumem")
        assert native["status"]["used"] == {NATIVE_GPUMEM_KEY: "0"}
        with pytest.raises(ClusterError) as refused:
            cluster.create_pod(contrast, over)
        assert (refused.value.status, refused.value.message) == (
            403,
            f'pods "lc-native-over" is forbidden: exceeded quota: native-gpumem, requested: '
            f"{NATIVE_GPUMEM_KEY}={limit + 1}, used: {NATIVE_GPUMEM_KEY}=0, limited: "
            f"{NATIVE_GPUMEM_KEY}={limit}",
        )
    finally:
        plane.kubectl("delete", "namespace", contrast, "--wait=false")


@pytest.fixture(scope="module")
def hami_endpoint_stand_in(planes) -> None:
    """A ready endpoint of HAMi's webhook Service, which is all labcheck waits for before its
    first GPU pod; no webhook answers there (the API server has no webhook configuration)."""
    for tenant in TENANTS:
        planes[tenant].kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{SCHEDULER_SERVICE}-stand-in",
                "namespace": "kube-system",
                "labels": {"kubernetes.io/service-name": SCHEDULER_SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.99"], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": 443, "protocol": "TCP"}],
        }))  # fmt: skip


@pytest.mark.upstream("kube-quota-extended-resources-requests-only")
def test_without_hamis_webhook_the_quota_check_fails_and_leaves_nothing(
    lab_program, planes, declared_quotas, hami_endpoint_stand_in
):
    """gpu.quota against the real servers without HAMi: the over-quota pod is admitted (the native
    quota ignores the key) with the default scheduler, and labcheck FAILS naming HAMi's webhook,
    never passing on the native quota. The pod it created (audit: 201) is gone afterwards, like
    everything else with the run's label."""
    audits = {t: AuditLog(planes[t]) for t in TENANTS}
    results, run_id = run_labcheck(lab_spec(lab_program, planes), ["gpu.quota"])

    for tenant in TENANTS:
        assert verdict(results[("gpu.quota", tenant)]) == (
            "fail", "schedulerName hami-scheduler", "schedulerName is default-scheduler",
            WEBHOOK_CAUSE,
        )  # fmt: skip
        namespace = declared_quotas[tenant]["metadata"]["namespace"]
        assert audits[tenant].creations(run_id, admin_user(tenant)) == [
            ("pods", f"{namespace}/lc-{run_id}-quota", 201)
        ]
    assert verdict(results[("cleanup", "")]) == ("pass", "", "", "")
    assert_nothing_left(planes, run_id)


@pytest.mark.upstream("hami-webhook-quota-denial")
def test_a_native_quota_refusing_first_is_not_taken_for_hamis(
    lab_program, planes, declared_quotas, hami_endpoint_stand_in
):
    """A `requests.nvidia.com/gpumem` quota next to the program's: the real server refuses the
    probe pod with its own `exceeded quota` 403, which labcheck must not count as HAMi's quota."""
    plane = planes["tenant-a"]
    namespace = declared_quotas["tenant-a"]["metadata"]["namespace"]
    limit = json.loads(lab_program.outputs["labcheckSpec"])["tenants"][0]["quota"]["gpumemMB"]
    plane.kubectl("create", "quota", "foreign-gpumem", "-n", namespace,
                  f"--hard={NATIVE_GPUMEM_KEY}={limit}")  # fmt: skip
    try:
        wait_for_quota_status(plane, namespace, "foreign-gpumem")
        audit = AuditLog(plane)
        results, run_id = run_labcheck(lab_spec(lab_program, planes), ["gpu.quota"])
    finally:
        plane.kubectl("delete", "resourcequota", "foreign-gpumem", "-n", namespace)
    status, expected, seen, cause = verdict(results[("gpu.quota", "tenant-a")])
    assert (status, expected, cause) == (
        "fail",
        f"HTTP 403 '{QUOTA_DENIAL}', or Pending with ResourceQuotaNotFit",
        FOREIGN_QUOTA_CAUSE,
    )
    assert seen == (
        f'HTTP 403: pods "lc-{run_id}-quota" is forbidden: exceeded quota: foreign-gpumem, '
        f"requested: {NATIVE_GPUMEM_KEY}={limit + 1}, used: {NATIVE_GPUMEM_KEY}=0, "
        f"limited: {NATIVE_GPUMEM_KEY}={limit}"
    )
    assert audit.creations(run_id, admin_user("tenant-a")) == [
        ("pods", f"{namespace}/lc-{run_id}-quota", 403)
    ]
    assert_nothing_left(planes, run_id)


# --- 3. nothing left behind ----------------------------------------------------------------


def test_a_failing_run_leaves_nothing_with_its_label(lab_program, planes, hami_endpoint_stand_in):
    """hami.webhook fails on both real servers (no webhook sets hami-scheduler). Before cleanup,
    the run's namespace is found by its run-id label on each server (so the search below can
    see labcheck's objects); afterwards no object of any kind carries the label, the namespaces
    included, though labcheck created a namespace and a pod on each (audit: 201)."""
    audits = {t: AuditLog(planes[t]) for t in TENANTS}
    run_id = secrets.token_hex(4)
    before_cleanup: dict[str, list[str]] = {}

    def snapshot(result: Result) -> None:
        if (result.check, result.tenant) == ("hami.webhook", TENANTS[-1]):
            before_cleanup.update({t: labelled_objects(planes[t], run_id) for t in TENANTS})

    spec = lab_spec(lab_program, planes)
    results, _ = run_labcheck(spec, ["hami.webhook"], snapshot, run_id)

    for tenant in TENANTS:
        assert verdict(results[("hami.webhook", tenant)]) == (
            "fail", "schedulerName hami-scheduler", "schedulerName is default-scheduler",
            WEBHOOK_CAUSE,
        )  # fmt: skip
        assert before_cleanup[tenant] == [f"namespace/labcheck-{run_id}"]
        assert audits[tenant].creations(run_id, admin_user(tenant)) == [
            ("namespaces", f"/labcheck-{run_id}", 201),
            ("pods", f"labcheck-{run_id}/lc-{run_id}-webhook", 201),
        ]
    assert results[("cleanup", "")].evidence == "deleted 2 object(s) by name"
    assert_nothing_left(planes, run_id)


@pytest.mark.upstream("kube-pod-admission-needs-service-account")
def test_a_namespace_without_its_service_account_fails_with_that_cause(lab_program, planes):
    """A tenant whose controller manager does not run (here: tenant-b pointed at the API-only
    plane) never gets the `default` ServiceAccount in labcheck's namespace, and pod admission
    refuses every pod there with 403 'error looking up service account'. labcheck waits for the
    ServiceAccount (bounded) and fails with that cause, not 'RBAC forbids' (found on the real
    servers: right after an API server restart the controller manager lagged and labcheck
    reported the 403 as an RBAC refusal)."""
    no_controllers = planes["management"]
    spec = lab_spec(lab_program, planes, tenant_b=admin_conf(no_controllers))
    spec["timeouts"]["apiSeconds"] = 3
    results, run_id = run_labcheck(spec, ["hami.webhook"])

    namespace = f"labcheck-{run_id}"
    assert verdict(results[("hami.webhook", "tenant-b")]) == (
        "fail",
        f"ServiceAccount {namespace}/default within 3s",
        'HTTP 404: serviceaccounts "default" not found',
        NO_SERVICE_ACCOUNT_CAUSE,
    )
    assert results[("cleanup", "")].status is Status.PASS
    # Deleted, though without a namespace controller it stays Terminating on that plane.
    left = no_controllers.get_json("namespace", namespace)
    assert left["metadata"]["deletionTimestamp"]


@pytest.fixture(scope="module")
def kwok_workers(lab_program, planes) -> None:
    """Each tenant's configured workers as kwok nodes: Ready, running pods, but with no address
    the API server could reach a kubelet at."""
    for tenant in json.loads(lab_program.outputs["labcheckSpec"])["tenants"]:
        plane = planes[tenant["name"]]
        for node in tenant["nodes"]:
            plane.create_fake_node(node)
            plane.wait_for_object(
                "node", node,
                condition=lambda n: any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                ),
                what=f"kwok node {node} Ready",
            )  # fmt: skip


@pytest.mark.upstream("websocket-handshake-error-text")
def test_a_kubelet_the_api_server_cannot_reach_fails_the_tunnel_checks(
    lab_program, planes, kwok_workers
):
    """The tools pod runs (kwok), but the API server cannot reach its node's kubelet, as with a
    broken Konnectivity tunnel: logs, exec and port-forward all FAIL with the API server's own
    message (for exec and port-forward it comes in a failed websocket handshake, whose text
    also carries the response headers: labcheck shows only the server's Status message). Then
    the tools pod and the namespace are gone."""
    audits = {t: AuditLog(planes[t]) for t in TENANTS}
    results, run_id = run_labcheck(lab_spec(lab_program, planes), ["konnectivity.*"])

    unreachable = "HTTP 500: no preferred addresses found; known addresses: []"
    cause = (
        "API server or an aggregated/proxied backend failed; or Konnectivity tunnel broken "
        "(agent not connected or server sidecar down)"
    )
    tools = f"lc-{run_id}-tools"
    for tenant in TENANTS:
        assert [verdict(results[(check, tenant)]) for check in KONNECTIVITY] == [
            ("fail", "pod logs via the API server", unreachable, cause),
            ("fail", "exec into the pod", unreachable, cause),
            ("fail", f"port-forward to {tools}:8080", unreachable, cause),
        ]
        assert audits[tenant].creations(run_id, admin_user(tenant)) == [
            ("namespaces", f"/labcheck-{run_id}", 201),
            ("pods", f"labcheck-{run_id}/{tools}", 201),
        ]
    assert results[("cleanup", "")].evidence == "deleted 4 object(s) by name"
    assert_nothing_left(planes, run_id)


# --- the lock-wait policy ---------------------------------------------------------------------

ADMISSION = "kubernetes:admissionregistration.k8s.io/v1beta1"
LOCK_WAIT_POLICY = "hami-gpu-pods-wait-for-node-lock"  # builders/lock_wait_policy.py


@pytest.mark.upstream("kube-mutating-admission-policy-stages")
def test_lock_wait_passes_where_the_programs_policy_runs_and_fails_where_it_does_not(
    lab_program, planes
):
    """tenant-a's provider's lock-wait policy and binding, server-side applied to tenant-a's
    plane only: labcheck's dry run shows the label there, and names the missing policy on
    tenant-b's; neither creates a pod."""
    api = "admissionregistration.k8s.io/v1beta1"
    manifests = [
        {**m, "apiVersion": api}
        for kind in ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
        for m in declared(lab_program, f"{ADMISSION}:{kind}", "tenant-a")
        if m["metadata"]["name"] == LOCK_WAIT_POLICY
    ]
    assert [m["kind"] for m in manifests] == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    plane = planes["tenant-a"]
    for manifest in manifests:
        plane.kubectl("apply", "--server-side", "--field-manager=pulumi-kubernetes", "-f", "-",
                      input=json.dumps(manifest))  # fmt: skip
    try:
        spec = lab_spec(lab_program, planes)
        deadline = time.monotonic() + 30  # the policy takes effect once its informer has it
        while True:
            results, run_id = run_labcheck(spec, ["hami.lock-wait"])
            passed = results[("hami.lock-wait", "tenant-a")].status is Status.PASS
            if passed or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert verdict(results[("hami.lock-wait", "tenant-a")])[0] == "pass"
        assert "scheduling.x-k8s.io/pod-group=hami-node-lock-wait" in (
            results[("hami.lock-wait", "tenant-a")].evidence
        )
        assert verdict(results[("hami.lock-wait", "tenant-b")]) == (
            "fail",
            "scheduling.x-k8s.io/pod-group=hami-node-lock-wait on a GPU pod",
            "no scheduling.x-k8s.io/pod-group label",
            LOCK_WAIT_CAUSE,
        )
        for tenant in TENANTS:
            pods = planes[tenant].get_json("pods", "-A", "-l", f"{RUN_ID_LABEL}={run_id}")
            assert pods["items"] == []
    finally:
        for manifest in reversed(manifests):
            plane.kubectl("delete", manifest["kind"], manifest["metadata"]["name"])


# --- 5. each node's registry files -------------------------------------------------------------


def test_the_node_files_pod_passes_a_real_api_server_and_waits_on_a_node_that_never_runs_it(
    planes, kwok_workers
):
    """The pod images.registries binds to each node (hostPath /etc/containerd read-only, every
    taint tolerated, its answer in its termination message) is what a real API server admits
    and keeps: a server-side dry run returns it with those fields as labcheck wrote them. Run
    with the program's spec of a mirrored stack, the check creates one such pod per worker
    (audit: 201); a kwok node runs no container, so no pod ends and the check fails naming the
    node, within podSeconds; nothing is left."""
    mirrored = run_program(
        {
            **on_the_planes_version(stack_config("lab")),
            "registryMirrors": [{"registry": "*", "mirror": "m.example"}],
        },
        stack="lab",
    )
    spec = lab_spec(mirrored, planes)
    paths = [f["path"] for f in spec["registryFiles"]["files"]]
    body = files_pod("lc-dry-files", "tenant-a-worker-1", spec["toolsImage"], {}, paths)
    kept = tenant_cluster(planes["tenant-a"], "tenant-a").create_pod("default", body, True)
    for key in ("nodeName", "tolerations", "volumes"):
        assert kept["spec"][key] == body["spec"][key], key
    (container,) = kept["spec"]["containers"]
    for key in ("command", "volumeMounts", "terminationMessagePath", "terminationMessagePolicy"):
        assert container[key] == body["spec"]["containers"][0][key], key

    audits = {t: AuditLog(planes[t]) for t in TENANTS}
    results, run_id = run_labcheck(spec, ["images.registries"])
    for tenant in TENANTS:
        node = f"{tenant}-worker-1"
        result = results[("images.registries", tenant)]
        assert result.status is Status.FAIL, result
        assert result.expected == f"a pod on {node} reads its registry files within 20s"
        assert f"on {node}" in result.seen
        assert audits[tenant].creations(run_id, admin_user(tenant)) == [
            ("namespaces", f"/labcheck-{run_id}", 201),
            ("pods", f"labcheck-{run_id}/lc-{run_id}-files-0", 201),
        ]
    assert results[("cleanup", "")].status is Status.PASS
    assert_nothing_left(planes, run_id)
