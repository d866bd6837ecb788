"""The host scripts, run for real against fake kind/kubectl/docker executables on PATH."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from components.scripts import (
    kind_cluster_config,
    kind_create_script,
    kind_delete_script,
    metallb_webhook_wait_script,
    worker_join_script,
    worker_leave_script,
)

# A fake tool appends its arguments to $CALLS and behaves as the test's env vars say.
FAKE_KIND = r"""#!/bin/sh
echo "kind $*" >> "$CALLS"
case "$1" in
  get)
    if [ "$2" = clusters ]; then printf '%s\n' $EXISTING_CLUSTERS
    else echo "KUBECONFIG-OF-$4"; fi ;;
  create) grep -q "ipFamily: ipv4" "$6" || exit 9 ;;
esac
"""
FAKE_KUBECTL = r"""#!/bin/sh
echo "kubectl $* KUBECONFIG=$(cat "$KUBECONFIG")" >> "$CALLS"
case "$*" in
  *--dry-run=server*)
    n=$(cat "$STATE/dry" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/dry"
    if [ "$n" -lt "${WEBHOOK_FAILS:-0}" ]; then
      echo 'failed calling webhook "ipaddresspoolvalidationwebhook.metallb.io"' >&2; exit 1
    fi ;;
esac
"""
FAKE_DOCKER = r"""#!/bin/sh
echo "docker $*" >> "$CALLS"
case "$1" in
  logs) echo "[  OK  ] Reached target multi-user.target - Multi-User System." ;;
  inspect) [ -z "$NO_CONTAINER" ] ;;
  exec)
    shift; [ "$1" = -i ] && { shift; cat > "$STATE/stdin"; }
    node=$1; shift
    case "$*" in
      "test -f /etc/kubernetes/kubelet.conf") [ -n "$JOINED" ] ;;
      kubeadm\ token*)
        n=$(cat "$STATE/tokens" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/tokens"
        [ "$n" -ge "${TOKEN_FAILS:-0}" ] || exit 1
        echo "kubeadm join 172.30.255.205:6443 --token abc.def" \
          "--discovery-token-ca-cert-hash sha256:00" ;;
    esac ;;
esac
"""


@pytest.fixture
def host(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("kind", FAKE_KIND), ("kubectl", FAKE_KUBECTL), ("docker", FAKE_DOCKER)):
        tool = bin_dir / name
        tool.write_text(body)
        tool.chmod(0o755)
    (tmp_path / "state").mkdir()

    def run(script: str, **env: str) -> subprocess.CompletedProcess:
        full_env = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "CALLS": str(tmp_path / "calls"),
            "STATE": str(tmp_path / "state"),
            **env,
        }
        return subprocess.run(
            ["/bin/sh", "-c", script.replace("sleep 3", "sleep 0").replace("sleep 1", "sleep 0")],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    run.calls = lambda: (tmp_path / "calls").read_text().splitlines()  # type: ignore[attr-defined]
    run.state = tmp_path / "state"  # type: ignore[attr-defined]
    return run


def kind_env(**extra: str) -> dict[str, str]:
    return {
        "KIND_CLUSTER_NAME": "lab",
        "KIND_CONFIG": kind_cluster_config("lab", "kindest/node:v1.35.0@sha256:" + "1" * 64),
        "KIND_EXPERIMENTAL_DOCKER_NETWORK": "kamaji-hami-lab",
        **extra,
    }


def test_kind_config_is_ipv4_single_node_pinned():
    cfg = yaml.safe_load(kind_cluster_config("lab", "img@sha256:x"))
    assert cfg["networking"] == {"ipFamily": "ipv4"}
    assert cfg["nodes"] == [{"role": "control-plane", "image": "img@sha256:x"}]


def test_kind_create_creates_then_prints_only_the_kubeconfig(host):
    result = host(kind_create_script(), **kind_env(EXISTING_CLUSTERS=""))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "KUBECONFIG-OF-lab\n"
    created = [c for c in host.calls() if c.startswith("kind create")]
    assert len(created) == 1 and "--name lab" in created[0] and "--wait" in created[0]


def test_kind_create_reuses_an_existing_cluster(host):
    result = host(kind_create_script(), **kind_env(EXISTING_CLUSTERS="other lab"))
    assert result.returncode == 0
    assert not any(c.startswith("kind create") for c in host.calls())
    assert "reusing it" in result.stderr
    assert result.stdout == "KUBECONFIG-OF-lab\n"


def test_kind_delete_names_the_cluster(host):
    assert host(kind_delete_script(), KIND_CLUSTER_NAME="lab").returncode == 0
    assert host.calls() == ["kind delete cluster --name lab"]


def test_metallb_wait_retries_until_the_webhook_admits_the_pool(host):
    result = host(
        metallb_webhook_wait_script(30),
        LAB_KUBECONFIG="secret-kc",
        METALLB_MANIFEST="kind: IPAddressPool",
        WEBHOOK_FAILS="2",
    )
    assert result.returncode == 0, result.stderr
    dry_runs = [c for c in host.calls() if "--dry-run=server" in c]
    assert len(dry_runs) == 3
    assert all("KUBECONFIG=secret-kc" in c for c in host.calls())
    assert "rollout status deployment/metallb-controller" in host.calls()[0]


def test_metallb_wait_gives_up_with_the_webhook_error(host):
    result = host(
        metallb_webhook_wait_script(0),
        LAB_KUBECONFIG="kc",
        METALLB_MANIFEST="x",
        WEBHOOK_FAILS="99",
    )
    assert result.returncode == 1
    assert "ipaddresspoolvalidationwebhook.metallb.io" in result.stderr


def test_join_retries_token_then_joins_with_preflight_exceptions(host):
    result = host(
        worker_join_script(30),
        NODE_NAME="tenant-a-worker-1",
        LAB_KUBECONFIG="tenant-kc",
        TOKEN_FAILS="2",
    )
    assert result.returncode == 0, result.stderr
    calls = host.calls()
    joins = [c for c in calls if "kubeadm join" in c]
    assert len(joins) == 1
    assert "--ignore-preflight-errors=SystemVerification,FileExisting" in joins[0]
    assert len([c for c in calls if "kubeadm token create" in c]) == 3
    # the admin kubeconfig went in through stdin, never on a command line, and was removed
    assert (host.state / "stdin").read_text() == "tenant-kc\n"
    assert not any("tenant-kc" in c for c in calls)
    removed = next(i for i, c in enumerate(calls) if "rm -f /etc/kubernetes/lab-admin.conf" in c)
    assert removed < calls.index(joins[0])


def test_join_is_skipped_for_a_joined_node(host):
    result = host(worker_join_script(5), NODE_NAME="n", LAB_KUBECONFIG="kc", JOINED="1")
    assert result.returncode == 0
    assert not any("kubeadm" in c for c in host.calls())


def test_join_fails_clearly_without_a_token(host):
    result = host(worker_join_script(0), NODE_NAME="n", LAB_KUBECONFIG="kc", TOKEN_FAILS="99")
    assert result.returncode == 1
    assert "no bootstrap token" in result.stderr


def test_leave_deletes_the_node_object_and_tolerates_a_missing_container(host):
    assert host(worker_leave_script(), NODE_NAME="n", LAB_KUBECONFIG="kc").returncode == 0
    assert any("delete node n --ignore-not-found" in c for c in host.calls())
    gone = host(worker_leave_script(), NODE_NAME="n", LAB_KUBECONFIG="kc", NO_CONTAINER="1")
    assert gone.returncode == 0
