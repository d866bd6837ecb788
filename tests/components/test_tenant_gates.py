"""The tenant's two gates, run for real against fake kubectl and curl on PATH.

Before the TenantControlPlane is created: a server-side dry run of that very manifest until
Kamaji's webhooks admit it (m5). After Kamaji reports it Ready: /healthz on its address from
this host until it answers `ok` (m13, M4).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from builders.control_plane import tenant_control_plane_manifest
from builders.scripts import api_server_healthz_wait_script, control_plane_admission_wait_script
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

TENANT_A = parse_config(lab_stack_config()).tenants[0]
MANIFEST = yaml.safe_dump(tenant_control_plane_manifest(TENANT_A, "172.30.255.205"))

# Fails the first $REJECTS dry runs as Kamaji's webhook does before cert-manager injected its CA.
FAKE_KUBECTL = r"""#!/bin/sh
echo "kubectl $*" >> "$CALLS"
cp "$KUBECONFIG" "$STATE/kubeconfig-seen"
case "$*" in
  "apply --dry-run=server -f "*)
    cp "$4" "$STATE/manifest-seen"
    n=$(cat "$STATE/dry" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/dry"
    if [ "$n" -lt "${REJECTS:-0}" ]; then
      echo 'Error from server (InternalError): failed calling webhook' \
        '"vtenantcontrolplane.kb.io": tls: failed to verify certificate:' \
        'x509: certificate signed by unknown authority' >&2
      exit 1
    fi ;;
  *) exit 2 ;;
esac
"""
# Refuses the first $REFUSALS connections, as a VIP nobody announces yet, then says ok.
FAKE_CURL = r"""#!/bin/sh
echo "curl $*" >> "$CALLS"
n=$(cat "$STATE/curl" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/curl"
if [ "$n" -lt "${REFUSALS:-0}" ]; then
  echo "curl: (7) Failed to connect to 172.30.255.205 port 6443: No route to host" >&2
  exit 7
fi
printf ok
"""


@pytest.fixture
def host(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("kubectl", FAKE_KUBECTL), ("curl", FAKE_CURL)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()

    def run(script: str, path: str = f"{bin_dir}:/usr/bin:/bin", **env: str):
        return subprocess.run(
            ["/bin/sh", "-c", script.replace("sleep 3", "sleep 0")],
            env={
                "PATH": path,  # the fakes come first: no real kubectl or curl answers
                "CALLS": str(tmp_path / "calls"),
                "STATE": str(state),
                **env,
            },
            capture_output=True,
            text=True,
            timeout=30,
        )

    run.state = state  # type: ignore[attr-defined]
    run.calls = tmp_path / "calls"  # type: ignore[attr-defined]
    run.tmp = tmp_path  # type: ignore[attr-defined]
    return run


@pytest.mark.upstream("kamaji-webhooks-admit-dry-runs")
def test_admission_gate_retries_the_dry_run_of_the_very_manifest_until_admitted(host):
    """m5: the create must not race cert-manager's CA injection into Kamaji's webhooks."""
    result = host(
        control_plane_admission_wait_script(),
        LAB_KUBECONFIG="management-kubeconfig",
        TCP_MANIFEST=MANIFEST,
        REJECTS="2",
    )
    assert result.returncode == 0, result.stderr
    calls = host.calls.read_text().splitlines()
    assert len(calls) == 3 and all(
        c.startswith("kubectl apply --dry-run=server -f ") for c in calls
    )
    assert yaml.safe_load((host.state / "manifest-seen").read_text()) == yaml.safe_load(MANIFEST)
    assert (host.state / "kubeconfig-seen").read_text() == "management-kubeconfig\n"
    assert "the API server admits the TenantControlPlane" in result.stderr
    assert not list(host.tmp.glob("tmp*")) and "management-kubeconfig" not in result.stderr


def test_admission_gate_stops_with_the_webhooks_own_error(host):
    result = host(
        control_plane_admission_wait_script(timeout_seconds=0),
        LAB_KUBECONFIG="kc",
        TCP_MANIFEST=MANIFEST,
        REJECTS="99",
    )
    assert result.returncode == 1
    assert "still rejects the TenantControlPlane after 0s" in result.stderr
    assert "x509: certificate signed by unknown authority" in result.stderr


@pytest.mark.upstream("kamaji-ready-ignores-the-loadbalancer")
def test_api_gate_waits_until_the_address_answers_from_the_host(host):
    """m13, M4: Kamaji's Ready says nothing about MetalLB announcing the address."""
    result = host(
        api_server_healthz_wait_script(),
        API_ENDPOINT="https://172.30.255.205:6443",
        REFUSALS="2",
    )
    assert result.returncode == 0, result.stderr
    calls = host.calls.read_text().splitlines()
    assert calls == ["curl -ks --max-time 5 https://172.30.255.205:6443/healthz"] * 3
    assert "https://172.30.255.205:6443 answers" in result.stderr


def test_api_gate_gives_up_with_what_to_check(host):
    result = host(
        api_server_healthz_wait_script(timeout_seconds=0),
        API_ENDPOINT="https://172.30.255.205:6443",
        REFUSALS="99",
    )
    assert result.returncode == 1
    assert "did not answer ok from this host within 0s" in result.stderr
    assert "No route to host" in result.stderr
    assert "MetalLB announces the address" in result.stderr


def test_api_gate_names_a_missing_curl(host, tmp_path: Path):
    empty = tmp_path / "no-tools"
    empty.mkdir()
    result = host(api_server_healthz_wait_script(), path=str(empty), API_ENDPOINT="https://x:6443")
    assert result.returncode == 1
    assert "curl is needed to check https://x:6443 from this host" in result.stderr
