"""The simulated-GPU agent on real kubelets (issue 19, item 4).

The agent as the program deploys it (its ServiceAccount, RBAC, ConfigMaps and Deployment, the
image by the digest the stack config names) registers the simulated cards on Nodes that their
real kubelets own and keep updating (status heartbeats, their own capacity writes). The
registration must come back after a kubelet restart (which zeroes extended resources) and a
worker container restart, and the kubelet's cpu/memory/pods capacity must never be lost.
HAMi itself cannot run here: what needs it stays with tests/real and the hermetic tests.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from tenant_lab import TENANTS, TenantLab
from test_node_image import wait_for_boot

REGISTER = "hami.io/node-nvidia-register"
GPU = "nvidia.com/gpu"
KUBELET_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
CONVERGE_SECONDS = 120


def agent_config(tenants: TenantLab, tenant: str) -> dict[str, Any]:
    inputs = tenants.run.named(f"{tenant}-simulated-gpus-config").inputs
    return json.loads(inputs["data"]["config.json"])


def registered(tenants: TenantLab, tenant: str, node: str) -> dict[str, Any]:
    """What the agent wrote on the Node, and what the kubelet keeps there."""
    found = tenants.get(tenant, "node", node)
    cards = json.loads(found["metadata"].get("annotations", {}).get(REGISTER, "[]"))
    return {
        "cards": [(c["type"], c["devmem"], c["devcore"], c["count"]) for c in cards],
        "label": found["metadata"]["labels"].get("gpu"),
        "capacity": found["status"].get("capacity", {}),
        "allocatable": found["status"].get("allocatable", {}),
    }


def expected(tenants: TenantLab, tenant: str, node: str) -> dict[str, Any]:
    config = agent_config(tenants, tenant)
    cards = config["nodes"][node]
    return {
        "cards": [(c["type"], c["devmem"], c["devcore"], config["splitCount"]) for c in cards],
        "label": "on",
        "gpus": str(len(cards) * config["splitCount"]),
    }


def is_registered(tenants: TenantLab, tenant: str, node: str) -> bool:
    found, want = registered(tenants, tenant, node), expected(tenants, tenant, node)
    return (
        found["cards"] == want["cards"]
        and found["label"] == want["label"]
        and found["capacity"].get(GPU) == want["gpus"]
        and found["allocatable"].get(GPU) == want["gpus"]
    )


def wait_registered(tenants: TenantLab, tenant: str, node: str) -> float:
    """Seconds until the node is registered as the config says (fails after CONVERGE_SECONDS)."""
    started = time.monotonic()
    while not is_registered(tenants, tenant, node):
        if time.monotonic() - started > CONVERGE_SECONDS:
            raise AssertionError(
                f"{node}: {registered(tenants, tenant, node)} != {expected(tenants, tenant, node)}"
            )
        time.sleep(1)
    return time.monotonic() - started


def assert_kubelet_capacity(tenants: TenantLab, tenant: str, node: str) -> None:
    capacity = registered(tenants, tenant, node)["capacity"]
    assert all(capacity.get(r) for r in KUBELET_RESOURCES), capacity


@pytest.fixture(scope="module")
def agents(tenants: TenantLab) -> dict[str, float]:
    """The agent deployed in both tenants; seconds until every configured node registered."""
    took = {}
    for tenant in TENANTS:
        tenants.ensure_agent(tenant)
        started = time.monotonic()
        for node in agent_config(tenants, tenant)["nodes"]:
            wait_registered(tenants, tenant, node)
        took[tenant] = time.monotonic() - started
    return took


@pytest.mark.upstream("containerd-cri-resolves-by-name", "containerd-import-digest")
@pytest.mark.parametrize("tenant", TENANTS)
def test_the_agent_registers_the_simulated_cards_on_real_nodes(
    tenants: TenantLab, agents: dict[str, float], tenant: str
):
    deployment = tenants.get(tenant, "deployment", "hami-simulated-gpu-agent", "-n", "kube-system")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == tenants.agent_image  # by digest, found without a pull
    assert deployment["status"].get("readyReplicas") == 1, deployment["status"]
    for node in agent_config(tenants, tenant)["nodes"]:
        assert is_registered(tenants, tenant, node)
        assert_kubelet_capacity(tenants, tenant, node)


@pytest.mark.parametrize("tenant", TENANTS)
def test_the_registration_survives_the_kubelets_heartbeats(
    tenants: TenantLab, agents: dict[str, float], tenant: str
):
    """Over 25 s the kubelets renew their Leases (every 10 s; they write the Node's status only
    on a change or every 5 min) and the cards, the label and nvidia.com/gpu stay, next to the
    kubelet's capacity."""
    nodes = list(agent_config(tenants, tenant)["nodes"])

    def renewed(node: str) -> str:
        return tenants.get(tenant, "lease", node, "-n", "kube-node-lease")["spec"]["renewTime"]

    before = {node: renewed(node) for node in nodes}
    time.sleep(25)
    for node in nodes:
        assert renewed(node) != before[node], f"{node}'s kubelet renewed no Lease in 25 s"
        assert is_registered(tenants, tenant, node), registered(tenants, tenant, node)
        assert_kubelet_capacity(tenants, tenant, node)


def test_a_kubelet_restart_is_repaired_and_keeps_the_kubelets_capacity(
    tenants: TenantLab, agents: dict[str, float]
):
    """A restarted kubelet zeroes extended resources it does not manage (nvidia.com/gpu);
    the agent writes them back, and the kubelet's own capacity stays."""
    tenant, node = "tenant-b", "tenant-b-worker-2"
    tenants.docker.run("exec", node, "systemctl", "restart", "kubelet")
    wait_registered(tenants, tenant, node)
    assert_kubelet_capacity(tenants, tenant, node)


def test_a_worker_container_restart_is_repaired(tenants: TenantLab, agents: dict[str, float]):
    """`docker restart` of a worker: systemd boots again, the kubelet re-registers the same
    Node with its joined credentials, and the agent puts the cards back."""
    tenant, node = "tenant-a", "tenant-a-worker-2"
    tenants.docker.run("restart", node)
    assert wait_for_boot(tenants.docker, node) in ("running", "degraded")
    deadline = time.monotonic() + CONVERGE_SECONDS
    while (tenants.node_ready(tenant, node) or {}).get("status") != "True":
        assert time.monotonic() < deadline, f"{node} not Ready after its restart"
        time.sleep(2)
    wait_registered(tenants, tenant, node)
    assert_kubelet_capacity(tenants, tenant, node)
