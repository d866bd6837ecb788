"""cert-manager, then Kamaji's CRDs and Kamaji with its bundled single-member etcd.

Kamaji's charts come from the git tag of the image that runs (components/platform/kamaji_chart.py),
fetched by the program into the checkout's cache.
The CRDs are their own release of the tag's `kamaji-crds` chart: Helm installs a chart's
`crds/` once and never upgrades them, so with the CRDs inside the Kamaji release a later
`kamajiImageTag` would run a new controller on old CRDs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from builders.kamaji import (
    KAMAJI_NAMESPACE,
    KAMAJI_RELEASE,
    crds_values,
    kamaji_values,
)
from builders.scripts import kamaji_datastores_delete_script
from components.helm import cert_manager_release, local_chart_release
from components.platform.kamaji_chart import release_chart_path
from labconfig.kamaji_sources import kamaji_source
from labconfig.mirrors import ChartLocation, upstream_chart


@dataclass(frozen=True)
class KamajiArgs:
    cert_manager_version: str
    image_tag: str
    etcd_replicas: int
    etcd_volume_size: str
    provider: k8s.Provider
    # The management cluster's kubeconfig and identity, for the DataStores' delete: a new
    # cluster replaces the step, so it runs on the old one first.
    kubeconfig: pulumi.Input[str]
    management_identity: pulumi.Input[str]
    # The pinned commit's charts on this machine (kamaji_chart.ensure_chart_cache), fetched by
    # the program before its first registration.
    charts_dir: Path
    cert_manager_chart: ChartLocation = field(
        default_factory=lambda: upstream_chart("cert-manager")
    )


class Kamaji(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KamajiArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Kamaji", name, None, opts)
        source = kamaji_source(args.image_tag)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.cert_manager = cert_manager_release(
            f"{name}-cert-manager",
            chart=args.cert_manager_chart,
            version=args.cert_manager_version,
            opts=child,
        )
        charts_dir = args.charts_dir
        self.crds = local_chart_release(
            f"{name}-crds",
            chart_dir=release_chart_path(charts_dir, "kamaji-crds"),
            release_name="kamaji-crds",
            namespace=KAMAJI_NAMESPACE,
            values=crds_values(),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.cert_manager])
            ),
        )
        self.release = local_chart_release(
            f"{name}-chart",
            chart_dir=release_chart_path(charts_dir, "kamaji"),
            release_name=KAMAJI_RELEASE,
            namespace=KAMAJI_NAMESPACE,
            values=kamaji_values(args.image_tag, args.etcd_replicas, args.etcd_volume_size),
            skip_crds=True,  # the kamaji-crds release owns them
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.crds])
            ),
        )
        # Created after the chart, so destroyed before it: Kamaji still runs to release them.
        self.datastores_delete = command.local.Command(
            f"{name}-datastores-delete",
            create="echo the DataStores of the Kamaji release are deleted before it on destroy",
            delete=kamaji_datastores_delete_script(),
            environment={
                "LAB_KUBECONFIG": pulumi.Output.secret(args.kubeconfig),
                "RELEASE": KAMAJI_RELEASE,
            },
            triggers=[args.management_identity],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.namespace = KAMAJI_NAMESPACE
        self.chart_source = {
            "tag": source.tag,
            "commit": source.commit,
            "chartTree": source.chart_tree,
            "crdsChartTree": source.crds_chart_tree,
            "etcdChartVersion": source.etcd_chart_version,
        }
        self.register_outputs(
            {"namespace": self.namespace, "imageTag": args.image_tag, "chart": self.chart_source}
        )
