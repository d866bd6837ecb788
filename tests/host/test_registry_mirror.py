"""A mirrored site's registry, reached by a worker's containerd 2 through the program's hosts.toml.

A worker container from the tier's node image (created as the provider creates the program's
`tenant-a-worker-1`) runs kindest/node's containerd: v2.2.0 built from its Go module with kind
v0.31.0's containerd config as it is, no `config_path` (containerd2.py). It gets the files of
`builders/registry_mirrors.py` from the program's own install script, run as pulumi-command runs
it, with the environment the program's `<node>-registry-mirrors` Command carries. Its containerd
then pulls `registry.k8s.io/e2e-mirror/busybox:1.0` through the CRI (crictl, as kubelet asks)
from site mirrors on the lab network's gateway (site_mirror.py, distribution's registry): one
plain HTTP at its root, one over TLS with a CA made here, basic auth and a project path, as a
Harbor proxy project; `*` (`_default`) takes another registry's name through the first. That
name exists nowhere else: upstream has no such repository, the node image does not preload it,
nothing is `kind load`ed, the host's Docker holds it under no name, and the pull fails before the
files are installed and once another mirror list replaced them. With the mirror down, a
`mirrorOnly` mirror fails the pull at once and never asks the registry (a listener the test owns
stands in for it and sees no connection), where the default falls back to it.

kindest/node ships crictl (kind v0.31.0 builds v1.33.0, which the Go module proxy does not
serve); the tier builds cri-tools v1.34.0 and copies crictl into the worker.
"""

from __future__ import annotations

import json
import re
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from containerd2 import CONTAINERD_VERSION, kind_containerd_config, swap_in_containerd2
from docker_host import Docker
from management_cluster import run_script
from node_image import BuildPaths, binaries, go_env
from program import CreatedNetwork, TierHost, declared
from site_mirror import (
    SecureSiteMirror,
    SiteMirror,
    asks_for_credentials,
    free_port,
    secure_site_mirror,
    site_mirror,
    upstream_listener,
)
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
PROJECT = "k8s-proxy"  # the secure mirror's path: a Harbor proxy project's name
UPSTREAM_NAME = "e2e-upstream.test"  # a registry the test owns: a listener on the gateway
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


def environment(
    mirrors: list[RegistryMirror], auth: dict[str, str] | None = None
) -> dict[str, str]:
    """What the program's mirror Command for the worker carries (components/registry_mirrors)."""
    return {"NODE": WORKER, **files_environment(registry_files(mirrors, auth))}


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
def secure_mirror(
    docker: Docker, tier_cache_dir: Path, busybox: str, lab_network: CreatedNetwork,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SecureSiteMirror]:  # fmt: skip
    gateway = lab_network.inspect["IPAM"]["Config"][0]["Gateway"]
    work = tmp_path_factory.mktemp("secure-site-mirror")
    repository = f"{PROJECT}/{MIRRORED}"
    with secure_site_mirror(docker, tier_cache_dir, busybox, gateway, repository, work) as served:
        yield served


@pytest.fixture(scope="module")
def worker(
    docker: Docker, node_image: str, lab_network: CreatedNetwork, tier_cache_dir: Path
) -> Iterator[str]:
    """The program's tenant-a-worker-1 from the node image, booted, with crictl copied in and
    kindest/node's containerd 2 in place of the image's."""
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
        # the registry name the mirror-down test owns, to the gateway; before containerd starts,
        # as Go's resolver keeps /etc/hosts for 5 s after a lookup
        gateway = lab_network.inspect["IPAM"]["Config"][0]["Gateway"]
        hosts_line = f"{gateway} {UPSTREAM_NAME}\n"
        docker.run("exec", "-i", container, "sh", "-c", "cat >> /etc/hosts", input=hosts_line)
        swap_in_containerd2(docker, container, tier_cache_dir)
        yield container
    finally:
        if docker.run("inspect", container, check=False).returncode == 0:
            remove_as_the_provider(docker, container)


@pytest.mark.upstream("kind-containerd-config", "containerd-default-config-path")
def test_the_workers_containerd_is_kinds_containerd_2_reading_certs_d_by_default(
    docker: Docker, worker: str, tier_cache_dir: Path
):
    """kindest/node's containerd and config, which names no config_path: containerd 2 reads
    /etc/containerd/certs.d (then /etc/docker/certs.d) by default."""
    version = docker.run("exec", worker, "containerd", "--version").stdout
    assert f" {CONTAINERD_VERSION} " in version, version
    served = docker.run("exec", worker, "ctr", "version").stdout
    assert f"Version:  {CONTAINERD_VERSION}" in served.split("Server:")[1], served
    config = docker.run("exec", worker, "cat", "/etc/containerd/config.toml").stdout
    # kind's file; the tier's start script sets restrict_oom_score_adj on a bounded host
    kinds = kind_containerd_config(tier_cache_dir)
    assert (
        config.replace("restrict_oom_score_adj = true", "restrict_oom_score_adj = false") == kinds
    )
    assert "config_path" not in config and ".registry" not in config
    dumped = docker.run("exec", worker, "containerd", "config", "dump").stdout
    assert re.search(
        r"config_path = ['\"]/etc/containerd/certs\.d:/etc/docker/certs\.d['\"]", dumped
    ), dumped
    assert images_named(docker, worker, PRELOADED)  # the content store survived the swap


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


def install(docker: Docker, tier_cache: Path, env: dict[str, str]) -> None:
    installed = run_script(docker, tier_cache, install_files_script(), env)
    assert installed.returncode == 0, installed.stderr


@pytest.mark.parametrize("mirror_only", [False, True], ids=["with-fallback", "mirror-only"])
@pytest.mark.upstream(
    "containerd-hosts-toml", "containerd-hosts-server-only", "containerd-cri-credentials-by-host"
)
def test_a_tls_mirror_with_a_path_basic_auth_and_a_ca(
    docker: Docker, worker: str, secure_mirror: SecureSiteMirror, tier_cache_dir: Path,
    mirror_only: bool,
):  # fmt: skip
    """The Harbor example of docs/mirrored-site.md: `host:port/project`, `ca`, credentials from
    registryMirrorAuth; as a `[host]` before the registry, and as the only `server`."""
    mirror = RegistryMirror(
        registry="registry.k8s.io", mirror=f"{secure_mirror.address}/{PROJECT}",
        ca=secure_mirror.ca, mirror_only=mirror_only,
    )  # fmt: skip
    auth = {mirror.host: secure_mirror.credentials}
    # what the mirror demands: its CA, and credentials
    manifest = f"https://{secure_mirror.address}/v2/{PROJECT}/e2e-mirror/busybox/manifests/1.0"
    assert asks_for_credentials(manifest, secure_mirror.ca_file)
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(manifest, timeout=5)
    crictl(docker, worker, "rmi", IMAGE)
    install(docker, tier_cache_dir, environment([mirror], auth))
    hosts = f"{CERTS_DIR}/registry.k8s.io/hosts.toml"
    assert docker.run("exec", worker, "cat", hosts).stdout == registry_files([mirror], auth)[hosts]
    mode = docker.run("exec", worker, "stat", "-c", "%a", hosts).stdout.strip()
    assert stat.S_IMODE(int(mode, 8)) == 0o600

    pulled = crictl(docker, worker, "pull", IMAGE)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    # through the project path, for registry.k8s.io, with the credentials (else 401)
    request = (
        rf'"(HEAD|GET) /v2/{PROJECT}/e2e-mirror/busybox/manifests/1\.0\?ns=registry\.k8s\.io '
        r'HTTP/1\.1" 200 .*"containerd/'
    )
    assert re.search(request, secure_mirror.requests()), secure_mirror.requests()
    assert crictl(docker, worker, "rmi", IMAGE).returncode == 0
    run_script(docker, tier_cache_dir, remove_files_script(), environment([mirror], auth))


@pytest.mark.parametrize("mirror_only", [False, True], ids=["with-fallback", "mirror-only"])
@pytest.mark.upstream("containerd-hosts-default-dir", "containerd-hosts-server-only")
def test_a_mirror_for_every_registry_serves_another_registrys_name(
    docker: Docker, worker: str, mirror: SiteMirror, tier_cache_dir: Path, mirror_only: bool
):
    """`*`: containerd's `_default` directory, for a registry with no directory of its own."""
    everything = RegistryMirror(
        registry="*", mirror=mirror.address, plain_http=True, mirror_only=mirror_only
    )
    install(docker, tier_cache_dir, environment([everything]))
    assert node_files(docker, worker) == sorted(registry_files([everything]))
    image = f"ghcr.io/{MIRRORED}"
    pulled = crictl(docker, worker, "pull", image)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    assert mirror.served("e2e-mirror/busybox", "1.0", "ghcr.io"), mirror.requests()
    assert crictl(docker, worker, "rmi", image).returncode == 0
    run_script(docker, tier_cache_dir, remove_files_script(), environment([everything]))


FAST_FAILURE_SECONDS = 5.0


@pytest.mark.upstream("containerd-hosts-server-only", "containerd-hosts-server-last")
def test_with_the_mirror_down_mirror_only_fails_at_once_and_never_asks_the_registry(
    docker: Docker, worker: str, lab_network: CreatedNetwork, tier_cache_dir: Path
):
    """The registry is a name the test owns: the worker resolves it to a listener on the
    gateway that records every connection. The mirror is a closed port. By default containerd
    falls back to the registry (the listener sees the worker's TLS hello); with `mirrorOnly`
    the pull fails at once naming the mirror, and nothing reaches the listener."""
    gateway = lab_network.inspect["IPAM"]["Config"][0]["Gateway"]
    inspected = json.loads(docker.run("inspect", worker).stdout)[0]
    worker_ip = inspected["NetworkSettings"]["Networks"][lab_network.name]["IPAddress"]
    down = f"{gateway}:{free_port(gateway)}"
    seen: dict[bool, list[tuple[str, bytes]]] = {}
    took: dict[bool, float] = {}
    errors: dict[bool, str] = {}
    with upstream_listener(gateway) as upstream:
        registry = f"{UPSTREAM_NAME}:{upstream.address.rsplit(':', 1)[1]}"
        image = f"{registry}/{MIRRORED}"
        for mirror_only in (False, True):
            mirrors = [RegistryMirror(
                registry=registry, mirror=down, plain_http=True, mirror_only=mirror_only
            )]  # fmt: skip
            install(docker, tier_cache_dir, environment(mirrors))
            upstream.connections.clear()
            started = time.monotonic()
            pulled = crictl(docker, worker, "pull", image, timeout=60)
            took[mirror_only] = time.monotonic() - started
            assert pulled.returncode != 0, pulled.stdout
            time.sleep(0.5)  # the listener's thread records what it took
            seen[mirror_only] = list(upstream.connections)
            errors[mirror_only] = pulled.stderr
            if mirror_only:
                assert down in pulled.stderr, pulled.stderr
            run_script(docker, tier_cache_dir, remove_files_script(), environment(mirrors))
    print(f"\nmirror down: pull failed in {took[False]:.1f} s with the fallback, "
          f"{took[True]:.1f} s mirror-only")  # fmt: skip
    # the fallback: containerd went on to `server`, the registry (a TLS ClientHello: 0x16),
    # saying so in its log only
    assert seen[False] and seen[False][0][0] == worker_ip, (seen, errors)
    journal = docker.run("exec", worker, "journalctl", "-u", "containerd", "--no-pager").stdout
    assert re.search(rf'msg="trying next host".*host="{re.escape(down)}"', journal), journal[-3000:]
    assert seen[False][0][1][:1] == b"\x16", seen
    # mirror-only: nothing, and at once
    assert seen[True] == [], seen
    assert took[True] < FAST_FAILURE_SECONDS, took


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
