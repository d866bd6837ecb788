"""What builders/scripts.py's mutants showed unpinned: kind's config document and the default
deadlines of the host-side gates (the components call the builders without a timeout).

The deadlines run on a fake clock: `date +%s` answers the times a test gives, so a five-minute
wait is checked in milliseconds and to the second: the script retries at deadline - 1 s and gives
up at the deadline. The tools are tests/support/fake_host.py's; a test adds only a clock and,
for the API gate, a curl that nobody answers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builders.scripts import (
    api_server_healthz_wait_script,
    control_plane_admission_wait_script,
    kind_cluster_config,
    metallb_webhook_wait_script,
    worker_join_script,
)
from tests.support.fake_host import FakeHost, Result

IMAGE = "kindest/node:v1.35.0@sha256:" + "1" * 64
NODE = "tenant-a-worker-1"
START = 1_000_000
# What `date +%s` answers once the test's times are used up: past every deadline, so a script
# that waits longer than the test expects stops at its next check instead of looping.
LATE = 4_000_000_000

FAKE_DATE = f"""#!/bin/sh
[ "$*" = "+%s" ] || {{ echo "fake date: unsupported arguments: $*" >&2; exit 2; }}
n=$(cat "$FAKE_CLOCK.used" 2>/dev/null || echo 0)
echo $((n + 1)) > "$FAKE_CLOCK.used"
sed -n "$((n + 1))p" "$FAKE_CLOCK" | grep . || echo {LATE}
"""
# An API address nobody announces: every connection fails, as curl reports it.
UNANSWERED_CURL = """#!/bin/sh
echo "$*" >> "$FAKE_CURL_CALLS"
echo "curl: (7) Failed to connect to 172.30.255.205 port 6443: No route to host" >&2
exit 7
"""


def tools_dir(host: FakeHost) -> Path:
    directory = host.state.root / "test-bin"
    directory.mkdir(exist_ok=True)
    for name, body in (("date", FAKE_DATE), ("curl", UNANSWERED_CURL)):
        (directory / name).write_text(body)
        (directory / name).chmod(0o755)
    return directory


def run_on_clock(host: FakeHost, script: str, times: list[int], **env: str) -> Result:
    """Runs `script` on the fake host; its `date +%s` calls answer `times`, in order."""
    clock = host.state.root / "clock"
    clock.write_text("".join(f"{t}\n" for t in times))
    (host.state.root / "tmp").mkdir(exist_ok=True)
    return host.run(
        script,
        PATH=f"{tools_dir(host)}:{host.path}",
        FAKE_CLOCK=str(clock),
        FAKE_CURL_CALLS=str(host.state.root / "curl-calls"),
        TMPDIR=str(host.state.root / "tmp"),
        **env,
    )


def dry_runs(host: FakeHost) -> list[list[str]]:
    return [c for c in host.calls("kubectl") if "--dry-run=server" in c]


def temp_files(host: FakeHost) -> list[Path]:
    return sorted((host.state.root / "tmp").glob("*"))


# --------------------------------------------------------------------------- kind


@pytest.mark.upstream("kind-config-v1alpha4-strict")
def test_kind_config_is_a_v1alpha4_cluster_document_with_only_fields_kind_knows():
    """kind reads only `kind.x-k8s.io/v1alpha4` `Cluster` and rejects an unknown key."""
    assert yaml.safe_load(kind_cluster_config("lab", IMAGE)) == {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": "lab",
        "networking": {"ipFamily": "ipv4"},
        "nodes": [{"role": "control-plane", "image": IMAGE}],
    }


# --------------------------------------------------------------------------- default deadlines


def test_metallb_gate_gives_the_controller_and_the_webhook_five_minutes_by_default(
    host: FakeHost,
):
    result = run_on_clock(
        host,
        metallb_webhook_wait_script(),
        [START, START + 299, START + 300],
        LAB_KUBECONFIG="management-kubeconfig",
        METALLB_MANIFEST="kind: IPAddressPool",
        FAKE_WEBHOOK_FAILS="99",
    )
    assert result.returncode == 1
    (rollout,) = [c for c in host.calls("kubectl") if "rollout" in c]
    assert rollout[1:] == [
        "-n", "metallb-system", "rollout", "status", "deployment/metallb-controller",
        "--timeout=300s",
    ]  # fmt: skip
    assert len(dry_runs(host)) == 2  # retried at 299 s, given up at 300 s
    assert "ipaddresspoolvalidationwebhook.metallb.io" in result.stderr
    assert temp_files(host) == []


def test_tenant_admission_gate_gives_kamajis_webhooks_five_minutes_by_default(host: FakeHost):
    result = run_on_clock(
        host,
        control_plane_admission_wait_script(),
        [START, START + 299, START + 300],
        LAB_KUBECONFIG="management-kubeconfig",
        TCP_MANIFEST="kind: TenantControlPlane",
        FAKE_WEBHOOK_FAILS="99",
    )
    assert result.returncode == 1
    assert len(dry_runs(host)) == 2  # retried at 299 s, given up at 300 s
    assert "failed calling webhook" in result.stderr
    assert temp_files(host) == []


def test_api_gate_gives_the_address_five_minutes_by_default(host: FakeHost):
    result = run_on_clock(
        host,
        api_server_healthz_wait_script(),
        [START, START + 299, START + 300],
        API_ENDPOINT="https://172.30.255.205:6443",
    )
    assert result.returncode == 1
    calls = (host.state.root / "curl-calls").read_text().splitlines()
    probe = "-ks --max-time 5 https://172.30.255.205:6443/healthz"
    report = "-ksS --max-time 5 https://172.30.255.205:6443/healthz"
    assert calls == [probe, probe, report]  # retried at 299 s, given up at 300 s
    assert "No route to host" in result.stderr


def test_join_gives_the_tenant_two_minutes_by_default_to_hand_out_a_token(host: FakeHost):
    root = host.add_container(NODE)
    host.set_tenant(token_failures=99)
    result = run_on_clock(
        host,
        worker_join_script(),
        # systemd's deadline, then the token's start, then the checks after each refusal
        [START, START, START + 119, START + 120],
        NODE_NAME=NODE,
        NODE_LABELS="gpu=on",
        LAB_KUBECONFIG=host.tenant_kubeconfig,
    )
    assert result.returncode == 1
    tokens = [c for c in host.calls("kubeadm") if c[1:3] == ["token", "create"]]
    assert len(tokens) == 2  # retried at 119 s, given up at 120 s
    assert [c for c in host.calls("kubeadm") if c[1] == "join"] == []
    assert host.tenant_nodes() == {}
    assert not (root / "etc/kubernetes/lab-admin.conf").exists()
