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
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
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


class NodeWatch:
    """`kubectl get node --watch` from before a disruption: every version of the Node the API
    server hands out after it, as (resourceVersion, nvidia.com/gpu capacity, allocatable)."""

    TEMPLATE = (
        "{.metadata.resourceVersion} {.status.capacity.nvidia\\.com/gpu}"
        ' {.status.allocatable.nvidia\\.com/gpu}{"\\n"}'
    )

    def __init__(self, tenants: TenantLab, tenant: str, node: str) -> None:
        argv = [
            str(tenants.bin_dir / "kubectl"),
            f"--kubeconfig={tenants.stand_ins[tenant].admin_path}",
            "get", "node", node, "--watch", "-o", f"jsonpath={self.TEMPLATE}",
        ]  # fmt: skip
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.versions: list[tuple[str, str, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._wait_for(lambda: bool(self.versions), "the watch's first event")
        self.first = self.versions[0]  # the Node as it was before the disruption

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            fields = [*line.split(), "", "", ""][:3]
            self.versions.append((fields[0], fields[1], fields[2]))

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + CONVERGE_SECONDS
        while not ready():
            assert time.monotonic() < deadline, f"no {what} in {CONVERGE_SECONDS}s: {self.versions}"
            time.sleep(0.2)

    def zeroed_then_back(self, gpus: str) -> tuple[int, int]:
        """Waits until a version after the first has nvidia.com/gpu at 0 and a later one at
        `gpus` again; their indices."""

        def found() -> tuple[int, int] | None:
            later = self.versions[1:]
            zero = next((i for i, v in enumerate(later, 1) if v[1:] == ("0", "0")), None)
            if zero is None:
                return None
            back = next(
                (i for i, v in enumerate(later[zero:], zero + 1) if v[1:] == (gpus, gpus)), None
            )
            return (zero, back) if back is not None else None

        self._wait_for(lambda: found() is not None, f"nvidia.com/gpu 0 and then {gpus}")
        result = found()
        assert result is not None
        return result

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def lease_renewed_after(tenants: TenantLab, tenant: str, node: str, after: datetime) -> datetime:
    """Waits for the node's kubelet to renew its Lease after `after` (only a running kubelet
    does); the renewal's time."""
    deadline = time.monotonic() + CONVERGE_SECONDS
    while True:
        lease = tenants.get(tenant, "lease", node, "-n", "kube-node-lease")
        renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        if renewed > after:
            return renewed
        assert time.monotonic() < deadline, f"{node}: no Lease renewal after {after}"
        time.sleep(1)


def ready_heartbeat(tenants: TenantLab, tenant: str, node: str) -> datetime:
    ready = tenants.node_ready(tenant, node) or {}
    return datetime.fromisoformat(
        ready.get("lastHeartbeatTime", "1970-01-01T00:00:00Z").replace("Z", "+00:00")
    )


def wait_status_written_since(tenants: TenantLab, tenant: str, node: str, before: datetime) -> None:
    """The new kubelet's first status write: a Ready heartbeat newer than `before`, the one on
    the Node before the restart. (Heartbeats have seconds only: a restarted kubelet writes its
    status within the second it starts in, so "later than the restart's time" can miss the
    write, and the next one comes only minutes later.)"""
    deadline = time.monotonic() + CONVERGE_SECONDS
    while ready_heartbeat(tenants, tenant, node) <= before:
        assert time.monotonic() < deadline, f"{node}: the kubelet wrote no status since {before}"
        time.sleep(1)


def now() -> datetime:
    return datetime.now(UTC)


@pytest.mark.upstream("kubelet-zeroes-extended-resources-of-a-recreated-node")
def test_a_kubelet_restart_ends_with_the_registration_and_the_kubelets_capacity(
    tenants: TenantLab, agents: dict[str, float]
):
    """A restarted kubelet may zero nvidia.com/gpu (it does when its device-plugin folder holds
    no checkpoint at the moment it registers, a race with its own socket; seen in some runs
    and not in others). So: once the new kubelet has renewed its Lease and written its status,
    the cards and nvidia.com/gpu are there or come back, and a zero the watch saw is followed
    by the agent's value; the kubelet's own capacity is there throughout."""
    tenant, node = "tenant-b", "tenant-b-worker-2"
    gpus = expected(tenants, tenant, node)["gpus"]
    watch = NodeWatch(tenants, tenant, node)
    try:
        heartbeat, restarted = ready_heartbeat(tenants, tenant, node), now()
        tenants.docker.run("exec", node, "systemctl", "restart", "kubelet")
        lease_renewed_after(tenants, tenant, node, restarted)
        wait_status_written_since(tenants, tenant, node, heartbeat)
        wait_registered(tenants, tenant, node)
        if any(v[1:] == ("0", "0") for v in watch.versions[1:]):
            watch.zeroed_then_back(gpus)
    finally:
        watch.stop()
    assert_kubelet_capacity(tenants, tenant, node)


@pytest.mark.upstream("kubelet-zeroes-extended-resources-of-a-recreated-node")
def test_nvidia_gpu_zeroed_as_a_kubelet_zeroes_it_is_restored_by_the_agent(
    tenants: TenantLab, agents: dict[str, float]
):
    """A kubelet that takes its Node for re-created (its device-plugin checkpoint gone) zeroes
    every extended resource of the Node's status when it registers. That write, made here as
    the kubelet makes it (capacity and allocatable to 0 through nodes/status), is seen by a
    watch opened before it, then the agent's value again; the kubelet's capacity stays."""
    tenant, node = "tenant-b", "tenant-b-worker-1"
    gpus = expected(tenants, tenant, node)["gpus"]
    watch = NodeWatch(tenants, tenant, node)
    try:
        assert watch.first[1:] == (gpus, gpus), watch.first
        zero = {"status": {"capacity": {GPU: "0"}, "allocatable": {GPU: "0"}}}
        tenants.kubectl(tenant, "patch", "node", node, "--subresource=status",
                        "--type=merge", "-p", json.dumps(zero))  # fmt: skip
        watch.zeroed_then_back(gpus)
    finally:
        watch.stop()
    assert is_registered(tenants, tenant, node)
    assert_kubelet_capacity(tenants, tenant, node)


def test_a_worker_container_restart_is_repaired(tenants: TenantLab, agents: dict[str, float]):
    """`docker restart` of a worker: systemd boots again, the new kubelet renews its Lease and
    writes the Node's status with its joined credentials, and the cards are there after that."""
    tenant, node = "tenant-a", "tenant-a-worker-2"
    heartbeat = ready_heartbeat(tenants, tenant, node)
    tenants.docker.run("restart", node)
    started = now()  # the container runs again: any Lease renewal from here is the new kubelet's
    assert wait_for_boot(tenants.docker, node) in ("running", "degraded")
    lease_renewed_after(tenants, tenant, node, started)
    wait_status_written_since(tenants, tenant, node, heartbeat)
    deadline = time.monotonic() + CONVERGE_SECONDS
    while (tenants.node_ready(tenant, node) or {}).get("status") != "True":
        assert time.monotonic() < deadline, f"{node} not Ready after its restart"
        time.sleep(2)
    wait_registered(tenants, tenant, node)
    assert_kubelet_capacity(tenants, tenant, node)
