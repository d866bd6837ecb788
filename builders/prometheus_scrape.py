"""What the lab's Prometheus scrapes in each tenant, and the tenant-side reader it scrapes as.

Every tenant's sharing metrics are read through that tenant's own API server, at its MetalLB
address: the API server's service proxy reaches the pod over Konnectivity, so the management
cluster needs no route to tenant pods, and a tenant whose workers are remote GPU hosts is read
the same way. The reader is a ServiceAccount allowed exactly one thing, `get` on the one
service's proxy; its token and the tenant's CA are all Prometheus holds of the tenant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# HAMi v2.10.0's chart names its scheduler Service `<fullname>-scheduler` (the release `hami`
# is its own fullname) with the metrics port named `monitor` (9395 in the pod), plain HTTP
# (fact hami-chart-scheduler-service). HAMi-DRA 0.2.2's monitor: `hami-dra-monitor`, port
# `metrics` (fact hami-dra-monitor-endpoint).
HAMI_METRICS = ("kube-system", "http:hami-scheduler:monitor")
HAMI_DRA_METRICS = ("hami-dra", "http:hami-dra-monitor:metrics")

READER = "lab-metrics-reader"
# HAMi's device plugin pods carry the vGPU monitor (usage on real cards) on 9394 (fact
# hami-chart-device-plugin-monitor-service): read per pod, as the Service would pick one.
DEVICE_PLUGIN_NAMESPACE = "kube-system"
DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/component=hami-device-plugin"
VGPU_MONITOR_PORT = 9394
# Where the tenant's token Secret is mounted in the Prometheus server, one folder per tenant.
SECRET_MOUNT_ROOT = "/etc/lab-tenants"


@dataclass(frozen=True)
class ScrapeTarget:
    tenant: str
    api_host: str  # host:port of the tenant's API server, as Prometheus reaches it
    secret_dir: str  # holds the tenant's `ca.crt` and the reader's `token`
    dra: bool = False  # a HAMi-DRA tenant: its monitor, not HAMi's scheduler
    vgpu_monitor: bool = False  # real or NVML cards: HAMi's vGPU monitor on each GPU node


def metrics_service(dra: bool) -> tuple[str, str]:
    """(namespace, `scheme:service:port`) of the service whose /metrics a tenant exposes."""
    return HAMI_DRA_METRICS if dra else HAMI_METRICS


def proxy_path(dra: bool) -> str:
    """The API server's service-proxy path to that service's /metrics."""
    namespace, service = metrics_service(dra)
    return f"/api/v1/namespaces/{namespace}/services/{service}/proxy/metrics"


def job_name(tenant: str) -> str:
    return f"tenant-{tenant}"


def secret_dir(tenant: str) -> str:
    return f"{SECRET_MOUNT_ROOT}/{tenant}"


def hami_scrape_configs(targets: Sequence[ScrapeTarget], interval: str) -> list[dict[str, Any]]:
    """One scrape job per tenant; every series it yields carries `tenant`.

    HAMi's series carry a `namespace` label of their own (the pod's) and no `job`-like label
    that a target label would clash with, so `honor_labels` stays off and `tenant` is a
    target label: a series cannot forge another tenant's name.
    """
    jobs = []
    for t in targets:
        jobs.append(
            {
                "job_name": job_name(t.tenant),
                "scrape_interval": interval,
                "scheme": "https",
                "metrics_path": proxy_path(t.dra),
                **_credentials(t),
                "static_configs": [{"targets": [t.api_host], "labels": {"tenant": t.tenant}}],
            }
        )
        if t.vgpu_monitor:
            jobs.append(vgpu_monitor_scrape_config(t, interval))
    return jobs


def _credentials(target: ScrapeTarget) -> dict[str, Any]:
    return {
        "authorization": {"type": "Bearer", "credentials_file": f"{target.secret_dir}/token"},
        "tls_config": {"ca_file": f"{target.secret_dir}/ca.crt"},
    }


def vgpu_monitor_scrape_config(target: ScrapeTarget, interval: str) -> dict[str, Any]:
    """The vGPU monitor of every device plugin pod, found through the tenant's API server
    (Prometheus's pod discovery) and read through its pod proxy: one target per GPU node."""
    pods = f"/api/v1/namespaces/{DEVICE_PLUGIN_NAMESPACE}/pods"
    pod_proxy = f"{pods}/${{1}}:{VGPU_MONITOR_PORT}/proxy/metrics"
    return {
        "job_name": f"{job_name(target.tenant)}-vgpu-monitor",
        "scrape_interval": interval,
        "scheme": "https",
        **_credentials(target),
        "kubernetes_sd_configs": [
            {
                "role": "pod",
                "api_server": f"https://{target.api_host}",
                "namespaces": {"names": [DEVICE_PLUGIN_NAMESPACE]},
                "selectors": [{"role": "pod", "label": DEVICE_PLUGIN_SELECTOR}],
                **_credentials(target),
            }
        ],
        "relabel_configs": [
            {
                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                "regex": str(VGPU_MONITOR_PORT),
                "action": "keep",
            },
            {"target_label": "__address__", "replacement": target.api_host},
            {
                "source_labels": ["__meta_kubernetes_pod_name"],
                "target_label": "__metrics_path__",
                "replacement": pod_proxy,
            },
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "instance"},
            {"target_label": "tenant", "replacement": target.tenant},
        ],
    }


def reader_manifests(dra: bool, vgpu_monitor: bool = False) -> list[dict[str, Any]]:
    """The tenant-side reader: a ServiceAccount that may `get` the metrics service's proxy and
    nothing else, and a token Secret the tenant's controller fills (a long-lived token: a
    projected one would expire while Prometheus holds a copy)."""
    namespace, service = metrics_service(dra)
    meta = {"name": READER, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            # The authorizer's name for a proxy request is the whole `scheme:name:port`
            # segment of the URL (fact kube-service-proxy-rbac).
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services/proxy"],
                    "resourceNames": [service],
                    "verbs": ["get"],
                },
                # The vGPU monitor's pods change names: their list, and their proxy.
                *(
                    [
                        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
                        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]},
                    ]
                    if vgpu_monitor
                    else []
                ),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {**meta, "annotations": {"kubernetes.io/service-account.name": READER}},
        },
    ]
