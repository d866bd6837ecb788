"""The images a tenant worker runs (workload_images.py): flannel's two and the agent's Python,
built here, run as the program's manifests run them, and imported into a node container's
containerd under the names (tag and digest) a kubelet asks for.

These tests use the tier's daemon but not the lab network; images they load into the daemon
and the node container they create are removed at the end. The images running in kubelets' pods
under the program's manifests are test_tenant_join.py's (flannel) and test_tenant_agent.py's.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_host import Docker
from node_image import docker_archive
from test_node_image import wait_for_boot
from test_workers import leftover
from workload_images import (
    AGENT_IMAGE,
    CNI_PLUGINS_VERSION,
    FLANNEL_VERSION,
    HELM_VERSION,
    TENCENT_VPC_MODULE,
    _members,
    archive_references,
    chart_values,
    containerd_digest,
    flannel_image_names,
    helm_binary,
    load_images,
    normalized_name,
    pinned_reference,
    render_flannel,
    timed_archives,
)

from builders.flannel import flannel_cni_conf, flannel_values
from builders.simulated_gpus import AGENT_DIR, CODE_MOUNT, agent_manifests

POD_CIDR = "10.250.0.0/16"
NAMESPACE = "kube-flannel"  # components/tenant/cni.py


@pytest.fixture(scope="session")
def workload_archives(tier_cache_dir: Path) -> dict[str, Path]:
    from conftest import TIMINGS

    found, steps = timed_archives(tier_cache_dir)
    TIMINGS.update(steps)
    return found


@pytest.fixture(scope="session")
def rendered(tier_cache_dir: Path) -> list[dict[str, Any]]:
    text = render_flannel(flannel_values(POD_CIDR), NAMESPACE, tier_cache_dir)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def daemonset(rendered: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [doc for doc in rendered if doc["kind"] == "DaemonSet"]
    return found["spec"]["template"]["spec"]


# --- pure: no daemon


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("python:3.13@sha256:ab", "docker.io/library/python"),
        ("lab/gpu-agent-python:bookworm", "docker.io/lab/gpu-agent-python"),
        ("ghcr.io/flannel-io/flannel:v0.28.9", "ghcr.io/flannel-io/flannel"),
        ("127.0.0.1:5000/kindest/node:v1.35.4", "127.0.0.1:5000/kindest/node"),
        ("localhost/x:1", "localhost/x"),
    ],
)  # fmt: skip
def test_names_are_normalized_as_containerd_names_them(reference: str, name: str):
    assert normalized_name(reference) == name


def test_the_digest_follows_the_archives_content_only():
    first = docker_archive("example/a:1", b"layer-one", ())
    again = docker_archive("example/a:1", b"layer-one", ())
    other = docker_archive("example/a:1", b"layer-two", ())
    assert first == again  # mtime 0, sorted JSON: the same bytes every build
    assert containerd_digest(first) == containerd_digest(again) != containerd_digest(other)
    assert pinned_reference(first) == f"example/a:1@{containerd_digest(first)}"
    assert archive_references(first) == ["example/a:1"]


# --- the chart, rendered by the helm built here


def test_helm_is_the_pinned_version(tier_cache_dir: Path):
    version = subprocess.run(
        [str(helm_binary(tier_cache_dir)), "version", "--template", "{{.Version}}"],
        capture_output=True, text=True, check=True, env={"HOME": "/nonexistent"},
    ).stdout  # fmt: skip
    assert version == HELM_VERSION


@pytest.mark.upstream("flannel-chart-containers")
def test_the_chart_runs_the_images_built_here_with_the_programs_values(
    rendered: list[dict[str, Any]], workload_archives: dict[str, Path], tier_cache_dir: Path
):
    spec = daemonset(rendered)
    containers = [*spec["initContainers"], *spec["containers"]]
    assert {c["image"] for c in containers} <= set(workload_archives)
    daemon, installer = flannel_image_names(chart_values(tier_cache_dir))
    by_name = {c["name"]: c for c in containers}
    assert by_name["install-cni-plugin"]["image"] == installer
    assert by_name["install-cni-plugin"]["command"] == ["cp"]
    assert by_name["install-cni-plugin"]["args"] == ["-f", "/flannel", "/opt/cni/bin/flannel"]
    assert by_name["install-cni"]["image"] == daemon
    assert by_name["install-cni"]["command"] == ["/opt/bin/install-conf"]
    assert by_name["kube-flannel"]["command"][0] == "/opt/bin/flanneld"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["cni-plugin"]["hostPath"]["path"] == "/opt/cni/bin"
    (config,) = [doc for doc in rendered if doc["kind"] == "ConfigMap"]
    assert config["metadata"]["namespace"] == NAMESPACE
    assert json.loads(config["data"]["net-conf.json"])["Network"] == POD_CIDR
    assert config["data"]["cni-conf.json"].strip() == flannel_cni_conf().strip()


# --- the images, run by the daemon as the manifests run them


@pytest.fixture(scope="session")
def loaded(docker: Docker, workload_archives: dict[str, Path]) -> Iterator[dict[str, str]]:
    """The archives `docker load`ed into the daemon (removed afterwards): reference -> id."""
    present = {
        name
        for name in workload_archives
        if docker.run("image", "inspect", name, check=False).returncode == 0
    }
    found = {}
    for name, path in workload_archives.items():
        docker.run("load", input=path.read_bytes())
        found[name] = json.loads(docker.run("image", "inspect", name).stdout)[0]["Id"]
    try:
        yield found
    finally:
        for name in set(found) - present:
            docker.run("image", "rm", name, check=False)


def run(docker: Docker, *args: str, check: bool = True) -> str:
    """`docker run --rm` of args: its output (stdout, then stderr)."""
    ran = docker.run("run", "--rm", "--name", f"workload-images-{os.getpid()}", *args, check=check)
    return ran.stdout + ran.stderr


@pytest.mark.upstream("flannel-image-build")
def test_flanneld_is_the_release_with_its_iptables(
    docker: Docker, loaded: dict[str, str], rendered: list[dict[str, Any]], tmp_path: Path
):
    daemon = next(name for name in loaded if "/flannel:" in name)
    assert run(docker, daemon, "--version").strip() == FLANNEL_VERSION  # the image's entrypoint
    found = run(docker, "--entrypoint", "/bin/sh", daemon, "-c",
                "iptables --version; ip6tables-save --version; nft --version")  # fmt: skip
    assert "iptables v1.8" in found and "nf_tables" in found and "nftables v" in found, found
    # install-conf, as the chart's install-cni container runs it: the config into place
    (install,) = [c for c in daemonset(rendered)["initContainers"] if c["name"] == "install-cni"]
    source, target = tmp_path / "cfg", tmp_path / "net.d"
    source.mkdir()
    target.mkdir(mode=0o777)
    (source / "cni-conf.json").write_text(flannel_cni_conf())
    run(docker, "--volume", f"{source}:/etc/kube-flannel:ro",
        "--volume", f"{target}:/etc/cni/net.d",
        "--entrypoint", install["command"][0], daemon, *install["args"])  # fmt: skip
    assert (target / "10-flannel.conflist").read_text() == flannel_cni_conf()


@pytest.mark.upstream("flannel-cni-plugin-from-containernetworking-plugins")
def test_the_cni_installer_copies_a_working_flannel_plugin(
    docker: Docker, loaded: dict[str, str], rendered: list[dict[str, Any]], tmp_path: Path
):
    init_containers = daemonset(rendered)["initContainers"]
    (init,) = [c for c in init_containers if c["name"] == "install-cni-plugin"]
    tmp_path.chmod(0o777)
    run(docker, "--volume", f"{tmp_path}:/opt/cni/bin", "--entrypoint", init["command"][0],
        init["image"], *init["args"])  # fmt: skip
    plugin = tmp_path / "flannel"
    assert plugin.exists()

    # the plugin the init container copied: CNI's VERSION command, and its build stamp
    version = subprocess.run(
        [str(plugin)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, text=True
    )
    assert "0.3.1" in json.loads(version.stdout)["supportedVersions"]  # flannel_cni_conf's
    about = subprocess.run([str(plugin)], env={}, capture_output=True, text=True)
    assert about.stderr.strip() == f"CNI flannel plugin {CNI_PLUGINS_VERSION}"


def test_the_agent_image_runs_the_manifests_command(docker: Docker, loaded: dict[str, str]):
    """As the Deployment runs it: its command in its working directory, as nobody, on a
    read-only root, the agent's code mounted where its ConfigMap is."""
    (container,) = agent_manifests({}, AGENT_IMAGE)["deployment"]["spec"]["template"]["spec"][
        "containers"
    ]
    security = container["securityContext"]
    out = run(docker, "--read-only", "--user", str(security["runAsUser"]),
              "--cap-drop", "ALL", "--workdir", container["workingDir"],
              "--volume", f"{AGENT_DIR}:{CODE_MOUNT}:ro",
              "--entrypoint", container["command"][0],
              AGENT_IMAGE, *container["command"][1:], "--help")  # fmt: skip
    assert "--once" in out, out
    imports = "import ssl, json, urllib.request"
    assert run(docker, "--entrypoint", "python", AGENT_IMAGE, "-c", imports) == ""


def test_tencent_vpc_is_the_stub(tier_cache_dir: Path):
    from workload_images import FLANNEL_SET, set_root

    go_mod = (set_root(tier_cache_dir, FLANNEL_SET.name) / "src/flannel/go.mod").read_text()
    assert f"{TENCENT_VPC_MODULE} => " in go_mod


# --- containerd in a node container


@pytest.fixture(scope="module")
def node(docker: Docker, node_image: str) -> Iterator[str]:
    """A node container of the node image, booted (systemd, containerd), not joined."""
    docker.require_privileged()
    name = f"workload-images-node-{os.getpid()}"
    leftover(docker, name)
    docker.run(
        "run", "-d", "--name", name, "--privileged", "--tmpfs", "/tmp", "--tmpfs", "/run",
        "--volume", "/var", "--volume", "/lib/modules:/lib/modules:ro", node_image,
    )  # fmt: skip
    try:
        assert wait_for_boot(docker, name) in ("running", "degraded")
        yield name
    finally:
        docker.run("rm", "-f", "--volumes", name, check=False)


@pytest.mark.upstream("containerd-import-digest", "containerd-cri-resolves-by-name")
def test_containerd_records_the_computed_digest_under_both_names(
    docker: Docker, node: str, workload_archives: dict[str, Path]
):
    archives = [path.read_bytes() for path in workload_archives.values()]
    pinned = load_images(docker, node, archives)
    listed = docker.run("exec", node, "ctr", "--namespace=k8s.io", "images", "ls").stdout
    rows = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:]}
    for archive, reference in zip(archives, pinned, strict=True):
        digest = containerd_digest(archive)
        (tag,) = archive_references(archive)
        name = normalized_name(tag)
        assert rows[f"{name}:{tag.rsplit(':', 1)[1]}"] == digest, listed
        assert rows[f"{name}@{digest}"] == digest, listed
        assert reference == f"{tag}@{digest}"
    # loading again (a second worker, a rerun) changes nothing
    assert load_images(docker, node, archives) == pinned


def test_no_layer_holds_a_path_twice(workload_archives: dict[str, Path]):
    """`docker load` refuses such a layer (containerd takes it): each path once."""
    for name, path in workload_archives.items():
        members = _members(path.read_bytes())
        (entry,) = json.loads(members["manifest.json"])
        with tarfile.open(fileobj=io.BytesIO(members[entry["Layers"][0]])) as tar:
            names = [member.name for member in tar.getmembers()]
        assert len(names) == len(set(names)), name
