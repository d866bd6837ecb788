"""HAMi-DRA in a DRA tenant: cert-manager for its webhook's certificate, then its chart with the
fake kubelet plugin publishing the tenant's cards. Kubernetes' own scheduler allocates them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.hami_dra import NAMESPACE, RELEASE, WORKLOAD_NAMESPACE, hami_dra_values
from components.helm import cert_manager_release, pinned_release
from labconfig.mirrors import ChartLocation, upstream_chart
from labconfig.model import TenantConfig


@dataclass(frozen=True)
class HamiDraArgs:
    tenant: TenantConfig
    chart_version: str
    fake_driver_image: str
    cert_manager_version: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]
    chart: ChartLocation = field(default_factory=lambda: upstream_chart("hami-dra"))
    cert_manager_chart: ChartLocation = field(
        default_factory=lambda: upstream_chart("cert-manager")
    )


class HamiDra(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: HamiDraArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:HamiDra", name, None, opts)
        on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # The chart's webhook certificate is a cert-manager Certificate, with its CA injected.
        self.cert_manager = cert_manager_release(
            f"{name}-cert-manager",
            chart=args.cert_manager_chart,
            version=args.cert_manager_version,
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=args.depends_on)
            ),
        )
        self.release = pinned_release(
            f"{name}-chart",
            chart=args.chart,
            version=args.chart_version,
            release_name=RELEASE,
            namespace=NAMESPACE,
            values=hami_dra_values(args.tenant, args.fake_driver_image),
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=[self.cert_manager])
            ),
        )
        self.workloads = k8s.core.v1.Namespace(
            f"{name}-workloads", metadata={"name": WORKLOAD_NAMESPACE}, opts=on_tenant
        )
        self.register_outputs({"release": self.release.status})
