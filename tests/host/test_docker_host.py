"""docker_host.py: where the tier's own dockerd lives, when docker.io is installed, how a
daemon is stopped by its PID; and the session's daemon as it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import docker_host
import pytest
from docker_host import (
    RUNTIME,
    SESSION_ENV,
    DaemonPaths,
    Docker,
    DockerUnavailable,
    NotMadeHere,
    OwnDockerd,
    dockerd_command,
    host_capabilities_to_bound,
    install_docker,
    pid_in,
    process_alive,
    stop_pid,
    tier_cache,
)
from test_workers import remove_made_here


def test_the_tier_cache_follows_xdg_then_home():
    assert tier_cache({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/kamaji-hami-lab/host")
    home = Path("/h/.cache/kamaji-hami-lab/host")
    assert tier_cache({"HOME": "/h"}) == home
    assert tier_cache({"XDG_CACHE_HOME": "", "HOME": "/h"}) == home


def test_the_own_dockerd_keeps_everything_under_the_tier_cache(tmp_path: Path):
    paths = DaemonPaths.under(tmp_path)
    argv = dockerd_command(paths)
    options = dict(zip(argv[1::2], argv[2::2], strict=True))
    assert options == {
        "--config-file": str(tmp_path / "daemon.json"),
        "--data-root": str(tmp_path / "docker"),
        "--exec-root": str(tmp_path / "run"),
        "--pidfile": str(tmp_path / "dockerd.pid"),
        "--host": f"unix://{tmp_path / 'docker.sock'}",
    }


def test_prepare_writes_the_config_and_an_executable_launcher(tmp_path: Path):
    daemon = OwnDockerd(DaemonPaths.under(tmp_path / "host"), ["CAP_SYS_RESOURCE"])
    daemon.prepare()
    config = json.loads((tmp_path / "host" / "daemon.json").read_text())
    assert config["default-runtime"] == RUNTIME
    launcher = Path(config["runtimes"][RUNTIME]["path"])
    assert launcher.stat().st_mode & 0o111
    assert "bounded_runc.py" in launcher.read_text()
    OwnDockerd(DaemonPaths.under(tmp_path / "plain"), []).prepare()
    assert json.loads((tmp_path / "plain" / "daemon.json").read_text()) == {}


def test_a_cache_path_too_long_for_sockets_is_refused(tmp_path: Path):
    with pytest.raises(DockerUnavailable, match="too long"):
        OwnDockerd(DaemonPaths.under(tmp_path / ("x" * 80)), []).prepare()


def test_docker_io_is_installed_only_when_dockerd_is_missing(monkeypatch: pytest.MonkeyPatch):
    calls: list[list[str]] = []

    def run(argv, **_):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(docker_host.shutil, "which", lambda tool: "/usr/sbin/dockerd")
    assert install_docker(run) is False and calls == []
    monkeypatch.setattr(docker_host.shutil, "which", lambda tool: None)
    monkeypatch.setattr(docker_host.os, "geteuid", lambda: 0)
    assert install_docker(run) is True
    assert calls == [
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "docker.io"],
    ]

    def failing(argv, **_):
        return subprocess.CompletedProcess(argv, 100, "", "E: Unable to locate package")

    with pytest.raises(DockerUnavailable, match="Unable to locate package"):
        install_docker(failing)


def sleeper(tmp_path: Path, marker: str, ignore_term: bool = False) -> subprocess.Popen:
    script = "import signal, time\n"
    if ignore_term:
        script += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    script += "print('ready', flush=True)\ntime.sleep(60)\n"
    process = subprocess.Popen(
        [sys.executable, "-c", script, marker], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_stop_pid_stops_only_the_process_its_marker_names(tmp_path: Path):
    process = sleeper(tmp_path, "host-tier-marker")
    try:
        stop_pid(process.pid, "another-marker")  # a recycled PID is left alone
        assert process.poll() is None
        stop_pid(process.pid, "host-tier-marker")
        assert process.wait(timeout=5) != 0
        assert not process_alive(process.pid, "host-tier-marker")
    finally:
        process.kill()


def test_a_daemon_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path: Path):
    process = sleeper(tmp_path, "host-tier-stubborn", ignore_term=True)
    try:
        started = time.monotonic()
        stop_pid(process.pid, "host-tier-stubborn", timeout=0.5)
        assert process.wait(timeout=5) == -9
        assert time.monotonic() - started < 5
    finally:
        process.kill()


def test_a_stale_pidfile_is_read_and_garbage_is_ignored(tmp_path: Path):
    (tmp_path / "pid").write_text("1234\n")
    assert pid_in(tmp_path / "pid") == 1234
    (tmp_path / "pid").write_text("")
    assert pid_in(tmp_path / "pid") is None
    assert pid_in(tmp_path / "missing") is None


def test_the_sessions_daemon(docker: Docker):
    """Ours: its PID in our pidfile, its socket in our cache, the bounded runtime exactly when
    the bounding set needs it. Another one: we started nothing."""
    paths = DaemonPaths.under(tier_cache(SESSION_ENV))
    info = docker.api("GET", "/info")[2]
    if docker.own:
        pid = pid_in(paths.pidfile)
        assert pid is not None and process_alive(pid, str(paths.exec_root))
        assert docker.socket == str(paths.socket)
        assert info["DockerRootDir"] == str(paths.data_root)
        assert info["DefaultRuntime"] == (RUNTIME if host_capabilities_to_bound() else "runc")
    else:
        pid = pid_in(paths.pidfile)
        assert pid is None or not process_alive(pid, str(paths.exec_root))
        assert info["DefaultRuntime"] == docker.default_runtime


def test_a_missing_program_is_installed_from_its_debian_package(monkeypatch: pytest.MonkeyPatch):
    """debootstrap, like dockerd, is installed on a fresh machine (CI) before the tier uses it."""
    calls: list[list[str]] = []

    def run(argv, **_):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(docker_host.shutil, "which", lambda tool: None)
    monkeypatch.setattr(docker_host.os, "geteuid", lambda: 1000)
    assert docker_host.install_if_missing("debootstrap", "debootstrap", run) is True
    assert calls[-1] == [
        "sudo",
        "-n",
        "apt-get",
        "install",
        "-y",
        "--no-install-recommends",
        "debootstrap",
    ]


def test_a_shim_left_by_the_tiers_daemon_is_found_by_its_exec_root(tmp_path: Path):
    """What `OwnDockerd.stop` stops after dockerd and containerd: processes naming its exec
    root (a containerd-shim's `-address <exec root>/containerd/containerd.sock`), no others."""
    exec_root = tmp_path / "run"
    shim = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"-address={exec_root}/c.sock"]
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = docker_host.pids_naming(str(exec_root))
        assert shim.pid in found and other.pid not in found
        stop_pid(shim.pid, str(exec_root), timeout=5)
        assert shim.wait(timeout=10) is not None
    finally:
        for process in (shim, other):
            process.kill()
            process.wait()


# --- what the tier made, on a daemon it shares


class FakeDaemon:
    """The Engine API calls the bookkeeping makes, on objects kept in memory."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in docker_host.KINDS}
        self.serial = 0

    def add(self, kind: str, name: str, labels: dict[str, str] | None = None) -> str:
        self.serial += 1
        ident = f"{self.serial:064x}" if kind != "volume" else name
        labels = labels or {}
        found = {"Id": ident, "Name": name, "Labels": labels}
        if kind == "container":
            found = {"Id": ident, "Name": f"/{name}", "Config": {"Labels": labels}}
        self.objects[kind][ident] = found
        return ident

    def find(self, kind: str, key: str) -> dict[str, Any] | None:
        named = [o for o in self.objects[kind].values() if o["Name"].lstrip("/") == key]
        return self.objects[kind].get(key) or (named[0] if named else None)

    def __call__(self, socket_path: str, method: str, path: str, body: Any = None, timeout=60):
        endpoint, _, query = path.partition("?")
        parts = endpoint.strip("/").split("/")
        parts = parts[1:] if parts[0].startswith("v1.") else parts
        kind = parts[0].removesuffix("s")
        if method == "POST" and parts[-1] == "create":
            name = dict(p.split("=", 1) for p in query.split("&") if p).get("name", "")
            ident = self.add(kind, name or body.get("Name", ""), (body or {}).get("Labels"))
            return 201, {}, ({"Id": ident} if kind != "volume" else {"Name": ident})
        if method == "GET" and parts[1:] in ([], ["json"]):  # a listing, by label
            wanted = json.loads(unquote(query.split("filters=", 1)[1]))["label"][0]
            key, value = wanted.split("=", 1)
            listed = [
                o for o in self.objects[kind].values()
                if docker_host.labels_of(kind, o).get(key) == value
            ]  # fmt: skip
            return 200, {}, ({"Volumes": listed} if kind == "volume" else listed)
        found = self.find(kind, parts[1])  # /containers/<id>/json, /networks/<id>, ...
        if found is None:
            return 404, {}, {"message": "no such object"}
        if method == "DELETE":
            del self.objects[kind][found["Id"]]
            return 204, {}, None
        return 200, {}, found


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeDaemon, Docker]:
    """A daemon the tier did not start, and the session's view of it."""
    daemon = FakeDaemon()
    monkeypatch.setattr(docker_host, "api", daemon)
    return daemon, Docker("unix:///fake.sock", own=False, default_runtime="runc", session="1-ab")


def test_the_clis_creating_commands_carry_the_sessions_label_and_no_others():
    label = [docker_host.TIER_LABEL + "=1-ab"]
    assert docker_host.labelled(["run", "-d", "img"], "1-ab") == [
        "run",
        "--label",
        *label,
        "-d",
        "img",
    ]
    assert docker_host.labelled(["network", "create", "n"], "1-ab") == [
        "network", "create", "--label", *label, "n",
    ]  # fmt: skip
    assert docker_host.labelled(["container", "create", "i"], "1-ab")[2:4] == ["--label", *label]
    assert docker_host.labelled(["volume", "create", "v"], "1-ab")[2:4] == ["--label", *label]
    for untouched in (["exec", "c", "run"], ["rm", "-f", "create"], ["image", "inspect", "x"]):
        assert docker_host.labelled(untouched, "1-ab") == untouched


def test_what_the_cli_creates_is_recorded_by_the_id_it_prints(monkeypatch: pytest.MonkeyPatch):
    printed = {"run": "a" * 64 + "\n", "network": "b" * 64 + "\n", "volume": "v1\n", "exec": "x\n"}
    calls: list[list[str]] = []

    def run(argv, **_):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, printed[argv[1]], "")

    monkeypatch.setattr(docker_host.subprocess, "run", run)
    docker = Docker("unix:///fake.sock", own=False, default_runtime="runc", session="1-ab")
    docker.run("run", "-d", "img")
    docker.run("network", "create", "n")
    docker.run("volume", "create", "v1")
    docker.run("exec", "c", "true")
    assert docker.made == {"container": {"a" * 64}, "network": {"b" * 64}, "volume": {"v1"}}
    assert all(f"{docker_host.TIER_LABEL}=1-ab" in argv for argv in calls[:3])


def test_a_container_created_through_the_api_is_labelled_and_recorded(shared):
    daemon, docker = shared
    status, _, body = docker.api("POST", "/v1.43/containers/create?name=w", {"Image": "i"})
    assert status == 201 and body["Id"] in docker.made["container"]
    assert daemon.find("container", "w")["Config"]["Labels"] == {docker_host.TIER_LABEL: "1-ab"}
    status, _, body = docker.api("POST", "/v1.43/networks/create", {"Name": "lab"})
    assert body["Id"] in docker.made["network"]
    assert daemon.find("network", "lab")["Labels"] == {}  # the provider reads these back


def test_only_what_the_tier_made_is_claimed(shared, monkeypatch: pytest.MonkeyPatch):
    daemon, docker = shared
    daemon.add("container", "foreign")
    daemon.add("container", "labelled-by-an-earlier-session", {docker_host.TIER_LABEL: "2-dead"})
    daemon.add("container", "of-a-running-session", {docker_host.TIER_LABEL: "3-alive"})
    monkeypatch.setattr(docker_host, "session_alive", lambda session: session == "3-alive")
    docker.made["network"].add(daemon.add("network", "recorded"))
    assert docker.claim("container", "absent") is None
    assert docker.claim("container", "labelled-by-an-earlier-session") is not None
    assert docker.claim("network", "recorded") is not None
    with pytest.raises(NotMadeHere, match=r"already has a container 'foreign' .*did not make"):
        docker.claim("container", "foreign")
    with pytest.raises(NotMadeHere, match=r"another host-tier session that still runs \(pid 3\)"):
        docker.claim("container", "of-a-running-session")
    docker.own = True  # the tier's own daemon holds only what the tier made
    assert docker.claim("container", "foreign") is not None


def test_the_sessions_end_removes_what_it_made_and_only_that(shared):
    """Labelled by this session or recorded by it: removed, containers before networks; a
    foreign object of a name the tier uses, and an earlier session's, stay."""
    daemon, docker = shared
    foreign = {k: daemon.add(k, f"tenant-a-worker-1-{k}") for k in docker_host.KINDS}
    earlier = daemon.add("container", "earlier", {docker_host.TIER_LABEL: "2-dead"})
    docker.api("POST", "/v1.43/containers/create?name=ours", {"Image": "i"})
    docker.api("POST", "/v1.43/networks/create", {"Name": "lab"})
    docker.api("POST", "/v1.43/volumes/create", {"Name": "vol"})
    daemon.add("container", "labelled-only", {docker_host.TIER_LABEL: "1-ab"})
    assert remove_made_here(docker) == []
    assert {k: set(v) for k, v in daemon.objects.items()} == {
        "container": {foreign["container"], earlier},
        "network": {foreign["network"]},
        "volume": {foreign["volume"]},
    }
