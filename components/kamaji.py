"""cert-manager, then Kamaji with its bundled single-member etcd, sized for a small host."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.helm import pinned_release

# Kamaji's CRD CA injection is hard-wired to kamaji-system/kamaji-serving-cert.
KAMAJI_NAMESPACE = "kamaji-system"
DATASTORE = "default"


@dataclass(frozen=True)
class KamajiArgs:
    cert_manager_version: str
    chart_version: str
    image_tag: str
    etcd_replicas: int
    etcd_volume_size: str
    provider: k8s.Provider


def cert_manager_values() -> dict[str, Any]:
    return {"crds": {"enabled": True}}


def kamaji_values(image_tag: str, etcd_replicas: int, etcd_volume_size: str) -> dict[str, Any]:
    return {
        "image": {"tag": image_tag},
        # As in Kamaji's kind guide: no requests, so it fits next to the tenant control planes.
        "resources": None,
        "telemetry": {"disabled": True},
        "defaultDatastoreName": DATASTORE,
        "kamaji-etcd": {
            "deploy": True,
            "datastore": {"name": DATASTORE},
            "replicas": etcd_replicas,
            "persistentVolumeClaim": {"size": etcd_volume_size},
        },
    }


class Kamaji(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KamajiArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Kamaji", name, None, opts)
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
        self.release = pinned_release(
            f"{name}-chart",
            chart="kamaji",
            repo="https://clastix.github.io/charts",
            version=args.chart_version,
            namespace=KAMAJI_NAMESPACE,
            values=kamaji_values(args.image_tag, args.etcd_replicas, args.etcd_volume_size),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.cert_manager])
            ),
        )
        self.namespace = KAMAJI_NAMESPACE
        self.register_outputs({"namespace": self.namespace, "imageTag": args.image_tag})
