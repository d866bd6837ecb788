"""The gate before a tenant's admission policies, run for real against a fake kubectl.

On v1.34-v1.35 the tenant's API server serves MutatingAdmissionPolicies only with the flags the
program passes through Kamaji; right after they change, Kamaji rolls the API server while the
control plane still reports Ready, and the Service may reach either pod for a moment. The gate
(builders/scripts.py `admission_policy_api_wait_script`) first waits, on the management
cluster, until Kamaji has reconciled the spec and its Deployment has rolled out, then for three
answers in a row from the tenant.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.scripts import admission_policy_api_wait_script
from tests.support.fake_tools import script_run
from tests.support.pulumi_harness import ProgramRun

# Management calls (`--kubeconfig <file> -n <ns> ...`) and tenant calls keep a count each.
# Management: `get` answers the next pair of $GENERATIONS ("2/1": generation 2, observed 1;
# "2/": none observed yet), `rollout status` exits with $ROLLOUT. Tenant: each `get --raw`
# answers the next word of $ANSWERS: y (served), n (the group without the resource), x (no
# answer). Every call is logged with the kubeconfig's text it was given.
FAKE_KUBECTL = r"""
next_word() {  # next_word <counter> <words>
  n=$(cat "$STATE/$1" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/$1"
  echo $2 | cut -d' ' -f$((n + 1))
}
if [ "$1" = --kubeconfig ]; then
  echo "management($(cat "$2")) ${*:3}" >> "$CALLS"
  case "$5" in
    get) if [ "$*" != "${*%-o yaml}" ]; then echo "status: {}"; exit 0; fi
         pair=$(next_word management "$GENERATIONS")
         echo "${pair%/*} ${pair#*/}" ;;
    rollout) [ "$ROLLOUT" = 0 ] && echo 'deployment "tenant-a" successfully rolled out'
             exit "$ROLLOUT" ;;
  esac
  exit 0
fi
echo "tenant($(cat "$KUBECONFIG")) $*" >> "$CALLS"
answer=$(next_word tenant "$ANSWERS")
list='{"kind":"APIResourceList","resources":['
case "$answer" in
  y) echo "$list"'{"name":"mutatingadmissionpolicies"}]}' ;;
  n) echo "$list"'{"name":"validatingadmissionpolicies"}]}' ;;
  *) echo 'Error from server (NotFound): the server could not find the requested resource' >&2
     exit 1 ;;
esac
"""
SERVED = "mutatingadmissionpolicies served in admissionregistration.k8s.io/v1beta1"
TENANT_GET = (
    "tenant(tenant-admin-kubeconfig) --request-timeout=10s get --raw "
    "/apis/admissionregistration.k8s.io/v1beta1"
)
MANAGEMENT_GET = (
    "management(management-kubeconfig) -n tenant-a get tenantcontrolplane/tenant-a "
    "--request-timeout=10s -o jsonpath={.metadata.generation} {.status.observedGeneration}"
)
ROLLOUT = "management(management-kubeconfig) -n tenant-a rollout status deployment/tenant-a"


@pytest.fixture
def gate(tmp_path: Path):
    runner = script_run(tmp_path, {"kubectl": FAKE_KUBECTL})

    def run(
        answers: str,
        timeout_seconds: int = 300,
        generations: str = "1/1",
        rollout: int = 0,
    ) -> subprocess.CompletedProcess[str]:
        return runner(
            admission_policy_api_wait_script(timeout_seconds, interval_seconds=0),
            ANSWERS=answers,
            GENERATIONS=generations,
            ROLLOUT=str(rollout),
            LAB_KUBECONFIG="tenant-admin-kubeconfig",
            MANAGEMENT_KUBECONFIG="management-kubeconfig",
            TCP_NAME="tenant-a",
            TCP_NAMESPACE="tenant-a",
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
    assert calls[2:] == [TENANT_GET] * 8
    assert SERVED in result.stderr


def test_it_waits_for_kamaji_to_reconcile_the_spec_then_its_rollout_first(gate):
    """Right after the flags change, Kamaji's status still describes the old generation and the
    old Deployment: a tenant answer then could come from the old API server."""
    result = gate("y y y", generations="2/ 2/1 2/1 2/2")
    assert result.returncode == 0, result.stderr
    calls = gate.calls.read_text().splitlines()
    assert calls[:4] == [MANAGEMENT_GET] * 4
    assert calls[4].startswith(ROLLOUT + " --timeout=")
    assert calls[5:] == [TENANT_GET] * 3
    assert "successfully rolled out" in result.stderr


def test_it_gives_up_when_kamaji_never_reconciles_naming_the_control_plane(gate):
    result = gate("y y y", timeout_seconds=0, generations="2/1 2/1")
    assert result.returncode == 1
    assert "Kamaji did not reconcile tenant-a/tenant-a's spec within 0s" in result.stderr
    calls = gate.calls.read_text().splitlines()
    assert not [call for call in calls if call.startswith("tenant(")]
    assert "management-kubeconfig" not in result.stderr


def test_a_rollout_that_does_not_finish_stops_the_gate(gate):
    result = gate("y y y", rollout=1)
    assert result.returncode == 1
    assert "Kamaji's Deployment tenant-a/tenant-a did not finish rolling out" in result.stderr
    assert not [c for c in gate.calls.read_text().splitlines() if c.startswith("tenant(")]


def test_it_gives_up_naming_the_flags_to_check(gate):
    result = gate("n n n n n", timeout_seconds=0)
    assert result.returncode == 1
    assert "did not serve mutatingadmissionpolicies in admissionregistration.k8s.io/v1beta1" in (
        result.stderr
    )
    assert "extraArgs.apiServer" in result.stderr
    assert "tenant-admin-kubeconfig" not in result.stderr


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_both_policy_sets_wait_for_the_gate(lab_135: ProgramRun, lab: ProgramRun, tenant: str):
    """On v1.35 the gate waits for the flags that switch the beta API on; on v1.36 (the
    default) for the GA API alone."""
    default = lab.named(f"{tenant}-policy-api-ready")
    assert default.inputs["environment"]["POLICY_API"] == "admissionregistration.k8s.io/v1"
    assert "MutatingAdmissionPolicy" not in str(default.inputs["triggers"])
    lab = lab_135
    gate = lab.named(f"{tenant}-policy-api-ready")
    environment = gate.inputs["environment"]
    assert environment["POLICY_API"] == "admissionregistration.k8s.io/v1beta1"
    assert gate.is_secret("environment.LAB_KUBECONFIG")
    assert gate.is_secret("environment.MANAGEMENT_KUBECONFIG")
    control_plane = lab.named(f"{tenant}-control-plane")
    assert environment["TCP_NAME"] == control_plane.inputs["metadata"]["name"] == tenant
    assert environment["TCP_NAMESPACE"] == control_plane.inputs["metadata"]["namespace"]
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
