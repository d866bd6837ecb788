"""The management cluster: the program's own kind create script, with the environment the
program gives it (its kind config, node image, the lab network), run by the real kind on the
real daemon, from the node image built here under its mirrored name.

kind is the one the node image's build made (`sigs.k8s.io/kind@v0.31.0`); the script finds it
and `docker` on PATH as `pulumi up` would.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_host import Docker
from node_image import BuildPaths
from program import CreatedNetwork, assert_only_on_the_lab_network
from test_node_image import mirrored_run

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
    path = f"{BuildPaths.under(tier_cache).bin}{os.pathsep}{os.environ['PATH']}"
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


@pytest.fixture(scope="module")
def kind_cluster(
    docker: Docker, tier_cache_dir: Path, mirrored_node_image: str, lab_network: CreatedNetwork
) -> Iterator[Cluster]:
    docker.require_privileged()
    command = kind_command(mirrored_node_image)
    assert command.environment["KIND_EXPERIMENTAL_DOCKER_NETWORK"] == lab_network.name
    if docker.run("inspect", command.node, check=False).returncode == 0:
        if not docker.own:
            pytest.fail(f"the daemon at {docker.host} already runs {command.node}", pytrace=False)
        run_script(docker, tier_cache_dir, command.delete, command.environment)
    created = run_script(docker, tier_cache_dir, command.create, command.environment)
    try:
        assert created.returncode == 0, created.stderr[-5000:]
        container = json.loads(docker.run("inspect", command.node).stdout)[0]
        yield Cluster(command, created, container)
    finally:
        run_script(docker, tier_cache_dir, command.delete, command.environment)


def kubectl(tier_cache: Path, kubeconfig: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as file:
        file.write(kubeconfig)
        file.flush()
        return subprocess.run(
            [str(BuildPaths.under(tier_cache).bin / "kubectl"), "--kubeconfig", file.name, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def test_the_node_runs_the_mirrored_image_on_the_lab_network(
    docker: Docker, kind_cluster: Cluster, mirrored_node_image: str, lab_network: CreatedNetwork
):
    found = kind_cluster.container
    assert found["Config"]["Image"] == mirrored_node_image
    assert_only_on_the_lab_network(found, lab_network)
    node = kind_cluster.command.node
    inside = docker.run("exec", node, "ip", "-6", "-o", "address", "show", "scope", "global")
    assert inside.stdout == "", inside.stdout


def pod_cidrs(tier_cache: Path, kubeconfig: str, timeout: float = 60) -> list[str]:
    """The node's pod CIDRs, once kube-controller-manager assigned them."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = kubectl(tier_cache, kubeconfig, "get", "nodes", "-o", "json")
        cidrs = json.loads(nodes.stdout)["items"][0]["spec"].get("podCIDRs", [])
        if cidrs or time.monotonic() > deadline:
            assert cidrs, "no pod CIDR assigned"
            return cidrs
        time.sleep(1)


@pytest.mark.upstream(
    "kubelet-cgroup-driver-from-cri-fallback",
    "containerd-restrict-oom-score-adj",
    "kubelet-fail-cgroupv1-flag",
)
def test_the_exported_kubeconfig_reaches_a_ready_ipv4_node(
    kind_cluster: Cluster, tier_cache_dir: Path
):
    kubeconfig = kind_cluster.created.stdout
    assert yaml.safe_load(kubeconfig)["kind"] == "Config"
    nodes = kubectl(tier_cache_dir, kubeconfig, "get", "nodes", "-o", "json")
    assert nodes.returncode == 0, nodes.stderr
    (node,) = json.loads(nodes.stdout)["items"]
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
    assert ready == "True"
    # Debian's containerd 1.6 (no RuntimeConfig) runs the v1.35 kubelet; the API server that
    # answered runs in a pod sandbox, which this host gets only with the clamped OOM score
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6.")
    addresses = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert all(ipaddress.ip_address(a).version == 4 for a in addresses), addresses
    assert all(ipaddress.ip_network(c).version == 4 for c in pod_cidrs(tier_cache_dir, kubeconfig))
    service = kubectl(tier_cache_dir, kubeconfig, "get", "service", "kubernetes", "-o", "json")
    assert json.loads(service.stdout)["spec"]["ipFamilies"] == ["IPv4"]


def test_a_second_create_reuses_the_cluster(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path
):
    command = kind_cluster.command
    again = run_script(docker, tier_cache_dir, command.create, command.environment)
    assert again.returncode == 0, again.stderr
    assert "reusing it" in again.stderr
    assert (
        json.loads(docker.run("inspect", command.node).stdout)[0]["Id"]
        == (kind_cluster.container["Id"])
    )
    assert (
        yaml.safe_load(again.stdout)["clusters"]
        == yaml.safe_load(kind_cluster.created.stdout)["clusters"]
    )


def test_the_delete_script_removes_the_cluster(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path
):
    """Last in the module: the fixture's own delete then finds nothing (and exits 0)."""
    command = kind_cluster.command
    deleted = run_script(docker, tier_cache_dir, command.delete, command.environment)
    assert deleted.returncode == 0, deleted.stderr
    assert docker.run("inspect", command.node, check=False).returncode != 0
