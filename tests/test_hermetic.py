"""The hermetic tier reaches neither the machine's Docker daemon nor the user's kubeconfig.

Issue 17 (item 2): beside a running Docker daemon, a program run under the mocks asked it for
its bridge MTU and `test_snapshot` went red. The program's host reads now go through one seam
(components/host.py) that every program run replaces (MockHost); and every hermetic test process
finds DOCKER_HOST, KUBECONFIG and HOME only in a trap that fails the test touching it
(tests/conftest.py, tests/support/host_trap.py). These tests prove both, and that the trap
really fires.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import REAL_TIER, pytest_collection_modifyitems, trap_applies
from tests.support.fake_tools import fake_tools
from tests.support.host_trap import UNSET_VARS, HostTrap
from tests.support.pulumi_harness import (
    PROJECT_DIR,
    MockHost,
    UnexpectedHostCommand,
    lab_stack_config,
    prepared_chart_cache,
    run_program,
)
from tests.support.tools import require_tool

LAB = lab_stack_config()
PROGRAM = ("labconfig", "planning", "builders", "components")
SEAM = PROJECT_DIR / "components" / "host.py"
# What reaches the machine: commands, sockets, the environment. Only the seam may use them.
HOST_MODULES = {"subprocess", "shutil", "socket", "urllib", "http", "requests", "docker"}
HOST_ATTRIBUTES = {"environ", "getenv", "putenv", "expanduser", "home", "system", "popen"}

# A docker client as the SDKs are: DOCKER_HOST's socket, one API request.
DOCKER_CLIENT = """\
import os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["DOCKER_HOST"].removeprefix("unix://"))
s.sendall(b"GET /v1.41/version HTTP/1.1\\r\\nHost: docker\\r\\n\\r\\n")
assert s.recv(1) == b""
"""
# A Kubernetes client as client-go is: KUBECONFIG's current cluster, over TLS.
KUBE_CLIENT = """\
import os, socket, ssl
text = open(os.environ["KUBECONFIG"]).read()
host, port = text.split("server: https://")[1].split()[0].split(":")
tls = ssl.create_default_context()
tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
try:
    tls.wrap_socket(socket.create_connection((host, int(port))))
except (ssl.SSLError, OSError):
    pass
"""
# A pytest session of its own with tests/conftest.py as a plugin, wherever its tests are.
PYTEST = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
PYTEST += ["-p", "no:xdist"]
HOME_READER = "import os; open(os.path.expanduser('~/.kube/config')).read()"


def _client(code: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-c", code], env=env, timeout=30, check=False)


def test_no_program_run_asks_the_machines_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Issue 17 item 2: with a docker on PATH that answers as this machine's daemon does
    (1500), a program run still gets the harness's answer: the golden files hold no MTU."""
    log = fake_tools(tmp_path, {"docker": 'echo "docker $*" >> "$CALLS"; echo 1500'})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(log))
    for preview in (False, True):
        network = run_program(LAB, preview=preview).named("lab-network-bridge")
        assert network.inputs["options"] == {
            "com.docker.network.bridge.enable_ip_masquerade": "true",
            "com.docker.network.enable_ipv6": "false",
        }
    assert not log.exists(), log.read_text()


def test_no_program_run_fetches_charts_or_reads_the_checkouts_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The charts come from the harness's cache; a run whose cache lacks them stops at the
    fetch command, with git and helm on PATH: GitHub and `.cache/` stay out of reach."""
    log = fake_tools(tmp_path, {"git": 'echo "git $*" >> "$CALLS"', "helm": "exit 0"})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(log))
    chart = run_program(LAB).named("kamaji-chart").inputs["chart"]
    assert chart == str(prepared_chart_cache() / "ddbabd87ed0e8d7c319414383e153c46f21733a9/kamaji")
    host = MockHost(cache=tmp_path / "empty-cache")
    with pytest.raises(UnexpectedHostCommand, match=r"(?s)ran `bash -c .*` on its host"):
        run_program(LAB, host=host)
    assert [command[:2] for command in host.commands][-1] == ["bash", "-c"]
    assert not log.exists(), log.read_text()


def _host_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [f"import {n}" for n in names if n.split(".")[0] in HOST_MODULES]
        if isinstance(node, ast.Attribute) and node.attr in HOST_ATTRIBUTES:
            found.append(f".{node.attr} (line {node.lineno})")
    return found


def test_only_the_seam_runs_commands_or_reads_the_environment():
    """The program's host reads go through components/host.py and nowhere else, so replacing
    it (as every program run does) leaves nothing of the machine in a run."""
    modules = [p for package in PROGRAM for p in sorted((PROJECT_DIR / package).rglob("*.py"))]
    uses = {
        str(path.relative_to(PROJECT_DIR)): used
        for path in [*modules, PROJECT_DIR / "__main__.py"]
        if path != SEAM and (used := _host_uses(path))
    }
    assert uses == {}
    assert _host_uses(SEAM)  # the check sees what it looks for


def test_every_hermetic_test_sees_only_the_trap(host_trap: HostTrap | None):
    """DOCKER_HOST, KUBECONFIG and HOME lead to the trap; nothing else leads elsewhere."""
    assert host_trap is not None
    assert {name: os.environ.get(name) for name in host_trap.env()} == host_trap.env()
    assert [name for name in UNSET_VARS if name in os.environ] == []
    assert Path.home() / ".kube" / "config" == host_trap.home_kubeconfig


def test_the_trap_records_every_client_and_what_it_asked(host_trap: HostTrap):
    """A trap that cannot fire is no proof: a Docker client, a kubeconfig client and a
    reader of ~/.kube/config, each in a process of its own, are each recorded."""
    _client(DOCKER_CLIENT)
    _client(KUBE_CLIENT)
    _client(HOME_READER)
    touched = "\n".join(host_trap.take())
    assert f"Docker (DOCKER_HOST={host_trap.docker_host}): 'GET /v1.41/version HTTP/1.1'" in (
        touched
    )
    assert f"the kubeconfig's server {host_trap.kube_server}: a TLS handshake from pid" in touched
    assert f"$KUBECONFIG ({host_trap.kubeconfig}): opened, read" in touched
    assert f"$HOME/.kube/config ({host_trap.home_kubeconfig}): opened, read" in touched
    assert "from pid" in touched and "(python" in touched  # which process it was
    assert host_trap.take() == []  # reported once


@pytest.mark.upstream("docker-cli-docker-host-wins")
def test_the_docker_cli_lands_in_the_trap(host_trap: HostTrap):
    """The real CLI, whatever its contexts say, asks DOCKER_HOST: the trap."""
    done = subprocess.run(
        [require_tool("docker"), "version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    touched = host_trap.take()
    assert any(t.startswith(f"Docker (DOCKER_HOST={host_trap.docker_host}): ") for t in touched)
    assert any("(docker version)" in t for t in touched), touched


@pytest.mark.upstream("client-go-kubeconfig-from-env-then-home")
def test_kubectl_lands_in_the_trap_with_or_without_kubeconfig(host_trap: HostTrap):
    """client-go reads KUBECONFIG when set, else $HOME/.kube/config: the trap either way."""
    version = [require_tool("kubectl"), "version", "--request-timeout=5s"]
    assert subprocess.run(version, capture_output=True, timeout=60).returncode != 0
    touched = "\n".join(host_trap.take())
    assert f"$KUBECONFIG ({host_trap.kubeconfig}): opened" in touched
    assert "$HOME/.kube/config" not in touched
    assert f"{host_trap.kube_server}: a TLS handshake from pid" in touched
    without = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    assert subprocess.run(version, capture_output=True, env=without, timeout=60).returncode != 0
    touched = "\n".join(host_trap.take())
    assert f"$HOME/.kube/config ({host_trap.home_kubeconfig}): opened" in touched
    assert f"{host_trap.kube_server}: a TLS handshake from pid" in touched


def test_a_touch_fails_the_test_that_made_it_and_says_what(tmp_path: Path):
    """The whole mechanism, in a pytest session of its own under tests/conftest.py: the test
    that reached Docker and the kubeconfig fails, named, with what it touched; its
    neighbour passes."""
    (tmp_path / "test_touch.py").write_text(
        textwrap.dedent(f"""\
        import subprocess, sys

        def test_reaches_the_host():
            subprocess.run([sys.executable, "-c", {DOCKER_CLIENT!r}])
            subprocess.run([sys.executable, "-c", {KUBE_CLIENT!r}])

        def test_stays_home():
            pass
        """)
    )
    done = subprocess.run(
        [*PYTEST, "-c", str(PROJECT_DIR / "pyproject.toml"), str(tmp_path)],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "ERROR at teardown of test_reaches_the_host" in out, out
    assert "test_touch.py::test_reaches_the_host reached for the host's Docker" in out
    assert "Docker (DOCKER_HOST=unix://" in out and "'GET /v1.41/version HTTP/1.1'" in out
    assert "$KUBECONFIG (" in out and ": a TLS handshake from pid" in out
    assert "2 passed, 1 error" in out  # the call passed, its teardown check did not


def test_the_real_tier_runs_outside_the_trap():
    """tests/real needs the real HOME (its binaries' cache, the Pulumi CLI's plugins): its
    sessions get no trap, and a session mixing both tiers is refused."""
    hermetic, real = PROJECT_DIR / "tests" / "test_x.py", REAL_TIER / "test_x.py"
    assert trap_applies([hermetic]) and not trap_applies([real])
    pytest_collection_modifyitems([SimpleNamespace(path=real)])  # type: ignore[list-item]
    with pytest.raises(pytest.UsageError, match="run them apart"):
        pytest_collection_modifyitems([SimpleNamespace(path=p) for p in (hermetic, real)])  # type: ignore[misc]
