"""HAMi in a tenant: scheduler extender, webhook and the device plugin that fits the GPU mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.helm import pinned_release
from labconfig.model import TenantConfig
from planning.node_labels import GPU_NODE_LABELS

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
NVML_MOCK_LIBRARY_DIR = "usr/lib64"  # where nvml-mock puts libnvidia-ml.so.1 in its driver root
RUNTIME_CLASS = "nvidia"
RUNTIME_HANDLER = "nvidia"  # the containerd runtime `nvidia-ctk runtime configure` adds
# The extender's client-go rate limit; its default of 5 QPS / burst 10 throttles every Bind
# (node gets, node and pod patches, binding, events) to about 1.3 s in a burst of GPU pods.
EXTENDER_KUBE_QPS = 50
EXTENDER_KUBE_BURST = 100


def nvml_mock_library_envs() -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """LD_LIBRARY_PATH for the device plugin and for vgpu-monitor, each as it sees the driver.

    Both load NVML by name (go-nvml's package-level Init dlopens "libnvidia-ml.so.1"), and a
    kindest/node worker has no NVIDIA runtime to put it on their linker path. The chart mounts
    the driver root at /driver-root in the plugin container only; vgpu-monitor sees the node's
    /var at /hostvar. The mock library finds its GPU config relative to its own path.
    """
    plugin_dir = f"/driver-root/{NVML_MOCK_LIBRARY_DIR}"
    monitor_dir = f"/hostvar/{NVML_MOCK_DRIVER_ROOT.removeprefix('/var/')}/{NVML_MOCK_LIBRARY_DIR}"
    return (
        [{"name": "LD_LIBRARY_PATH", "value": plugin_dir}],
        [{"name": "LD_LIBRARY_PATH", "value": monitor_dir}],
    )


def device_plugin_values(tenant: TenantConfig, split_count: int) -> dict[str, Any]:
    """Which device plugin runs, by GPU mode; the real one only on nodes labelled gpu=on."""
    plugin: dict[str, Any] = {
        "enabled": tenant.gpu_mode != "simulated",
        "deviceSplitCount": split_count,
        "nvidiaNodeSelector": dict(GPU_NODE_LABELS),  # what the workers register with
    }
    if tenant.gpu_mode == "nvml-mock":
        # The real plugin loads NVIDIA's fake libnvidia-ml from the driver root nvml-mock lays out.
        plugin["nvidiaDriverRoot"] = NVML_MOCK_DRIVER_ROOT
        plugin_envs, monitor_envs = nvml_mock_library_envs()
        plugin["extraEnvs"] = plugin_envs
        plugin["monitor"] = {"extraEnvs": monitor_envs}
    if tenant.gpu_mode == "real":
        # Containers with GPU slices run under the NVIDIA runtime the toolkit configured. The
        # chart would create the RuntimeClass as a Helm hook, which uninstall leaves behind;
        # the Hami component owns it instead.
        plugin["runtimeClassName"] = RUNTIME_CLASS
        plugin["createRuntimeClass"] = False
    return plugin


def extender_args(node_lock_timeout: str) -> list[str]:
    # scheduler.nodeLockExpire is ignored in v2.7-v2.10 (upstream issue 2692); the extender's
    # own flag is what sets the lock timeout.
    return [
        "--debug",
        "-v=4",
        f"--node-lock-timeout={node_lock_timeout}",
        f"--kube-qps={EXTENDER_KUBE_QPS}",
        f"--kube-burst={EXTENDER_KUBE_BURST}",
    ]


def runtime_class_manifest() -> dict[str, Any]:
    return {"metadata": {"name": RUNTIME_CLASS}, "handler": RUNTIME_HANDLER}


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
            "extender": {"extraArgs": extender_args(node_lock_timeout)},
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
        on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.runtime_class = None
        if args.tenant.gpu_mode == "real":
            runtime_class = runtime_class_manifest()
            self.runtime_class = k8s.node.v1.RuntimeClass(
                f"{name}-runtime-class",
                metadata=runtime_class["metadata"],
                handler=runtime_class["handler"],
                opts=pulumi.ResourceOptions.merge(
                    on_tenant, pulumi.ResourceOptions(depends_on=args.depends_on)
                ),
            )
        self.release = pinned_release(
            f"{name}-chart",
            chart="hami",
            repo=CHART_REPO,
            version=args.chart_version,
            namespace=NAMESPACE,
            values=hami_values(args.tenant, args.split_count, args.node_lock_timeout),
            opts=pulumi.ResourceOptions.merge(
                on_tenant,
                pulumi.ResourceOptions(
                    depends_on=[
                        *args.depends_on,
                        *([self.runtime_class] if self.runtime_class else []),
                    ]
                ),
            ),
        )
        self.quota = None
        if args.tenant.gpu_quota_mb:
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
