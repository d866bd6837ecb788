"""A site's registry mirror for the host tier: distribution's registry (the binary node_image.py
builds), holding one image under a path no upstream registry is asked for, served plain HTTP on
the lab network's gateway so the nodes on that network reach it; stopped by PID.

The image goes in through a first registry process on loopback (Docker pushes plain HTTP only to
127.0.0.0/8 by itself), which is stopped before the second one serves the same storage on the
gateway."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from docker_host import Docker
from node_image import REGISTRY_SET, BuildPaths, binaries, go_env, registry_process


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


@contextmanager
def site_mirror(
    docker: Docker, tier_cache: Path, image: str, gateway: str, repository: str, work: Path
) -> Iterator[SiteMirror]:
    """`image` as `<mirror>/<repository>`, served on `gateway` until the block ends."""
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
    address = f"{gateway}:{free_port(gateway)}"
    with registry_process(binary, storage, address, work / "serve.log", level="info"):
        yield SiteMirror(address, repository, work / "serve.log")
