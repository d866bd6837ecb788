"""The host tier's Docker Engine: a daemon that already answers, or dockerd started here.

The tier's own dockerd keeps everything under `${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/host/`
(data root, exec root, pidfile, socket, daemon.json, log), so it touches no system daemon's
files, and is stopped by its PID, also when the session fails. On a host whose capability
bounding set lacks capabilities the kernel knows, its default runtime is bounded_runc.py
(privileged containers fail under plain runc there); a host that grants all gets plain runc.
When `dockerd` is missing, Debian's docker.io is installed with apt.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import bounded_runc

from tests.support.debian_packages import PackageUnavailable, install_if_missing

RUNTIME = "bounded-runc"
DEFAULT_SOCKET = "/var/run/docker.sock"
START_TIMEOUT_SECONDS = 90
STOP_TIMEOUT_SECONDS = 40  # dockerd gives running containers 15 s (shutdown-timeout) first
SHIM_STOP_TIMEOUT_SECONDS = 5
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with its NUL
# Every container, network and volume the tier creates through `Docker` carries this label, its
# value the session's: what the tier made, on a daemon it shares with others, is told by it.
TIER_LABEL = "io.kamaji-hami-lab.host-tier.session"
SESSION = f"{os.getpid()}-{secrets.token_hex(4)}"
KINDS = ("container", "network", "volume")
# The docker CLI's commands that create an object of a kind, and take `--label`.
CREATING = {
    ("run",): "container", ("create",): "container", ("container", "run"): "container",
    ("container", "create"): "container", ("network", "create"): "network",
    ("volume", "create"): "volume",
}  # fmt: skip
CREATED_ID = re.compile(r"[0-9a-f]{64}")
# The environment as the session started (imported by conftest.py), before any fixture, the
# hermetic tier's included, changed it.
SESSION_ENV = dict(os.environ)


class DockerUnavailable(Exception):
    """The tier could neither reach a Docker daemon nor start its own."""


def tier_cache(env: Mapping[str, str]) -> Path:
    """`${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/host`, from the environment given."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or "~").expanduser() / ".cache")
    return Path(base) / "kamaji-hami-lab" / "host"


def capabilities_to_bound(status: str, last_cap: int) -> list[str]:
    """The capabilities privileged containers must lose on this host (empty: plain runc)."""
    return bounded_runc.missing_capabilities(bounded_runc.bounding_set(status), last_cap)


def host_capabilities_to_bound() -> list[str]:
    return capabilities_to_bound(
        Path("/proc/self/status").read_text(),
        int(Path("/proc/sys/kernel/cap_last_cap").read_text()),
    )


@dataclass(frozen=True)
class DaemonPaths:
    """Where the tier's own dockerd keeps everything: `under(<the tier's cache>)`."""

    root: Path
    data_root: Path
    exec_root: Path
    pidfile: Path
    socket: Path
    config: Path  # daemon.json
    log: Path
    launcher: Path  # the runtime dockerd runs: bounded_runc.py through this interpreter

    @classmethod
    def under(cls, root: Path) -> DaemonPaths:
        return cls(
            root, root / "docker", root / "run", root / "dockerd.pid", root / "docker.sock",
            root / "daemon.json", root / "dockerd.log", root / "bounded-runc",
        )  # fmt: skip

    @property
    def containerd_pidfile(self) -> Path:
        # dockerd's containerd supervisor keeps its state in <exec-root>/containerd
        return self.exec_root / "containerd" / "containerd.pid"


def daemon_config(bound: Sequence[str], launcher: Path) -> dict[str, Any]:
    """daemon.json: bounded_runc as the default runtime only when capabilities must go."""
    if not bound:
        return {}
    return {"runtimes": {RUNTIME: {"path": str(launcher)}}, "default-runtime": RUNTIME}


def launcher_script(python: str, program: Path, runc: str) -> str:
    """What dockerd runs as the runtime: this interpreter, isolated, on bounded_runc.py."""
    return f"#!/bin/sh\nBOUNDED_RUNC_RUNC='{runc}' exec '{python}' -I '{program}' \"$@\"\n"


def dockerd_command(paths: DaemonPaths) -> list[str]:
    return [
        "dockerd",
        "--config-file", str(paths.config),
        "--data-root", str(paths.data_root),
        "--exec-root", str(paths.exec_root),
        "--pidfile", str(paths.pidfile),
        "--host", f"unix://{paths.socket}",
    ]  # fmt: skip


def unix_socket_of(docker_host: str) -> str:
    if not docker_host.startswith("unix://"):
        raise DockerUnavailable(f"the host tier talks to Docker over a unix socket: {docker_host}")
    return docker_host.removeprefix("unix://")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def api(
    socket_path: str, method: str, path: str, body: Any = None, timeout: float = 60
) -> tuple[int, dict[str, str], Any]:
    """One Docker Engine API call: (status, headers, decoded JSON or text)."""
    connection = UnixHTTPConnection(socket_path, timeout)
    try:
        payload = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read().decode()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            decoded = raw
        return response.status, dict(response.getheaders()), decoded
    finally:
        connection.close()


def pings(socket_path: str) -> bool:
    try:
        return api(socket_path, "GET", "/_ping", timeout=5)[0] == 200
    except OSError:
        return False


class NotMadeHere(Exception):
    """The daemon holds an object of a name the tier needs that the tier did not make."""


def creates(args: Sequence[str]) -> str | None:
    """The kind of object a docker CLI command creates (None: it creates none)."""
    for words, kind in CREATING.items():
        if tuple(args[: len(words)]) == words:
            return kind
    return None


def labelled(args: Sequence[str], session: str) -> list[str]:
    """The command with the session's label, when it creates an object."""
    kind = creates(args)
    if kind is None:
        return list(args)
    at = 2 if args[0] in ("container", "network", "volume") else 1
    return [*args[:at], "--label", f"{TIER_LABEL}={session}", *args[at:]]


def labels_of(kind: str, found: Mapping[str, Any]) -> Mapping[str, str]:
    """An inspected object's labels: a container's are in its Config."""
    where = (found.get("Config") or {}) if kind == "container" else found
    return where.get("Labels") or {}


def session_alive(session: str) -> bool:
    """The tier's session of that label value still runs (its pytest process lives)."""
    pid = session.split("-", 1)[0]
    return pid.isdigit() and process_alive(int(pid), "pytest")


def not_made_here(
    kind: str,
    name: str,
    found: Mapping[str, Any],
    docker: Docker,
    alive: Callable[[str], bool] | None = None,
) -> str | None:
    """Why the tier must leave `found` alone, or None when the tier made it: on its own daemon
    everything is the tier's; on another, what this session recorded or labelled, and what an
    earlier session that no longer runs labelled (it was interrupted before its cleanup)."""
    if docker.own or found.get("Id") in docker.made[kind]:
        return None
    session = labels_of(kind, found).get(TIER_LABEL)
    alive = alive or session_alive
    if session == docker.session or (session is not None and not alive(session)):
        return None
    where = f"the Docker daemon at {docker.host} already has a {kind} {name!r}"
    if session is not None:
        pid = session.split("-", 1)[0]
        return f"{where}, made by another host-tier session that still runs (pid {pid})"
    return (
        f"{where} ({str(found.get('Id', ''))[:12]}) that this tier did not make (no "
        f"{TIER_LABEL} label): the tier never removes it. Remove or rename it yourself, or "
        "run the tier on its own daemon (LAB_HOST_DOCKER=own; see docs/testing.md)"
    )


@dataclass
class Docker:
    """The daemon the tier uses; `run` is the docker CLI aimed at it.

    What the tier creates through `run` and `api` is labelled with the session (TIER_LABEL) and
    its ID recorded in `made`, except networks created through the API: the provider reads a
    network's labels back, so the lab network's request stays as the program's (recorded only).
    """

    host: str  # DOCKER_HOST, unix://...
    own: bool
    default_runtime: str
    timings: dict[str, float] = field(default_factory=dict)
    session: str = SESSION
    made: dict[str, set[str]] = field(default_factory=lambda: {kind: set() for kind in KINDS})

    @property
    def socket(self) -> str:
        return unix_socket_of(self.host)

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def run(
        self, *args: str, input: str | bytes | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        kind = creates(args)
        result = subprocess.run(
            ["docker", *labelled(args, self.session)],
            env=self.env(),
            input=input,
            capture_output=True,
            text=not isinstance(input, bytes),
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)[:300]} exited {result.returncode}: {result.stderr!s}"
            )
        printed = result.stdout.strip().splitlines() if isinstance(result.stdout, str) else []
        if kind is not None and result.returncode == 0 and printed:
            if CREATED_ID.fullmatch(printed[-1]):  # `run -d`, `create`: the new object's ID
                self.made[kind].add(printed[-1])
            elif kind == "volume":
                self.made[kind].add(printed[-1])  # a volume's ID is its name
        return result

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], Any]:
        endpoint = path.split("?", 1)[0]
        kind = next(
            (k for k in KINDS if method == "POST" and endpoint.endswith(f"/{k}s/create")), None
        )
        if kind in ("container", "volume"):
            body = {**(body or {}), "Labels": {**(body or {}).get("Labels", {}),
                                               TIER_LABEL: self.session}}  # fmt: skip
        status, headers, answer = api(self.socket, method, path, body)
        if kind is not None and status == 201 and isinstance(answer, dict):
            self.made[kind].add(answer.get("Id") or answer.get("Name", ""))
        return status, headers, answer

    def inspect(self, kind: str, name: str) -> dict[str, Any] | None:
        status, _, found = self.api(
            "GET", f"/{kind}s/{name}" + ("/json" if kind == "container" else "")
        )
        return found if status == 200 else None

    def claim(self, kind: str, name: str) -> dict[str, Any] | None:
        """The object of that name the tier made (to remove or reuse), None when there is none;
        NotMadeHere, naming it, when one is there that the tier did not make."""
        found = self.inspect(kind, name)
        if found is None:
            return None
        reason = not_made_here(kind, name, found, self)
        if reason is not None:
            raise NotMadeHere(reason)
        return found

    def record(self, kind: str, name: str) -> None:
        """An object made for the tier by another program (kind's node containers)."""
        found = self.inspect(kind, name)
        if found is not None:
            self.made[kind].add(found.get("Id") or found["Name"])

    def made_here(self) -> dict[str, list[str]]:
        """The IDs of what this session made that the daemon still has, by kind (volumes by
        name): what the session's end removes from a daemon the tier shares."""
        labelled = f'{{"label":["{TIER_LABEL}={self.session}"]}}'
        listings = {
            "container": ("/containers/json?all=1&filters=", "Id"),
            "network": ("/networks?filters=", "Id"),
            "volume": ("/volumes?filters=", "Name"),
        }
        found: dict[str, list[str]] = {}
        for kind, (listing, key) in listings.items():
            by_label = self.api("GET", listing + quote(labelled))[2] or []
            if kind == "volume":
                by_label = by_label.get("Volumes") or []
            ids = [item[key] for item in by_label]
            ids += [i for i in sorted(self.made[kind]) if i not in ids and self.inspect(kind, i)]
            found[kind] = ids
        return found

    def require_privileged(self) -> None:
        """A daemon the tier did not start runs privileged containers here only if it carries
        the adaptation itself: say so instead of runc's bare error."""
        bound = host_capabilities_to_bound()
        if bound and self.default_runtime == "runc":
            raise DockerUnavailable(
                f"the Docker daemon at {self.host} runs plain runc, and this host's capability "
                f"bounding set lacks {bound}: privileged containers fail there. Stop it (the "
                "tier then starts its own) or run with LAB_HOST_DOCKER=own."
            )

    def api_version(self) -> str:
        """The daemon's API version, from its ping header as the docker client reads it."""
        return api(self.socket, "GET", "/_ping")[1]["Api-Version"]


def reachable_daemon(env: Mapping[str, str]) -> str | None:
    """The DOCKER_HOST of a daemon that answers with this environment, else None."""
    host = env.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"
    if not host.startswith("unix://"):
        return None
    return host if pings(unix_socket_of(host)) else None


def install_docker(run: Any = subprocess.run) -> bool:
    """Installs Debian's docker.io when dockerd is missing; True when it did."""
    try:
        return install_if_missing("dockerd", "docker.io", run)
    except PackageUnavailable as error:
        raise DockerUnavailable(str(error)) from None


def process_alive(pid: int, marker: str) -> bool:
    """The process exists, is not a zombie, and its command line mentions `marker`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z" and marker in cmdline


def stop_pid(pid: int, marker: str, timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """SIGTERM, then SIGKILL after `timeout`, for a process whose command line names `marker`
    (a PID from a stale pidfile may belong to another program by now)."""
    if not process_alive(pid, marker):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(pid, marker):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
        time.sleep(0.1)


def pids_naming(marker: str, proc: Path = Path("/proc")) -> list[int]:
    """The processes whose command line names `marker` (not this one)."""
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found


def pid_in(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


class OwnDockerd:
    """dockerd with its own data root, exec root, pidfile and socket under the tier's cache."""

    def __init__(self, paths: DaemonPaths, bound: Sequence[str]) -> None:
        self.paths = paths
        self.bound = list(bound)
        self.process: subprocess.Popen[bytes] | None = None

    def stop_leftovers(self) -> None:
        """A daemon of an earlier session that was not stopped (a killed pytest)."""
        for pidfile in (self.paths.pidfile, self.paths.containerd_pidfile):
            pid = pid_in(pidfile)
            if pid is not None:
                stop_pid(pid, str(self.paths.exec_root))

    def prepare(self) -> None:
        paths = self.paths
        paths.root.mkdir(parents=True, exist_ok=True)
        if len(str(paths.exec_root / "containerd" / "containerd.sock.ttrpc")) > SOCKET_PATH_MAX:
            raise DockerUnavailable(f"the tier's cache path is too long for sockets: {paths.root}")
        runc = shutil.which("runc") or "/usr/sbin/runc"
        paths.launcher.write_text(
            launcher_script(sys.executable, Path(bounded_runc.__file__).resolve(), runc)
        )
        paths.launcher.chmod(0o755)
        paths.config.write_text(json.dumps(daemon_config(self.bound, paths.launcher), indent=2))

    def start(self) -> Docker:
        self.stop_leftovers()
        self.prepare()
        started = time.monotonic()
        with self.paths.log.open("ab") as log:
            self.process = subprocess.Popen(
                dockerd_command(self.paths),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of pytest does not reach it: we stop it
            )
        socket_path = str(self.paths.socket)
        while not pings(socket_path):
            if (
                self.process.poll() is not None
                or time.monotonic() - started > START_TIMEOUT_SECONDS
            ):
                self.stop()
                tail = self.paths.log.read_text(errors="replace")[-3000:]
                raise DockerUnavailable(f"dockerd did not start; {self.paths.log}:\n{tail}")
            time.sleep(0.2)
        return Docker(
            host=f"unix://{socket_path}",
            own=True,
            default_runtime=RUNTIME if self.bound else "runc",
            timings={"dockerd start": time.monotonic() - started},
        )

    def stop(self) -> None:
        """Stops dockerd by its PID (it stops its containerd), then any containerd left, then
        any shim of its containerd still running (one whose container's kill did not complete
        outlives both, and the next daemon restores its container as running and unremovable)."""
        marker = str(self.paths.exec_root)
        if self.process is not None:
            stop_pid(self.process.pid, marker)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stop_leftovers()
        for pid in pids_naming(marker):
            stop_pid(pid, marker, timeout=SHIM_STOP_TIMEOUT_SECONDS)


def existing_daemon(host: str) -> Docker:
    docker = Docker(host=host, own=False, default_runtime="")
    docker.default_runtime = docker.api("GET", "/info")[2].get("DefaultRuntime", "")
    return docker


def start_docker(env: Mapping[str, str], mode: str) -> tuple[Docker, OwnDockerd | None]:
    """`mode`: "auto" (a reachable daemon, else our own), "own" (always our own)."""
    if mode not in ("auto", "own"):
        raise DockerUnavailable(f"LAB_HOST_DOCKER must be auto or own, not {mode!r}")
    if mode == "auto" and (host := reachable_daemon(env)):
        return existing_daemon(host), None
    started = time.monotonic()
    installed = install_docker()
    install_seconds = time.monotonic() - started
    if installed and mode == "auto" and (host := reachable_daemon(env)):
        # a host with systemd starts docker.service on install: use it, never a second one
        return existing_daemon(host), None
    daemon = OwnDockerd(DaemonPaths.under(tier_cache(env)), host_capabilities_to_bound())
    docker = daemon.start()
    docker.timings["docker.io install" if installed else "docker.io present"] = install_seconds
    return docker, daemon
