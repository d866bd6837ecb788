"""GpuNodes: what makes nodes GPU nodes outside simulation (nvml-mock and real modes).

Labels each worker `gpu=on` (HAMi's device plugin runs only there) and, for nvml-mock,
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


def nvml_mock_values(tenant: TenantConfig, image: str) -> dict[str, Any]:
    repository, _, tag = image.rpartition(":")
    return {
        "gpu": {"profile": nvml_mock_profile(tenant), "count": tenant.gpus[0].count},
        "image": {"repository": repository, "tag": tag},
    }


def gpu_node_label_patch(node_name: str) -> dict[str, Any]:
    return {"name": node_name, "labels": {"gpu": "on"}}


@dataclass(frozen=True)
class GpuNodesArgs:
    tenant: TenantConfig
    nvml_mock_chart_version: str
    nvml_mock_image: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]


class GpuNodes(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: GpuNodesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:GpuNodes", name, None, opts)
        on_tenant = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=args.depends_on
        )
        # A server-side-apply patch: destroy takes the label away again.
        self.labels = [
            k8s.core.v1.NodePatch(
                f"{node}-gpu-label", metadata=gpu_node_label_patch(node), opts=on_tenant
            )
            for node in args.tenant.worker_names
        ]
        self.nvml_mock = None
        if args.tenant.gpu_mode == "nvml-mock":
            self.nvml_mock = pinned_release(
                f"{name}-nvml-mock",
                chart=NVML_MOCK_CHART,
                repo=None,
                version=args.nvml_mock_chart_version,
                namespace=NVML_MOCK_NAMESPACE,
                values=nvml_mock_values(args.tenant, args.nvml_mock_image),
                release_name="nvml-mock",
                opts=on_tenant,
            )
        self.register_outputs({"nodes": args.tenant.worker_names})
