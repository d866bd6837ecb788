"""A mirrored site's registry, reached by a worker's containerd through the program's hosts.toml.

A worker container from the tier's node image (created as the provider creates the program's
`tenant-a-worker-1`) gets the files of `builders/registry_mirrors.py` from the program's own
install script, run as pulumi-command runs it, with the environment the program's
`<node>-registry-mirrors` Command carries. Its containerd then pulls
`registry.k8s.io/e2e-mirror/busybox:1.0` through the CRI (crictl, as kubelet asks) from a site
mirror on the lab network's gateway (site_mirror.py: distribution's registry, plain HTTP), and
runs a container of it, timed against one of a preloaded image. That name exists nowhere else:
upstream has no such repository, the node image does not preload it, nothing is `kind load`ed,
the host's Docker holds it under no name, and the pull fails before the files are installed and
once another mirror list replaced them.

The node image's containerd is Debian's 1.6.20, whose CRI reads hosts.toml only from a
configured `config_path`; the image sets `/etc/containerd/certs.d`, where kindest/node's
containerd 2 reads them by default (node_image.py, CERTS_D_CONFIG). kindest/node ships crictl
(kind v0.31.0 builds v1.33.0, which the Go module proxy does not serve); the tier builds
cri-tools v1.34.0 and copies crictl into the worker.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker_host import Docker
from management_cluster import run_script
from node_image import BuildPaths, binaries, go_env
from program import CreatedNetwork, TierHost, declared
from site_mirror import SiteMirror, site_mirror
from test_node_image import wait_for_boot
from test_workers import WORKER, create_as_the_provider, leftover, remove_as_the_provider

from builders.registry_mirrors import (
    CERTS_DIR,
    MARKER,
    files_environment,
    install_files_script,
    registry_files,
    remove_files_script,
)
from labconfig.mirrors import RegistryMirror
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import lab_stack_config, run_program

MIRRORED = "e2e-mirror/busybox:1.0"  # a repository registry.k8s.io does not have
IMAGE = f"registry.k8s.io/{MIRRORED}"
PRELOADED = "registry.k8s.io/pause:3.10"  # the node image's sandbox image, imported at boot
CRICTL_SET = binaries.BinarySet(
    name="crictl",
    module="sigs.k8s.io/cri-tools",
    version="v1.34.0",
    packages=("sigs.k8s.io/cri-tools/cmd/crictl",),
    local_replace_version="v1.34.0",
)
CRI_ENDPOINT = "unix:///run/containerd/containerd.sock"
PULL_TIMEOUT_SECONDS = 120
# The access log's line for containerd's resolve of the tag through the mirror (a HEAD first).
MANIFEST_REQUEST = (
    r'"(HEAD|GET) /v2/e2e-mirror/busybox/manifests/1\.0\?ns=registry\.k8s\.io HTTP/1\.1" 200 '
    r'.*"containerd/'
)
TIMINGS: dict[str, float] = {}


def crictl_binary(tier_cache: Path) -> Path:
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(CRICTL_SET, paths.go_root, env, go_version)
    return paths.bin / "crictl"


def crictl(docker: Docker, node: str, *args: str, timeout: float = PULL_TIMEOUT_SECONDS) -> Any:
    return docker.run(
        "exec", node, "crictl", "--runtime-endpoint", CRI_ENDPOINT, "--image-endpoint",
        CRI_ENDPOINT, "--timeout", f"{int(timeout)}s", *args, check=False, timeout=timeout + 30,
    )  # fmt: skip


def node_files(docker: Docker, node: str) -> list[str]:
    found = docker.run("exec", node, "find", CERTS_DIR, "-type", "f", check=False)
    return sorted(found.stdout.split())


def environment(mirrors: list[RegistryMirror]) -> dict[str, str]:
    """What the program's mirror Command for the worker carries (components/registry_mirrors)."""
    return {"NODE": WORKER, **files_environment(registry_files(mirrors))}


def images_named(docker: Docker, node: str, name: str) -> list[str]:
    """Every image of that name in any of the node's containerd namespaces."""
    namespaces = docker.run("exec", node, "ctr", "namespaces", "ls", "-q").stdout.split()
    found = []
    for namespace in namespaces:
        listed = docker.run("exec", node, "ctr", "-n", namespace, "images", "ls", "-q").stdout
        found += [f"{namespace}: {image}" for image in listed.split() if name in image]
    return found


def run_container(
    docker: Docker, node: str, name: str, image: str, *command: str, no_pull: bool = False
) -> float:
    """Seconds for `crictl run` (a pod sandbox on the node's network, a container of `image`,
    pulled unless `no_pull`) to return with the container running."""
    pod = {
        "metadata": {"name": name, "namespace": "default", "uid": name, "attempt": 0},
        "log_directory": f"/tmp/{name}",
        # the node's containerd uses systemd cgroups: a parent slice, as the kubelet gives one
        "linux": {"cgroup_parent": "system.slice", "security_context": {
            "namespace_options": {"network": 2}}},  # NODE: no CNI on this worker
    }  # fmt: skip
    container = {"metadata": {"name": name}, "image": {"image": image}, "log_path": "log"}
    if command:
        container["command"] = list(command)
    for kind, spec in (("pod", pod), ("container", container)):
        write = f"mkdir -p /tmp/{name} && cat > /tmp/{name}-{kind}.json"
        docker.run("exec", "-i", node, "sh", "-c", write, input=json.dumps(spec))
    started = time.monotonic()
    ran = crictl(docker, node, "run", *(["--no-pull"] if no_pull else []),
                 f"/tmp/{name}-container.json", f"/tmp/{name}-pod.json")  # fmt: skip
    seconds = time.monotonic() - started
    assert ran.returncode == 0, ran.stdout + ran.stderr
    container_id = ran.stdout.split()[-1]
    state = json.loads(crictl(docker, node, "inspect", container_id).stdout)["status"]
    assert state["state"] == "CONTAINER_RUNNING", state
    return seconds


@pytest.fixture(scope="module")
def mirror(
    docker: Docker, tier_cache_dir: Path, busybox: str, lab_network: CreatedNetwork,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SiteMirror]:  # fmt: skip
    gateway = lab_network.inspect["IPAM"]["Config"][0]["Gateway"]
    work = tmp_path_factory.mktemp("site-mirror")
    with site_mirror(docker, tier_cache_dir, busybox, gateway, MIRRORED, work) as served:
        yield served


@pytest.fixture(scope="module")
def worker(
    docker: Docker, node_image: str, lab_network: CreatedNetwork, tier_cache_dir: Path
) -> Iterator[str]:
    """The program's tenant-a-worker-1 from the node image, booted, with crictl copied in."""
    docker.require_privileged()
    inputs = declared(WORKER)
    assert inputs["networksAdvanced"] == [{"name": lab_network.name}]
    image_id = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Id"]
    attributes = {**container_attributes(inputs), "image": image_id}
    leftover(docker, attributes["name"])
    binary = crictl_binary(tier_cache_dir)
    container = create_as_the_provider(docker, attributes)
    try:
        assert wait_for_boot(docker, container) in ("running", "degraded")
        docker.run("cp", str(binary), f"{container}:/usr/local/bin/crictl")
        for _ in range(60):  # the preloaded images are imported after containerd starts
            if images_named(docker, container, PRELOADED):
                break
            time.sleep(1)
        yield container
    finally:
        if docker.run("inspect", container, check=False).returncode == 0:
            remove_as_the_provider(docker, container)


def test_the_nodes_containerd_reads_hosts_toml_from_certs_d(docker: Docker, worker: str):
    """As kindest/node's containerd 2 does by default (the image's one change for it)."""
    version = docker.run("exec", worker, "containerd", "--version").stdout
    assert " 1.6." in version, version  # Debian bookworm's: no default config_path
    dumped = docker.run("exec", worker, "containerd", "config", "dump").stdout
    assert f'config_path = "{CERTS_DIR}"' in dumped, dumped


@pytest.mark.upstream("containerd-hosts-toml", "containerd-default-config-path")
def test_the_worker_pulls_a_registry_k8s_io_name_through_the_sites_mirror(
    docker: Docker, worker: str, mirror: SiteMirror, tier_cache_dir: Path, busybox: str
):
    mirrors = [RegistryMirror(registry="registry.k8s.io", mirror=mirror.address, plain_http=True)]
    env = environment(mirrors)
    # the Command the program registers for this worker runs exactly this
    config = {
        **lab_stack_config(),
        "registryMirrors": [
            {"registry": "registry.k8s.io", "mirror": mirror.address, "plainHttp": True}
        ],
    }
    command = run_program(config, host=TierHost()).named(f"{WORKER}-registry-mirrors").inputs
    assert command["create"] == install_files_script()
    assert command["delete"] == remove_files_script()
    assert dict(command["environment"]) == env

    # the name is nowhere but in the mirror
    assert docker.run("image", "inspect", IMAGE, check=False).returncode != 0
    assert images_named(docker, worker, "e2e-mirror") == []
    assert images_named(docker, worker, PRELOADED)  # the node's images did import
    preloaded = docker.run("exec", worker, "ls", "/kind/images").stdout
    assert "e2e-mirror" not in preloaded
    before = crictl(docker, worker, "pull", IMAGE, timeout=60)
    assert before.returncode != 0, "pulled with no mirror files: the name exists elsewhere"
    assert f"/v2/{MIRRORED.split(':')[0]}/" not in mirror.requests()

    installed = run_script(docker, tier_cache_dir, install_files_script(), env)
    assert installed.returncode == 0, installed.stderr
    expected = registry_files(mirrors)
    assert node_files(docker, worker) == sorted(expected)
    hosts = docker.run("exec", worker, "cat", f"{CERTS_DIR}/registry.k8s.io/hosts.toml").stdout
    assert hosts == expected[f"{CERTS_DIR}/registry.k8s.io/hosts.toml"]

    started = time.monotonic()
    pulled = crictl(docker, worker, "pull", IMAGE)
    TIMINGS["pull through the mirror"] = time.monotonic() - started
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    # containerd's requests for registry.k8s.io's name (`ns=`), answered by the mirror
    served = mirror.requests()
    assert re.search(MANIFEST_REQUEST, served), served
    config = json.loads(docker.run("image", "inspect", busybox).stdout)[0]["Id"]
    assert f'"GET /v2/e2e-mirror/busybox/blobs/{config}?ns=registry.k8s.io HTTP/1.1" 200' in served
    listed = json.loads(crictl(docker, worker, "images", "-o", "json").stdout)["images"]
    tags = {tag for image in listed for tag in image.get("repoTags") or ()}
    assert IMAGE in tags
    # the layer the mirror served is the tier's busybox (its one layer, by digest)
    ours = json.loads(docker.run("image", "inspect", busybox).stdout)[0]["RootFS"]["Layers"]
    inspected = json.loads(crictl(docker, worker, "inspecti", IMAGE).stdout)
    assert inspected["info"]["imageSpec"]["rootfs"]["diff_ids"] == ours

    # A container of it, pulled again through the mirror, against one of a preloaded image.
    assert crictl(docker, worker, "rmi", IMAGE).returncode == 0
    TIMINGS["container of the mirrored name, pull included"] = run_container(
        docker, worker, "through-mirror", IMAGE, "sleep", "3600"
    )
    TIMINGS["container of a preloaded image"] = run_container(
        docker, worker, "preloaded", PRELOADED, no_pull=True
    )
    crictl(docker, worker, "rmp", "--force", "--all")
    print("\nworker: " + ", ".join(f"{what} {seconds:.1f} s" for what, seconds in TIMINGS.items()))


def test_another_mirror_list_replaces_the_files_and_the_delete_removes_them(
    docker: Docker, worker: str, mirror: SiteMirror, tier_cache_dir: Path
):
    first = [RegistryMirror(registry="registry.k8s.io", mirror=mirror.address, plain_http=True)]
    second = [RegistryMirror(registry="quay.io", mirror=f"{mirror.address}/quay", plain_http=True)]
    for mirrors in (first, second):
        installed = run_script(docker, tier_cache_dir, install_files_script(), environment(mirrors))
        assert installed.returncode == 0, installed.stderr
    assert node_files(docker, worker) == sorted(registry_files(second))
    marker = docker.run("exec", worker, "cat", MARKER).stdout
    assert "registry.k8s.io" not in marker
    # containerd reads the files at each pull: without registry.k8s.io's, the name is gone
    crictl(docker, worker, "rmi", IMAGE)
    assert crictl(docker, worker, "pull", IMAGE, timeout=60).returncode != 0

    removed = run_script(docker, tier_cache_dir, remove_files_script(), environment(second))
    assert removed.returncode == 0, removed.stderr
    assert node_files(docker, worker) == []


def test_the_delete_exits_0_once_the_container_is_gone(
    docker: Docker, worker: str, mirror: SiteMirror, tier_cache_dir: Path
):
    mirrors = [RegistryMirror(registry="registry.k8s.io", mirror=mirror.address, plain_http=True)]
    remove_as_the_provider(docker, worker)
    removed = run_script(docker, tier_cache_dir, remove_files_script(), environment(mirrors))
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert docker.run("inspect", WORKER, check=False).returncode != 0
