"""The real kube-proxy v1.35.4 in a worker container of the node image, against a real API server.

What a tenant's kube-proxy DaemonSet pod does on a lab worker, without a kubelet: the node
image's preloaded `registry.k8s.io/kube-proxy:v1.35.4`, run by the worker's containerd as a
privileged container in the worker's network namespace (kubeadm's DaemonSet: `hostNetwork`,
`privileged`, /lib/modules read-only), with either configuration: the program's
(builders/kube_proxy.py, `conntrack.maxPerCore: 0`) or kubeadm's default, which Kamaji's addon
deploys (printed by the worker's own kubeadm: conntrack maxPerCore and min left to kube-proxy's
defaults, 32768 and 131072; mode iptables). The API server is the real tier's
(tests/real/controlplane.py) on loopback, reached through a forwarder on the test network's
gateway.

kube-proxy v1.36.3 runs the same way, its binary (built here from its Go module) mounted over
the image's: v1.36 changed what kube-proxy does with the conntrack hash size.

Used by test_kube_proxy_conntrack.py. Everything it creates is named `hc-`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import selectors
import socket
import socketserver
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from docker_host import Docker
from node_image import K8S_VERSION, REGISTRY, BuildPaths, binaries, go_env
from program import declared
from test_workers import WORKER, create_as_the_provider, remove_as_the_provider

from builders import kube_proxy
from labconfig.parse import parse_config
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import lab_stack_config

NETWORK = "hc-net"
SUBNET = "172.28.0.0/16"
GATEWAY = "172.28.0.1"
CONTAINER = "hc-worker"
IMAGE = f"{REGISTRY}/kube-proxy:{K8S_VERSION}"
TASK = "hc-kube-proxy"
CONFIG_DIR = "/var/lib/kube-proxy"  # kubeadm's mount of the kube-proxy ConfigMap
CLUSTER_CIDR = "10.244.0.0/16"
CONNTRACK_MAX = "/proc/sys/net/netfilter/nf_conntrack_max"
HASHSIZE = "/sys/module/nf_conntrack/parameters/hashsize"
BOOT_TIMEOUT_SECONDS = 120
PROBE_BANNER = b"hc-probe\n"


# --- the host's conntrack settings ---------------------------------------------------------


@dataclass(frozen=True)
class HostConntrack:
    max: int
    hashsize: int

    @classmethod
    def read(cls) -> HostConntrack:
        return cls(int(Path(CONNTRACK_MAX).read_text()), int(Path(HASHSIZE).read_text()))

    def write(self) -> None:
        """Only what differs: a hashsize write rehashes the host's whole table."""
        current = HostConntrack.read()
        if current.hashsize != self.hashsize:
            Path(HASHSIZE).write_text(str(self.hashsize))
        if current.max != self.max:
            Path(CONNTRACK_MAX).write_text(str(self.max))


@contextlib.contextmanager
def host_conntrack(wanted: HostConntrack) -> Iterator[HostConntrack]:
    """The host (initial netns) set to `wanted`; the original restored afterwards, also on
    failure. Yields the original."""
    original = HostConntrack.read()
    try:
        wanted.write()
        yield original
    finally:
        original.write()


NEXT_VERSION = binaries.K8S_NEXT_VERSION  # v1.36.3, the real tier's second version
# A set of its own (the real tier's kubernetes-next set builds no kube-proxy); the same module
# and version, so Go's build cache shares the work.
KUBE_PROXY_NEXT_SET = binaries.BinarySet(
    name="host-kube-proxy-next",
    module="k8s.io/kubernetes",
    version=NEXT_VERSION,
    packages=("k8s.io/kubernetes/cmd/kube-proxy",),
    local_replace_version="v0." + NEXT_VERSION.split(".", 1)[1],
    ldflags=binaries._k8s_ldflags(NEXT_VERSION),
    bin_subdir=NEXT_VERSION,
)
NEXT_BINARY = f"/opt/hc/kube-proxy-{NEXT_VERSION}"  # in the worker


def kube_proxy_next(tier_cache: Path) -> Path:
    """kube-proxy v1.36.3, built once into the tier's cache."""
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(KUBE_PROXY_NEXT_SET, paths.go_root, env, go_version)
    return paths.go_root / "bin" / NEXT_VERSION / "kube-proxy"


def kubeadm_default_target(version: str, cpus: int) -> int:
    """The nf_conntrack_max kube-proxy writes with kubeadm's default configuration (Kamaji's
    addon): max(32768 x CPUs, 131072), capped at 1048576 from v1.36.0 (upstream facts
    `kube-proxy-conntrack-max-exact`, `kube-proxy-max-per-core-zero-skips-the-conntrack-table`)."""
    scaled = 32768 * cpus
    minor = int(version.lstrip("v").split(".")[1])
    if minor >= 36 and scaled > 1048576:
        return 1048576
    return max(scaled, 131072)


# --- the API server, reached from the test network ---------------------------------------


class _Forward(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        target = self.server.target  # type: ignore[attr-defined]
        with socket.create_connection(target, timeout=10) as upstream:
            upstream.settimeout(None)
            _pump(self.request, upstream)


def _pump(a: socket.socket, b: socket.socket) -> None:
    with selectors.DefaultSelector() as selector:
        selector.register(a, selectors.EVENT_READ, b)
        selector.register(b, selectors.EVENT_READ, a)
        while True:
            for key, _ in selector.select():
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                if not data:
                    return
                key.data.sendall(data)


class _Banner(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(PROBE_BANNER)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def serving(handler: type[socketserver.BaseRequestHandler], **attrs: Any) -> Iterator[int]:
    """A TCP server on the test network's gateway (only there); yields its port."""
    server = _Server((GATEWAY, 0), handler)
    for name, value in attrs.items():
        setattr(server, name, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def kube_proxy_kubeconfig(ca_pem: str, port: int, token: str) -> dict[str, Any]:
    """The API server through the forwarder; its serving certificate names localhost only."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "hc",
                "cluster": {
                    "server": f"https://{GATEWAY}:{port}",
                    "certificate-authority-data": _b64(ca_pem),
                    "tls-server-name": "localhost",
                },
            }
        ],
        "users": [{"name": "hc", "user": {"token": token}}],
        "contexts": [{"name": "hc", "context": {"cluster": "hc", "user": "hc"}}],
        "current-context": "hc",
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeadm_kube_proxy_config(printed: str) -> dict[str, Any]:
    """kubeadm's KubeProxyConfiguration (`kubeadm config print init-defaults
    --component-configs KubeProxyConfiguration`), with what kubeadm's addon phase sets from
    the cluster: the pod CIDR, and the mode the DaemonSet gets (iptables, kube-proxy's Linux
    default for an empty mode)."""
    documents = [d for d in yaml.safe_load_all(printed) if d]
    (config,) = [d for d in documents if d.get("kind") == "KubeProxyConfiguration"]
    return {**config, "clusterCIDR": CLUSTER_CIDR, "mode": "iptables"}


def program_kube_proxy_config(version: str = K8S_VERSION) -> dict[str, Any]:
    """The program's KubeProxyConfiguration for the lab stack's first tenant (container
    workers) at `version`, its pod CIDR the test's."""
    tenant = parse_config(lab_stack_config()).tenants[0]
    tenant = tenant.model_copy(update={"kubernetes_version": version, "pod_cidr": CLUSTER_CIDR})
    return kube_proxy.configuration(tenant)


# --- the worker ----------------------------------------------------------------------------


def create_network(docker: Docker) -> str:
    found = docker.claim("network", NETWORK)  # NotMadeHere: one the tier did not make stays
    if found is not None:
        docker.api("DELETE", f"/networks/{found['Id']}")  # left by an interrupted run of ours
    return docker.run(
        "network", "create", "--subnet", SUBNET, "--gateway", GATEWAY, NETWORK
    ).stdout.strip()


def worker_attributes(image_id: str) -> dict[str, Any]:
    """The program's tenant-a-worker-1 (privileged, cgroupns private, /lib/modules ro, tmpfs
    /tmp and /run, an anonymous /var), renamed `hc-` and put on the test network."""
    attributes = container_attributes(declared(WORKER))
    return {
        **attributes,
        "image": image_id,
        "name": CONTAINER,
        "hostname": CONTAINER,
        "networks_advanced": [{"name": NETWORK}],
        "labels": [],
    }


def start_worker(docker: Docker, node_image: str) -> str:
    found = docker.claim("container", CONTAINER)  # NotMadeHere: one the tier did not make
    if found is not None:
        remove_as_the_provider(docker, found["Id"])  # left by an interrupted run of ours
    image_id = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Id"]
    container = create_as_the_provider(docker, worker_attributes(image_id))
    deadline = time.monotonic() + BOOT_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        images = exec_in(docker, container, "ctr", "-n", "k8s.io", "images", "ls", "-q")
        if IMAGE in images.stdout.split():
            return container
        time.sleep(1)
    raise AssertionError(f"{IMAGE} not imported in {BOOT_TIMEOUT_SECONDS} s")


def exec_in(
    docker: Docker, container: str, *argv: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return docker.run("exec", "-i", container, *argv, input=input, check=False, timeout=120)


def sh(docker: Docker, container: str, script: str) -> subprocess.CompletedProcess[str]:
    return exec_in(docker, container, "bash", "-c", script)


def write_file(docker: Docker, container: str, path: str, text: str) -> None:
    done = exec_in(
        docker, container, "bash", "-c", f"mkdir -p $(dirname {path}) && cat > {path}", input=text
    )
    assert done.returncode == 0, done.stderr


# --- kube-proxy ----------------------------------------------------------------------------

RUN_TIMEOUT_SECONDS = 40


@dataclass(frozen=True)
class KubeProxyRun:
    """What one start of kube-proxy in the worker showed."""

    host: HostConntrack  # the initial netns while it ran
    exit_code: int | None  # None: still running when stopped (it started)
    log: str
    netns_max_before: int
    netns_max_after: int
    probe_rules: str  # `iptables-save -t nat` lines of the probe Service
    probe: str  # what a TCP connection to the probe Service's cluster IP read

    def lines(self, word: str) -> list[str]:
        return [line for line in self.log.splitlines() if word in line]

    def evidence(self) -> str:
        return "\n".join(
            [
                f"host (initial netns): nf_conntrack_max={self.host.max} "
                f"hashsize={self.host.hashsize}",
                f"worker netns nf_conntrack_max before={self.netns_max_before} "
                f"after={self.netns_max_after}",
                f"kube-proxy exit code: {self.exit_code} (None: running, stopped by the test)",
                "kube-proxy conntrack lines:",
                *(f"  {line}" for line in self.log.splitlines() if _about_conntrack(line)),
                "probe Service rules:",
                *(f"  {line}" for line in self.probe_rules.splitlines()),
                f"probe through the cluster IP: {self.probe!r}",
            ]
        )


def _about_conntrack(line: str) -> bool:
    return any(word in line for word in ("conntrack", "Sysfs", "Error running ProxyServer"))


def ctr_run_argv(*kube_proxy_args: str, binary: str | None = None) -> list[str]:
    """kubeadm's DaemonSet as a containerd task of the worker: privileged, host network, the
    config and /lib/modules mounted read-only, /run/xtables.lock shared; `binary` (a file in
    the worker) mounted over the image's kube-proxy."""
    program = "/usr/local/bin/kube-proxy"
    over = ["--mount", f"type=bind,src={binary},dst={program},options=rbind:ro"] if binary else []
    return [
        "ctr", "-n", "k8s.io", "run", "--rm", "--privileged", "--net-host",
        "--mount", f"type=bind,src={CONFIG_DIR},dst={CONFIG_DIR},options=rbind:ro",
        "--mount", "type=bind,src=/lib/modules,dst=/lib/modules,options=rbind:ro",
        "--mount", "type=bind,src=/run/xtables.lock,dst=/run/xtables.lock,options=rbind:rw",
        *over, IMAGE, TASK, program, *kube_proxy_args,
    ]  # fmt: skip


KUBE_PROXY_ARGS = (f"--config={CONFIG_DIR}/config.conf", f"--hostname-override={CONTAINER}")


@dataclass
class Worker:
    """The booted worker, kube-proxy's config in place, the probe Service on the API server."""

    docker: Docker
    container: str
    probe_ip: str
    kubeadm_config: dict[str, Any]  # kubeadm's default, as Kamaji's addon deploys it

    def netns_max(self) -> int:
        return int(self.sh(f"cat {CONNTRACK_MAX}").stdout)

    def netns_value(self, name: str) -> int:
        return int(self.sh(f"cat /proc/sys/net/netfilter/{name}").stdout)

    def install(self, binary: Path, path: str) -> str:
        """`binary` copied into the worker at `path`."""
        assert self.sh(f"mkdir -p $(dirname {path})").returncode == 0
        self.docker.run("cp", str(binary), f"{self.container}:{path}")
        return path

    def use_config(self, config: dict[str, Any]) -> None:
        """kube-proxy's config.conf (the ConfigMap's key) for the next run."""
        write_file(self.docker, self.container, f"{CONFIG_DIR}/config.conf", yaml.safe_dump(config))

    def sh(self, script: str) -> subprocess.CompletedProcess[str]:
        return sh(self.docker, self.container, script)

    def probe_rules(self) -> str:
        saved = self.sh("iptables-save -t nat").stdout
        return "\n".join(line for line in saved.splitlines() if "default/hc-probe" in line)

    def probe(self) -> str:
        """A TCP connection to the probe Service: only kube-proxy's DNAT leads anywhere."""
        got = self.sh(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{self.probe_ip}/80 && cat <&3'")
        return got.stdout

    def cleanup(self) -> None:
        """`kube-proxy --cleanup`: the rules a previous run left go."""
        done = exec_in(self.docker, self.container, *ctr_run_argv("--cleanup"))
        assert done.returncode == 0, done.stdout + done.stderr

    def run_kube_proxy(self, host: HostConntrack, binary: str | None = None) -> KubeProxyRun:
        """Start kube-proxy (the image's, or `binary` in the worker); wait for it to exit, or
        to write the probe Service's rules (then probe it and stop it)."""
        self.cleanup()
        before = self.netns_max()
        process = subprocess.Popen(
            ["docker", "exec", self.container, *ctr_run_argv(*KUBE_PROXY_ARGS, binary=binary)],
            env=self.docker.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
            while process.poll() is None and not self.probe_rules():
                assert time.monotonic() < deadline, "kube-proxy neither exited nor synced"
                time.sleep(0.5)
            rules, probe = self.probe_rules(), self.probe()
            after = self.netns_max()
        finally:
            exit_code = process.poll()
            if exit_code is None:
                exec_in(self.docker, self.container, "ctr", "-n", "k8s.io", "task", "kill", TASK)
            try:
                log = process.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                process.kill()  # the docker exec this started
                log = process.communicate()[0]
            exec_in(self.docker, self.container, "ctr", "-n", "k8s.io", "containers", "rm", TASK)
        return KubeProxyRun(host, exit_code, log, before, after, rules, probe)


def kubectl_apply(plane: Any, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def probe_objects(port: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Service without selector and its EndpointSlice: the banner server on the gateway."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "hc-probe", "namespace": "default"},
        "spec": {"ports": [{"name": "p", "port": 80, "protocol": "TCP"}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "hc-probe-1",
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": "hc-probe"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [GATEWAY], "conditions": {"ready": True}}],
    }
    return service, endpoints


def node_object(address: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The worker's Node (kube-proxy waits 30 s for it otherwise) and its status patch."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": CONTAINER}}
    return node, {"status": {"addresses": [{"type": "InternalIP", "address": address}]}}


@contextlib.contextmanager
def worker_with_kube_proxy(docker: Docker, node_image: str, workdir: Path) -> Iterator[Worker]:
    """hc-net, the real tier's API server (with a forwarder and the probe's banner server on
    the gateway), and the booted worker with kube-proxy's files; all removed afterwards."""
    from controlplane import ControlPlane  # tests/real, on sys.path through node_image

    network = create_network(docker)
    plane = ControlPlane.start(workdir, name="hc", full=False)
    container = None
    try:
        api_port = int(plane.server.rsplit(":", 1)[1])
        with (
            serving(_Forward, target=("127.0.0.1", api_port)) as forwarded,
            serving(_Banner) as banner,
        ):
            container = start_worker(docker, node_image)
            found = json.loads(docker.run("inspect", container).stdout)[0]
            address = found["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]
            node, status = node_object(address)
            kubectl_apply(plane, node, *probe_objects(banner))
            plane.kubectl("patch", "node", CONTAINER, "--subresource=status",
                          "--type=merge", "-p", json.dumps(status))  # fmt: skip
            printed = exec_in(
                docker, container, "kubeadm", "config", "print", "init-defaults",
                "--component-configs", "KubeProxyConfiguration",
            )  # fmt: skip
            config = kubeadm_kube_proxy_config(printed.stdout)
            path = config["clientConnection"]["kubeconfig"]
            assert path == program_kube_proxy_config()["clientConnection"]["kubeconfig"]
            kubeconfig = kube_proxy_kubeconfig(
                plane.ca_path.read_text(), forwarded, plane.admin_token
            )
            write_file(docker, container, f"{CONFIG_DIR}/config.conf", yaml.safe_dump(config))
            write_file(docker, container, path, yaml.safe_dump(kubeconfig))
            assert sh(docker, container, "touch /run/xtables.lock").returncode == 0
            probe_ip = plane.get_json("service", "hc-probe")["spec"]["clusterIP"]
            yield Worker(docker, container, probe_ip, config)
    finally:
        if container is not None:
            remove_as_the_provider(docker, container)
        plane.stop()
        docker.api("DELETE", f"/networks/{network}")
