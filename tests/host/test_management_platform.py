"""The management cluster's platform layer as the program builds it, run for real on its kind
cluster: MetalLB announcing each tenant's address, and each tenant control plane where Kamaji runs
it, on a datastore shared as Kamaji shares it.

- MetalLB at the version the program pins, built here from its Go module (platform_images.py):
  its images loaded with `kind load image-archive` (what a user's node pulls from quay.io), its
  chart installed by Helm with the program's release inputs (name, namespace, values, atomic,
  timeout), the program's webhook wait script, then its IPAddressPool and L2Advertisement.
- The shared datastore (shared_datastore.py): one etcd with client-certificate auth, a user and a
  role per tenant as Kamaji makes them.
- Each tenant: its control plane as a Deployment (control_plane_pods.py) behind the Service Kamaji
  makes for the program's TenantControlPlane (kamaji_render.tenant_service). The program's healthz
  wait reaches each address from the host (MetalLB's speaker answers ARP for it on the lab
  network, kube-proxy on the kind node forwards to the pod), then the kubeadm phases Kamaji runs
  go through the same address.
- What MetalLB does with the addresses the program's config refuses (outside the pool, one
  address for two tenants), and the addresses after a restart of the kind node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import control_plane_pods
import kamaji_render
import konnectivity
import pytest
import shared_datastore
import tenant_stand_in
import workload_images
import yaml
from container_stats import stats
from docker_host import Docker
from footprint_report import FOOTPRINT, MEASURED
from management_cluster import Cluster, kubectl, management_cluster, run_script
from node_image import K8S_VERSION, BuildPaths
from platform_images import MetalLBBuild, build_etcd_image, build_metallb
from program import CreatedNetwork, TierHost
from tenant_lab import TenantLab, Worker, conntrack_off_kubeadms_target, worker_names
from tenant_stand_in import StandIn, run_phases
from test_node_image import mirrored_config
from test_workers import leftover

from labconfig.addresses import plan_network
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from planning import footprint
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import (
    ProgramRun,
    integral_numbers,
    lab_stack_config,
    run_program,
)

NAMESPACE = "metallb-system"
READY_TIMEOUT_SECONDS = 300
SETTLE_SECONDS = 30
TCP_TYPE = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"


@dataclass
class TenantPlane:
    """One tenant's control plane in the management cluster."""

    tcp: dict[str, Any]  # the program's TCP, with the UID the API server would give it
    workdir: Path  # its certificates and kubeconfigs (admin.conf reaches it on its address)
    healthz: subprocess.CompletedProcess[str]  # the program's healthz wait, as `pulumi up` ran it
    phases: list[str]  # the kubeadm phases run through the address

    @property
    def name(self) -> str:
        return self.tcp["metadata"]["name"]

    @property
    def address(self) -> str:
        return self.tcp["spec"]["networkProfile"]["address"]

    @property
    def schema(self) -> str:
        return kamaji_render.datastore_schema(self.tcp)


@dataclass
class Platform:
    docker: Docker
    cluster: Cluster
    run: ProgramRun
    build: MetalLBBuild
    tier_cache: Path
    webhook_wait: subprocess.CompletedProcess[str] | None = None  # install_metallb's
    tenants: dict[str, TenantPlane] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> str:
        return self.cluster.created.stdout

    @property
    def bin_dir(self) -> Path:
        return BuildPaths.under(self.tier_cache).bin

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return kubectl(self.tier_cache, self.kubeconfig, *args, input=input)

    def apply(self, *documents: dict[str, Any]) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
            yaml.safe_dump_all(documents, file)
            file.flush()
            applied = self.kubectl("apply", "--server-side", "-f", file.name)
        assert applied.returncode == 0, applied.stderr

    def get(self, *args: str) -> dict[str, Any]:
        found = self.kubectl("get", *args, "-o", "json")
        assert found.returncode == 0, found.stderr
        return json.loads(found.stdout)

    def etcd(self, script: str) -> subprocess.CompletedProcess[str]:
        """`sh -c script` in the datastore's pod (its root client certificate mounted)."""
        return self.kubectl(
            "exec", "-n", shared_datastore.NAMESPACE, shared_datastore.POD, "--",
            "sh", "-c", script,
        )  # fmt: skip

    def tcps(self) -> list[dict[str, Any]]:
        return [integral_numbers(r.inputs) for r in self.run.of_type(TCP_TYPE)]

    def healthz_wait(self, tenant: str) -> subprocess.CompletedProcess[str]:
        """The tenant's `<tenant>-api-ready` Command, run from this host as pulumi-command runs
        it."""
        command = self.run.named(f"{tenant}-api-ready").inputs
        return run_script(
            self.docker, self.tier_cache, command["create"], dict(command["environment"])
        )


def platform_config(reference: str) -> dict[str, Any]:
    """The lab stack with the mirrored node image, its tenants at the version the node image
    holds the control plane images of."""
    config = mirrored_config(reference)
    tenants = [{**tenant, "kubernetesVersion": K8S_VERSION} for tenant in config["tenants"]]
    return {**config, "tenants": tenants}


def _release_inputs(run: ProgramRun) -> dict[str, Any]:
    return run.named("metallb-chart").inputs


def helm_install(
    build: MetalLBBuild, kubeconfig: str, inputs: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`helm install` of the module's chart with the program's Release inputs: its name,
    namespace (created), values, atomic (which waits) and timeout."""
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "kubeconfig").write_text(kubeconfig)
        (Path(home) / "values.json").write_text(json.dumps(inputs["values"]))
        argv = [
            str(build.helm), "install", inputs["name"], str(build.chart),
            "--kubeconfig", f"{home}/kubeconfig", "--namespace", inputs["namespace"],
            "--values", f"{home}/values.json", "--timeout", f"{int(inputs['timeout'])}s",
        ]  # fmt: skip
        argv += ["--create-namespace"] if inputs["createNamespace"] else []
        argv += ["--atomic"] if inputs["atomic"] else []
        env = {"PATH": os.environ["PATH"], "HOME": home, "XDG_CACHE_HOME": f"{home}/cache"}
        return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def load_images(docker: Docker, tier_cache: Path, cluster: Cluster, archives: list[Path]) -> None:
    """`kind load image-archive` into the cluster's node, as a user loads an image kind cannot
    pull."""
    kind = str(BuildPaths.under(tier_cache).bin / "kind")
    name = cluster.command.environment["KIND_CLUSTER_NAME"]
    for archive in archives:
        loaded = subprocess.run(
            [kind, "load", "image-archive", str(archive), "--name", name],
            env={**os.environ, **docker.env()},
            capture_output=True,
            text=True,
            check=False,
        )
        assert loaded.returncode == 0, loaded.stderr


def install_metallb(platform: Platform) -> None:
    installed = helm_install(platform.build, platform.kubeconfig, _release_inputs(platform.run))
    assert installed.returncode == 0, installed.stderr
    webhook = platform.run.named("metallb-webhook-ready").inputs
    environment = {**webhook["environment"], "LAB_KUBECONFIG": platform.kubeconfig}
    platform.webhook_wait = run_script(
        platform.docker, platform.tier_cache, webhook["create"], environment
    )
    assert platform.webhook_wait.returncode == 0, platform.webhook_wait.stderr
    platform.apply(
        *(
            {k: r.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
            for r in platform.run.resources
            if r.type.startswith("kubernetes:metallb.io/")
        )
    )


def install_datastore(platform: Platform, image: str) -> shared_datastore.DatastorePki:
    pki = shared_datastore.make_pki()
    platform.apply(*shared_datastore.manifests(pki, image))
    status = kubectl(
        platform.tier_cache, platform.kubeconfig,
        "rollout", "status", "-n", shared_datastore.NAMESPACE,
        f"statefulset/{shared_datastore.NAME}", f"--timeout={READY_TIMEOUT_SECONDS}s",
        timeout=READY_TIMEOUT_SECONDS + 30,
    )  # fmt: skip
    assert status.returncode == 0, status.stderr
    setup = platform.etcd(shared_datastore.root_setup_script())
    assert setup.returncode == 0, setup.stderr
    return pki


def start_tenant(
    platform: Platform, tcp: dict[str, Any], pki: shared_datastore.DatastorePki, workdir: Path
) -> None:
    """What Kamaji does for a new TCP up to its pods: the datastore's user and role, the
    certificates, the Service and the Deployment (with its Konnectivity server)."""
    tcp["metadata"]["uid"] = str(uuid.uuid4())  # what the API server gives the created TCP
    schema = kamaji_render.datastore_schema(tcp)
    setup = platform.etcd(shared_datastore.tenant_setup_script(schema, schema))
    assert setup.returncode == 0, setup.stderr
    server = konnectivity.build_binaries(platform.tier_cache)["proxy-server"]
    files = control_plane_pods.tenant_files(platform.bin_dir, tcp, workdir, pki, server)
    platform.apply(
        namespace(tcp["metadata"]["namespace"]),
        *control_plane_pods.manifests(tcp, files, K8S_VERSION),
        kamaji_render.tenant_service(tcp),
    )


@pytest.fixture(scope="module")
def platform(
    docker: Docker,
    tier_cache_dir: Path,
    mirrored_node_image: str,
    lab_network: CreatedNetwork,
    request: pytest.FixtureRequest,
) -> Iterator[Platform]:
    run = run_program(platform_config(mirrored_node_image), host=TierHost())
    build = build_metallb(tier_cache_dir, _release_inputs(run)["version"])
    etcd_image, etcd_archive = build_etcd_image(tier_cache_dir)
    servers = {
        konnectivity.server_archive(tier_cache_dir, integral_numbers(r.inputs))
        for r in run.of_type(TCP_TYPE)
    }
    with (
        management_cluster(docker, tier_cache_dir, mirrored_node_image, lab_network) as cluster,
        tempfile.TemporaryDirectory(dir=tier_cache_dir) as work,
    ):
        started = time.monotonic()  # the kind cluster is ready: its create script waits for it
        archives = [*build.images.values(), etcd_archive, *sorted(servers)]
        load_images(docker, tier_cache_dir, cluster, archives)
        platform = Platform(docker, cluster, run, build, tier_cache_dir)
        install_metallb(platform)
        platform.timings["kind ready -> MetalLB admits the pool"] = time.monotonic() - started
        pki = install_datastore(platform, etcd_image)
        platform.timings["kind ready -> the shared datastore set up"] = time.monotonic() - started
        tcps = {tcp["metadata"]["name"]: tcp for tcp in platform.tcps()}
        for name, tcp in tcps.items():
            (Path(work) / name).mkdir()
            start_tenant(platform, tcp, pki, Path(work) / name)
        answered = {}
        for name in tcps:  # every tenant's wait first: each time is its own
            answered[name] = platform.healthz_wait(name)
            platform.timings[f"kind ready -> {name} answers on its address"] = (
                time.monotonic() - started
            )
        for name, tcp in tcps.items():
            workdir = Path(work) / name
            stand_in = StandIn(name, tcp["spec"]["networkProfile"]["address"], workdir)
            phases = []
            if answered[name].returncode == 0:
                phases = run_phases(platform.bin_dir, stand_in, tcp)
                # what Kamaji's Konnectivity addon applies once the API server answers
                konnectivity.apply_agent(platform.bin_dir / "kubectl", stand_in.admin_path, tcp)
            platform.tenants[name] = TenantPlane(tcp, workdir, answered[name], phases)
        try:
            yield platform
        finally:  # what the module measured, for the session's summary
            request.config.stash.setdefault(MEASURED, {}).update(platform.timings)


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def ingress(lab: Platform, namespace: str, name: str) -> list[str]:
    service = lab.get("service", name, "-n", namespace)
    return [i["ip"] for i in service["status"].get("loadBalancer", {}).get("ingress", [])]


def events(lab: Platform, namespace: str, name: str) -> list[tuple[str, str]]:
    found = lab.get("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in found["items"]]


def test_metallb_runs_from_the_pinned_chart_and_the_images_built_here(platform: Platform):
    """The chart at the program's pinned version, installed with its values (native L2 mode:
    no FRR container in the speaker), both workloads running from the images built here; the
    program's wait script saw the webhook admit the pool."""
    chart = yaml.safe_load((platform.build.chart / "Chart.yaml").read_text())
    assert chart["version"] == _release_inputs(platform.run)["version"]
    pods = platform.get("pods", "-n", NAMESPACE)["items"]
    containers = {
        pod["metadata"]["labels"]["app.kubernetes.io/component"]: pod["spec"]["containers"]
        for pod in pods
    }
    assert sorted(containers) == ["controller", "speaker"]
    assert [c["name"] for c in containers["speaker"]] == ["speaker"]
    images = {c["image"] for found in containers.values() for c in found}
    assert images == set(platform.build.images)
    for pod in pods:
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert ready["Ready"] == "True", pod["status"]
    assert platform.webhook_wait is not None
    assert "the API server admits the MetalLB pool" in platform.webhook_wait.stderr


def test_the_pool_is_the_programs_range(platform: Platform):
    pool = platform.get("ipaddresspool", "lab-pool", "-n", NAMESPACE)
    declared = platform.run.named("metallb-ipaddresspool").inputs
    assert pool["spec"]["addresses"] == declared["spec"]["addresses"]
    # MetalLB's own count: both tenants' addresses came from it
    assert pool["status"]["assignedIPv4"] == len(platform.tenants), pool["status"]
    advertisement = platform.get("l2advertisement", "lab-pool", "-n", NAMESPACE)
    assert advertisement["spec"]["ipAddressPools"] == ["lab-pool"]


@pytest.mark.upstream("kamaji-tcp-service", "metallb-loadbalancerips-annotation")
def test_each_tenant_control_plane_answers_on_its_address_from_the_host(platform: Platform):
    """Each TCP's Service as Kamaji makes it gets the address the program pins, MetalLB's
    speaker announces it from the kind node, and the program's healthz wait, run from the host,
    got `ok` from the tenant's API server pod through it; Kamaji's kubeadm phases then ran
    through the same address, and the admin kubeconfig reaches the tenant there."""
    for tenant in platform.tenants.values():
        assert tenant.healthz.returncode == 0, tenant.healthz.stderr
        assert f"https://{tenant.address}:6443 answers" in tenant.healthz.stderr
        assert assigned(platform, tenant.tcp) == [tenant.address]
        assert announced(platform, tenant.tcp).startswith("announcing from node")
        assert tenant.phases, "the kubeadm phases did not run"
        admin = yaml.safe_load((tenant.workdir / "admin.conf").read_text())
        assert admin["clusters"][0]["cluster"]["server"] == f"https://{tenant.address}:6443"
        version = kubectl(platform.tier_cache, yaml.safe_dump(admin), "version", "-o", "json")
        assert version.returncode == 0, version.stderr
        assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == K8S_VERSION


@pytest.mark.upstream("kamaji-etcd-shared-datastore")
def test_the_tenants_share_one_etcd_each_under_its_own_prefix(platform: Platform):
    """Both API servers store their objects in the one etcd, each under `/<its TCP's UID>/`;
    a tenant's client certificate reads its own keys and is refused the other's."""
    first, second = platform.tenants.values()
    for tenant in (first, second):
        namespaces = f"/{tenant.schema}/namespaces/"
        keys = platform.etcd(f"{shared_datastore.ETCDCTL} get --prefix --keys-only {namespaces}")
        assert keys.returncode == 0, keys.stderr
        assert f"/{tenant.schema}/namespaces/kube-system" in keys.stdout.split()
    cert, key = client_files(platform, first)
    as_first = f"etcdctl --endpoints=https://{shared_datastore.ENDPOINT}" + (
        f" --cacert={shared_datastore.PKI}/ca.crt --cert={cert} --key={key}"
    )
    own = platform.etcd(f"{as_first} get --keys-only /{first.schema}/namespaces/default")
    assert (own.returncode, own.stdout.strip()) == (
        0,
        f"/{first.schema}/namespaces/default",
    ), own.stderr
    other = platform.etcd(f"{as_first} get --prefix --keys-only /{second.schema}/")
    assert other.returncode != 0 and "permission denied" in other.stderr, other


@pytest.mark.upstream("kamaji-etcd-shared-datastore")
def test_the_shared_etcd_holds_each_tenants_user_and_role_as_kamaji_makes_them(platform: Platform):
    """What the whole-lab run's kamaji-etcd showed, read back from the etcd the stand-in set
    up: auth on; users and roles `root` and one per tenant named by its schema (the UID), the
    tenant's user holding its role alone, the role read and write on [/<UID>/, /<UID>0) only."""
    schemas = sorted(tenant.schema for tenant in platform.tenants.values())
    read = platform.etcd(
        f"{shared_datastore.ETCDCTL} auth status && {shared_datastore.ETCDCTL} user list"
        f" && {shared_datastore.ETCDCTL} role list"
    )
    assert read.returncode == 0, read.stderr
    lines = read.stdout.splitlines()
    assert lines[0] == "Authentication Status: true", lines
    names = sorted(["root", *schemas])  # etcd lists them by name
    assert lines[2:] == [*names, *names], lines
    for schema in schemas:
        user = platform.etcd(f"{shared_datastore.ETCDCTL} user get {schema}")
        assert user.stdout == f"User: {schema}\nRoles: {schema}\n", user
        role = platform.etcd(f"{shared_datastore.ETCDCTL} role get {schema}")
        span = f"\t[/{schema}/, /{schema}0) (prefix /{schema}/)\n"
        assert role.stdout == f"Role {schema}\nKV Read:\n{span}KV Write:\n{span}", role


def client_files(platform: Platform, tenant: TenantPlane) -> tuple[str, str]:
    """The tenant's etcd client certificate and key, copied into the datastore's pod."""
    paths = []
    for name in ("server.crt", "server.key"):
        path = f"/tmp/{tenant.schema}-{name}"
        content = (tenant.workdir / "pki" / "etcd" / name).read_text()
        # as an argument: `kubectl exec -i` with stdin once lost the end of a key here
        copied = platform.kubectl(
            "exec", "-n", shared_datastore.NAMESPACE, shared_datastore.POD, "--",
            "sh", "-c", f'echo "$1" > {path}', "sh", content,
        )  # fmt: skip
        assert copied.returncode == 0, copied.stderr
        paths.append(path)
    return paths[0], paths[1]


def assigned(lab: Platform, tcp: dict[str, Any]) -> list[str]:
    name, ns = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    return konnectivity.wait_for(f"{name}'s address", lambda: ingress(lab, ns, name))


def announced(lab: Platform, tcp: dict[str, Any]) -> str:
    """The speaker's event on the Service once it announces the address from a node."""
    name, ns = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    found = konnectivity.wait_for(
        f"{name}'s announcement",
        lambda: [m for r, m in events(lab, ns, name) if r == "nodeAssigned"],
    )
    return found[0]


JOINED_TENANT = "tenant-a"


@pytest.fixture(scope="module")
def worker(platform: Platform, mirrored_node_image: str) -> Iterator[tuple[TenantLab, Worker]]:
    """The tenant's first worker, created as the provider creates it, with the images a user's
    host would pull, joined by the program's join script with the admin kubeconfig Kamaji
    hands out (its server: the tenant's MetalLB address), then the program's kube-proxy and
    flannel."""
    tenant = platform.tenants[JOINED_TENANT]
    name = worker_names(JOINED_TENANT)[0]
    archives = workload_images.workload_archives(platform.tier_cache)
    agent = konnectivity.artifacts(platform.tier_cache, tenant.tcp).agent_archive
    images = [path.read_bytes() for path in [*archives.values(), agent]]
    lab = TenantLab(
        platform.docker, platform.tier_cache, platform.bin_dir, platform.run, images, "", ""
    )
    lab.stand_ins[JOINED_TENANT] = StandIn(JOINED_TENANT, tenant.address, tenant.workdir)
    image = json.loads(platform.docker.run("image", "inspect", mirrored_node_image).stdout)[0]
    attributes = {**container_attributes(platform.run.named(name).inputs), "image": image["Id"]}
    joined = Worker(name, JOINED_TENANT, attributes, platform.run.named(f"{name}-join").inputs)
    lab.workers[name] = joined
    with contextlib.ExitStack() as stack:
        stack.enter_context(conntrack_off_kubeadms_target(K8S_VERSION))  # the host's own
        stack.callback(leftover, platform.docker, name)
        lab.create_worker(joined)
        stack.callback(lab.run_leave, joined)  # the program's leave script: its Node goes too
        joined.joined = lab.run_join(joined)
        assert joined.joined.returncode == 0, joined.joined.stderr[-3000:]
        lab.apply_kube_proxy(JOINED_TENANT)
        lab.apply_flannel(JOINED_TENANT)
        lab.wait_ready([joined])
        platform.timings[f"{name}: container start to Node Ready"] = joined.ready_seconds or 0
        yield lab, joined


@pytest.mark.upstream("kamaji-konnectivity-egress-selector")
def test_a_worker_joins_through_the_address_and_is_reached_through_the_tunnel(
    platform: Platform, worker: tuple[TenantLab, Worker]
):
    """The worker's kubelet and kube-proxy talk to the tenant through MetalLB (its join read
    the kubeadm-config with the datastore's endpoint in Kamaji's form); the API server, a pod
    in the management cluster whose egress selector sends every request to nodes through
    Konnectivity, reads the worker's pod logs through the agent, which dialled the server on
    the same address. (The management cluster's pods could reach the worker's kubelet on the
    lab network directly too: what shows the tunnel is the egress selector in the API
    server's command and the server's "Agent connected".)"""
    lab, joined = worker
    assert "This node has joined the cluster" in joined.joined.stdout + joined.joined.stderr
    # the kubeadm-config the join read names the datastore as Kamaji uploads it (host:port)
    uploaded = lab.get(JOINED_TENANT, "configmap", "kubeadm-config", "-n", "kube-system")
    cluster = yaml.safe_load(uploaded["data"]["ClusterConfiguration"])
    assert cluster["etcd"]["external"]["endpoints"] == [shared_datastore.ENDPOINT]
    node = lab.get(JOINED_TENANT, "node", joined.name)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == K8S_VERSION
    konnectivity.wait_for(
        "the agent on the worker",
        lambda: konnectivity.ready_agents(lab_kubectl(lab)) == [joined.name],
    )
    # the agent's own logs: the API server reaches the worker's kubelet through that agent
    logs = lab.kubectl(
        JOINED_TENANT, "logs", "-n", konnectivity.AGENT_NAMESPACE,
        "-l", f"k8s-app={konnectivity.AGENT_NAME}",
    )  # fmt: skip
    assert logs, "no logs through the tunnel"
    deployment = platform.get("deployment", JOINED_TENANT, "-n", JOINED_TENANT)
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    egress = f"--egress-selector-config-file={kamaji_render.EGRESS_SELECTOR_CONFIG}"
    assert egress in containers["kube-apiserver"]["command"]
    server = platform.kubectl(
        "logs", "-n", JOINED_TENANT, f"deployment/{JOINED_TENANT}", "-c",
        konnectivity.SERVER_CONTAINER,
    )  # fmt: skip
    assert '"Agent connected"' in server.stdout + server.stderr, server.stderr[-2000:]


def lab_kubectl(lab: TenantLab) -> konnectivity.Kubectl:
    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        admin = lab.stand_ins[JOINED_TENANT].admin_path
        return tenant_stand_in.kubectl(lab.bin_dir, admin, *args, input=input)

    return run


def refused_service(lab: Platform, name: str, address: str) -> dict[str, Any]:
    """A third tenant's Service as Kamaji would make it, asking for `address`."""
    tcp = json.loads(json.dumps(lab.tcps()[0]))
    tcp["metadata"]["name"] = name
    annotations = tcp["spec"]["controlPlane"]["service"]["additionalMetadata"]["annotations"]
    annotations["metallb.io/loadBalancerIPs"] = address
    tcp["spec"]["networkProfile"]["address"] = address
    return kamaji_render.tenant_service(tcp)


def allocation_failure(lab: Platform, service: dict[str, Any]) -> str:
    lab.apply(service)
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    (message,) = konnectivity.wait_for(
        f"{name}'s allocation failure",
        lambda: [m for r, m in events(lab, ns, name) if r == "AllocationFailed"][:1],
    )
    assert ingress(lab, ns, name) == []
    return message


def program_refuses(tenants: list[dict[str, Any]]) -> str:
    """The program's verdict on the lab stack with these tenants: its ConfigError, after it
    registered nothing (exit code 32, the language host's "error already shown")."""
    config = {**lab_stack_config(), "tenants": tenants}
    exited = run_program(config, allow_exit=True)
    assert (exited.exit_code, exited.resources) == (32, [])
    with pytest.raises(ConfigError) as refused:
        plan_network(parse_config(config))
    return str(refused.value)


@pytest.mark.upstream("metallb-address-outside-pool")
def test_an_address_outside_the_pool_is_refused_before_anything_is_made(platform: Platform):
    """MetalLB leaves a Service that asks for an address outside every pool without one, saying
    so only in an event; the program refuses the config first, naming the key."""
    (pool,) = platform.run.named("metallb-ipaddresspool").inputs["spec"]["addresses"]
    outside = str(ipaddress.ip_address(pool.split("-")[0]) - 1)
    message = allocation_failure(platform, refused_service(platform, "outside", outside))
    assert message.endswith(f'["{outside}"] is not allowed in config'), message
    tenants = lab_stack_config()["tenants"]
    refused = program_refuses([{**tenants[0], "address": outside}, tenants[1]])
    assert refused.startswith("tenants[0].address") and "is outside the pool" in refused


@pytest.mark.upstream("metallb-address-sharing-needs-a-key")
def test_one_address_for_two_tenants_is_refused_before_anything_is_made(platform: Platform):
    """MetalLB gives an address to one Service only unless both carry the same sharing key
    (`metallb.io/allow-shared-ip`, which Kamaji's Service does not): the second stays without
    one while the first keeps answering. The program refuses the
    config first, naming the key and the tenant that has the address."""
    tcp = platform.tcps()[0]
    taken = tcp["spec"]["networkProfile"]["address"]
    message = allocation_failure(platform, refused_service(platform, "second", taken))
    ns, name = tcp["metadata"]["namespace"], tcp["metadata"]["name"]
    assert message.endswith(f"address also in use by {ns}/{name}"), message
    waited = platform.healthz_wait(tcp["metadata"]["name"])
    assert waited.returncode == 0, waited.stderr
    tenants = lab_stack_config()["tenants"]
    pinned = [{**tenant, "address": taken} for tenant in tenants]
    refused = program_refuses(pinned)
    assert refused.startswith("tenants[1].address") and "already pinned by tenant" in refused


def test_the_management_node_fits_the_model(platform: Platform, request: pytest.FixtureRequest):
    """The kind node with MetalLB, the shared etcd and both tenants' control plane pods (no
    cert-manager or Kamaji's controller here), settled, against planning/footprint.py's
    MANAGEMENT plus one CONTROL_PLANE per tenant; printed at the end of the session."""
    time.sleep(SETTLE_SECONDS)
    cpus, mib = stats(platform.docker, platform.cluster.command.node)
    model = footprint.MANAGEMENT + footprint.CONTROL_PLANE * len(platform.tenants)
    name = f"management node + MetalLB + etcd + {len(platform.tenants)} tenant control planes"
    request.config.stash.setdefault(FOOTPRINT, {})[name] = (cpus, mib, model)
    assert 0 < mib < model.memory_mb and cpus < model.cpus


def test_the_addresses_answer_again_after_the_kind_node_restarts(platform: Platform):
    """`docker restart` of the kind node (a host reboot does the same to it): kind's node comes
    back, MetalLB announces the addresses again, and the program's healthz wait passes."""
    node = platform.cluster.command.node
    started = time.monotonic()
    platform.docker.run("restart", node)
    for name in platform.tenants:
        waited = platform.healthz_wait(name)
        assert waited.returncode == 0, waited.stderr
    platform.timings["kind node restart -> every tenant address answers"] = (
        time.monotonic() - started
    )
