"""A site's registry mirror for the host tier: distribution's registry (the binary node_image.py
builds), holding one image under a path no upstream registry is asked for, served on the lab
network's gateway so the nodes on that network reach it; stopped by PID. `site_mirror` serves it
plain HTTP; `secure_site_mirror` over TLS with a CA made here and distribution's htpasswd basic
auth, the image under a project path as a Harbor proxy project serves it (distribution takes
`<project>/<repository>` as one repository name: no proxy in front is needed).

The image goes in through a first registry process on loopback (Docker pushes plain HTTP only to
127.0.0.0/8 by itself), which is stopped before the second one serves the same storage on the
gateway. `upstream_listener` stands in for a registry that must never be asked: it records who
connects."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from controlplane import certificate, key_usage, pem_private_key  # tests/real
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from docker_host import Docker
from node_image import REGISTRY_SET, BuildPaths, binaries, go_env, registry_process

START_TIMEOUT_SECONDS = 30


@dataclass
class SiteMirror:
    address: str  # host:port the nodes reach it at
    repository: str  # e.g. e2e-mirror/busybox:1.0
    log: Path  # the serving process's log: its access lines show what was pulled

    def requests(self) -> str:
        return self.log.read_text(errors="replace")

    def served(self, repository: str, tag: str, upstream: str) -> bool:
        """A tag resolved here for `upstream` (containerd names the registry it mirrors in the
        `ns` parameter), answered 200."""
        line = rf'"(HEAD|GET) /v2/{re.escape(repository)}/manifests/{re.escape(tag)}'
        line += rf'\?ns={re.escape(upstream)} HTTP/1\.1" 200 '
        return re.search(line, self.requests()) is not None


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def filled_storage(
    docker: Docker, tier_cache: Path, image: str, repository: str, work: Path
) -> tuple[Path, Path]:
    """distribution's binary, and a storage directory holding `image` as `repository`."""
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(REGISTRY_SET, paths.go_root, env, go_version)
    binary, storage = paths.bin / "registry", work / "storage"
    loopback = f"127.0.0.1:{free_port('127.0.0.1')}"
    with registry_process(binary, storage, loopback, work / "push.log"):
        pushed = f"{loopback}/{repository}"
        docker.run("tag", image, pushed)
        try:
            docker.run("push", pushed, timeout=300)
        finally:
            docker.run("rmi", pushed, check=False)
    return binary, storage


@contextmanager
def site_mirror(
    docker: Docker, tier_cache: Path, image: str, gateway: str, repository: str, work: Path
) -> Iterator[SiteMirror]:
    """`image` as `<mirror>/<repository>`, served on `gateway` until the block ends."""
    binary, storage = filled_storage(docker, tier_cache, image, repository, work)
    address = f"{gateway}:{free_port(gateway)}"
    with registry_process(binary, storage, address, work / "serve.log", level="info"):
        yield SiteMirror(address, repository, work / "serve.log")


@dataclass
class SecureSiteMirror(SiteMirror):
    ca: str = ""  # PEM of the CA its certificate chains to (no system trusts it)
    credentials: str = ""  # user:password distribution's htpasswd accepts
    ca_file: Path = Path()


def write_tls(work: Path, address: str) -> tuple[Path, Path, Path]:
    """A CA, and a serving certificate for `address`'s IP from it: (ca, certificate, key)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    authority = [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (key_usage(cert_sign=True), True),
    ]
    ca = certificate("kamaji-hami-lab-host-site-mirror-ca", ca_key, None, authority)
    key = ec.generate_private_key(ec.SECP256R1())
    ip = ipaddress.ip_address(address.rsplit(":", 1)[0])
    serving = certificate(
        "site-mirror", key, (ca, ca_key),
        [(x509.SubjectAlternativeName([x509.IPAddress(ip)]), False),
         (x509.BasicConstraints(ca=False, path_length=None), True),
         (key_usage(cert_sign=False), True)],
    )  # fmt: skip
    files = (work / "ca.crt", work / "tls.crt", work / "tls.key")
    for path, data in zip(
        files,
        (ca.public_bytes(serialization.Encoding.PEM),
         serving.public_bytes(serialization.Encoding.PEM), pem_private_key(key)),
        strict=True,
    ):  # fmt: skip
        path.write_bytes(data)
    return files


def secure_config(storage: Path, address: str, tls: tuple[Path, Path, Path], htpasswd: Path) -> str:
    """distribution's config: TLS, and htpasswd basic auth (a missing file is created with a
    user `docker` and a random password, which the registry logs)."""
    _, cert, key = tls
    return (
        "version: 0.1\n"
        "log:\n  level: info\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
        f"http:\n  addr: {address}\n  tls:\n    certificate: {cert}\n    key: {key}\n"
        f"auth:\n  htpasswd:\n    realm: site-mirror\n    path: {htpasswd}\n"
    )


def asks_for_credentials(url: str, ca: Path) -> bool:
    """The registry answers, over TLS verified with `ca`, 401 to a request without them."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=ssl.create_default_context(cafile=ca)):
            return False
    except urllib.error.HTTPError as error:
        return error.code == 401
    except OSError:
        return False


@contextmanager
def secure_site_mirror(
    docker: Docker, tier_cache: Path, image: str, gateway: str, repository: str, work: Path
) -> Iterator[SecureSiteMirror]:
    """`image` as `<mirror>/<repository>` over TLS with basic auth, on `gateway`. Its own
    process (node_image.registry_process serves plain HTTP, and any change to node_image.py is
    a new node image for the whole tier)."""
    binary, storage = filled_storage(docker, tier_cache, image, repository, work)
    address = f"{gateway}:{free_port(gateway)}"
    tls = write_tls(work, address)
    config, log = work / "secure.yml", work / "secure.log"
    config.write_text(secure_config(storage, address, tls, work / "htpasswd"))
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(binary), "serve", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not asks_for_credentials(f"https://{address}/v2/", tls[0]):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the registry did not start on {address}; see {log}")
            time.sleep(0.2)
        provisioned = re.search(r'password="?([A-Za-z0-9_-]+)', log.read_text())
        assert provisioned, f"no provisioned password in {log}"
        yield SecureSiteMirror(
            address, repository, log, ca=tls[0].read_text(),
            credentials=f"docker:{provisioned.group(1)}", ca_file=tls[0],
        )  # fmt: skip
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Listener:
    """A TCP listener that takes each connection, keeps its first bytes and closes it."""

    address: str
    connections: list[tuple[str, bytes]] = field(default_factory=list)


@contextmanager
def upstream_listener(host: str) -> Iterator[Listener]:
    server = socket.create_server((host, 0))
    server.settimeout(0.2)
    listener = Listener(f"{host}:{server.getsockname()[1]}")
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                try:
                    first = connection.recv(16)
                except OSError:
                    first = b""
                listener.connections.append((peer[0], first))

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
