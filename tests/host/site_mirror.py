"""A site's registry mirror for the host tier: distribution's registry (the binary node_image.py
builds), holding one image under a path no upstream registry is asked for, served plain HTTP on
the lab network's gateway so the nodes on that network reach it; stopped by PID.

The image goes in through a first registry process on loopback (Docker pushes plain HTTP only to
127.0.0.0/8 by itself), which is stopped before the second one serves the same storage on the
gateway."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from docker_host import Docker
from node_image import REGISTRY_SET, BuildPaths, _answers, binaries, go_env, registry_config

START_TIMEOUT_SECONDS = 30


@dataclass
class SiteMirror:
    address: str  # host:port the nodes reach it at
    repository: str  # e.g. e2e-mirror/busybox:1.0
    log: Path  # the serving process's log: its access lines show what was pulled

    def requests(self) -> str:
        return self.log.read_text(errors="replace")


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@contextmanager
def registry_process(binary: Path, storage: Path, address: str, log: Path) -> Iterator[None]:
    config = log.with_suffix(".yml")
    config.write_text(registry_config(storage, address).replace("level: warn", "level: info"))
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(binary), "serve", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not _answers(f"http://{address}/v2/"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the mirror did not start on {address}; see {log}")
                time.sleep(0.2)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
    with registry_process(binary, storage, address, work / "serve.log"):
        yield SiteMirror(address, repository, work / "serve.log")
