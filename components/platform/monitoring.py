"""The lab's record over time: Prometheus scraping every tenant, Grafana with the dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.dashboard import dashboard_json
from builders.monitoring_values import (
    DASHBOARD_CONFIGMAP,
    GRAFANA_ADMIN_SECRET,
    GRAFANA_RELEASE,
    NAMESPACE,
    PROMETHEUS_RELEASE,
    dashboard_path,
    grafana_values,
    prometheus_values,
    tenant_secret_name,
)
from builders.prometheus_scrape import ScrapeTarget
from components.helm import pinned_release
from labconfig.mirrors import ChartLocation, upstream_chart
from labconfig.monitoring import MonitoringConfig


@dataclass(frozen=True)
class MonitoringArgs:
    config: MonitoringConfig
    targets: list[ScrapeTarget]
    # Each tenant's reader credentials (`token`, `ca.crt`, base64), by tenant: secrets.
    credentials: Mapping[str, pulumi.Input[dict[str, str]]]
    provider: k8s.Provider
    dashboard_address: str | None  # None: no Grafana
    grafana_admin_password: pulumi.Input[str] | None  # None: the chart makes one
    depends_on: list[pulumi.Resource]  # MetalLB: Grafana's address comes from its pool
    prometheus_chart: ChartLocation = field(default_factory=lambda: upstream_chart("prometheus"))
    grafana_chart: ChartLocation = field(default_factory=lambda: upstream_chart("grafana"))


class Monitoring(pulumi.ComponentResource):
    dashboard_url: pulumi.Output[str] | None

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Monitoring", name, None, opts)
        on_management = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=args.depends_on
        )
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata={"name": NAMESPACE}, opts=on_management
        )
        in_namespace = pulumi.ResourceOptions.merge(
            on_management, pulumi.ResourceOptions(depends_on=[namespace])
        )
        secrets = [
            k8s.core.v1.Secret(
                f"{name}-{tenant_secret_name(target.tenant)}",
                metadata={"name": tenant_secret_name(target.tenant), "namespace": NAMESPACE},
                data=args.credentials[target.tenant],
                opts=in_namespace,
            )
            for target in args.targets
        ]
        self.prometheus = pinned_release(
            f"{name}-prometheus",
            chart=args.prometheus_chart,
            version=args.config.prometheus_chart_version,
            release_name=PROMETHEUS_RELEASE,
            namespace=NAMESPACE,
            values=prometheus_values(args.config, args.targets),
            create_namespace=False,
            opts=pulumi.ResourceOptions.merge(
                in_namespace, pulumi.ResourceOptions(depends_on=secrets)
            ),
        )
        self.grafana = None
        self.dashboard_url = None
        if args.dashboard_address is not None:
            self.grafana = self._grafana(name, args, in_namespace)
            self.dashboard_url = pulumi.Output.from_input(
                f"http://{args.dashboard_address}{dashboard_path()}"
            )
        self.register_outputs({"namespace": NAMESPACE, "dashboardUrl": self.dashboard_url})

    def _grafana(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions
    ) -> k8s.helm.v3.Release:
        assert args.dashboard_address is not None
        dashboards = k8s.core.v1.ConfigMap(
            f"{name}-dashboards",
            metadata={"name": DASHBOARD_CONFIGMAP, "namespace": NAMESPACE},
            data={"sharing.json": dashboard_json()},
            opts=opts,
        )
        after: list[pulumi.Resource] = [dashboards]
        if args.grafana_admin_password is not None:
            after.append(
                k8s.core.v1.Secret(
                    f"{name}-grafana-admin",
                    metadata={"name": GRAFANA_ADMIN_SECRET, "namespace": NAMESPACE},
                    string_data={
                        "admin-user": "admin",
                        "admin-password": args.grafana_admin_password,
                    },
                    opts=opts,
                )
            )
        return pinned_release(
            f"{name}-grafana",
            chart=args.grafana_chart,
            version=args.config.grafana_chart_version,
            release_name=GRAFANA_RELEASE,
            namespace=NAMESPACE,
            values=grafana_values(
                args.dashboard_address, admin_secret=args.grafana_admin_password is not None
            ),
            create_namespace=False,
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=after)),
        )
