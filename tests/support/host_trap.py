"""A trap where a test process would look for Docker and for a Kubernetes cluster.

`HostTrap` listens on a unix socket (the process's DOCKER_HOST) and on a loopback TCP port,
the server of a kubeconfig written both where KUBECONFIG points and at `$HOME/.kube/config`
in a HOME of its own; inotify watches both files. Every connection and every opening of
either file is recorded, and nothing is answered: a client sees its connection closed.
tests/conftest.py points every hermetic test process at one and fails the test during which
anything was recorded, saying what.

The docker CLI takes DOCKER_HOST over its contexts, and client-go (kubectl, Helm, the
Kubernetes provider) reads KUBECONFIG, else `$HOME/.kube/config` (upstream facts
`docker-cli-docker-host-wins` and `client-go-kubeconfig-from-env-then-home`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import select
import socket
import struct
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

# inotify(7): the events that say a file was opened, read or written.
IN_ACCESS, IN_MODIFY, IN_OPEN = 0x001, 0x002, 0x020
_EVENT_KINDS = {IN_OPEN: "opened", IN_ACCESS: "read", IN_MODIFY: "written"}
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
SETTLE_SECONDS = 2.0  # how long `take` waits for a connection queued but not yet accepted
READ_SECONDS = 0.5  # how long the trap waits for a client's first bytes
TLS_HANDSHAKE_FAILURE = bytes([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28])  # RFC 8446 6.2
# Variables that could lead a client elsewhere than DOCKER_HOST and KUBECONFIG.
UNSET_VARS = (
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_TLS_VERIFY",
    "DOCKER_CERT_PATH",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
)


def trap_kubeconfig(server: str) -> str:
    cluster = {"server": server, "insecure-skip-tls-verify": True}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "host-trap", "cluster": cluster}],
            "users": [{"name": "host-trap", "user": {"token": "host-trap"}}],
            "contexts": [
                {"name": "host-trap", "context": {"cluster": "host-trap", "user": "host-trap"}}
            ],
            "current-context": "host-trap",
        }
    )


class HostTrap:
    """Docker's socket, a cluster's server and two kubeconfigs under `root`; close() ends it."""

    def __init__(self, root: Path) -> None:
        self.docker_socket = root / "docker.sock"
        self.kubeconfig = root / "kubeconfig"
        self.home = root / "home"
        self.home_kubeconfig = self.home / ".kube" / "config"
        self._lock = threading.Lock()
        self._touches: list[str] = []
        self._docker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._docker.bind(str(self.docker_socket))
        self._docker.listen(64)
        self._kube = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.kube_server = f"https://127.0.0.1:{self._kube.getsockname()[1]}"
        self._names = {
            self._docker: f"Docker (DOCKER_HOST={self.docker_host})",
            self._kube: f"the kubeconfig's server {self.kube_server}",
        }
        for listener in self._names:
            listener.setblocking(False)
        self.home_kubeconfig.parent.mkdir(parents=True)
        for path in (self.kubeconfig, self.home_kubeconfig):
            path.write_text(trap_kubeconfig(self.kube_server))
        self._files = _FileWatch(
            {self.kubeconfig: "$KUBECONFIG", self.home_kubeconfig: "$HOME/.kube/config"}
        )
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="host-trap", daemon=True)
        self._thread.start()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_socket}"

    def env(self) -> dict[str, str]:
        """What a process sets to find only the trap (and unsets: UNSET_VARS)."""
        return {
            "DOCKER_HOST": self.docker_host,
            "KUBECONFIG": str(self.kubeconfig),
            "HOME": str(self.home),
        }

    def take(self) -> list[str]:
        """What was touched since the last call, one line each; a connection still queued is
        waited for (up to SETTLE_SECONDS), so a client that already returned is counted."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            with self._lock:  # the server records under the lock: nothing is half-recorded
                queued = select.select(list(self._names), [], [], 0)[0]
                if not queued or time.monotonic() > deadline:
                    touches, self._touches = self._touches, []
                    break
            time.sleep(0.01)
        touches += [f"{self._names[listener]}: a connection not accepted" for listener in queued]
        counted = Counter(touches + self._files.read())  # a client's retries: one line
        return [f"{touch} (x{n})" if n > 1 else touch for touch, n in counted.items()]

    def close(self) -> None:
        os.write(self._wake_write, b"x")
        self._thread.join()
        for fd in (self._wake_read, self._wake_write):
            os.close(fd)
        for listener in self._names:
            listener.close()
        self._files.close()
        self.docker_socket.unlink(missing_ok=True)

    def _serve(self) -> None:
        while True:
            ready = select.select([*self._names, self._wake_read], [], [])[0]
            if self._wake_read in ready:
                return
            for listener in ready:
                with self._lock:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        continue  # taken by an earlier round
                    with conn:
                        self._touches.append(f"{self._names[listener]}: {self._what(conn)}")

    def _what(self, conn: socket.socket) -> str:
        who = _peer(conn)
        conn.settimeout(READ_SECONDS)
        try:
            first = conn.recv(256)
        except OSError:
            first = b""
        if first[:1] == b"\x16":
            asked = "a TLS handshake"
            # A fatal handshake_failure alert: the client stops at once (a reset is retried).
            with contextlib.suppress(OSError):
                conn.sendall(TLS_HANDSHAKE_FAILURE)
        elif first:
            asked = repr(first.split(b"\r\n", 1)[0].decode("latin-1"))
        else:
            asked = "a connection"
        return f"{asked} from {who}"


def _peer(conn: socket.socket) -> str:
    """The connecting process, as far as /proc tells (it waits for an answer, so it lives)."""
    with contextlib.suppress(OSError):
        if conn.family == socket.AF_UNIX:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            return _process(struct.unpack("3i", creds)[0])
        return _process(_tcp_client_pid(conn.getpeername()[1], conn.getsockname()[1]))
    return "an unknown process"


def _tcp_client_pid(client_port: int, server_port: int) -> int:
    """The pid holding the client end of a loopback connection (/proc/net/tcp, then fds)."""
    inode = ""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == client_port and int(remote.split(":")[1], 16) == (
            server_port
        ):
            inode = fields[9]
    target = f"socket:[{inode}]"
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            if inode and any(os.readlink(fd) == target for fd in fd_dir.iterdir()):
                return int(fd_dir.parent.name)
    raise OSError("no process holds the client end")


def _process(pid: int) -> str:
    args = [
        a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    ]
    command = " ".join([os.path.basename(args[0]), *args[1:4]])
    return f"pid {pid} ({' '.join(command.split())[:100]})"


class _FileWatch:
    """inotify watches on files: which were opened, read or written since the last read."""

    def __init__(self, files: dict[Path, str]) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed: the trap cannot watch files")
        self._names: dict[int, str] = {}
        for path, name in files.items():
            wd = libc.inotify_add_watch(
                self._fd, os.fsencode(path), IN_OPEN | IN_ACCESS | IN_MODIFY
            )
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch failed for {path}")
            self._names[wd] = f"{name} ({path})"

    def read(self) -> list[str]:
        kinds: dict[str, set[str]] = {}
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size + length
                for bit, kind in _EVENT_KINDS.items():
                    if mask & bit and wd in self._names:
                        kinds.setdefault(self._names[wd], set()).add(kind)
        return [f"{name}: {', '.join(sorted(done))}" for name, done in kinds.items()]

    def close(self) -> None:
        os.close(self._fd)
