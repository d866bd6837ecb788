"""nvml-mock GPU nodes: NVIDIA's nvml-mock chart lays a fake NVML driver root on every node.

Their `gpu=on` label is registered by the kubelet itself (planning/node_labels.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.nvml_mock import nvml_mock_values
from components.helm import pinned_release
from labconfig.mirrors import ChartLocation, upstream_chart
from labconfig.model import TenantConfig

NVML_MOCK_NAMESPACE = "nvml-mock"


@dataclass(frozen=True)
class GpuNodesArgs:
    tenant: TenantConfig
    nvml_mock_chart_version: str
    nvml_mock_image: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]
    chart: ChartLocation = field(default_factory=lambda: upstream_chart("nvml-mock"))


class GpuNodes(pulumi.ComponentResource):
    """nvml-mock's fake NVML driver root on every worker of an nvml-mock tenant."""

    def __init__(
        self, name: str, args: GpuNodesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:GpuNodes", name, None, opts)
        self.nvml_mock = pinned_release(
            f"{name}-nvml-mock",
            chart=args.chart,
            version=args.nvml_mock_chart_version,
            namespace=NVML_MOCK_NAMESPACE,
            values=nvml_mock_values(args.tenant, args.nvml_mock_image),
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=args.depends_on
            ),
        )
        self.register_outputs({"nodes": args.tenant.worker_names})
