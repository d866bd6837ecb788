"""Two tenants with real workers: the program's declarations, run against real programs.

Per tenant, a control plane as Kamaji builds one (tenant_stand_in.py) at the tenant's address
on the lab network; then, as `pulumi up` would run them, the program's worker containers
(created as the docker provider creates them), its join scripts with the environment WorkerPool
gives them (LAB_KUBECONFIG: the admin kubeconfig Kamaji's Secret holds), its flannel chart
with the program's values and its simulated-GPU agent's objects. Images a user's host would
pull are built here and imported into each worker's containerd first (workload_images.py).

The tier's stack config is the lab stack's with two workers per tenant, the tenants at
v1.35.4 (the one 1.35 patch built here), the node image by its mirrored name and the agent
image by the digest containerd gives it: keys a user sets the same way.

Each tenant's kube-proxy is the program's own (its KubeProxy component's objects), applied once
the stand-in's API server answers, as Kamaji's addon would have been. The host's conntrack
table is left as the host has it; only when nf_conntrack_max happens to equal what kubeadm's
default configuration would make kube-proxy write is it moved off that value for the lab's
lifetime (and restored), so the lab shows kube-proxy running at a value it would have refused.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import konnectivity
import tenant_objects
import tenant_stand_in
import workload_images
from docker_host import SESSION_ENV, Docker
from images import busybox_applets, busybox_binary, busybox_image, busybox_rootfs
from kube_proxy_run import HostConntrack, kubeadm_default_target
from management_cluster import run_script
from node_image import binaries, docker_archive
from program import NETWORK_RESOURCE, TierHost
from test_node_image import mirrored_config, wait_for_boot
from test_workers import create_as_the_provider, leftover

from builders.kubeconfig import checked_kubeconfig
from builders.lock_wait_policy import POD_GROUP_LABEL
from preflight.host_facts import online_cpus
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import ProgramRun, integral_numbers, run_program

TENANTS = ("tenant-a", "tenant-b")
WORKERS_PER_TENANT = 2
VERSION = "v1.35.4"
READY_TIMEOUT_SECONDS = 240


def tier_config(
    node_image: str, agent_image: str, upgraded: dict[str, tuple[str, str]] | None = None
) -> dict[str, Any]:
    """The tier's stack config; `upgraded`: tenant -> (kubernetesVersion, workerImage) of the
    tenants a user has moved to another version (their image named as for VERSION's)."""
    config = mirrored_config(node_image)
    tenants = [
        {**tenant, "workers": WORKERS_PER_TENANT, "kubernetesVersion": VERSION}
        for tenant in config["tenants"]
    ]
    for name, (version, image) in (upgraded or {}).items():
        (tenant,) = [t for t in tenants if t["name"] == name]
        tenant.update(kubernetesVersion=version, workerImage=image)
    return {**config, "tenants": tenants, "gpuAgentImage": agent_image}


def worker_names(tenant: str) -> list[str]:
    return [f"{tenant}-worker-{n}" for n in range(1, WORKERS_PER_TENANT + 1)]


@dataclass
class Worker:
    name: str
    tenant: str
    attributes: dict[str, Any]  # the docker provider's configuration
    join: dict[str, Any]  # the join Command's inputs
    started: float = 0.0  # time.monotonic() at container create
    steps: dict[str, float] = field(default_factory=dict)  # seconds from `started`
    joined: subprocess.CompletedProcess[str] | None = None
    ready_seconds: float | None = None

    @property
    def environment(self) -> dict[str, str]:
        return dict(self.join["environment"])


@dataclass
class TenantLab:
    docker: Docker
    cache: Path
    bin_dir: Path  # the real tier's kube binaries (kubectl, kubeadm)
    run: ProgramRun
    images: list[bytes]
    agent_image: str  # the pinned reference the stack config names (gpuAgentImage)
    tools_image: str  # labcheck's toolsImage, as the program's spec names it
    stand_ins: dict[str, tenant_stand_in.StandIn] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    before_cni: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> Ready
    # (the host's conntrack while the lab runs, what kubeadm's default config would write)
    conntrack: tuple[HostConntrack, int] = (HostConntrack(0, 0), 0)
    agents: set[str] = field(default_factory=set)  # tenants the agent was deployed in
    timings: dict[str, float] = field(default_factory=dict)

    def kubeconfig(self, tenant: str) -> str:
        """LAB_KUBECONFIG as WorkerPool hands it over: Kamaji's Secret, checked."""
        return checked_kubeconfig(
            self.stand_ins[tenant].admin_kubeconfig, f"{tenant}/{tenant}-admin-kubeconfig"
        )

    def kubectl(self, tenant: str, *args: str, check: bool = True, input: str | None = None) -> str:
        found = tenant_stand_in.kubectl(
            self.bin_dir, self.stand_ins[tenant].admin_path, *args, input=input
        )
        if check and found.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {found.stderr}")
        return found.stdout

    def get(self, tenant: str, *args: str) -> Any:
        return json.loads(self.kubectl(tenant, "get", *args, "-o", "json"))

    def tenant_workers(self, tenant: str) -> list[Worker]:
        return [w for w in self.workers.values() if w.tenant == tenant]

    def run_join(self, worker: Worker) -> subprocess.CompletedProcess[str]:
        environment = {**worker.environment, "LAB_KUBECONFIG": self.kubeconfig(worker.tenant)}
        joined = run_script(self.docker, self.cache, worker.join["create"], environment)
        worker.steps.setdefault("joined", time.monotonic() - worker.started)
        return joined

    def run_leave(self, worker: Worker) -> subprocess.CompletedProcess[str]:
        environment = {**worker.environment, "LAB_KUBECONFIG": self.kubeconfig(worker.tenant)}
        return run_script(self.docker, self.cache, worker.join["delete"], environment)

    def create_worker(self, worker: Worker) -> None:
        """The container as the provider creates it, booted, with the workload images."""
        leftover(self.docker, worker.name)
        worker.started = time.monotonic()
        create_as_the_provider(self.docker, worker.attributes)
        state = wait_for_boot(self.docker, worker.name)
        assert state in ("running", "degraded"), f"{worker.name}: systemd is {state!r}"
        worker.steps["booted"] = time.monotonic() - worker.started
        # what a user's host pulls from registries
        workload_images.load_images(self.docker, worker.name, self.images)
        worker.steps["images loaded"] = time.monotonic() - worker.started

    def node_ready(self, tenant: str, node: str) -> dict[str, Any] | None:
        found = tenant_stand_in.kubectl(
            self.bin_dir,
            self.stand_ins[tenant].workdir / "admin.conf",
            "get", "node", node, "-o", "json",
        )  # fmt: skip
        if found.returncode != 0:
            return None
        conditions = json.loads(found.stdout)["status"].get("conditions", [])
        return next((c for c in conditions if c["type"] == "Ready"), None)

    def first_ready_condition(self, tenant: str, node: str, timeout: float = 60) -> dict[str, Any]:
        """The Node's Ready condition once its kubelet has written one: `kubeadm join` returns
        when the Node exists, and the kubelet's first status write (with the conditions) can
        come a moment later on a busy host. Empty if none came within `timeout`."""
        deadline = time.monotonic() + timeout
        while (ready := self.node_ready(tenant, node)) is None and time.monotonic() < deadline:
            time.sleep(0.5)
        return ready or {}

    def wait_ready(self, workers: list[Worker]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        pending = [w for w in workers if w.ready_seconds is None]
        while pending:
            for worker in list(pending):
                ready = self.node_ready(worker.tenant, worker.name)
                if ready and ready["status"] == "True":
                    worker.ready_seconds = time.monotonic() - worker.started
                    pending.remove(worker)
            if pending and time.monotonic() > deadline:
                raise AssertionError(f"not Ready in {READY_TIMEOUT_SECONDS}s: {pending}")
            time.sleep(1)

    def wait_dns(self, tenant: str) -> None:
        """Every CoreDNS replica of Kamaji's DNS addon ready and behind the kube-dns Service:
        CoreDNS pods are placed only once Nodes are Ready, so a pod resolving names right
        after the joins can meet none (seen under load: "Temporary failure in name
        resolution")."""
        rollout = tenant_stand_in.kubectl(
            self.bin_dir, self.stand_ins[tenant].admin_path,
            "rollout", "status", "deployment/coredns", "-n", "kube-system",
            f"--timeout={READY_TIMEOUT_SECONDS}s",
        )  # fmt: skip
        if rollout.returncode != 0:
            pods = self.kubectl(tenant, "get", "pods", "-n", "kube-system", "-o", "wide")
            raise AssertionError(f"{tenant}: CoreDNS not ready: {rollout.stderr}\n{pods}")
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not self.dns_endpoints(tenant):
            assert time.monotonic() < deadline, f"{tenant}: kube-dns has no ready endpoint"
            time.sleep(1)

    def dns_endpoints(self, tenant: str) -> list[str]:
        """The ready addresses behind the kube-dns Service (its EndpointSlices)."""
        slices = self.get(
            tenant, "endpointslices", "-n", "kube-system",
            "-l", "kubernetes.io/service-name=kube-dns",
        )["items"]  # fmt: skip
        return [
            address
            for found in slices
            for endpoint in found.get("endpoints") or []
            if (endpoint.get("conditions") or {}).get("ready")
            for address in endpoint["addresses"]
        ]

    def apply_flannel(self, tenant: str) -> None:
        """The program's Flannel component: its namespace, then its chart with its values."""
        objects = tenant_objects.objects(
            tenant_objects.on_tenant(self.run, tenant), parents=(f"{tenant}-cni",)
        )
        self.apply_objects(tenant, objects)
        release = integral_numbers(self.run.named(f"{tenant}-cni-chart").inputs)
        rendered = workload_images.render_flannel(
            release["values"], release["namespace"], self.cache, release["name"]
        )
        self.kubectl_apply(tenant, rendered)

    def apply_kube_proxy(self, tenant: str, run: ProgramRun | None = None) -> None:
        """The program's KubeProxy component's objects (builders/kube_proxy.py), of `run` (the
        session's program run unless given)."""
        objects = tenant_objects.objects(
            tenant_objects.on_tenant(run or self.run, tenant), parents=(f"{tenant}-kube-proxy",)
        )
        assert len(objects) == 6, f"the program declares {len(objects)} kube-proxy objects"
        self.apply_objects(tenant, objects)

    def apply_agent(self, tenant: str, run: ProgramRun | None = None) -> None:
        """The program's SimulatedGpus component's objects (ServiceAccount, RBAC, ConfigMaps,
        Deployment), of `run` (the session's program run unless given)."""
        objects = tenant_objects.objects(
            tenant_objects.on_tenant(run or self.run, tenant), parents=(f"{tenant}-simulated-gpus",)
        )
        assert objects, f"the program declares no agent objects in {tenant}"
        self.apply_objects(tenant, objects)

    def apply_lock_wait_policy(
        self, tenant: str, run: ProgramRun | None = None
    ) -> list[dict[str, Any]]:
        """The admission policy (and its binding) the program's Hami component declares (in
        `run`, the session's program run unless given); HAMi's chart, and the quota beside it,
        are not applied here."""
        objects = [
            found
            for found in tenant_objects.objects(
                tenant_objects.on_tenant(run or self.run, tenant), parents=(f"{tenant}-hami",)
            )
            if found["kind"].startswith("MutatingAdmissionPolicy")
        ]
        assert objects, f"the program declares no lock-wait policy in {tenant}"
        self.apply_objects(tenant, objects)
        return objects

    def dry_run_gpu_pod_labels(self, tenant: str) -> dict[str, str]:
        """The labels a user's GPU pod would be stored with (a server-side dry run)."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "user-gpu-pod", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/app:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ]
            },
        }
        created = self.kubectl(
            tenant, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod)
        )
        return json.loads(created)["metadata"].get("labels") or {}

    def ensure_lock_wait_policy(self, tenant: str, run: ProgramRun | None = None) -> None:
        """The program's lock-wait policy applied and in effect (its informer has it)."""
        self.apply_lock_wait_policy(tenant, run)
        konnectivity.wait_for(
            f"{tenant}: the lock-wait policy in effect",
            lambda: POD_GROUP_LABEL in self.dry_run_gpu_pod_labels(tenant),
            timeout=30,
        )

    def ensure_agent(self, tenant: str) -> None:
        if tenant not in self.agents:
            self.apply_agent(tenant)
            self.agents.add(tenant)

    def kubectl_apply(self, tenant: str, manifests: str, *manager: str) -> None:
        """`kubectl apply --server-side` of YAML or JSON on stdin."""
        self.kubectl(tenant, "apply", "--server-side", *manager, "-f", "-", input=manifests)

    def apply_objects(self, tenant: str, items: list[dict[str, Any]]) -> None:
        """The program's objects, as one List under pulumi-kubernetes' field manager."""
        document = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        self.kubectl_apply(tenant, document, "--field-manager=pulumi-kubernetes")


def tools_archive(cache: Path, reference: str) -> bytes:
    """The tier's busybox (Debian's busybox-static: sh, mkdir, echo, httpd) under the name
    labcheck's spec gives its tools image, which a user's worker would pull."""
    binary = busybox_binary(cache)
    rootfs = busybox_rootfs(binary.read_bytes(), busybox_applets(binary))
    return docker_archive(reference, rootfs, ())


@contextmanager
def conntrack_off_kubeadms_target(version: str) -> Iterator[tuple[HostConntrack, int]]:
    """The host's conntrack table as it is, unless nf_conntrack_max equals the target
    kubeadm's default configuration makes kube-proxy write: then twice that, restored after.
    Yields (the host's settings while the lab runs, that target); the host is the same after."""
    original = HostConntrack.read()
    target = kubeadm_default_target(version, online_cpus(Path("/")))
    wanted = original if original.max != target else HostConntrack(2 * target, original.hashsize)
    wanted.write()
    try:
        yield wanted, target
    finally:
        original.write()
        assert HostConntrack.read() == original


def _timed(lab: TenantLab, what: str, started: float) -> None:
    lab.timings[what] = time.monotonic() - started


@contextmanager
def tenant_lab(docker: Docker, cache: Path, node_image: str, network: str) -> Iterator[TenantLab]:
    started = time.monotonic()
    archives = workload_images.workload_archives(cache)
    images = [path.read_bytes() for path in archives.values()]
    agent = workload_images.pinned_reference(archives[workload_images.AGENT_IMAGE].read_bytes())
    run = run_program(tier_config(node_image, agent), host=TierHost())
    assert run.named(NETWORK_RESOURCE).inputs["name"] == network
    spec = json.loads(run.named("validation-labcheck").inputs["environment"]["LABCHECK_SPEC"])
    images.append(tools_archive(cache, spec["toolsImage"]))
    tcps = {t: integral_numbers(run.named(f"{t}-control-plane").inputs) for t in TENANTS}
    proxies = {t: konnectivity.artifacts(cache, tcp) for t, tcp in tcps.items()}
    for archive in sorted({p.agent_archive for p in proxies.values()}):
        images.append(archive.read_bytes())
    real_bin = binaries.cache_root(SESSION_ENV) / "bin"  # the real tier's builds
    lab = TenantLab(docker, cache, real_bin, run, images, agent, spec["toolsImage"])
    _timed(lab, "workload images and the program", started)
    image_id = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Id"]
    for tenant in TENANTS:
        for name in worker_names(tenant):
            attributes = {**container_attributes(run.named(name).inputs), "image": image_id}
            lab.workers[name] = Worker(name, tenant, attributes, run.named(f"{name}-join").inputs)
    busybox = busybox_image(docker, cache)
    try:
        with conntrack_off_kubeadms_target(VERSION) as lab.conntrack:
            for tenant, tcp in tcps.items():
                step = time.monotonic()
                lab.stand_ins[tenant] = stand_in = tenant_stand_in.start(
                    docker, tcp=tcp, network=network, image=busybox, bin_dir=lab.bin_dir,
                    cache=cache, konnectivity_server=proxies[tenant].server_binary,
                )  # fmt: skip
                tenant_stand_in.run_phases(lab.bin_dir, stand_in, tcp)
                lab.apply_kube_proxy(tenant)  # the program's, where Kamaji's addon would be
                # what Kamaji's Konnectivity addon applies once the API server answers
                konnectivity.apply_agent(lab.bin_dir / "kubectl", stand_in.admin_path, tcp)
                _timed(lab, f"{tenant}: control plane and kubeadm phases", step)
            # tenant-b gets flannel before its workers exist, tenant-a after they joined: the
            # first shows a worker's whole way to Ready, the second its Nodes before the CNI
            lab.apply_flannel("tenant-b")
            step = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(len(lab.workers)) as pool:
                list(pool.map(lab.create_worker, lab.workers.values()))
            _timed(lab, "workers created, booted, images loaded", step)
            step = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(len(lab.workers)) as pool:
                joined = list(pool.map(lab.run_join, lab.workers.values()))
            joins = dict(zip(lab.workers, joined, strict=True))
            for name, joined in joins.items():
                lab.workers[name].joined = joined
                assert joined.returncode == 0, f"{name}: {joined.stderr[-3000:]}"
            _timed(lab, "join scripts (four at once)", step)
            for worker in lab.tenant_workers("tenant-a"):
                lab.before_cni[worker.name] = lab.first_ready_condition("tenant-a", worker.name)
            lab.apply_flannel("tenant-a")
            step = time.monotonic()
            lab.wait_ready(list(lab.workers.values()))
            _timed(lab, "Nodes Ready after the joins", step)
            step = time.monotonic()
            for tenant in TENANTS:
                lab.wait_dns(tenant)
            _timed(lab, "CoreDNS ready behind kube-dns", step)
            for worker in lab.workers.values():
                steps = ", ".join(f"{what} {at:.0f} s" for what, at in worker.steps.items())
                lab.timings[f"{worker.name}: container start to Node Ready ({steps})"] = (
                    worker.ready_seconds
                )
            yield lab
    finally:
        for name in lab.workers:  # as the provider removes them, each until it is gone: a
            # daemon stopped while a removal is in flight keeps the container "removing" for good
            leftover(docker, name)
        for stand_in in lab.stand_ins.values():
            tenant_stand_in.stop(docker, stand_in)


POD_TIMEOUT_SECONDS = 120


def pod_manifest(
    name: str, node: str, image: str, command: list[str], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod pinned to `node` (no scheduler decision to wait for), as nobody."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "securityContext": {"runAsUser": 65534, "allowPrivilegeEscalation": False},
                }
            ],
        },
    }


def wait_pod(lab: TenantLab, tenant: str, name: str, phases: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + POD_TIMEOUT_SECONDS
    while True:
        pod = lab.get(tenant, "pod", name, "-n", "default")
        if pod["status"].get("phase") in phases or time.monotonic() > deadline:
            return pod
        time.sleep(1)


def run_pod(lab: TenantLab, tenant: str, name: str, node: str, script: str) -> tuple[str, str]:
    """A Python script in a pod on `node` to its end: (phase, logs)."""
    manifest = pod_manifest(name, node, lab.agent_image, ["python", "-c", script])
    lab.kubectl(tenant, "delete", "pod", name, "-n", "default", "--ignore-not-found", "--wait")
    lab.kubectl_apply(tenant, json.dumps(manifest))
    pod = wait_pod(lab, tenant, name, ("Succeeded", "Failed"))
    logs = lab.kubectl(tenant, "logs", name, "-n", "default", check=False)
    return pod["status"].get("phase", ""), logs
