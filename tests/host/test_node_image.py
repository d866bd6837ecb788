"""The kind node image built here (node_image.py): what kind reads of it, its mirrored name in
the stack config, and a worker container of the program's declaration booting from it.

The image reaches the program only through the stack config keys a user sets for a mirrored
image (`managementNodeImage`, `tenants[].workerImage`), by the digest-pinned name the loopback
registry gave it.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diagnostics
import pytest
import yaml
from docker_host import Docker
from node_image import (
    CNI_PLUGINS,
    IPTABLES_WRAPPER,
    K8S_VERSION,
    NODE_BINARIES,
    image_file_name,
    preloaded_images,
    sandbox_image,
)
from program import CreatedNetwork, TierHost
from test_workers import WORKER, create_as_the_provider, leftover, remove_as_the_provider

from labconfig.parse import parse_config
from tests.support.docker_readback import (
    container_attributes,
    container_differences,
    container_state,
)
from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program

BOOT_TIMEOUT_SECONDS = 180
KIND_READY = "Reached target .*Multi-User System.*|detected cgroup v1"
JOIN_READY = "Reached target .*Multi-User System"


def mirrored_config(reference: str) -> dict[str, Any]:
    """The lab stack's config with the mirrored node image, as a user would set it: the tenants
    on the image's version (a worker's kubelet has its tenant's minor)."""
    config = lab_stack_config()
    tenants = [
        {**tenant, "kubernetesVersion": K8S_VERSION, "workerImage": reference}
        for tenant in config["tenants"]
    ]
    return {**config, "managementNodeImage": reference, "tenants": tenants}


@functools.cache
def mirrored_run(reference: str) -> ProgramRun:
    return run_program(mirrored_config(reference), host=TierHost())


def run_in_image(docker: Docker, image: str, *command: str) -> str:
    """`command` in a throwaway container of the image, without its entrypoint (no boot)."""
    return docker.run("run", "--rm", "--entrypoint", command[0], image, *command[1:]).stdout


@pytest.mark.upstream("kind-node-image-layout")
def test_the_image_carries_what_kind_reads(docker: Docker, node_image: str):
    assert run_in_image(docker, node_image, "cat", "/kind/version") == K8S_VERSION
    config = run_in_image(docker, node_image, "cat", "/etc/containerd/config.toml")
    # kind's nodeutils reads the config's version and its CRI snapshotter (`kind load`)
    assert "\nversion = 2\n" in config
    assert 'snapshotter = "overlayfs"' in config
    cni = run_in_image(docker, node_image, "cat", "/kind/manifests/default-cni.yaml")
    assert cni.startswith("# would you kindly template this file\n")
    asked = {"kubelet": ("--version",), "kubeadm": ("version", "-o", "short")}
    for program in NODE_BINARIES:
        args = asked.get(program, ("version", "--client"))
        version = run_in_image(docker, node_image, f"/usr/bin/{program}", *args)
        assert K8S_VERSION in version, (program, version)
    found = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Config"]
    assert found["Entrypoint"] == ["/usr/local/bin/entrypoint", "/sbin/init"]
    assert found["StopSignal"] == "SIGRTMIN+3"
    assert "container=docker" in found["Env"]


@pytest.mark.upstream("kindest-node-cni-layout")
def test_the_image_has_kinds_cni_plugins_and_no_cni_config(docker: Docker, node_image: str):
    """As kindest/node: the four plugins where containerd looks by default, no conflist (the
    default CNI's DaemonSet writes it), and that DaemonSet runs only preloaded images."""
    plugins = run_in_image(docker, node_image, "ls", "-A", "/opt/cni/bin").split()
    assert sorted(plugins) == sorted(CNI_PLUGINS)
    assert run_in_image(docker, node_image, "ls", "-A", "/etc/cni/net.d") == ""
    config = run_in_image(docker, node_image, "cat", "/etc/containerd/config.toml")
    assert "bin_dir" not in config and "conf_dir" not in config  # containerd's defaults
    manifest = run_in_image(docker, node_image, "cat", "/kind/manifests/default-cni.yaml")
    templated = manifest.replace("{{ .PodSubnet }}", "10.244.0.0/16")
    (daemonset,) = [doc for doc in yaml.safe_load_all(templated) if doc]
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert spec["tolerations"] == [{"operator": "Exists"}]  # kindnet's
    images = {c["image"] for c in [*spec["initContainers"], *spec["containers"]]}
    assert images <= {image.name for image in preloaded_images(config)}, images
    (writer,) = spec["initContainers"]
    conflist = json.loads(writer["env"][0]["value"])
    assert conflist["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16"}]]
    assert {p["type"] for p in conflist["plugins"]} | {"host-local"} <= set(CNI_PLUGINS)


@pytest.mark.upstream("kubelet-fail-cgroupv1-flag")
def test_the_kubelet_of_the_image_accepts_cgroup_v1(docker: Docker, node_image: str):
    defaults = run_in_image(docker, node_image, "cat", "/etc/default/kubelet")
    assert "--fail-cgroupv1=false" in defaults
    # the flag exists in this kubelet (an unknown flag would stop it at every start)
    helped = run_in_image(docker, node_image, "/usr/bin/kubelet", "--help")
    assert "--fail-cgroupv1" in helped


# kubeadm lists pause 3.10.1; the node runs kind's sandbox image (containerd's config).
NOT_PRELOADED = ("registry.k8s.io/pause:",)


@pytest.mark.upstream("kind-node-image-layout", "kubeadm-addon-images")
def test_the_image_holds_the_images_kubeadm_runs(docker: Docker, node_image: str):
    """kind's node build imports `kubeadm config images list` and the sandbox image."""
    listed = run_in_image(
        docker, node_image, "kubeadm", "config", "images", "list",
        "--kubernetes-version", K8S_VERSION,
    ).split()  # fmt: skip
    config = run_in_image(docker, node_image, "cat", "/etc/containerd/config.toml")
    preloaded = {spec.name for spec in preloaded_images(config)}
    wanted = {image for image in listed if not image.startswith(NOT_PRELOADED)}
    assert wanted | {sandbox_image(config)} == preloaded
    files = run_in_image(docker, node_image, "ls", "/kind/images").split()
    assert sorted(files) == sorted(image_file_name(name) for name in preloaded)


def test_the_mirrored_name_is_what_the_stack_config_takes(
    docker: Docker, node_image: str, mirrored_node_image: str
):
    assert mirrored_node_image.startswith(f"127.0.0.1:5000/kindest/node:{K8S_VERSION}@sha256:")
    cfg = parse_config(mirrored_config(mirrored_node_image))
    assert cfg.management_node_image == mirrored_node_image
    assert {t.node_image for t in cfg.tenants} == {mirrored_node_image}
    # the pinned name resolves to the built image on the daemon (no registry needed then)
    by_name = json.loads(docker.run("image", "inspect", mirrored_node_image).stdout)[0]["Id"]
    built = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Id"]
    assert by_name == built


@pytest.fixture(scope="module")
def booted_worker(
    docker: Docker, node_image: str, mirrored_node_image: str, lab_network: CreatedNetwork
) -> Iterator[tuple[dict[str, Any], str]]:
    """The program's tenant-a-worker-1, declared with the mirrored image, created as the
    provider creates it, from the node image, and booted: (provider attributes, container)."""
    docker.require_privileged()
    run = mirrored_run(mirrored_node_image)
    image = run.named("tenant-a-workers-image").inputs
    assert image["name"] == mirrored_node_image
    inputs = run.named(WORKER).inputs
    image_id = json.loads(docker.run("image", "inspect", mirrored_node_image).stdout)[0]["Id"]
    # the RemoteImage's image_id output, which the mocks cannot know
    attributes = {**container_attributes(inputs), "image": image_id}
    leftover(docker, attributes["name"])
    container = create_as_the_provider(docker, attributes)
    try:
        yield attributes, container
    finally:
        remove_as_the_provider(docker, container)


def system_state(docker: Docker, container: str) -> str:
    result = docker.run("exec", container, "systemctl", "is-system-running", check=False)
    return result.stdout.strip()


def wait_for_boot(docker: Docker, container: str) -> str:
    deadline = time.monotonic() + BOOT_TIMEOUT_SECONDS
    state = ""
    while time.monotonic() < deadline:
        state = system_state(docker, container)
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    return state


@pytest.mark.upstream("kubelet-validates-hugetlb-cgroup-root")
def test_every_cgroup_v1_hierarchy_the_kubelet_validates_has_its_root(
    docker: Docker, booted_worker
):
    """kind's entrypoint made the kubelet's cgroup root in every hierarchy the kubelet checks,
    hugetlb included, and it is still there after the unconfigured kubelet restarted: each
    hierarchy is the node's own (the host mounts them all: host_cgroups.py)."""
    _, container = booted_worker
    assert wait_for_boot(docker, container) == "running"
    time.sleep(3)  # one restart of the unconfigured kubelet at least
    script = (
        "for c in cpu cpuacct cpuset memory pids systemd hugetlb; do"
        " m=/sys/fs/cgroup/$c; [ -d $m ] && [ ! -L $m ] || continue;"
        " test -d $m/kubelet.slice && test -d $m/kubelet || echo missing $m; done"
    )
    found = docker.run("exec", container, "sh", "-c", script)
    assert found.stdout == "", found.stdout


def test_the_worker_boots_systemd_and_containerd(docker: Docker, booted_worker):
    _, container = booted_worker
    state = wait_for_boot(docker, container)
    failed = docker.run("exec", container, "systemctl", "--failed", "--no-legend", check=False)
    assert state == "running", f"systemd is {state!r}; failed units:\n{failed.stdout}"
    logs = docker.run("logs", container).stdout
    # what kind waits for (providers/common/cgroups.go), and what the program's join script
    # waits for (builders/scripts.py, worker_join_script)
    assert re.search(KIND_READY, logs), logs[-2000:]
    assert re.search(JOIN_READY, logs), logs[-2000:]
    for unit in ("containerd.service", "kind-import-images.service"):
        active = docker.run("exec", container, "systemctl", "is-active", unit, check=False)
        assert active.stdout.strip() == "active", unit
    names = docker.run("exec", container, "ctr", "--namespace=k8s.io", "images", "ls", "-q")
    config = docker.run("exec", container, "cat", "/etc/containerd/config.toml").stdout
    wanted = {spec.name for spec in preloaded_images(config)}
    assert wanted <= set(names.stdout.split()), names.stdout


def test_the_booted_worker_gives_the_provider_no_diff(docker: Docker, booted_worker):
    attributes, container = booted_worker
    found = json.loads(docker.run("inspect", container).stdout)[0]
    assert found["State"]["Running"], found["State"]
    state = container_state(found, attributes["image"])
    assert container_differences(attributes, state) == set(), state


@pytest.mark.upstream("kubelet-iptables-hint-chain")
@pytest.mark.parametrize(
    ("hinted", "chosen"), [("nft", "nft"), ("legacy", "legacy"), (None, "nft")]
)
def test_the_kube_proxy_images_iptables_follows_the_kubelets_mode(
    tmp_path: Path, hinted: str | None, chosen: str
):
    """The wrapper (no daemon needed): the mode whose mangle table holds KUBE-IPTABLES-HINT,
    else nft; the command and its arguments passed on to that mode's program."""
    for mode in ("nft", "legacy"):
        hint = ":KUBE-IPTABLES-HINT - [0:0]" if mode == hinted else ""
        program = tmp_path / f"xtables-{mode}-multi"
        program.write_text(
            f'#!/bin/sh\ncase $1 in *-save) echo "*mangle\n{hint}" ;; *) echo "{mode} $*" ;; esac\n'
        )
        program.chmod(0o755)
    wrapper = tmp_path / "iptables-restore"
    wrapper.write_text(IPTABLES_WRAPPER)
    wrapper.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    ran = subprocess.run(
        [str(wrapper), "--noflush", "-w", "5"], env=env, capture_output=True, text=True
    )
    assert ran.stdout.strip() == f"{chosen} iptables-restore --noflush -w 5", ran.stderr


def test_a_failure_report_shows_the_nodes_kubelet_journal_units_and_output(
    docker: Docker, booted_worker
):
    """What diagnostics.py adds to a failed test's report, read from a booted node that has
    not joined yet (systemd skips its kubelet until kubeadm writes the kubelet's config)."""
    attributes, container = booted_worker
    assert wait_for_boot(docker, container) == "running"
    name = attributes["name"]
    text = diagnostics.report(docker, None)
    assert f"=== {name}: kubelet journal" in text, text[:2000]
    journal = text.split(f"=== {name}: kubelet journal")[1].split("\n=== ")[0]
    assert "kubelet" in journal and "(nothing)" not in journal, journal
    assert f"=== {name}: failed systemd units" in text
    output = text.split(f"=== {name}: container output")[1].split("\n=== ")[0]
    assert re.search(r"Reached target|Started|Finished", output), output  # systemd's console
