"""The tenant's own kube-proxy (components/tenant/kube_proxy.py) and its gate, run for real
against a fake kubectl.

A lab deployed when Kamaji's kube-proxy addon was on turns it off on its next update; Kamaji
then deletes the addon's objects, those carrying its label, while the program creates its own
under kubeadm's names. The gate (builders/scripts.py `kamaji_kube_proxy_gone_wait_script`)
waits until none is left, so the program neither meets `already exists` nor takes over an
object Kamaji's cleanup would delete.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from builders.scripts import kamaji_kube_proxy_gone_wait_script
from tests.support.fake_tools import NEXT_ANSWER, script_run
from tests.support.pulumi_harness import ProgramRun

# Each `kubectl get` answers with the next word of $ANSWERS: e (nothing found), k (an object of
# Kamaji's addon), x (no answer, exit 1).
FAKE_KUBECTL = (
    r"""
echo "kubectl $*" >> "$CALLS"
"""
    + NEXT_ANSWER
    + r"""
case "$answer" in
  e) echo 'No resources found in kube-system namespace.' >&2 ;;
  k) echo daemonset.apps/kube-proxy ;;
  *) echo 'The connection to the server was refused' >&2; exit 1 ;;
esac
"""
)
GONE = "no kube-proxy object of Kamaji's addon in the tenant"


@pytest.fixture
def gate(tmp_path: Path):
    runner = script_run(tmp_path, {"kubectl": FAKE_KUBECTL})

    def run(answers: str, timeout_seconds: int = 300) -> subprocess.CompletedProcess[str]:
        script = kamaji_kube_proxy_gone_wait_script(timeout_seconds, interval_seconds=0)
        return runner(script, ANSWERS=answers, LAB_KUBECONFIG="tenant-admin-kubeconfig")

    run.calls = runner.calls  # type: ignore[attr-defined]
    return run


@pytest.mark.upstream("kamaji-kube-proxy-addon-is-kubeadms-default")
def test_it_waits_until_kamajis_labelled_objects_are_gone(gate):
    """Unanswered (x) and found (k) checks go round again; both kinds of query must be empty."""
    result = gate("x k e e k e e")
    assert result.returncode == 0, result.stderr
    calls = gate.calls.read_text().splitlines()
    assert len(calls) == 7  # x; k+e; e+k; e+e
    assert all("-l kamaji.clastix.io/project=kamaji" in call for call in calls)
    assert "--field-selector metadata.name=kube-proxy" in calls[0]
    assert "clusterrolebindings" in calls[2] and "metadata.name=kubeadm:node-proxier" in calls[2]
    assert GONE in result.stderr


def test_a_new_tenant_passes_at_once(gate):
    result = gate("e e")
    assert result.returncode == 0 and GONE in result.stderr
    assert len(gate.calls.read_text().splitlines()) == 2


def test_it_gives_up_saying_what_is_left(gate):
    result = gate("k k k", timeout_seconds=0)
    assert result.returncode == 1
    assert "still in the tenant after 0s" in result.stderr
    assert "daemonset.apps/kube-proxy" in result.stderr
    assert "tenant-admin-kubeconfig" not in result.stderr


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_the_tenants_kube_proxy_objects_wait_for_the_gate_and_flannel_for_them(
    lab: ProgramRun, tenant: str
):
    gate = lab.named(f"{tenant}-kube-proxy-kamaji-addon-gone")
    assert gate.is_secret("environment.LAB_KUBECONFIG")
    assert lab.named(f"{tenant}-admin-ready").urn in lab.depends_on(gate.urn)
    objects = [
        r
        for r in lab.resources
        if r.parent.endswith(f"::{tenant}-kube-proxy") and r.urn != gate.urn
    ]
    assert len(objects) == 6
    for resource in objects:
        assert gate.urn in lab.depends_on(resource.urn), resource.name
        assert resource.provider.startswith(lab.named(f"{tenant}-provider").urn + "::")
    namespace = lab.named(f"{tenant}-cni-namespace")
    daemon_set = lab.named(f"{tenant}-kube-proxy-daemonset")
    assert daemon_set.urn in lab.depends_on(namespace.urn)
    config = yaml.safe_load(lab.named(f"{tenant}-kube-proxy-config").inputs["data"]["config.conf"])
    assert config["conntrack"] == {"maxPerCore": 0}
    assert "kubeProxy" not in lab.named(f"{tenant}-control-plane").inputs["spec"]["addons"]
