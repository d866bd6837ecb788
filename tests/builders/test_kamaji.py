"""Kamaji's Helm values (builders/kamaji.py)."""

from __future__ import annotations

import pytest

from builders.kamaji import (
    KAMAJI_RESOURCES,
    cert_manager_values,
    etcd_quota_bytes,
    kamaji_values,
    quantity_bytes,
)


def test_kamaji_values_pin_the_image_and_shrink_etcd():
    values = kamaji_values("26.8.2-edge", 1, "2Gi")
    assert values["image"] == {"tag": "26.8.2-edge", "pullPolicy": "IfNotPresent"}
    assert values["telemetry"] == {"disabled": True}
    etcd = values["kamaji-etcd"]
    assert etcd["deploy"] is True and etcd["replicas"] == 1
    assert etcd["persistentVolumeClaim"] == {"size": "2Gi"}
    assert values["defaultDatastoreName"] == etcd["datastore"]["name"] == "default"
    assert cert_manager_values() == {"crds": {"enabled": True}}


@pytest.mark.upstream("kamaji-chart-values-at-the-tag", "kamaji-etcd-quota-backend-bytes")
def test_kamaji_values_set_resources_pull_policy_and_an_etcd_quota_inside_the_volume():
    """m3, m4, m14: explicit resources (Helm merges into the chart's limits 200m/100Mi, which
    a null may not reach), IfNotPresent for the pinned tag, and an etcd quota below the volume,
    as a string like the chart's own (a number renders in exponent form)."""
    values = kamaji_values("26.8.2-edge", 1, "2Gi")
    assert (
        values["resources"]
        == KAMAJI_RESOURCES
        == {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        }
    )
    assert values["image"]["pullPolicy"] == "IfNotPresent"
    etcd = values["kamaji-etcd"]
    assert etcd["quotaBackendBytes"] == "1610612736"
    assert int(etcd["quotaBackendBytes"]) < quantity_bytes(etcd["persistentVolumeClaim"]["size"])
    assert etcd_quota_bytes("512Mi") == 402653184
    with pytest.raises(ValueError, match=r"kamajiEtcdVolumeSize: '2GB' is not a size"):
        quantity_bytes("2GB")
