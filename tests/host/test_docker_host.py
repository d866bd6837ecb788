"""docker_host.py: where the tier's own dockerd lives, when docker.io is installed, how a
daemon is stopped by its PID; and the session's daemon as it runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import docker_host
import pytest
from docker_host import (
    RUNTIME,
    SESSION_ENV,
    DaemonPaths,
    Docker,
    DockerUnavailable,
    OwnDockerd,
    dockerd_command,
    host_capabilities_to_bound,
    install_docker,
    pid_in,
    process_alive,
    stop_pid,
    tier_cache,
)


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
