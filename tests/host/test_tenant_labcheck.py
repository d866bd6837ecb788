"""labcheck against the two real tenants (issue 19, item 6).

The program's own validation step, run as `pulumi up` runs it: the `validation-labcheck`
Command's command line with its LABCHECK_SPEC environment, where each tenant's kubeconfig is
the admin kubeconfig Kamaji's Secret gives (`tenants.kubeconfig`, checked as the program checks
it) and each address the one the program planned (the stand-in serves there). The tenants are
the session's `tenants` fixture (tenant_lab.py): real API servers, real kindest/node workers
joined with kubeadm, flannel, kube-proxy, CoreDNS and the simulated-GPU agent; no HAMi.

What runs, and what it must say:
- every check that needs neither the management cluster nor HAMi PASSES: tenant.api,
  nodes.joined, the three tunnel checks (logs, exec and port-forward from the tenant's API
  server to real kubelets), gpu.inventory (the agent's registration), isolation.cross-tenant
  (each tenant's admin credentials unknown to the other's real API server: 401),
  gpu.placement (what the cards hold now), hami.lock-wait (the program's admission policy, which
  the Hami component declares beside HAMi's chart, labels a dry-run GPU pod);
- hami.extender-timeout FAILS (no hami-scheduler Deployment to read the chart's extender
  config from);
- hami.webhook FAILS as on any host without HAMi (no ready endpoint of its Service), and every
  check that requires it is SKIPPED with `blocked: hami.webhook (<tenant>) fail`: labcheck's
  one way of saying a prerequisite is missing; isolation.gpu-placement skips (no GPU pod placed);
- the management checks are not selected: this tier has no management cluster (Kamaji is
  stood in for), so the program's management kubeconfig points nowhere.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from tenant_lab import TENANTS, TenantLab, worker_names
from test_labcheck_real import UNKNOWN_THERE
from test_tenant_agent import wait_registered

from labcheck import RUN_ID_LABEL
from labcheck.checks import ALL_CHECKS
from labcheck.checks.gpu import ENDPOINTS_CAUSE, ENDPOINTS_WAIT_SECONDS
from labcheck.hami import SCHEDULER_SERVICE
from labcheck.objects import HTTP_PORT
from labcheck.report import JSON_NAME

ROOT = Path(__file__).resolve().parents[2]  # the Command runs in the project directory
STEP = "validation-labcheck"
# Checks that read the management cluster (Kamaji, or the lab's Prometheus there): none here
# (the program's kubeconfig for it is the mocks' placeholder).
MANAGEMENT_CHECKS = {
    "mgmt.kamaji", "mgmt.webhooks", "tcp.ready", "tcp.distinct",
    "nodes.management-clean", "isolation.management", "mgmt.registries", "tenant.versions",
    "monitoring.targets", "monitoring.truth",
}  # fmt: skip
SELECTED = [c.id for c in ALL_CHECKS if c.id not in MANAGEMENT_CHECKS]
NEEDS_HAMI = (
    "gpu.sharing", "gpu.policy", "gpu.oversubscription", "gpu.quota", "gpu.node-lock",
    "gpu.memory-limit",
)  # fmt: skip
RUN_SECONDS = 240  # two 30 s waits for HAMi's endpoint, the rest is seconds


def step_inputs(tenants: TenantLab) -> dict[str, Any]:
    return tenants.run.named(STEP).inputs


def real_spec(tenants: TenantLab) -> dict[str, Any]:
    """The step's LABCHECK_SPEC with Kamaji's admin kubeconfigs where the program puts them."""
    spec = json.loads(step_inputs(tenants)["environment"]["LABCHECK_SPEC"])
    assert [t["name"] for t in spec["tenants"]] == list(TENANTS)
    for tenant in spec["tenants"]:
        assert tenant["address"] == tenants.stand_ins[tenant["name"]].address
        tenant["kubeconfig"] = tenants.kubeconfig(tenant["name"])
    return spec


def command(tenants: TenantLab, report_dir: Path) -> list[str]:
    """The step's command line, its report directory moved to `report_dir`, the management
    checks left out."""
    argv = shlex.split(step_inputs(tenants)["create"])
    assert argv == [".venv/bin/python", "-m", "labcheck", "--spec-env", "LABCHECK_SPEC",
                    "--report-dir", "reports/lab"]  # fmt: skip
    argv[-1] = str(report_dir)
    return argv + [arg for check in SELECTED for arg in ("--only", check)]


@pytest.fixture(scope="module")
def prepared(tenants: TenantLab) -> dict[str, Any]:
    """The agent's cards registered (the tools image is in every worker: tenant_lab.py); the
    spec."""
    spec = real_spec(tenants)
    assert spec["toolsImage"] == tenants.tools_image
    for tenant in TENANTS:
        tenants.ensure_agent(tenant)
        tenants.ensure_lock_wait_policy(tenant)  # the Hami component declares it beside the chart
        for node in worker_names(tenant):
            wait_registered(tenants, tenant, node)
    return spec


def labelled(tenants: TenantLab, tenant: str, run_id: str) -> list[str]:
    """Every namespace and pod in the tenant that carries the run's id label."""
    found = tenants.kubectl(
        tenant, "get", "namespaces,pods", "-A", "-l", f"{RUN_ID_LABEL}={run_id}", "-o", "name"
    )
    return sorted(found.split())


@pytest.fixture(scope="module")
def labcheck_run(
    tenants: TenantLab, prepared: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    report_dir = tmp_path_factory.mktemp("labcheck")
    environment = {**os.environ, "LABCHECK_SPEC": json.dumps(prepared)}
    started = time.monotonic()
    done = subprocess.run(
        command(tenants, report_dir), cwd=ROOT, env=environment, capture_output=True,
        text=True, timeout=RUN_SECONDS + 60, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - started
    print(done.stdout, done.stderr, f"labcheck took {seconds:.1f} s", sep="\n")
    report = json.loads((report_dir / JSON_NAME).read_text())
    files = sorted(p.name for p in report_dir.iterdir())
    return {
        "returncode": done.returncode,
        "seconds": seconds,
        "report": report,
        "stdout": done.stdout,
        "files": files,
    }


def results(labcheck_run: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["check"], r["tenant"]): r for r in labcheck_run["report"]["results"]}


def test_the_run_ends_failed_only_for_hami_and_leaves_nothing(
    tenants: TenantLab, labcheck_run: dict[str, Any]
):
    report, found = labcheck_run["report"], results(labcheck_run)
    bad = sorted(key for key, r in found.items() if r["status"] in ("fail", "error"))
    without_hami = ("hami.extender-timeout", "hami.webhook")
    assert bad == sorted((c, t) for c in without_hami for t in TENANTS), labcheck_run["stdout"]
    for tenant in TENANTS:  # read from the chart's objects, which only HAMi's release makes
        said = json.dumps(found[("hami.extender-timeout", tenant)])
        assert "Deployment kube-system/hami-scheduler" in said and "not found" in said, said
    assert (labcheck_run["returncode"], report["ok"]) == (1, False)
    assert {check for check, _ in found} == {*SELECTED, "cleanup"}
    assert labcheck_run["seconds"] < RUN_SECONDS
    # the namespace and the tools pod in each tenant, deleted by name
    assert found[("cleanup", "")] | {"seconds": 0} == {
        "check": "cleanup", "title": "Remove every object this run created", "tenant": "",
        "status": "pass", "seconds": 0, "evidence": "deleted 4 object(s) by name",
        "expected": "", "seen": "", "cause": "",
    }  # fmt: skip
    deadline = time.monotonic() + 60  # a namespace stays Terminating until it is emptied
    left = {t: labelled(tenants, t, report["runId"]) for t in TENANTS}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(1)
        left = {t: labelled(tenants, t, report["runId"]) for t in TENANTS}
    assert left == {t: [] for t in TENANTS}
    written = set(labcheck_run["files"])
    assert {"labcheck-junit.xml", JSON_NAME, "labcheck-placement.png"} <= written


@pytest.mark.parametrize("tenant", TENANTS)
def test_the_api_the_workers_and_the_tunnel_checks_pass(
    tenants: TenantLab, labcheck_run: dict[str, Any], tenant: str
):
    """tenant.api and nodes.joined; then a busybox pod on a real worker, read through the
    tenant's API server: its logs, `exec cat`, an HTTP GET over port-forward."""
    found, run_id = results(labcheck_run), labcheck_run["report"]["runId"]
    address = tenants.stand_ins[tenant].address
    tools = f"lc-{run_id}-tools"
    workers = worker_names(tenant)
    assert {check: found[(check, tenant)]["evidence"] for check in (
        "tenant.api", "nodes.joined", "konnectivity.logs", "konnectivity.exec",
        "konnectivity.port-forward",
    )} == {
        "tenant.api": f"v1.35.4 at https://{address}:6443, /readyz ok",
        "nodes.joined": f"{len(workers)} node(s) Ready: {', '.join(workers)}",
        "konnectivity.logs": f"logs of labcheck-{run_id}/{tools} contain the run token",
        "konnectivity.exec": f"exec `cat /www/index.html` in {tools} returned the token",
        "konnectivity.port-forward": (
            f"HTTP GET via port-forward {tools}:{HTTP_PORT} returned the token"
        ),
    }  # fmt: skip
    assert all(found[(c, tenant)]["status"] == "pass" for c in SELECTED if c.startswith(
        ("tenant.", "nodes.", "konnectivity.")))  # fmt: skip
    assert found[("hami.lock-wait", tenant)]["status"] == "pass"
    assert (
        "scheduling.x-k8s.io/pod-group=hami-node-lock-wait"
        in (found[("hami.lock-wait", tenant)]["evidence"])
    )


def test_each_tenants_credentials_are_unknown_to_the_other_api_server(
    labcheck_run: dict[str, Any],
):
    """Separate CAs (kubeadm's certificates per tenant, as Kamaji's): 401 on every read."""
    cross = results(labcheck_run)[("isolation.cross-tenant", "")]
    assert (cross["status"], cross["evidence"], cross["detail"]) == (
        "pass",
        "2 ordered pair(s): every read refused with 401/403",
        [f"tenant-a-creds@tenant-b: {UNKNOWN_THERE}", f"tenant-b-creds@tenant-a: {UNKNOWN_THERE}"],
    )


@pytest.mark.parametrize("tenant", TENANTS)
def test_the_agents_cards_are_the_inventory_and_what_the_cards_hold_is_drawn(
    labcheck_run: dict[str, Any], prepared: dict[str, Any], tenant: str
):
    found = results(labcheck_run)
    (declared,) = [t for t in prepared["tenants"] if t["name"] == tenant]
    cards = [c for node in declared["gpus"].values() for c in node]
    inventory = "; ".join(
        f"{node}: {len(node_cards)} card(s), nvidia.com/gpu={sum(c['count'] for c in node_cards)}"
        for node, node_cards in declared["gpus"].items()
    )
    assert (found[("gpu.inventory", tenant)]["status"],
            found[("gpu.inventory", tenant)]["evidence"]) == ("pass", inventory)  # fmt: skip
    placement = found[("gpu.placement", tenant)]
    total = sum(c["devmem"] for c in cards)
    assert (placement["status"], placement["evidence"]) == (
        "pass",
        f"live: {len(cards)} card(s) on {len(declared['gpus'])} node(s), 0 pod(s), "
        f"0/{total} MB allocated, largest free slice {max(c['devmem'] for c in cards)} MB",
    )
    assert len(labcheck_run["report"]["placement"][tenant]["cards"]) == len(cards)


@pytest.mark.parametrize("tenant", TENANTS)
def test_the_checks_that_need_hami_say_so(labcheck_run: dict[str, Any], tenant: str):
    """Without HAMi: hami.webhook fails after its bounded wait for the scheduler Service's
    endpoint, and the checks requiring it are skipped as blocked by it, never passed."""
    assert {c.id for c in ALL_CHECKS if "hami.webhook" in c.requires} == set(NEEDS_HAMI)
    found = results(labcheck_run)
    webhook = found[("hami.webhook", tenant)]
    service = f"kube-system/{SCHEDULER_SERVICE}"
    assert (webhook["status"], webhook["expected"], webhook["seen"], webhook["cause"]) == (
        "fail",
        f"a ready endpoint of Service {service} within {ENDPOINTS_WAIT_SECONDS:g}s",
        f"0 EndpointSlice(s) of {service}, no ready endpoint",
        ENDPOINTS_CAUSE,
    )
    assert webhook["seconds"] >= ENDPOINTS_WAIT_SECONDS
    assert {check: (found[(check, tenant)]["status"], found[(check, tenant)]["evidence"])
            for check in NEEDS_HAMI} == {
        check: ("skip", f"blocked: hami.webhook ({tenant}) fail") for check in NEEDS_HAMI
    }  # fmt: skip
    gpu_placement = found[("isolation.gpu-placement", tenant)]
    assert (gpu_placement["status"], gpu_placement["evidence"]) == (
        "skip",
        "no GPU pod was placed in this tenant during the run",
    )
