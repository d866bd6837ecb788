"""Helm values of the lab's Prometheus (prometheus-community `prometheus` chart) and Grafana
(grafana-community `grafana` chart), and the tenant Secrets' mounts.

The Prometheus chart's defaults scrape the cluster it runs in (nodes, pods, services) and
bring Alertmanager, kube-state-metrics, node-exporter and Pushgateway: the lab needs none of
it, only the tenants' jobs and Prometheus's own, so the default jobs, the subcharts and their
RBAC are off (facts prom-chart-values-keys, prom-chart-default-jobs-rbac).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from builders.dashboard import DASHBOARD_UID, DATASOURCE_UID
from builders.prometheus_scrape import ScrapeTarget, hami_scrape_configs
from builders.slice_rules import rule_groups
from labconfig.monitoring import MonitoringConfig
from planning.footprint import GRAFANA_RESOURCES, PROMETHEUS_RESOURCES

NAMESPACE = "lab-monitoring"
PROMETHEUS_RELEASE = "prometheus"
GRAFANA_RELEASE = "grafana"
# The chart's server Service: `<release>-server`, port 80 (values server.service.servicePort).
PROMETHEUS_SERVICE = f"{PROMETHEUS_RELEASE}-server"
PROMETHEUS_URL = f"http://{PROMETHEUS_SERVICE}.{NAMESPACE}.svc"
DASHBOARD_CONFIGMAP = "lab-dashboards"
DASHBOARD_PROVIDER = "lab"
GRAFANA_ADMIN_SECRET = "grafana-admin"

# The chart's default scrape jobs (values.yaml scrapeConfigs), all turned off but Prometheus's own.
CHART_DEFAULT_JOBS = (
    "kubernetes-api-servers",
    "kubernetes-nodes",
    "kubernetes-nodes-cadvisor",
    "kubernetes-service-endpoints",
    "kubernetes-service-endpoints-slow",
    "prometheus-pushgateway",
    "kubernetes-services",
    "kubernetes-pods",
    "kubernetes-pods-slow",
)


def tenant_secret_name(tenant: str) -> str:
    return f"tenant-{tenant}-metrics-reader"


def prometheus_values(
    monitoring: MonitoringConfig, targets: Sequence[ScrapeTarget]
) -> dict[str, Any]:
    jobs: dict[str, Any] = {job: {"enabled": False} for job in CHART_DEFAULT_JOBS}
    for job in hami_scrape_configs(targets, monitoring.scrape_interval):
        jobs[job["job_name"]] = job
    return {
        "alertmanager": {"enabled": False},
        "kube-state-metrics": {"enabled": False},
        "prometheus-node-exporter": {"enabled": False},
        "prometheus-pushgateway": {"enabled": False},
        # Only the default jobs read the management cluster's API; the tenant jobs bring
        # their own credentials.
        "rbac": {"create": False},
        "scrapeConfigs": jobs,
        "serverFiles": {"recording_rules.yml": {"groups": rule_groups(monitoring.scrape_interval)}},
        "server": {
            "resources": PROMETHEUS_RESOURCES,
            "retention": monitoring.retention,
            "persistentVolume": {"enabled": True, "size": monitoring.volume_size},
            "global": {
                "scrape_interval": monitoring.scrape_interval,
                "evaluation_interval": monitoring.scrape_interval,
            },
            "extraSecretMounts": [
                {
                    "name": tenant_secret_name(t.tenant),
                    "secretName": tenant_secret_name(t.tenant),
                    "mountPath": t.secret_dir,
                    "readOnly": True,
                }
                for t in targets
            ],
        },
    }


def grafana_values(address: str, admin_secret: bool) -> dict[str, Any]:
    """Grafana on `address` (a MetalLB address of the lab network), the lab's Prometheus as
    its data source, the dashboard from a ConfigMap (no sidecar, no download init container:
    no image beyond Grafana's own; fact grafana-chart-values-keys). Anyone who reaches the
    address may view; only the admin may edit."""
    values: dict[str, Any] = {
        "service": {
            "type": "LoadBalancer",
            "annotations": {"metallb.io/loadBalancerIPs": address},
        },
        "persistence": {"enabled": False},
        "resources": GRAFANA_RESOURCES,
        "testFramework": {"enabled": False},
        "grafana.ini": {
            "auth.anonymous": {"enabled": True, "org_role": "Viewer"},
            "dashboards": {
                "default_home_dashboard_path": (
                    f"/var/lib/grafana/dashboards/{DASHBOARD_PROVIDER}/sharing.json"
                )
            },
        },
        "datasources": {
            "datasources.yaml": {
                "apiVersion": 1,
                "datasources": [
                    {
                        "name": "Prometheus",
                        "type": "prometheus",
                        "uid": DATASOURCE_UID,
                        "url": PROMETHEUS_URL,
                        "access": "proxy",
                        "isDefault": True,
                    }
                ],
            }
        },
        "dashboardProviders": {
            "dashboardproviders.yaml": {
                "apiVersion": 1,
                "providers": [
                    {
                        "name": DASHBOARD_PROVIDER,
                        "orgId": 1,
                        "folder": "kamaji-hami-lab",
                        "type": "file",
                        "disableDeletion": True,
                        "editable": False,
                        "options": {"path": f"/var/lib/grafana/dashboards/{DASHBOARD_PROVIDER}"},
                    }
                ],
            }
        },
        "dashboardsConfigMaps": {DASHBOARD_PROVIDER: DASHBOARD_CONFIGMAP},
    }
    if admin_secret:
        values["admin"] = {
            "existingSecret": GRAFANA_ADMIN_SECRET,
            "userKey": "admin-user",
            "passwordKey": "admin-password",
        }
    return values


def dashboard_path() -> str:
    """Where the dashboard opens, relative to Grafana's address."""
    return f"/d/{DASHBOARD_UID}"
