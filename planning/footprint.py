"""What the lab asks of its host, computed from the same specs the components deploy.

The tenant control plane's resources are made here (memory from here, CPU from each tenant's
config) and used by the TenantControlPlane manifest, so the preflight's estimate cannot drift
from what is really requested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labconfig.model import ControlPlaneCpuRequests


@dataclass(frozen=True)
class Footprint:
    cpus: float
    memory_mb: int
    disk_gb: int

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(
            self.cpus + other.cpus, self.memory_mb + other.memory_mb, self.disk_gb + other.disk_gb
        )

    def __mul__(self, times: int) -> Footprint:
        return Footprint(self.cpus * times, self.memory_mb * times, self.disk_gb * times)


NOTHING = Footprint(cpus=0, memory_mb=0, disk_gb=0)

# Per-container memory (request, limit) of one TenantControlPlane pod. The API server OOMs at
# 512Mi, so its limit is well above that; requests stay small so several tenants fit 8 GB. The
# CPU requests are each tenant's `controlPlaneCpuRequests` (labconfig/model.py).
CONTROL_PLANE_MEMORY = {
    "apiServer": ("512Mi", "1536Mi"),
    "controllerManager": ("128Mi", "512Mi"),
    "scheduler": ("64Mi", "256Mi"),
}
KONNECTIVITY_SERVER_MEMORY = ("64Mi", "256Mi")
# The memory requests above together.
CONTROL_PLANE_POD_MB = 512 + 128 + 64 + 64


def _resources(cpu: str, memory: tuple[str, str]) -> dict[str, Any]:
    request, limit = memory
    return {"requests": {"cpu": cpu, "memory": request}, "limits": {"memory": limit}}


def control_plane_resources(cpu: ControlPlaneCpuRequests) -> dict[str, Any]:
    """The TenantControlPlane's deployment resources: its three control plane containers."""
    requests = cpu.model_dump(by_alias=True)
    return {
        name: _resources(requests[name], memory) for name, memory in CONTROL_PLANE_MEMORY.items()
    }


def konnectivity_server_resources(cpu: ControlPlaneCpuRequests) -> dict[str, Any]:
    return _resources(cpu.konnectivity_server, KONNECTIVITY_SERVER_MEMORY)


GPU_AGENT_RESOURCES = {
    "requests": {"cpu": "20m", "memory": "48Mi"},
    "limits": {"cpu": "200m", "memory": "96Mi"},
}

# kind node with its own control plane, cert-manager, MetalLB, Kamaji and one etcd member.
MANAGEMENT = Footprint(cpus=1.2, memory_mb=2048, disk_gb=6)
# A kindest/node worker: kubelet, containerd, kube-proxy, flannel, konnectivity agent.
WORKER = Footprint(cpus=0.3, memory_mb=512, disk_gb=3)
# HAMi scheduler (kube-scheduler + extender), webhook, and our agent.
GPU_STACK = Footprint(cpus=0.25, memory_mb=384, disk_gb=1)

# The lab's Prometheus and Grafana (builders/monitoring_values.py requests exactly these):
# memory only. A CPU request would take schedulable CPU from the kind node, where a tenant's
# rollout surge must fit (lab_footprint); idle, both use a few millicores. A tenant adds a few
# hundred series; the disk is their record over the retention, well under a gigabyte.
PROMETHEUS_RESOURCES = {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}}
GRAFANA_RESOURCES = {"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}}
MONITORING = Footprint(cpus=0, memory_mb=256 + 128, disk_gb=1)


def control_plane(cpus: float) -> Footprint:
    """One tenant's control plane pod (its requests: `cpus` and the memory above) plus its etcd
    share."""
    return Footprint(cpus=cpus, memory_mb=CONTROL_PLANE_POD_MB + 64, disk_gb=1)


# A tenant's control plane with the default requests (0.45 CPU).
CONTROL_PLANE = control_plane(ControlPlaneCpuRequests().cpus)


def lab_footprint(
    control_plane_cpus: Sequence[float], workers: int, monitoring: bool = True
) -> Footprint:
    """The lab with one control plane per tenant (each tenant's CPU requests) and `workers`,
    and its Prometheus and Grafana unless the stack turned them off.

    Plus one rollout surge: Kamaji rolls a TenantControlPlane's Deployment with maxSurge 100%
    (several times while it provisions one), so during a rollout a second pod of that tenant
    exists with the same requests, and on the single kind node it stays Pending ("Insufficient
    cpu") unless there is room for it: the tenant never becomes Ready. Room for one pod of the
    largest tenant lets every rollout finish: when two tenants roll at once, the second surge
    pod waits until the first rollout has removed its old pod. Only its CPU counts: the kind
    node's allocatable memory is the host's, gigabytes above what the lab requests, and the
    surge pod lives for seconds; it pulls no more images and has no etcd of its own.
    """
    planes = sum((control_plane(cpus) + GPU_STACK for cpus in control_plane_cpus), NOTHING)
    surge = (
        Footprint(cpus=max(control_plane_cpus), memory_mb=0, disk_gb=0)
        if control_plane_cpus
        else NOTHING
    )
    return MANAGEMENT + planes + surge + WORKER * workers + (MONITORING if monitoring else NOTHING)
