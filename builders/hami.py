"""HAMi's Helm values per GPU mode, its scheduler extender's flags, and the tenant's GPU quota."""

from __future__ import annotations

from typing import Any

from labconfig.model import TenantConfig
from planning.node_labels import GPU_NODE_LABELS

SCHEDULER_NAME = "hami-scheduler"
QUOTA_NAMESPACE = "gpu-workloads"
QUOTA_NAME = "gpu-quota"
NVML_MOCK_DRIVER_ROOT = "/var/lib/nvml-mock/driver"
NVML_MOCK_LIBRARY_DIR = "usr/lib64"  # where nvml-mock puts libnvidia-ml.so.1 in its driver root
RUNTIME_CLASS = "nvidia"
RUNTIME_HANDLER = "nvidia"  # the containerd runtime `nvidia-ctk runtime configure` adds
# The extender's one client-go token bucket, which every call of HAMi's shares: Filter's pod
# patch, Bind's lock (4 calls), pod patch and Binding, the events, and while a Bind waits for
# the node lock, two GETs per 100 ms poll. A burst of N pods on one node has N-1 Binds polling
# at once: about 20 x (N-1) requests a second. At 50/100 the polls starve the calls that place
# pods (a 50-pod burst: the last after 14-18 s); at 200/400 a 20-pod burst never waits on the
# bucket and a 50-pod burst waits little (docs/placement-time.md). HAMi's default is 5/10.
EXTENDER_KUBE_QPS = 200
EXTENDER_KUBE_BURST = 400
# How long Bind waits for a held node lock instead of failing, for pods labelled as a PodGroup
# (the capacity run's): a failed Bind waits out kube-scheduler's error backoff (1 s doubling to
# 10 s), which made a 20-pod burst's last pod wait 30-50 s (docs/placement-time.md). HAMi's
# default, set here so a changed default cannot switch it off. It must stay below the
# extender's httpTimeout in the kube-scheduler config HAMi's chart renders, or kube-scheduler
# gives up on the Bind first; the chart owns that value, so labcheck's hami.extender-timeout
# compares the two as deployed (upstream fact hami-chart-scheduler-config).
NODE_LOCK_RETRY_SECONDS = 28


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
        f"--node-lock-retry-timeout={NODE_LOCK_RETRY_SECONDS}s",
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
        # Never: HAMi's mock device plugin 1.0.1 exits on chart 2.10.0's device config (fact
        # hami-v2.10-mock-device-plugin-rejects-chart-config). gpu_agent registers simulated cards.
        "mockDevicePlugin": {"enabled": False},
    }


def gpu_quota_manifest(memory_mb: int) -> dict[str, Any]:
    """A ResourceQuota on HAMi's GPU memory key, which HAMi's webhook enforces per namespace."""
    return {
        "metadata": {"name": QUOTA_NAME, "namespace": QUOTA_NAMESPACE},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(memory_mb)}},
    }
