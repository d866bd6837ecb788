"""HAMi in a tenant: scheduler extender, webhook and the device plugin that fits the GPU mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.config import TenantConfig
from components.helm import pinned_release

NAMESPACE = "kube-system"
CHART_REPO = "https://project-hami.github.io/HAMi/"
SCHEDULER_NAME = "hami-scheduler"
QUOTA_NAMESPACE = "gpu-workloads"
QUOTA_NAME = "gpu-quota"


@dataclass(frozen=True)
class HamiArgs:
    tenant: TenantConfig
    chart_version: str
    split_count: int
    node_lock_timeout: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]


NVML_MOCK_DRIVER_ROOT = "/var/lib/nvml-mock/driver"
RUNTIME_CLASS = "nvidia"


def device_plugin_values(tenant: TenantConfig, split_count: int) -> dict[str, Any]:
    """Which device plugin runs, by GPU mode; the real one only on nodes labelled gpu=on."""
    plugin: dict[str, Any] = {
        "enabled": tenant.gpu_mode != "simulated",
        "deviceSplitCount": split_count,
        "nvidiaNodeSelector": {"gpu": "on"},
    }
    if tenant.gpu_mode == "nvml-mock":
        # The real plugin loads NVIDIA's fake libnvidia-ml from the driver root nvml-mock lays out.
        plugin["nvidiaDriverRoot"] = NVML_MOCK_DRIVER_ROOT
    if tenant.gpu_mode == "real":
        # Containers with GPU slices run under the NVIDIA runtime the toolkit configured.
        plugin["runtimeClassName"] = RUNTIME_CLASS
        plugin["createRuntimeClass"] = True
    return plugin


def hami_values(tenant: TenantConfig, split_count: int, node_lock_timeout: str) -> dict[str, Any]:
    return {
        "schedulerName": SCHEDULER_NAME,
        "scheduler": {
            # The chart's default registry is a mirror; the tag must be the tenant's version.
            "kubeScheduler": {
                "image": {
                    "registry": "registry.k8s.io",
                    "repository": "kube-scheduler",
                    "tag": tenant.kubernetes_version,
                }
            },
            # scheduler.nodeLockExpire is ignored in v2.7-v2.10 (upstream issue 2692); the
            # extender's own flag is what sets the lock timeout.
            "extender": {
                "extraArgs": ["--debug", "-v=4", f"--node-lock-timeout={node_lock_timeout}"]
            },
            "defaultSchedulerPolicy": {
                "nodeSchedulerPolicy": tenant.scheduler_policy.node,
                "gpuSchedulerPolicy": tenant.scheduler_policy.gpu,
            },
        },
        "devicePlugin": device_plugin_values(tenant, split_count),
        # Simulated only: advertises gpumem/gpucores from the annotation gpu_agent writes.
        "mockDevicePlugin": {"enabled": tenant.gpu_mode == "simulated"},
    }


def gpu_quota_manifest(memory_mb: int) -> dict[str, Any]:
    """A ResourceQuota on HAMi's GPU memory key, which HAMi's webhook enforces per namespace."""
    return {
        "metadata": {"name": QUOTA_NAME, "namespace": QUOTA_NAMESPACE},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(memory_mb)}},
    }


class Hami(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: HamiArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Hami", name, None, opts)
        self.release = pinned_release(
            f"{name}-chart",
            chart="hami",
            repo=CHART_REPO,
            version=args.chart_version,
            namespace=NAMESPACE,
            values=hami_values(args.tenant, args.split_count, args.node_lock_timeout),
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=args.depends_on
            ),
        )
        self.quota = None
        if args.tenant.gpu_quota_mb:
            on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
            namespace = k8s.core.v1.Namespace(
                f"{name}-workloads", metadata={"name": QUOTA_NAMESPACE}, opts=on_tenant
            )
            quota = gpu_quota_manifest(args.tenant.gpu_quota_mb)
            self.quota = k8s.core.v1.ResourceQuota(
                f"{name}-gpu-quota",
                metadata=quota["metadata"],
                spec=quota["spec"],
                opts=pulumi.ResourceOptions.merge(
                    on_tenant, pulumi.ResourceOptions(depends_on=[namespace, self.release])
                ),
            )
        self.scheduler_name = SCHEDULER_NAME
        self.register_outputs({"schedulerName": self.scheduler_name})
