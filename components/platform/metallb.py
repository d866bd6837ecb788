"""MetalLB in native (L2) mode with a pool computed from the lab subnet."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import yaml

from builders.metallb import NAMESPACE, metallb_values, pool_manifests
from builders.scripts import metallb_webhook_wait_script
from components.helm import pinned_release
from labconfig.mirrors import ChartLocation, upstream_chart


@dataclass(frozen=True)
class MetalLBArgs:
    version: str
    pool_range: str
    provider: k8s.Provider
    kubeconfig: pulumi.Input[str]
    chart: ChartLocation = field(default_factory=lambda: upstream_chart("metallb"))


class MetalLB(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: MetalLBArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:MetalLB", name, None, opts)
        self.release = pinned_release(
            f"{name}-chart",
            chart=args.chart,
            version=args.version,
            namespace=NAMESPACE,
            values=metallb_values(),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        manifests = pool_manifests(args.pool_range)
        self.webhook_ready = command.local.Command(
            f"{name}-webhook-ready",
            create=metallb_webhook_wait_script(),
            environment={
                "LAB_KUBECONFIG": args.kubeconfig,
                "METALLB_MANIFEST": yaml.safe_dump_all(manifests, sort_keys=False),
            },
            triggers=[self.release.id, args.pool_range],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        crs = [
            k8s.apiextensions.CustomResource(
                f"{name}-{manifest['kind'].lower()}",
                api_version=manifest["apiVersion"],
                kind=manifest["kind"],
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, depends_on=[self.webhook_ready]
                ),
            )
            for manifest in manifests
        ]
        self.pool, self.advertisement = crs
        self.pool_range = args.pool_range
        self.register_outputs({"poolRange": self.pool_range})
