"""Helm values of cert-manager, Kamaji and its CRDs chart, and the etcd quota they size."""

from __future__ import annotations

import re
from typing import Any

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


CERT_MANAGER_NAMESPACE = "cert-manager"


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
