"""The gate `tenant-<n>-version-ready` (`control_plane_version_wait_script`, builders/scripts.py)
against real API servers, with the real kubectl v1.35.4.

One API server plays both sides, as in test_lock_wait_policy_real.py: on the management side a
TenantControlPlane (a CRD of the test's own) and Kamaji's Deployment, whose status the test
writes as Kamaji would; on the tenant side its own /version, the real server's. The gate passes
only when Kamaji reports the version Ready and the API server itself answers it: kubectl's own
client version (v1.35.4) must never count, which a v1.36.3 tenant shows.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from binaries import K8S_NEXT_VERSION, K8S_VERSION, bin_path
from controlplane import ControlPlane
from test_lock_wait_policy_real import TCP, KamajiSide

from builders.scripts import control_plane_version_wait_script

OLD_VERSION = "v1.34.9"  # what the control plane ran before the upgrade


class KamajiUpgrade(KamajiSide):
    """Kamaji's side, reconciled and rolled out, with the version status it writes."""

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(plane)
        self.reconciled().rolled_out()

    def reports(self, version: str, state: str) -> KamajiUpgrade:
        written = {"version": {"version": version, "status": state}}
        self._status("tenantcontrolplane", {"kubernetesResources": written})
        return self


def version_gate(plane: ControlPlane, version: str, timeout_seconds: int) -> subprocess.Popen:
    """The gate as the program runs it on the host, with the real kubectl; the plane is also its
    management cluster."""
    kubeconfig = plane.kubeconfig().read_text()
    script = control_plane_version_wait_script(timeout_seconds, consecutive=3, interval_seconds=1)
    return subprocess.Popen(
        ["/bin/sh", "-c", script],
        env={
            "PATH": f"{bin_path('kubectl').parent}:/usr/bin:/bin",
            "HOME": str(plane.kubeconfig().parent),  # kubectl's discovery cache
            "LAB_KUBECONFIG": kubeconfig,
            "MANAGEMENT_KUBECONFIG": kubeconfig,
            "TCP_NAME": TCP,
            "TCP_NAMESPACE": TCP,
            "VERSION": version,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(gate: subprocess.Popen, timeout: float = 60) -> tuple[int, str, float]:
    """The gate's exit code, stderr and seconds from now to its end."""
    started = time.monotonic()
    try:
        _, stderr = gate.communicate(timeout=timeout)
    finally:
        gate.kill()
    took = time.monotonic() - started
    print(f"gate: exit {gate.returncode} after {took:.1f} s more\n{stderr}")
    return gate.returncode, stderr, took


@pytest.fixture(scope="module")
def tenant(start_control_plane) -> tuple[ControlPlane, KamajiUpgrade]:
    plane = start_control_plane("version-gate", full=False)
    assert plane.kubernetes == K8S_VERSION
    return plane, KamajiUpgrade(plane)


@pytest.mark.upstream("kamaji-status-version-follows-spec-when-ready")
def test_the_gate_waits_while_kamaji_reports_the_upgrade_in_progress(tenant):
    plane, kamaji = tenant
    kamaji.reports(K8S_VERSION, "Upgrading")
    gate = version_gate(plane, K8S_VERSION, timeout_seconds=60)
    time.sleep(5)
    still_waiting = gate.poll() is None
    kamaji.reports(K8S_VERSION, "Ready")
    code, stderr, took = finished(gate)
    assert still_waiting, f"the gate passed while Kamaji said Upgrading:\n{stderr}"
    assert code == 0, stderr
    assert f'deployment "{TCP}" successfully rolled out' in stderr
    assert stderr.rstrip().endswith(f"the control plane runs {K8S_VERSION}")
    assert took < 30  # three answers in a row, a second apart, once Ready (a busy host: slower)


@pytest.mark.upstream("kube-apiserver-version-endpoint")
def test_a_server_that_answers_another_version_never_passes(tenant):
    """Kamaji says v1.36.3 Ready, but the API server behind the Service still runs v1.35.4."""
    plane, kamaji = tenant
    kamaji.reports(K8S_NEXT_VERSION, "Ready")
    code, stderr, took = finished(version_gate(plane, K8S_NEXT_VERSION, timeout_seconds=4))
    assert code == 1
    assert (
        f"the tenant API server did not answer /version with {K8S_NEXT_VERSION} within 4s:"
        in stderr
    )
    assert f'"gitVersion": "{K8S_VERSION}"' in stderr  # what /version said instead
    assert "the control plane runs" not in stderr
    assert took < 30  # its own timeout, not the test's


def test_a_status_stuck_on_the_old_version_fails_naming_it(tenant):
    plane, kamaji = tenant
    kamaji.reports(OLD_VERSION, "Ready")
    code, stderr, _ = finished(version_gate(plane, K8S_VERSION, timeout_seconds=3))
    assert code == 1
    assert (
        f"Kamaji did not report {TCP}/{TCP} at {K8S_VERSION} and Ready within 3s"
        f" (status version and state: {OLD_VERSION} Ready); its conditions:"
    ) in stderr
    assert "/version" not in stderr  # it gave up before asking the tenant


@pytest.mark.upstream("kube-apiserver-version-endpoint", "kubectl-version-client-line")
def test_kubectls_own_client_version_never_counts(start_control_plane):
    """The tenant runs v1.36.3; the host's kubectl is v1.35.4, the version the gate waits for
    (`kubectl version` would print it as the client's)."""
    client = subprocess.run(
        [str(bin_path("kubectl")), "version", "--client"], capture_output=True, text=True
    )
    assert client.stdout.startswith(f"Client Version: {K8S_VERSION}\n")
    plane = start_control_plane("version-gate-next", full=False, kubernetes=K8S_NEXT_VERSION)
    KamajiUpgrade(plane).reports(K8S_VERSION, "Ready")
    code, stderr, _ = finished(version_gate(plane, K8S_VERSION, timeout_seconds=4))
    assert code == 1
    assert f"did not answer /version with {K8S_VERSION} within 4s:" in stderr
    assert f'"gitVersion": "{K8S_NEXT_VERSION}"' in stderr
