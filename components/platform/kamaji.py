"""cert-manager, then Kamaji's CRDs and Kamaji with its bundled single-member etcd.

Kamaji's charts come from the git tag of the image that runs (components/platform/kamaji_chart.py),
fetched by the program into the checkout's cache.
The CRDs are their own release of the tag's `kamaji-crds` chart: Helm installs a chart's
`crds/` once and never upgrades them, so with the CRDs inside the Kamaji release a later
`kamajiImageTag` would run a new controller on old CRDs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.helm import local_chart_release, pinned_release
from components.platform.kamaji_chart import ensure_chart_cache, release_chart_path
from labconfig.kamaji_sources import kamaji_source

# Kamaji's CRD CA injection is hard-wired to kamaji-system/kamaji-serving-cert.
KAMAJI_NAMESPACE = "kamaji-system"
KAMAJI_RELEASE = "kamaji"  # the chart names its objects after the release: kamaji-serving-cert
DATASTORE = "default"
# Small requests so it fits next to the tenant control planes, and limits above the chart's
# (cpu 200m, memory 100Mi), which Helm keeps for any key these values do not set.
KAMAJI_RESOURCES = {
    "requests": {"cpu": "50m", "memory": "64Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}
# etcd needs room for its WAL and snapshots on the same volume, so its quota alarm must fire
# well before the volume is full (kind's local-path volumes do not enforce their size).
ETCD_QUOTA_SHARE = 0.75
_QUANTITY = re.compile(r"^([1-9][0-9]*)(Mi|Gi|Ti)$")
_BINARY_UNITS = {"Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@dataclass(frozen=True)
class KamajiArgs:
    cert_manager_version: str
    image_tag: str
    etcd_replicas: int
    etcd_volume_size: str
    provider: k8s.Provider


def cert_manager_values() -> dict[str, Any]:
    return {"crds": {"enabled": True}}


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes binary quantity such as `2Gi`, in bytes."""
    match = _QUANTITY.match(quantity)
    if not match:
        raise ValueError(f"kamajiEtcdVolumeSize: {quantity!r} is not a size such as 512Mi or 2Gi")
    return int(match.group(1)) * _BINARY_UNITS[match.group(2)]


def etcd_quota_bytes(volume_size: str) -> int:
    return int(quantity_bytes(volume_size) * ETCD_QUOTA_SHARE)


def crds_values() -> dict[str, Any]:
    """Where the CRDs' conversion webhook and cert-manager CA injection point."""
    return {
        "kamajiNamespace": KAMAJI_NAMESPACE,
        "kamajiService": f"{KAMAJI_RELEASE}-webhook-service",
        "kamajiCertificateName": f"{KAMAJI_RELEASE}-serving-cert",
    }


def kamaji_values(image_tag: str, etcd_replicas: int, etcd_volume_size: str) -> dict[str, Any]:
    return {
        # The tag is pinned, so a restart never needs Docker Hub (the chart says Always).
        "image": {"tag": image_tag, "pullPolicy": "IfNotPresent"},
        "resources": KAMAJI_RESOURCES,
        "telemetry": {"disabled": True},
        "defaultDatastoreName": DATASTORE,
        "kamaji-etcd": {
            "deploy": True,
            "datastore": {"name": DATASTORE},
            "replicas": etcd_replicas,
            "persistentVolumeClaim": {"size": etcd_volume_size},
            # A string, as in the chart: a number reaches the template as a float and renders
            # as 1.2e+09, which etcd rejects.
            "quotaBackendBytes": str(etcd_quota_bytes(etcd_volume_size)),
        },
    }


class Kamaji(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KamajiArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Kamaji", name, None, opts)
        source = kamaji_source(args.image_tag)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.cert_manager = pinned_release(
            f"{name}-cert-manager",
            chart="cert-manager",
            repo="https://charts.jetstack.io",
            version=args.cert_manager_version,
            namespace="cert-manager",
            values=cert_manager_values(),
            opts=child,
        )
        # At program time, in preview too, on whichever machine runs the program: the
        # releases' Check loads the charts whenever their path is known. Fetched once per
        # checkout; never deleted, as another stack of the same Kamaji release may use it.
        charts_dir = ensure_chart_cache(source)
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
