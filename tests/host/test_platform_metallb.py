"""MetalLB as the program installs it, run for real on the program's kind management cluster.

- MetalLB at the version the program pins, built here from its Go module (platform_images.py):
  its images loaded with `kind load image-archive` (what a user's node pulls from quay.io), its
  chart installed by Helm with the program's release inputs (name, namespace, values, atomic,
  timeout), the program's webhook wait script, then its IPAddressPool and L2Advertisement.
- Each tenant's Service as Kamaji makes it for the program's TenantControlPlane
  (kamaji_render.tenant_service), in front of a pod labelled as Kamaji labels the control plane
  pods that answers /healthz over TLS on the API port (platform_images.build_healthz: the tenant
  control plane itself runs beside the cluster in this tier, tenant_stand_in.py). The program's
  healthz wait script reaches each address from the host: MetalLB's speaker answers ARP for it on
  the lab network, kube-proxy on the kind node forwards to the pod.
- What MetalLB does with the addresses the program's config refuses (outside the pool, one
  address for two tenants), and the addresses after a restart of the kind node.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kamaji_render
import pytest
import yaml
from container_stats import stats
from docker_host import Docker
from footprint_report import FOOTPRINT, MEASURED
from management_cluster import Cluster, kubectl, management_cluster, run_script
from node_image import BuildPaths
from platform_images import MetalLBBuild, build_healthz, build_metallb
from program import CreatedNetwork
from test_node_image import mirrored_run

from labconfig.addresses import plan_network
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from planning import footprint
from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program

NAMESPACE = "metallb-system"
READY_TIMEOUT_SECONDS = 300
BACKEND_LABEL = "kamaji-hami-lab-host/healthz"
SETTLE_SECONDS = 30


@dataclass
class MetalLBLab:
    docker: Docker
    cluster: Cluster
    run: ProgramRun
    build: MetalLBBuild
    tier_cache: Path
    healthz_image: str
    webhook_wait: subprocess.CompletedProcess[str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> str:
        return self.cluster.created.stdout

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(self.tier_cache, self.kubeconfig, *args)

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

    def tcps(self) -> list[dict[str, Any]]:
        kind = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
        return [r.inputs for r in self.run.of_type(kind)]

    def healthz_wait(self, tenant: str) -> tuple[subprocess.CompletedProcess[str], float]:
        """The tenant's `<tenant>-api-ready` Command, run from this host as pulumi-command runs
        it, and how long it took."""
        command = self.run.named(f"{tenant}-api-ready").inputs
        started = time.monotonic()
        ran = run_script(
            self.docker, self.tier_cache, command["create"], dict(command["environment"])
        )
        return ran, time.monotonic() - started


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


@pytest.fixture(scope="module")
def metallb_lab(
    docker: Docker, tier_cache_dir: Path, mirrored_node_image: str, lab_network: CreatedNetwork
) -> Iterator[MetalLBLab]:
    run = mirrored_run(mirrored_node_image)
    build = build_metallb(tier_cache_dir, _release_inputs(run)["version"])
    healthz_image, healthz_archive = build_healthz(tier_cache_dir)
    with management_cluster(docker, tier_cache_dir, mirrored_node_image, lab_network) as cluster:
        timings: dict[str, float] = {}
        started = time.monotonic()  # the kind cluster is ready: its create script waits for it
        load_images(docker, tier_cache_dir, cluster, [*build.images.values(), healthz_archive])
        installed = helm_install(build, cluster.created.stdout, _release_inputs(run))
        assert installed.returncode == 0, installed.stderr
        webhook = run.named("metallb-webhook-ready").inputs
        environment = {**webhook["environment"], "LAB_KUBECONFIG": cluster.created.stdout}
        waited = run_script(docker, tier_cache_dir, webhook["create"], environment)
        assert waited.returncode == 0, waited.stderr
        timings["kind ready -> MetalLB admits the pool"] = time.monotonic() - started
        lab = MetalLBLab(
            docker, cluster, run, build, tier_cache_dir, healthz_image, waited, timings
        )
        pools = [
            {k: r.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
            for r in run.resources
            if r.type.startswith("kubernetes:metallb.io/")
        ]
        lab.apply(*pools)
        yield lab


def backend(tcp: dict[str, Any], image: str) -> dict[str, Any]:
    """Where the control plane pods would be: a pod Kamaji's Service selects, on the API port."""
    name, namespace = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    labels = {kamaji_render.NAME_LABEL: name, BACKEND_LABEL: "true"}
    port = int(tcp["spec"]["networkProfile"]["port"])
    container = {"name": "healthz", "image": image, "env": [{"name": "PORT", "value": str(port)}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def ingress(lab: MetalLBLab, namespace: str, name: str) -> list[str]:
    service = lab.get("service", name, "-n", namespace)
    return [i["ip"] for i in service["status"].get("loadBalancer", {}).get("ingress", [])]


def events(lab: MetalLBLab, namespace: str, name: str) -> list[tuple[str, str]]:
    found = lab.get("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")
    return [(e["reason"], e["message"]) for e in found["items"]]


def wait_for(what: str, probe: Any, timeout: float = READY_TIMEOUT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(1)
    return found


def test_metallb_runs_from_the_pinned_chart_and_the_images_built_here(metallb_lab: MetalLBLab):
    """The chart at the program's pinned version, installed with its values (native L2 mode:
    no FRR container in the speaker), both workloads running from the images built here; the
    program's wait script saw the webhook admit the pool."""
    chart = yaml.safe_load((metallb_lab.build.chart / "Chart.yaml").read_text())
    assert chart["version"] == _release_inputs(metallb_lab.run)["version"]
    pods = metallb_lab.get("pods", "-n", NAMESPACE)["items"]
    containers = {
        pod["metadata"]["labels"]["app.kubernetes.io/component"]: pod["spec"]["containers"]
        for pod in pods
    }
    assert sorted(containers) == ["controller", "speaker"]
    assert [c["name"] for c in containers["speaker"]] == ["speaker"]
    images = {c["image"] for found in containers.values() for c in found}
    assert images == set(metallb_lab.build.images)
    for pod in pods:
        ready = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert ready["Ready"] == "True", pod["status"]
    assert "the API server admits the MetalLB pool" in metallb_lab.webhook_wait.stderr


def test_the_pool_is_the_programs_range(metallb_lab: MetalLBLab):
    pool = metallb_lab.get("ipaddresspool", "lab-pool", "-n", NAMESPACE)
    declared = metallb_lab.run.named("metallb-ipaddresspool").inputs
    assert pool["spec"]["addresses"] == declared["spec"]["addresses"]
    advertisement = metallb_lab.get("l2advertisement", "lab-pool", "-n", NAMESPACE)
    assert advertisement["spec"]["ipAddressPools"] == ["lab-pool"]


@pytest.mark.upstream("kamaji-tcp-service", "metallb-loadbalancerips-annotation")
def test_each_tenant_address_answers_from_the_host(metallb_lab: MetalLBLab):
    """Each TCP's Service as Kamaji makes it: MetalLB gives it the address the program pins and
    its speaker announces it from the kind node; the program's healthz wait, run from the host,
    gets `ok` through it."""
    started = time.monotonic()
    for tcp in metallb_lab.tcps():
        metallb_lab.apply(
            namespace(tcp["metadata"]["namespace"]),
            backend(tcp, metallb_lab.healthz_image),
            kamaji_render.tenant_service(tcp),
        )
    for tcp in metallb_lab.tcps():
        name, address = tcp["metadata"]["name"], tcp["spec"]["networkProfile"]["address"]
        assert assigned(metallb_lab, tcp) == [address]
        assert "announcing from node" in announced(metallb_lab, tcp), events(
            metallb_lab, name, name
        )
        waited, seconds = metallb_lab.healthz_wait(name)
        assert waited.returncode == 0, waited.stderr
        assert f"https://{address}:6443 answers" in waited.stderr
        metallb_lab.timings[f"Service created -> {name} answers from the host"] = (
            time.monotonic() - started
        )
        metallb_lab.timings[f"{name}: the program's healthz wait"] = seconds


def assigned(lab: MetalLBLab, tcp: dict[str, Any]) -> list[str]:
    name, ns = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    return wait_for(f"{name}'s address", lambda: ingress(lab, ns, name))


def announced(lab: MetalLBLab, tcp: dict[str, Any]) -> str:
    """The speaker's event on the Service once it announces the address from a node."""
    name, ns = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    found = wait_for(
        f"{name}'s announcement",
        lambda: [m for r, m in events(lab, ns, name) if r == "nodeAssigned"],
    )
    return found[0]


def refused_service(lab: MetalLBLab, name: str, address: str) -> dict[str, Any]:
    """A third tenant's Service as Kamaji would make it, asking for `address`."""
    tcp = json.loads(json.dumps(lab.tcps()[0]))
    tcp["metadata"]["name"] = name
    annotations = tcp["spec"]["controlPlane"]["service"]["additionalMetadata"]["annotations"]
    annotations["metallb.io/loadBalancerIPs"] = address
    tcp["spec"]["networkProfile"]["address"] = address
    return kamaji_render.tenant_service(tcp)


def allocation_failure(lab: MetalLBLab, service: dict[str, Any]) -> str:
    lab.apply(service)
    ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
    (message,) = wait_for(
        f"{name}'s allocation failure",
        lambda: [m for r, m in events(lab, ns, name) if r == "AllocationFailed"][:1],
    )
    assert ingress(lab, ns, name) == []
    return message


def program_refuses(run: ProgramRun, tenants: list[dict[str, Any]]) -> str:
    """The program's verdict on the lab stack with these tenants: its ConfigError, after it
    registered nothing (exit code 32, the language host's "error already shown")."""
    config = {**lab_stack_config(), "tenants": tenants}
    exited = run_program(config, allow_exit=True)
    assert (exited.exit_code, exited.resources) == (32, [])
    with pytest.raises(ConfigError) as refused:
        plan_network(parse_config(config))
    return str(refused.value)


@pytest.mark.upstream("metallb-address-outside-pool")
def test_an_address_outside_the_pool_is_refused_before_anything_is_made(metallb_lab: MetalLBLab):
    """MetalLB leaves a Service that asks for an address outside every pool without one, saying
    so only in an event; the program refuses the config first, naming the key."""
    (pool,) = metallb_lab.run.named("metallb-ipaddresspool").inputs["spec"]["addresses"]
    outside = str(ipaddress.ip_address(pool.split("-")[0]) - 1)
    message = allocation_failure(metallb_lab, refused_service(metallb_lab, "outside", outside))
    assert message.endswith(f'["{outside}"] is not allowed in config'), message
    tenants = lab_stack_config()["tenants"]
    refused = program_refuses(metallb_lab.run, [{**tenants[0], "address": outside}, tenants[1]])
    assert refused.startswith("tenants[0].address") and "is outside the pool" in refused


@pytest.mark.upstream("metallb-address-sharing-needs-a-key")
def test_one_address_for_two_tenants_is_refused_before_anything_is_made(metallb_lab: MetalLBLab):
    """MetalLB gives an address to one Service only unless both carry the same sharing key
    (`metallb.io/allow-shared-ip`, which Kamaji's Service does not): the second stays without
    one while the first keeps answering. The program refuses the
    config first, naming the key and the tenant that has the address."""
    tcp = metallb_lab.tcps()[0]
    taken = tcp["spec"]["networkProfile"]["address"]
    message = allocation_failure(metallb_lab, refused_service(metallb_lab, "second", taken))
    ns, name = tcp["metadata"]["namespace"], tcp["metadata"]["name"]
    assert message.endswith(f"address also in use by {ns}/{name}"), message
    waited, _ = metallb_lab.healthz_wait(tcp["metadata"]["name"])
    assert waited.returncode == 0, waited.stderr
    tenants = lab_stack_config()["tenants"]
    pinned = [{**tenant, "address": taken} for tenant in tenants]
    refused = program_refuses(metallb_lab.run, pinned)
    assert refused.startswith("tenants[1].address") and "already pinned by tenant" in refused


def test_the_management_node_with_metallb_fits_the_model(
    metallb_lab: MetalLBLab, request: pytest.FixtureRequest
):
    """The kind node with MetalLB and two tenant Services (no cert-manager or Kamaji here),
    settled, against planning/footprint.py's MANAGEMENT; printed at the end of the session."""
    time.sleep(SETTLE_SECONDS)
    cpus, mib = stats(metallb_lab.docker, metallb_lab.cluster.command.node)
    request.config.stash.setdefault(FOOTPRINT, {})["management node + MetalLB"] = (
        cpus,
        mib,
        footprint.MANAGEMENT,
    )
    assert 0 < mib < footprint.MANAGEMENT.memory_mb and cpus < footprint.MANAGEMENT.cpus


def test_the_addresses_answer_again_after_the_kind_node_restarts(
    metallb_lab: MetalLBLab, request: pytest.FixtureRequest
):
    """`docker restart` of the kind node (a host reboot does the same to it): kind's node comes
    back, MetalLB announces the addresses again, and the program's healthz wait passes."""
    node = metallb_lab.cluster.command.node
    started = time.monotonic()
    metallb_lab.docker.run("restart", node)
    for tcp in metallb_lab.tcps():
        waited, _ = metallb_lab.healthz_wait(tcp["metadata"]["name"])
        assert waited.returncode == 0, waited.stderr
    metallb_lab.timings["kind node restart -> every tenant address answers"] = (
        time.monotonic() - started
    )
    request.config.stash.setdefault(MEASURED, {}).update(metallb_lab.timings)
