"""The real control plane works: kwok's node turns Ready, a pod is scheduled and Running,
RBAC decides for token users, and stopping it ends exactly the processes it started."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from controlplane import certificate, pem_private_key
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec


def condition_status(obj: dict, kind: str) -> str | None:
    conditions = obj.get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == kind), None)


@pytest.mark.upstream("kwok-v0.8-needs-stages", "kcm-service-account-credentials")
def test_a_kwok_node_turns_ready_and_runs_a_scheduled_pod(control_plane):
    control_plane.create_fake_node("smoke-node")
    node = control_plane.wait_for_object(
        "node", "smoke-node",
        condition=lambda n: condition_status(n, "Ready") == "True" and not n["spec"].get("taints"),
        what="node smoke-node Ready, without the not-ready taint (node lifecycle controller)",
    )  # fmt: skip
    assert node["status"]["allocatable"]["pods"]  # kwok's node-initialize stage filled it

    control_plane.create_namespace("smoke")
    control_plane.kubectl(
        "run", "smoke", "-n", "smoke", "--image=registry.invalid/none:1", "--restart=Never"
    )
    pod = control_plane.wait_for_object(
        "pod", "smoke", "-n", "smoke",
        condition=lambda p: p.get("status", {}).get("phase") == "Running",
        what="pod smoke Running",
    )  # fmt: skip
    assert pod["spec"]["nodeName"] == "smoke-node"  # bound by the real kube-scheduler
    assert condition_status(pod, "PodScheduled") == "True"


def test_rbac_decides_for_token_users(start_control_plane):
    plane = start_control_plane("rbac", users={"alice": ("team-a",)}, full=False)
    plane.kubectl("create", "namespace", "team-a")
    # Not the built-in `view`: that one is aggregated, and its rules are filled in by the
    # controller manager's clusterrole-aggregation controller, which a full=False plane lacks.
    plane.kubectl("create", "role", "pod-reader", "-n", "team-a", "--verb=get,list",
                  "--resource=pods")  # fmt: skip
    plane.kubectl("create", "rolebinding", "pod-reader", "-n", "team-a", "--role=pod-reader",
                  "--group=team-a")  # fmt: skip
    plane.wait_until_allowed("alice", "list", "pods", "-n", "team-a")
    assert plane.can_i("alice", "list", "pods", "-n", "kube-system") is False
    forbidden = plane.kubectl("get", "pods", "-n", "kube-system", user="alice", check=False)
    assert 'User "alice" cannot list resource "pods"' in forbidden.stderr

    bob = plane.add_token_user("bob", ("team-a",))
    assert bob == plane.token("bob")
    whoami = json.loads(plane.kubectl("auth", "whoami", "-o", "json", user="bob").stdout)
    assert whoami["status"]["userInfo"]["username"] == "bob"
    assert whoami["status"]["userInfo"]["groups"] == ["team-a", "system:authenticated"]
    assert plane.can_i("alice", "list", "pods", "-n", "team-a")  # kept across the restart


@pytest.mark.upstream("k8s-aggregated-clusterroles-filled-by-kcm")
def test_view_has_rules_only_where_the_controller_manager_runs(control_plane, start_control_plane):
    api_only = start_control_plane("no-kcm", full=False)
    assert api_only.get_json("clusterrole", "view").get("rules") in (None, [])
    view = control_plane.wait_for_object(
        "clusterrole", "view",
        condition=lambda role: bool(role.get("rules")),
        what="the aggregated view role filled in",
    )  # fmt: skip
    pod_rules = [r for r in view["rules"] if "pods" in r.get("resources", [])]
    assert pod_rules and all(r["apiGroups"] == [""] for r in pod_rules)
    assert {"get", "list", "watch"} <= {verb for r in pod_rules for verb in r["verbs"]}
    api_only.stop()


def test_stop_ends_exactly_its_own_processes(start_control_plane):
    plane = start_control_plane("stop", full=False)
    pids = {name: process.popen.pid for name, process in plane.processes.items()}
    assert set(pids) == {"etcd", "kube-apiserver"}
    plane.stop()
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    assert all(process.popen is None for process in plane.processes.values())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def strict_client_context(cafile: Path) -> ssl.SSLContext:
    """What Python >= 3.13's ssl.create_default_context() does by default (the agent's image)."""
    context = ssl.create_default_context(cafile=str(cafile))
    context.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
    return context


@pytest.mark.upstream("python-3.13-strict-x509")
def test_the_api_servers_ca_passes_strict_x509_verification(start_control_plane):
    plane = start_control_plane("strict-tls", full=False)
    host, port = "127.0.0.1", int(plane.server.rsplit(":", 1)[1])
    context = strict_client_context(plane.ca_path)
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.upstream("python-3.13-strict-x509")
def test_strict_x509_refuses_a_ca_without_key_usage(tmp_path):
    """The counter-example: a CA with basicConstraints only (as a bare `openssl req -x509`
    makes it) is refused under the same flags, so the keyUsage in write_pki is load-bearing."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate(
        "bare-ca", ca_key, None, [(x509.BasicConstraints(ca=True, path_length=None), True)]
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = certificate(
        "server",
        key,
        (ca, ca_key),
        [(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)],
    )
    (tmp_path / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "leaf.pem").write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM) + pem_private_key(key)
    )
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "leaf.pem")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        thread = threading.Thread(target=_accept_one, args=(listener, server_context))
        thread.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                pytest.raises(ssl.SSLCertVerificationError, match="key usage"),
            ):
                strict_client_context(tmp_path / "ca.crt").wrap_socket(
                    raw, server_hostname="127.0.0.1"
                )
        finally:
            thread.join(10)


def _accept_one(listener: socket.socket, context: ssl.SSLContext) -> None:
    connection, _ = listener.accept()
    with connection, contextlib.suppress(ssl.SSLError, OSError):
        context.wrap_socket(connection, server_side=True)


FAILING_TEST = """
def test_fails_with_a_plane(start_control_plane):
    plane = start_control_plane("doomed", full=False)
    print("PIDS", *(p.popen.pid for p in plane.processes.values()), flush=True)
    assert False, "this test fails on purpose"
"""
REAL_DIR = Path(__file__).resolve().parent


def pids_printed(output: str) -> list[int]:
    line = next(line for line in output.splitlines() if line.startswith("PIDS "))
    return [int(pid) for pid in line.split()[1:]]


def test_a_failing_test_still_stops_its_planes(tmp_path):
    (tmp_path / "test_doomed.py").write_text(FAILING_TEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REAL_DIR), str(REAL_DIR.parent)])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "conftest", "--rootdir", str(tmp_path),
         "-c", os.devnull, str(tmp_path / "test_doomed.py")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "this test fails on purpose" in result.stdout
    pids = pids_printed(result.stdout)
    assert len(pids) == 2
    assert [pid for pid in pids if _alive(pid)] == []


KILLED_RUNNER = """
import sys, time
from pathlib import Path
from controlplane import ControlPlane
plane = ControlPlane.start(Path(sys.argv[1]), name="orphan", full=False)
print("PIDS", *(p.popen.pid for p in plane.processes.values()), flush=True)
time.sleep(600)
"""


def test_a_killed_test_run_leaves_no_process_behind(tmp_path):
    """SIGKILL gives pytest no teardown: the children die with it (PR_SET_PDEATHSIG)."""
    runner = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUNNER, str(tmp_path / "plane")],
        env={**os.environ, "PYTHONPATH": str(REAL_DIR)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    pids = pids_printed(runner.stdout.readline())
    assert all(_alive(pid) for pid in pids)
    runner.kill()
    runner.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if _alive(pid)] == []
