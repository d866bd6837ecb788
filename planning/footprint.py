"""What the lab asks of its host, computed from the same specs the components deploy.

The tenant control plane's requests are defined here and used by the TenantControlPlane
manifest, so the preflight's estimate cannot drift from what is really requested.
"""

from __future__ import annotations

from dataclasses import dataclass


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


# Per-container requests/limits of one TenantControlPlane pod. The API server OOMs at 512Mi,
# so its limit is well above that; requests stay small so several tenants fit 8 GB.
CONTROL_PLANE_RESOURCES = {
    "apiServer": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1536Mi"}},
    "controllerManager": {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    },
    "scheduler": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
}
KONNECTIVITY_SERVER_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"memory": "256Mi"},
}
GPU_AGENT_RESOURCES = {
    "requests": {"cpu": "20m", "memory": "48Mi"},
    "limits": {"cpu": "200m", "memory": "96Mi"},
}

# kind node with its own control plane, cert-manager, MetalLB, Kamaji and one etcd member.
MANAGEMENT = Footprint(cpus=1.2, memory_mb=2048, disk_gb=6)
# One tenant control plane pod (the sums of the requests above) plus its etcd share.
CONTROL_PLANE = Footprint(cpus=0.45, memory_mb=768 + 64, disk_gb=1)
# A kindest/node worker: kubelet, containerd, kube-proxy, flannel, konnectivity agent.
WORKER = Footprint(cpus=0.3, memory_mb=512, disk_gb=3)
# HAMi scheduler (kube-scheduler + extender), webhook, and our agent.
GPU_STACK = Footprint(cpus=0.25, memory_mb=384, disk_gb=1)


def lab_footprint(tenants: int, workers: int) -> Footprint:
    return MANAGEMENT + (CONTROL_PLANE + GPU_STACK) * tenants + WORKER * workers
