"""The gate before a tenant's admission policies, run for real against a fake kubectl.

On v1.34-v1.35 the tenant's API server serves MutatingAdmissionPolicies only with the flags the
program passes through Kamaji; right after they change, Kamaji rolls the API server while the
control plane still reports Ready, and the Service may reach either pod for a moment. The gate
(builders/scripts.py `admission_policy_api_wait_script`) waits for three answers in a row.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.scripts import admission_policy_api_wait_script
from tests.support.fake_tools import NEXT_ANSWER, script_run
from tests.support.pulumi_harness import ProgramRun

# Answers each `kubectl get --raw` with the next word of $ANSWERS: y (served), n (the group
# without the resource), x (no answer); the kubeconfig it was given is kept.
FAKE_KUBECTL = (
    r"""
echo "kubectl $*" >> "$CALLS"
cp "$KUBECONFIG" "$STATE/kubeconfig-seen"
"""
    + NEXT_ANSWER
    + r"""
list='{"kind":"APIResourceList","resources":['
case "$answer" in
  y) echo "$list"'{"name":"mutatingadmissionpolicies"}]}' ;;
  n) echo "$list"'{"name":"validatingadmissionpolicies"}]}' ;;
  *) echo 'Error from server (NotFound): the server could not find the requested resource' >&2
     exit 1 ;;
esac
"""
)
SERVED = "mutatingadmissionpolicies served in admissionregistration.k8s.io/v1beta1"


@pytest.fixture
def gate(tmp_path: Path):
    runner = script_run(tmp_path, {"kubectl": FAKE_KUBECTL})

    def run(answers: str, timeout_seconds: int = 300) -> subprocess.CompletedProcess[str]:
        return runner(
            admission_policy_api_wait_script(timeout_seconds, interval_seconds=0),
            ANSWERS=answers,
            LAB_KUBECONFIG="tenant-admin-kubeconfig",
            POLICY_API="admissionregistration.k8s.io/v1beta1",
        )

    run.calls = runner.calls  # type: ignore[attr-defined]
    run.state = runner.state  # type: ignore[attr-defined]
    return run


def test_it_waits_for_three_answers_in_a_row(gate):
    """The old API server (x, n) and a flap back to it during the roll (n) start the count anew."""
    result = gate("x n y y n y y y")
    assert result.returncode == 0, result.stderr
    calls = gate.calls.read_text().splitlines()
    assert (
        calls
        == ["kubectl --request-timeout=10s get --raw /apis/admissionregistration.k8s.io/v1beta1"]
        * 8
    )
    assert SERVED in result.stderr
    assert (gate.state / "kubeconfig-seen").read_text() == "tenant-admin-kubeconfig\n"


def test_it_gives_up_naming_the_flags_to_check(gate):
    result = gate("n n n n n", timeout_seconds=0)
    assert result.returncode == 1
    assert "did not serve mutatingadmissionpolicies in admissionregistration.k8s.io/v1beta1" in (
        result.stderr
    )
    assert "extraArgs.apiServer" in result.stderr
    assert "tenant-admin-kubeconfig" not in result.stderr


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_both_policy_sets_wait_for_the_gate(lab: ProgramRun, tenant: str):
    gate = lab.named(f"{tenant}-policy-api-ready")
    assert gate.inputs["environment"]["POLICY_API"] == "admissionregistration.k8s.io/v1beta1"
    assert gate.is_secret("environment.LAB_KUBECONFIG")
    assert "--feature-gates=MutatingAdmissionPolicy=true" in gate.inputs["triggers"]
    for policy in (
        f"{tenant}-hami-mutatingadmissionpolicy",
        f"{tenant}-simulated-gpus-registration-mutatingadmissionpolicy",
    ):
        assert gate.urn in lab.depends_on(lab.named(policy).urn), policy


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_only_the_policies_wait_for_the_gate(lab: ProgramRun, tenant: str):
    """A tenant whose API server never serves the policy API still gets HAMi and its agent:
    the policies speed placement up and may fail alone (their failure policy is Ignore)."""
    gate = lab.named(f"{tenant}-policy-api-ready")
    for part in (f"{tenant}-hami-chart", f"{tenant}-simulated-gpus-agent"):
        assert gate.urn not in lab.depends_on(lab.named(part).urn), part
    # The agent still starts after HAMi's release (the scheduler reads what it registers).
    chart = lab.named(f"{tenant}-hami-chart")
    assert chart.urn in lab.depends_on(lab.named(f"{tenant}-simulated-gpus-agent").urn)
