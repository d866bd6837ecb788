"""Konnectivity in the tenants, as Kamaji wires it (issue 19, item 7): each stand-in runs Kamaji's
proxy-server in the control plane's pod with the API server's egress selector pointing at it,
and Kamaji's agent DaemonSet runs on the workers (tenant_lab.py). A webhook served by a pod on
the pod network (flannel), an address the control plane's network namespace has no route to,
answers admission calls: only through the tunnel. Logs and exec go the same way, and without
its agents a tenant reaches no node while the other tenant's tunnel keeps working.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import kamaji_render as kr
import konnectivity as kn
import pytest
import tenant_stand_in
from program import lab_plan
from tenant_lab import TENANTS, TenantLab, worker_names

from tests.support.pulumi_harness import integral_numbers

WEBHOOK = "tunnel-probe"


def kubectl(tenants: TenantLab, tenant: str) -> kn.Kubectl:
    admin = tenants.stand_ins[tenant].workdir / "admin.conf"

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return tenant_stand_in.kubectl(tenants.bin_dir, admin, *args, input=input)

    return run


def lab_network_bridge(tenants: TenantLab) -> str:
    """The lab network's Linux bridge on the host (Docker names it br-<network id prefix>)."""
    network = tenants.run.named("lab-network-bridge").inputs["name"]
    found = tenants.docker.run("network", "inspect", "-f", "{{.Id}}", network).stdout.strip()
    return f"br-{found[:12]}"


def stand_in_container(tenant: str, role: str) -> str:
    return f"kamaji-stand-in-{tenant}-{role}"


@pytest.fixture(scope="module")
def webhooks(tenants: TenantLab) -> Iterator[dict[str, str]]:
    """tenant -> the node serving its probe webhook (a pod-network pod on its first worker)."""
    served = {}
    for tenant in TENANTS:
        run = kubectl(tenants, tenant)
        node = worker_names(tenant)[0]
        tls = kn.self_signed(f"{WEBHOOK}.default.svc")
        objects = kn.webhook_objects(WEBHOOK, node, tenants.agent_image, tls, host_network=False)
        items = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        applied = run("apply", "-f", "-", input=items)
        assert applied.returncode == 0, applied.stderr
        kn.wait_for(
            f"{tenant}: webhook serving",
            lambda run=run: "serving on" in run("logs", WEBHOOK).stdout,
        )
        served[tenant] = node
    yield served
    for tenant in TENANTS:
        run = kubectl(tenants, tenant)
        run("delete", "validatingwebhookconfiguration", WEBHOOK, "--ignore-not-found")
        run("delete", "pod,service,secret", WEBHOOK, "--ignore-not-found", "--wait=false")
        run("delete", "configmap", "-l", "konnectivity-probe=true", "--ignore-not-found")


@pytest.mark.upstream("kamaji-konnectivity-egress-selector", "kamaji-konnectivity-agent-objects")
@pytest.mark.parametrize("tenant", TENANTS)
def test_every_worker_runs_an_agent_connected_to_the_pods_server(tenants: TenantLab, tenant: str):
    inspect = json.loads(
        tenants.docker.run("inspect", stand_in_container(tenant, "kube-apiserver")).stdout
    )
    assert f"--egress-selector-config-file={kr.EGRESS_SELECTOR_CONFIG}" in inspect[0]["Args"]
    assert kn.ready_agents(kubectl(tenants, tenant)) == sorted(worker_names(tenant))
    logs = tenants.docker.run("logs", stand_in_container(tenant, kn.SERVER_CONTAINER))
    assert logs.stderr.count('"Agent connected"') >= len(worker_names(tenant))


@pytest.mark.upstream("konnectivity-tunnel-carries-node-traffic")
@pytest.mark.parametrize("tenant", TENANTS)
def test_a_webhook_on_the_pod_network_answers_through_the_tunnel(
    tenants: TenantLab, webhooks: dict[str, str], tenant: str
):
    run = kubectl(tenants, tenant)
    pod = json.loads(run("get", "pod", WEBHOOK, "-o", "json").stdout)
    assert pod["spec"].get("hostNetwork") is not True
    # The control plane's namespace routes only through the lab network's gateway, the host,
    # and the host has no route to the pod network through the lab network. (A TCP connect
    # proves nothing here: this workplace's network accepts connections to any address.)
    pod_ip = pod["status"]["podIP"]
    sandbox_route = tenants.docker.run(
        "exec", stand_in_container(tenant, "sandbox"), "ip", "route", "get", pod_ip
    ).stdout
    assert f"via {lab_plan().gateway} " in sandbox_route, sandbox_route
    host_route = subprocess.run(
        ["ip", "route", "get", pod_ip], capture_output=True, text=True, check=True
    ).stdout
    assert f"dev {lab_network_bridge(tenants)} " not in host_route, host_route
    allowed = kn.admitted(run, "allow-1")
    assert "configmap/allow-1 created" in allowed.stdout
    denied = kn.admit(run, f"{kn.DENY_PREFIX}1")
    assert f"refused by the webhook on {webhooks[tenant]}" in denied.stderr
    # what the webhook saw: requests from its node's side of the tunnel, never the control plane
    reviews = [line.split() for line in run("logs", WEBHOOK).stdout.splitlines()]
    clients = {words[-1] for words in reviews if words[:1] == ["review"]}
    assert clients and tenants.stand_ins[tenant].address not in clients, clients


@pytest.mark.upstream("konnectivity-tunnel-carries-node-traffic")
@pytest.mark.parametrize("tenant", TENANTS)
def test_logs_and_exec_through_the_tunnel(
    tenants: TenantLab, webhooks: dict[str, str], tenant: str
):
    run = kubectl(tenants, tenant)
    assert f"serving on {webhooks[tenant]}" in run("logs", WEBHOOK).stdout
    executed = run("exec", WEBHOOK, "--", "python", "-c", "print('through the tunnel')")
    assert (executed.returncode, executed.stdout.strip()) == (0, "through the tunnel")


@pytest.mark.upstream("konnectivity-tunnel-carries-node-traffic")
def test_without_agents_tenant_b_reaches_no_pod_and_tenant_a_is_untouched(
    tenants: TenantLab, webhooks: dict[str, str]
):
    """tenant-b's agents go away (and come back); tenant-a's tunnel keeps working."""
    tenant_b, tenant_a = kubectl(tenants, "tenant-b"), kubectl(tenants, "tenant-a")
    tcp_b = tenants.stand_ins["tenant-b"]
    kn.remove_agents(tenant_b)
    try:
        for found in (
            kn.admit(tenant_b, "allow-2"),
            tenant_b("logs", WEBHOOK),
            tenant_b("exec", WEBHOOK, "--", "true"),
        ):
            assert found.returncode != 0
            assert kn.TUNNEL_DOWN in found.stderr, found.stderr
        assert kn.admit(tenant_a, "allow-2").returncode == 0
    finally:
        tcp = integral_numbers(tenants.run.named("tenant-b-control-plane").inputs)
        kn.apply_agent(tenants.bin_dir / "kubectl", tcp_b.workdir / "admin.conf", tcp)
    kn.wait_for(
        "agents back", lambda: kn.ready_agents(tenant_b) == sorted(worker_names("tenant-b"))
    )
    back = kn.admitted(tenant_b, "allow-3")
    assert "configmap/allow-3 created" in back.stdout
