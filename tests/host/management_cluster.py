"""The program's kind management cluster as the host tier creates it: the program's own kind
Command (its create and delete scripts, its environment) run as pulumi-command runs it, and
kubectl against the kubeconfig kind exports."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker_host import Docker
from node_image import BuildPaths, lab_kind_dir
from program import CreatedNetwork
from test_node_image import mirrored_run
from test_workers import claimed

CREATE_TIMEOUT_SECONDS = 600


@dataclass
class KindCommand:
    """The program's kind Command: its scripts and environment."""

    create: str
    delete: str
    environment: dict[str, str]

    @property
    def node(self) -> str:
        return f"{self.environment['KIND_CLUSTER_NAME']}-control-plane"


def kind_command(reference: str) -> KindCommand:
    (registration,) = [
        r
        for r in mirrored_run(reference).of_type("command:local:Command")
        if r.name.endswith("-kind")
    ]
    inputs = registration.inputs
    return KindCommand(inputs["create"], inputs["delete"], dict(inputs["environment"]))


def run_script(
    docker: Docker, tier_cache: Path, script: str, environment: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """As pulumi-command runs it: `sh -c`, the resource's environment over the process's."""
    paths = BuildPaths.under(tier_cache)
    path = os.pathsep.join((str(lab_kind_dir(paths)), str(paths.bin), os.environ["PATH"]))
    with tempfile.TemporaryDirectory() as home:  # kind and docker write nothing of the user's
        env = {**docker.env(), **environment, "PATH": path, "HOME": home}
        return subprocess.run(
            ["sh", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT_SECONDS,
            check=False,
        )


@dataclass
class Cluster:
    command: KindCommand
    created: subprocess.CompletedProcess[str]
    container: dict[str, Any]  # docker inspect of the node


def kubectl(
    tier_cache: Path,
    kubeconfig: str,
    *args: str,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as file:
        file.write(kubeconfig)
        file.flush()
        return subprocess.run(
            [str(BuildPaths.under(tier_cache).bin / "kubectl"), "--kubeconfig", file.name, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@contextmanager
def management_cluster(
    docker: Docker, tier_cache: Path, reference: str, network: CreatedNetwork
) -> Iterator[Cluster]:
    """The program's kind cluster, created by its create script and deleted by its delete
    script at the end (also when the body fails)."""
    docker.require_privileged()
    command = kind_command(reference)
    assert command.environment["KIND_EXPERIMENTAL_DOCKER_NETWORK"] == network.name
    # kind's node carries no label of the tier's: recorded below once created
    if claimed(docker, "container", command.node) is not None:
        run_script(docker, tier_cache, command.delete, command.environment)
    try:  # a create cut off by its timeout leaves a node behind: the delete runs anyway
        created = run_script(docker, tier_cache, command.create, command.environment)
        docker.record("container", command.node)
        assert created.returncode == 0, created.stderr[-5000:]
        container = json.loads(docker.run("inspect", command.node).stdout)[0]
        yield Cluster(command, created, container)
    finally:
        run_script(docker, tier_cache, command.delete, command.environment)
