"""GPU nodes outside simulation (nvml-mock and real modes): their label, and nvml-mock.

HAMi's real device plugin runs only on nodes labelled `gpu=on`. The kubelet sets that label
when it registers the Node (`--node-labels`, see `registration_labels`), so a node that
registers again after a leave, a reset or a new container is a GPU node at once; a patch
applied once by Pulumi would be lost with the first re-registration. For nvml-mock, GpuNodes
installs NVIDIA's nvml-mock chart, which lays a fake NVML driver root on every node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import TenantConfig, nvml_mock_profile
from components.helm import pinned_release

NVML_MOCK_CHART = "oci://ghcr.io/nvidia/k8s-test-infra/chart/nvml-mock"
NVML_MOCK_NAMESPACE = "nvml-mock"
# What HAMi's device plugin selects (`devicePlugin.nvidiaNodeSelector`). Unprefixed, so the
# kubelet may set it itself: NodeRestriction and the kubelet's flag check refuse only
# kubernetes.io / k8s.io keys outside their allowed set and node-restriction.kubernetes.io.
GPU_NODE_LABELS = {"gpu": "on"}


def registration_labels(gpu_mode: str) -> dict[str, str]:
    """The labels a worker's kubelet registers its Node with, by GPU mode.

    Simulated GPUs need none: the agent labels the nodes it simulates cards on.
    """
    return {} if gpu_mode == "simulated" else dict(GPU_NODE_LABELS)


def kubelet_node_labels(labels: dict[str, str]) -> str:
    """The value of the kubelet's `--node-labels` flag: `key=value,...`, stable order."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def nvml_mock_values(tenant: TenantConfig, image: str) -> dict[str, Any]:
    repository, _, tag = image.rpartition(":")
    return {
        "gpu": {"profile": nvml_mock_profile(tenant), "count": tenant.gpus[0].count},
        "image": {"repository": repository, "tag": tag},
    }


@dataclass(frozen=True)
class GpuNodesArgs:
    tenant: TenantConfig
    nvml_mock_chart_version: str
    nvml_mock_image: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]


class GpuNodes(pulumi.ComponentResource):
    """nvml-mock's fake NVML driver root on every worker of an nvml-mock tenant."""

    def __init__(
        self, name: str, args: GpuNodesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:GpuNodes", name, None, opts)
        self.nvml_mock = pinned_release(
            f"{name}-nvml-mock",
            chart=NVML_MOCK_CHART,
            repo=None,
            version=args.nvml_mock_chart_version,
            namespace=NVML_MOCK_NAMESPACE,
            values=nvml_mock_values(args.tenant, args.nvml_mock_image),
            release_name="nvml-mock",
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=args.depends_on
            ),
        )
        self.register_outputs({"nodes": args.tenant.worker_names})
