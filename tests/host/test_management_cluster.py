"""The management cluster: the program's own kind create script, with the environment the
program gives it (its kind config, node image, the lab network), run by the real kind on the
real daemon, from the node image built here under its mirrored name.

kind is the release the program asks for (`sigs.k8s.io/kind@v0.33.0`, built by the tier beside
the node image's own v0.31.0); the script finds it and `docker` on PATH as `pulumi up` would.
"""

from __future__ import annotations

import ipaddress
import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from container_stats import stats
from docker_host import Docker
from footprint_report import FOOTPRINT
from management_cluster import Cluster, kubectl, management_cluster, run_script
from program import CreatedNetwork, TierHost, assert_only_on_the_lab_network
from site_mirror import site_mirror
from test_node_image import mirrored_config, mirrored_run, wait_for_boot
from test_workers import WORKER, create_as_the_provider, leftover, remove_as_the_provider

from labconfig.node_images import KIND_RELEASE
from planning import footprint
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import run_program


def test_the_scripts_run_the_kind_release_the_lab_asks_for(docker: Docker, tier_cache_dir: Path):
    """The preflight's kind (labconfig/node_images.py), not the node image build's v0.31.0."""
    found = run_script(docker, tier_cache_dir, "kind version", {})
    assert found.stdout.startswith(f"kind {KIND_RELEASE} "), found.stdout + found.stderr


@pytest.fixture(scope="module")
def kind_cluster(
    docker: Docker, tier_cache_dir: Path, mirrored_node_image: str, lab_network: CreatedNetwork
) -> Iterator[Cluster]:
    with management_cluster(docker, tier_cache_dir, mirrored_node_image, lab_network) as cluster:
        yield cluster


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


SERVICES_TIMEOUT_SECONDS = 240


def kube_system_pods(tier_cache: Path, kubeconfig: str) -> list[dict[str, Any]]:
    pods = kubectl(tier_cache, kubeconfig, "get", "pods", "-n", "kube-system", "-o", "json")
    assert pods.returncode == 0, pods.stderr
    return json.loads(pods.stdout)["items"]


def not_running(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Pod -> why it is not Running and Ready (the waiting reason, e.g. ImagePullBackOff)."""
    found = {}
    for pod in pods:
        status = pod["status"]
        ready = {c["type"]: c["status"] for c in status.get("conditions", [])}.get("Ready")
        if status.get("phase") != "Running" or ready != "True":
            waiting = [
                c["state"]["waiting"].get("reason", "")
                for c in status.get("containerStatuses", [])
                if "waiting" in c.get("state", {})
            ]
            found[pod["metadata"]["name"]] = f"{status.get('phase')} {','.join(waiting)}".strip()
    return found


def resolve_in_node(docker: Docker, node: str, name: str, nameserver: str) -> str:
    """`getent ahostsv4 name` in the node, asking `nameserver` (the cluster DNS's ClusterIP) in a
    mount namespace of its own, so the node's resolv.conf stays as kind made it."""
    script = (
        f"echo 'nameserver {nameserver}' > /tmp/cluster-dns.conf"
        " && mount --bind /tmp/cluster-dns.conf /etc/resolv.conf"
        f" && getent ahostsv4 {name}"
    )
    found = docker.run("exec", node, "unshare", "--mount", "sh", "-c", script, check=False)
    return found.stdout


@pytest.mark.upstream("kubeadm-addon-images", "kubelet-iptables-hint-chain")
def test_kube_proxy_and_coredns_run_and_services_answer(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path
):
    """Every kube-system pod runs from the preloaded images (kube-proxy with the iptables
    programs, CoreDNS from its module), and Services work: from the node, the cluster DNS's
    ClusterIP (kube-proxy's DNAT to the CoreDNS pod on the pod network) resolves
    `kubernetes.default` to the API server's ClusterIP, which CoreDNS itself learnt by
    watching the API server through that ClusterIP from its pod."""
    kubeconfig = kind_cluster.created.stdout
    deadline = time.monotonic() + SERVICES_TIMEOUT_SECONDS
    while True:
        pods = kube_system_pods(tier_cache_dir, kubeconfig)
        waiting = not_running(pods)
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert waiting == {}, waiting
    names = [pod["metadata"]["name"] for pod in pods]
    for app in ("coredns-", "kube-proxy-"):
        assert any(name.startswith(app) for name in names), names
    service = kubectl(
        tier_cache_dir, kubeconfig, "get", "service", "kube-dns", "-n", "kube-system", "-o", "json"
    )
    dns_ip = json.loads(service.stdout)["spec"]["clusterIP"]
    api = kubectl(tier_cache_dir, kubeconfig, "get", "service", "kubernetes", "-o", "json")
    api_ip = json.loads(api.stdout)["spec"]["clusterIP"]
    answer = resolve_in_node(
        docker, kind_cluster.command.node, "kubernetes.default.svc.cluster.local", dns_ip
    )
    assert answer.split()[:1] == [api_ip], answer


@pytest.mark.upstream("kindest-node-cni-layout")
def test_the_default_cni_daemonset_wrote_the_nodes_conflist(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path
):
    """The node image ships no CNI config (as kindest/node): kind's default CNI manifest, a
    DaemonSet of preloaded images, wrote it for the pod subnet kind templated in."""
    kubeconfig = kind_cluster.created.stdout
    found = kubectl(
        tier_cache_dir, kubeconfig, "get", "pods", "-n", "kube-system", "-l", "app=host-tier-cni",
        "-o", "json",
    )  # fmt: skip
    (pod,) = json.loads(found.stdout)["items"]
    assert pod["status"]["phase"] == "Running", pod["status"]
    written = docker.run(
        "exec", kind_cluster.command.node, "cat", "/etc/cni/net.d/10-host-tier.conflist"
    )
    subnet = json.loads(written.stdout)["plugins"][0]["ipam"]["ranges"][0][0]["subnet"]
    assert subnet == "10.244.0.0/16"  # kind's default podSubnet
    assert all(ipaddress.ip_network(c).subnet_of(ipaddress.ip_network(subnet))
               for c in pod_cidrs(tier_cache_dir, kubeconfig))  # fmt: skip


SETTLE_SECONDS = 30


def test_the_footprint_model_covers_the_measured_node_and_worker(
    docker: Docker,
    kind_cluster: Cluster,
    tier_cache_dir: Path,
    leave_script: LeaveScript,
    request: pytest.FixtureRequest,
):
    """Item 6: the kind node (its control plane, kube-proxy and CoreDNS, settled; without
    cert-manager, MetalLB and Kamaji, which the lab adds) and an idle worker container
    (booted, not joined: no kubelet, kube-proxy, flannel or agent yet, issue 19) measured in
    their cgroups (container_stats.py) against planning/footprint.py's MANAGEMENT and WORKER.
    The figures are printed at the end of the session (docs/scaling.md quotes them)."""
    worker = create_as_the_provider(docker, leave_script.attributes)
    try:
        assert wait_for_boot(docker, worker) == "running"
        kube_system_pods(tier_cache_dir, kind_cluster.created.stdout)
        time.sleep(SETTLE_SECONDS)
        node_cpus, node_mib = stats(docker, kind_cluster.command.node)
        worker_cpus, worker_mib = stats(docker, worker)
    finally:
        remove_as_the_provider(docker, worker)
    request.config.stash.setdefault(FOOTPRINT, {}).update(
        {
            "management node": (node_cpus, node_mib, footprint.MANAGEMENT),
            "idle worker (not joined)": (worker_cpus, worker_mib, footprint.WORKER),
        }
    )
    assert 0 < node_mib < footprint.MANAGEMENT.memory_mb and node_cpus < footprint.MANAGEMENT.cpus
    assert 0 < worker_mib < footprint.WORKER.memory_mb and worker_cpus < footprint.WORKER.cpus


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


@dataclass
class LeaveScript:
    """The program's leave script of a worker (its join Command's `delete`) and environment,
    and the container it is for, created from the node image as the provider creates it."""

    script: str
    environment: dict[str, str]
    attributes: dict[str, Any]  # the worker container's provider configuration


@pytest.fixture
def leave_script(docker: Docker, mirrored_node_image: str) -> Iterator[LeaveScript]:
    run = mirrored_run(mirrored_node_image)
    join = run.named(f"{WORKER}-join").inputs
    image_id = json.loads(docker.run("image", "inspect", mirrored_node_image).stdout)[0]["Id"]
    attributes = {**container_attributes(run.named(WORKER).inputs), "image": image_id}
    leftover(docker, WORKER)  # one this session did not make: never touched
    try:
        yield LeaveScript(join["delete"], dict(join["environment"]), attributes)
    finally:  # the one the test made, on any daemon
        leftover(docker, WORKER)


def fake_node(tier_cache: Path, kubeconfig: str, name: str) -> None:
    """A Node object named like the worker, as its kubelet would have registered it (afresh:
    one that an earlier case left behind goes first)."""
    kubectl(tier_cache, kubeconfig, "delete", "node", name, "--ignore-not-found")
    manifest = json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        file.write(manifest)
        file.flush()
        created = kubectl(tier_cache, kubeconfig, "create", "-f", file.name)
    assert created.returncode == 0, created.stderr


def container_status(docker: Docker, name: str) -> str:
    found = docker.run("inspect", "--format", "{{.State.Status}}", name, check=False)
    return found.stdout.strip() if found.returncode == 0 else "absent"


@pytest.mark.parametrize("state", ["running", "exited", "absent"])
def test_the_leave_script_deletes_the_node_whatever_the_container_does(
    docker: Docker,
    kind_cluster: Cluster,
    tier_cache_dir: Path,
    leave_script: LeaveScript,
    state: str,
):
    """The worker's leave script (builders/scripts.py, node_delete_script), with the
    environment WorkerPool gives it, for a worker container that runs, is stopped or is gone:
    it exits 0, the Node object is gone, and the container is left as it was (the provider
    removes it). The management cluster's API server stands in for the tenant's (the Node
    is a fake one named like the worker; a tenant joins workers in issue 19), reached with
    the kubeconfig kind exported, as LAB_KUBECONFIG carries a tenant's."""
    kubeconfig = kind_cluster.created.stdout
    if state != "absent":
        container = create_as_the_provider(docker, leave_script.attributes)
        if state == "exited":
            docker.run("stop", container)
    assert container_status(docker, WORKER) == state
    fake_node(tier_cache_dir, kubeconfig, WORKER)
    environment = {**leave_script.environment, "LAB_KUBECONFIG": kubeconfig}
    left = run_script(docker, tier_cache_dir, leave_script.script, environment)
    assert left.returncode == 0, left.stderr
    assert "warning" not in left.stderr, left.stderr
    found = kubectl(tier_cache_dir, kubeconfig, "get", "node", WORKER, "--ignore-not-found")
    assert (found.returncode, found.stdout) == (0, ""), (found.stdout, found.stderr)
    assert container_status(docker, WORKER) == state
    # a second run (a destroy retried after the node went) exits 0 as well
    again = run_script(docker, tier_cache_dir, leave_script.script, environment)
    assert (again.returncode, again.stderr) == (0, ""), again.stderr


def test_the_leave_script_only_warns_when_the_tenant_is_unreachable(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path, leave_script: LeaveScript
):
    """A tenant that is gone (its API server address refuses) must not stop a destroy."""
    kubeconfig = yaml.safe_load(kind_cluster.created.stdout)
    for cluster in kubeconfig["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens on port 1
    environment = {**leave_script.environment, "LAB_KUBECONFIG": yaml.safe_dump(kubeconfig)}
    left = run_script(docker, tier_cache_dir, leave_script.script, environment)
    assert left.returncode == 0, left.stderr
    assert f"warning: could not delete node {WORKER} from its tenant" in left.stderr


MIRRORED = "e2e-mirror/busybox:1.0"  # a repository no registry.k8s.io image has
PULL_TIMEOUT_SECONDS = 180


def pod_running(tier_cache: Path, kubeconfig: str, name: str, image: str, *command: str) -> float:
    """Seconds from creating a pod of `image` (no pull secret, the default pull policy) to it
    Running on the kind node."""
    started = time.monotonic()
    run = ("--command", "--", *command) if command else ()
    created = kubectl(
        tier_cache, kubeconfig, "run", name, f"--image={image}", "--restart=Never", *run
    )
    assert created.returncode == 0, created.stderr
    while True:
        pod = json.loads(kubectl(tier_cache, kubeconfig, "get", "pod", name, "-o", "json").stdout)
        if pod.get("status", {}).get("phase") == "Running":
            return time.monotonic() - started
        assert time.monotonic() - started < PULL_TIMEOUT_SECONDS, json.dumps(pod.get("status"))
        time.sleep(0.5)


@pytest.mark.upstream("containerd-default-config-path", "containerd-hosts-toml")
def test_the_kind_node_pulls_a_registry_k8s_io_name_through_the_sites_mirror(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path, busybox: str,
    lab_network: CreatedNetwork, mirrored_node_image: str, tmp_path: Path,
):  # fmt: skip
    """The program's own mirror Command for the kind node (registryMirrors: registry.k8s.io
    through a mirror on the lab network's gateway), run as pulumi-command runs it: the node's
    containerd then pulls `registry.k8s.io/e2e-mirror/busybox:1.0`, a name upstream does not
    have and nothing preloaded, from the mirror, with no `kind load`; the Command's delete
    removes the files again."""
    node, kubeconfig = kind_cluster.command.node, kind_cluster.created.stdout
    gateway = lab_network.inspect["IPAM"]["Config"][0]["Gateway"]
    image = f"registry.k8s.io/{MIRRORED}"
    listed = docker.run("exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q").stdout
    assert "registry.k8s.io/pause:3.10" in listed and "e2e-mirror" not in listed
    with site_mirror(docker, tier_cache_dir, busybox, gateway, MIRRORED, tmp_path) as mirror:
        config = mirrored_config(mirrored_node_image)
        config["registryMirrors"] = [
            {"registry": "registry.k8s.io", "mirror": mirror.address, "plainHttp": True}
        ]
        files = run_program(config, host=TierHost()).named("management-registry-mirrors")
        env = dict(files.inputs["environment"])
        assert env["NODE"] == node
        installed = run_script(docker, tier_cache_dir, files.inputs["create"], env)
        assert installed.returncode == 0, installed.stderr
        hosts = docker.run(
            "exec", node, "cat", "/etc/containerd/certs.d/registry.k8s.io/hosts.toml"
        )
        assert f'[host."http://{mirror.address}"]' in hosts.stdout
        try:
            through_mirror = pod_running(
                tier_cache_dir, kubeconfig, "e2e-mirror", image, "sleep", "3600"
            )
            preloaded = pod_running(
                tier_cache_dir, kubeconfig, "e2e-preloaded", "registry.k8s.io/pause:3.10"
            )
        finally:
            kubectl(tier_cache_dir, kubeconfig, "delete", "pod", "e2e-mirror", "e2e-preloaded",
                    "--now", "--ignore-not-found")  # fmt: skip
        assert mirror.served("e2e-mirror/busybox", "1.0", "registry.k8s.io"), mirror.requests()
        print(f"kind node: a pod Running in {through_mirror:.1f} s through the mirror, "
              f"{preloaded:.1f} s on a preloaded image")  # fmt: skip
        removed = run_script(docker, tier_cache_dir, files.inputs["delete"], env)
        assert removed.returncode == 0, removed.stderr
        left = docker.run("exec", node, "ls", "-A", "/etc/containerd/certs.d/registry.k8s.io")
        assert left.stdout.strip() == ""


def test_the_delete_script_removes_the_cluster(
    docker: Docker, kind_cluster: Cluster, tier_cache_dir: Path
):
    """Last in the module: the fixture's own delete then finds nothing (and exits 0)."""
    command = kind_cluster.command
    deleted = run_script(docker, tier_cache_dir, command.delete, command.environment)
    assert deleted.returncode == 0, deleted.stderr
    assert docker.run("inspect", command.node, check=False).returncode != 0
