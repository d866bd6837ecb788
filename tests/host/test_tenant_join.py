"""Workers join for real (issue 19): two tenants, each a control plane as Kamaji builds it
(tenant_stand_in.py) and two kindest/node workers that the program's join script joins, with the
program's flannel and kube-proxy (its KubeProxy component's objects) and CoreDNS from Kamaji's
DNS phase.
The lab is the session's `tenants` fixture (tenant_lab.py)."""

from __future__ import annotations

import ipaddress
import json

import pytest
import yaml
from container_stats import stats
from footprint_report import FOOTPRINT
from kube_proxy_run import HostConntrack
from program import lab_plan
from tenant_lab import (
    TENANTS,
    VERSION,
    TenantLab,
    pod_manifest,
    run_pod,
    wait_pod,
    worker_names,
)

from builders.control_plane import dns_service_ip
from planning import footprint
from tests.support.pulumi_harness import integral_numbers

# What every kubelet adds to its Node by itself (pkg/kubelet/kubelet_node_status.go).
KUBELET_OWN_LABELS = {
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
}


def tcp_spec(tenants: TenantLab, tenant: str) -> dict:
    return integral_numbers(tenants.run.named(f"{tenant}-control-plane").inputs)["spec"]


@pytest.mark.parametrize("tenant", TENANTS)
def test_the_control_plane_serves_at_the_tenants_address_on_the_lab_network(
    tenants: TenantLab, tenant: str
):
    stand_in = tenants.stand_ins[tenant]
    plan = lab_plan()
    assert ipaddress.ip_address(stand_in.address) == plan.tenant_addresses[tenant]
    assert plan.pool_start <= ipaddress.ip_address(stand_in.address) <= plan.pool_end
    kubeconfig = yaml.safe_load(tenants.kubeconfig(tenant))
    assert kubeconfig["clusters"][0]["cluster"]["server"] == f"https://{stand_in.address}:6443"
    version = json.loads(tenants.kubectl(tenant, "version", "-o", "json"))["serverVersion"]
    assert version["gitVersion"] == "v1.35.4"


@pytest.mark.parametrize("tenant", TENANTS)
def test_kamajis_phases_left_what_a_join_reads(tenants: TenantLab, tenant: str):
    """cluster-info (the join's discovery), kubeadm-config and the kubelet-config with the
    TCP's cgroup driver, DNS and kubelet patches: what every worker's kubelet then runs with."""
    info = tenants.get(tenant, "configmap", "cluster-info", "-n", "kube-public")
    assert f"server: https://{tenants.stand_ins[tenant].address}:6443" in info["data"]["kubeconfig"]
    spec = tcp_spec(tenants, tenant)
    for worker in worker_names(tenant):
        running = tenants.docker.run("exec", worker, "cat", "/var/lib/kubelet/config.yaml")
        config = yaml.safe_load(running.stdout)
        assert config["cgroupDriver"] == "systemd"
        assert config["cgroupRoot"] == "/kubelet"
        assert config["failSwapOn"] is False
        assert config["clusterDNS"] == [dns_service_ip(spec["networkProfile"]["serviceCidr"])]
        assert config["clusterDomain"] == "cluster.local"
        assert config["imageGCHighThresholdPercent"] == 100


@pytest.mark.upstream("kubelet-node-labels-at-registration")
@pytest.mark.parametrize("tenant", TENANTS)
def test_the_workers_register_with_exactly_the_labels_the_program_asks(
    tenants: TenantLab, tenant: str
):
    for worker in tenants.tenant_workers(tenant):
        asked = dict(
            pair.split("=", 1) for pair in worker.environment["NODE_LABELS"].split(",") if pair
        )
        node = tenants.get(tenant, "node", worker.name)
        labels = node["metadata"]["labels"]
        own = {key: value for key, value in labels.items() if key not in KUBELET_OWN_LABELS}
        assert own == asked, (worker.name, labels)
        assert labels["kubernetes.io/hostname"] == worker.name


@pytest.mark.upstream("flannel-chart-containers", "kindest-node-cni-layout")
def test_nodes_are_ready_only_with_the_programs_flannel(tenants: TenantLab):
    """tenant-a's workers joined before its flannel: NotReady, the runtime's network not
    ready (no CNI config: the node image has none, like kindest/node); then Ready once the
    program's chart ran. Each Node's pod CIDR is in the tenant's podCidr, and flannel wrote
    the program's CNI config (ptp delegate)."""
    for name, ready in tenants.before_cni.items():
        assert ready.get("status") == "False", (name, ready)
        assert "network plugin" in ready.get("message", "").lower(), (name, ready)
    for tenant in TENANTS:
        pod_cidr = ipaddress.ip_network(tcp_spec(tenants, tenant)["networkProfile"]["podCidr"])
        for worker in tenants.tenant_workers(tenant):
            node = tenants.get(tenant, "node", worker.name)
            ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
            assert ready == "True", worker.name
            assert ipaddress.ip_network(node["spec"]["podCIDR"]).subnet_of(pod_cidr)
            conf = tenants.docker.run(
                "exec", worker.name, "cat", "/etc/cni/net.d/10-flannel.conflist"
            )
            assert json.loads(conf.stdout)["plugins"][0]["delegate"] == {"type": "ptp"}
        flannel = tenants.get(tenant, "pods", "-n", "kube-flannel")["items"]
        assert {p["spec"]["nodeName"] for p in flannel} == set(worker_names(tenant))
        assert all(p["status"]["phase"] == "Running" for p in flannel), flannel


@pytest.mark.upstream("kube-proxy-max-per-core-zero-skips-the-conntrack-table")
@pytest.mark.parametrize("tenant", TENANTS)
def test_kube_proxy_runs_on_every_worker_and_leaves_the_hosts_conntrack_alone(
    tenants: TenantLab, tenant: str
):
    """The program's kube-proxy runs on every worker and never restarts, with the host's
    nf_conntrack_max off the value kubeadm's default configuration would have it write (at
    which Kamaji's addon crash-loops: test_kube_proxy_conntrack.py); it sizes nothing, and
    the host holds what it held."""
    pods = tenants.get(tenant, "pods", "-n", "kube-system", "-l", "k8s-app=kube-proxy")["items"]
    assert {p["spec"]["nodeName"] for p in pods} == set(worker_names(tenant))
    host, kubeadms_target = tenants.conntrack
    assert host.max != kubeadms_target
    for pod in pods:
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert status["image"].endswith(f"kube-proxy:{VERSION}"), status
        logs = tenants.kubectl(tenant, "logs", "-n", "kube-system", pod["metadata"]["name"])
        assert "Setting nf_conntrack_max" not in logs, logs[-2000:]
        assert "Setting conntrack hashsize" not in logs, logs[-2000:]
    assert HostConntrack.read() == host


SERVE = (
    "import http.server, socketserver\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(b'tenant-web')\n"
    "socketserver.TCPServer(('', 8080), H).serve_forever()\n"
)


def fetch(url: str) -> str:
    return (
        "import urllib.request\n"
        f"print(urllib.request.urlopen({url!r}, timeout=10).read().decode())\n"
    )


RESOLVE = "import socket\nprint(socket.gethostbyname('kubernetes.default.svc.cluster.local'))\n"


@pytest.fixture(scope="module")
def web(tenants: TenantLab) -> dict[str, str]:
    """Per tenant: a web server pod on its first worker behind a ClusterIP Service; the
    Service's ClusterIP."""
    found = {}
    for tenant in TENANTS:
        first = worker_names(tenant)[0]
        pod = pod_manifest("web", first, tenants.agent_image, ["python", "-c", SERVE])
        pod["spec"]["restartPolicy"] = "Always"
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
        tenants.kubectl_apply(tenant, json.dumps({"apiVersion": "v1", "kind": "List",
                                                  "items": [pod, service]}))  # fmt: skip
        running = wait_pod(tenants, tenant, "web", ("Running",))
        assert running["status"]["phase"] == "Running", running["status"]
        found[tenant] = tenants.get(tenant, "service", "web", "-n", "default")["spec"]["clusterIP"]
    return found


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_pod_on_one_worker_reaches_a_pod_on_the_other(
    tenants: TenantLab, web: dict[str, str], tenant: str
):
    server = tenants.get(tenant, "pod", "web", "-n", "default")["status"]["podIP"]
    second = worker_names(tenant)[1]
    phase, logs = run_pod(tenants, tenant, "client", second, fetch(f"http://{server}:8080/"))
    assert (phase, logs.strip()) == ("Succeeded", "tenant-web"), logs


@pytest.mark.parametrize("tenant", TENANTS)
def test_coredns_answers_on_both_workers_and_the_service_works_through_kube_proxy(
    tenants: TenantLab, web: dict[str, str], tenant: str
):
    api_ip = tenants.get(tenant, "service", "kubernetes")["spec"]["clusterIP"]
    for n, worker in enumerate(worker_names(tenant)):
        phase, logs = run_pod(tenants, tenant, f"dns-{n}", worker, RESOLVE)
        coredns = tenants.kubectl(tenant, "get", "pods", "-n", "kube-system", "-o", "wide",
                                  "-l", "k8s-app=kube-dns")  # fmt: skip
        assert (phase, logs.strip()) == ("Succeeded", api_ip), (worker, logs, coredns)
        by_name = fetch("http://web.default.svc.cluster.local/")
        phase, logs = run_pod(tenants, tenant, f"svc-{n}", worker, by_name)
        assert (phase, logs.strip()) == ("Succeeded", "tenant-web"), (worker, logs)


def test_the_time_to_ready_and_an_idle_joined_worker_are_measured(
    tenants: TenantLab, request: pytest.FixtureRequest
):
    """Container start to Node Ready for each worker (tenant-b's had flannel waiting; tenant-a's
    waited for it), and a joined worker's memory (kubelet, kube-proxy, flannel, Konnectivity
    agent; CoreDNS on some) against planning/footprint.py's WORKER."""
    seconds = {w.name: w.ready_seconds for w in tenants.workers.values()}
    assert all(s is not None and s < 180 for s in seconds.values()), seconds
    cpus, mib = stats(tenants.docker, worker_names("tenant-b")[1])
    measured = request.config.stash.get(FOOTPRINT, {})
    measured["joined worker (kubelet, kube-proxy, flannel, Konnectivity agent)"] = (
        cpus,
        mib,
        footprint.WORKER,
    )
    request.config.stash[FOOTPRINT] = measured
    assert 0 < mib < footprint.WORKER.memory_mb and cpus < footprint.WORKER.cpus
