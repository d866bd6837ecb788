"""Flannel in a tenant, on the tenant's pod CIDR (Kamaji installs no CNI)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.flannel import NAMESPACE, flannel_values
from components.helm import pinned_release
from labconfig.mirrors import ChartLocation, upstream_chart


@dataclass(frozen=True)
class FlannelArgs:
    version: str
    pod_cidr: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]
    chart: ChartLocation = field(default_factory=lambda: upstream_chart("flannel"))


class Flannel(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: FlannelArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Flannel", name, None, opts)
        on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # flannel runs privileged pods: its namespace must allow them under Pod Security.
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": NAMESPACE,
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
            },
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=args.depends_on)
            ),
        )
        self.release = pinned_release(
            f"{name}-chart",
            chart=args.chart,
            version=args.version,
            namespace=NAMESPACE,
            values=flannel_values(args.pod_cidr),
            create_namespace=False,
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=[namespace, *args.depends_on])
            ),
        )
        self.register_outputs({"podCidr": args.pod_cidr})
