"""The gate before anything is created in a tenant, run for real against a fake kubectl.

Kamaji reports a TenantControlPlane Ready, and its /healthz answers, a few seconds before the
admin kubeconfig's group is bound to cluster-admin: in a whole lab's run the first objects the
tenant provider created were refused (`User "kubernetes-admin" cannot create resource
"namespaces"`; fact kamaji-admin-rbac-after-ready). The gate (builders/scripts.py
`tenant_admin_authorized_wait_script`) waits for three grants in a row, and the tenant provider
takes its kubeconfig through the gate.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.scripts import tenant_admin_authorized_wait_script
from tests.support.fake_tools import NEXT_ANSWER, script_run
from tests.support.pulumi_harness import ProgramRun

# Answers each `kubectl auth can-i` with the next word of $ANSWERS: y (yes), n (no, exit 1 as
# kubectl does), x (no answer); the kubeconfig it was given is kept.
FAKE_KUBECTL = (
    r"""
echo "kubectl $*" >> "$CALLS"
cp "$KUBECONFIG" "$STATE/kubeconfig-seen"
"""
    + NEXT_ANSWER
    + r"""
case "$answer" in
  y) echo yes ;;
  n) echo no; exit 1 ;;
  *) echo 'The connection to the server was refused' >&2; exit 1 ;;
esac
"""
)
GRANTED = "the tenant's admin kubeconfig is cluster-admin"
CAN_I = "kubectl --request-timeout=10s auth can-i * * --all-namespaces"


@pytest.fixture
def gate(tmp_path: Path):
    runner = script_run(tmp_path, {"kubectl": FAKE_KUBECTL})

    def run(answers: str, timeout_seconds: int = 300) -> subprocess.CompletedProcess[str]:
        script = tenant_admin_authorized_wait_script(timeout_seconds, interval_seconds=0)
        return runner(script, ANSWERS=answers, LAB_KUBECONFIG="tenant-admin-kubeconfig")

    run.calls = runner.calls  # type: ignore[attr-defined]
    run.state = runner.state  # type: ignore[attr-defined]
    return run


@pytest.mark.upstream("kamaji-admin-rbac-after-ready")
def test_it_waits_for_three_grants_in_a_row(gate):
    """Refused (n) and unanswered (x) checks, and a refusal between grants, start the count anew."""
    result = gate("x n y n y y y")
    assert result.returncode == 0, result.stderr
    assert gate.calls.read_text().splitlines() == [CAN_I] * 7
    assert GRANTED in result.stderr
    assert (gate.state / "kubeconfig-seen").read_text() == "tenant-admin-kubeconfig\n"


def test_it_gives_up_saying_what_it_waited_for(gate):
    result = gate("n n n n", timeout_seconds=0)
    assert result.returncode == 1
    assert "was not granted cluster-admin within 0s" in result.stderr
    assert "kubeadm:cluster-admins" in result.stderr
    assert GRANTED not in result.stderr
    assert "tenant-admin-kubeconfig" not in result.stderr


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
@pytest.mark.upstream("kamaji-admin-rbac-after-ready")
def test_everything_in_the_tenant_waits_for_the_gate(lab: ProgramRun, tenant: str):
    gate = lab.named(f"{tenant}-admin-ready")
    assert gate.is_secret("environment.LAB_KUBECONFIG")
    assert lab.named(f"{tenant}-api-ready").urn in lab.depends_on(gate.urn)
    provider = lab.named(f"{tenant}-provider")
    assert gate.urn in lab.depends_on(provider.urn)
    assert provider.is_secret("kubeconfig")
    on_tenant = [r for r in lab.resources if r.provider.startswith(provider.urn + "::")]
    assert len(on_tenant) > 10
    for resource in on_tenant:
        assert gate.urn in lab.depends_on(resource.urn), resource.name
    assert gate.urn in lab.depends_on(lab.named(f"{tenant}-policy-api-ready").urn)
