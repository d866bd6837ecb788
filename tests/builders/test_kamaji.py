"""Kamaji's Helm values (builders/kamaji.py)."""

from __future__ import annotations

from builders.kamaji import cert_manager_values, kamaji_values


def test_kamaji_values_pin_the_image_and_shrink_etcd():
    values = kamaji_values("26.8.2-edge", 1, "2Gi")
    assert values["image"] == {"tag": "26.8.2-edge", "pullPolicy": "IfNotPresent"}
    assert values["telemetry"] == {"disabled": True}
    etcd = values["kamaji-etcd"]
    assert etcd["deploy"] is True and etcd["replicas"] == 1
    assert etcd["persistentVolumeClaim"] == {"size": "2Gi"}
    assert values["defaultDatastoreName"] == etcd["datastore"]["name"] == "default"
    assert cert_manager_values() == {"crds": {"enabled": True}}
