"""A DRA tenant: HAMi-DRA values, the fake plugin's inventory, the gates (builders/hami_dra.py)."""

from __future__ import annotations

import pytest
import yaml

from builders import hami_dra
from builders.control_plane import (
    apiserver_extra_args,
    kubelet_patches,
    tenant_control_plane_manifest,
)
from labconfig.model import TenantConfig
from labconfig.parse import parse_config
from tests.support.pulumi_harness import stack_config

DRA = parse_config(stack_config("dra"))
TENANT_HAMI, TENANT_DRA = DRA.tenants


def dra_tenant(version: str = "v1.35.0", **fields: object) -> TenantConfig:
    return TenantConfig(
        name="tenant-dra",
        kubernetes_version=version,
        gpu_sharing="dra",
        gpus=({"model": "L4", "count": 2},),
        **fields,
    )


@pytest.mark.upstream("hami-dra-fake-driver-config")
def test_the_fake_plugin_publishes_each_workers_cards_under_the_real_drivers_names():
    values = hami_dra.hami_dra_values(TENANT_DRA, "ghcr.io/project-hami/hami-dra-fake-driver:v9")
    assert values["drivers"]["nvidia"] == {"enabled": False}
    fake = values["drivers"]["fake"]
    assert fake["enabled"] is True
    assert fake["driverName"] == fake["deviceClassName"] == "hami-core-gpu.project-hami.io"
    assert fake["image"] == {
        "registry": "ghcr.io",
        "repository": "project-hami/hami-dra-fake-driver",
        "tag": "v9",
    }
    config = yaml.safe_load(fake["configMap"]["inlineData"])
    (device,) = config["nodes"]["tenant-dra-worker-1"]["devices"]
    assert device["name"] == "gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["type"] == {"string": "hami-gpu"}
    assert device["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}
    assert device["capacity"]["memory"]["value"] == "81920Mi"  # what HAMi counts for the card
    assert device["capacity"]["cores"] == {
        "value": "100",
        # as in HAMi: a pod that asks no gpucores has no compute limit and takes none
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
    }
    assert values["certs"] == {"certManager": {"enabled": True}}
    # a webhook that is down (failurePolicy Fail) must not stop the lab's own pods
    assert values["webhook"]["config"]["scope"] == {
        "enabled": True,
        "excludeReleaseNamespace": True,
        "excludedNamespaces": ["kube-system", "kube-flannel", "cert-manager"],
    }


def test_every_card_of_every_worker_is_its_own_device_with_a_stable_uuid():
    tenant = dra_tenant(workers=2)
    config = hami_dra.fake_driver_config(tenant.cards, tenant.worker_names)
    assert list(config["nodes"]) == ["tenant-dra-worker-1", "tenant-dra-worker-2"]
    uuids = [
        d["attributes"]["uuid"]["string"] for n in config["nodes"].values() for d in n["devices"]
    ]
    assert len(set(uuids)) == 4
    assert uuids == [
        d["attributes"]["uuid"]["string"]
        for n in hami_dra.fake_driver_config(tenant.cards, tenant.worker_names)["nodes"].values()
        for d in n["devices"]
    ]
    (l4, _) = config["nodes"]["tenant-dra-worker-1"]["devices"]
    memory = l4["capacity"]["memory"]
    assert memory == {
        "value": "23034Mi",
        "requestPolicy": {
            "default": "23034Mi",  # a claim asking no memory takes the whole card, as in HAMi
            "validRange": {"min": "1Mi", "max": "23034Mi", "step": "1Mi"},
        },
    }


@pytest.mark.upstream("dra-consumable-capacity-gate")
@pytest.mark.parametrize(
    ("version", "gated"), [("v1.34.1", True), ("v1.35.0", True), ("v1.36.0", False)]
)
def test_the_gate_is_turned_on_in_every_component_where_it_is_off(version, gated):
    tenant = dra_tenant(version)
    gate = "DRAConsumableCapacity=true"
    extra = tenant_control_plane_manifest(tenant, "172.30.255.210")["spec"]["controlPlane"][
        "deployment"
    ]["extraArgs"]
    flags = [f for f in apiserver_extra_args(tenant) if f.startswith("--feature-gates=")]
    assert (gate in flags[0] if flags else False) is gated
    assert extra.get("scheduler") == ([f"--feature-gates={gate}"] if gated else None)
    assert extra.get("controllerManager") == ([f"--feature-gates={gate}"] if gated else None)
    featuregates = [p for p in kubelet_patches(tenant) if p["path"] == "/featureGates"]
    assert featuregates == (
        [{"op": "add", "path": "/featureGates", "value": {"DRAConsumableCapacity": True}}]
        if gated
        else []
    )


def test_a_hami_tenant_gets_no_dra_gate():
    assert hami_dra.feature_gates(TENANT_HAMI) == {}
    extra = tenant_control_plane_manifest(TENANT_HAMI, "172.30.255.210")["spec"]["controlPlane"][
        "deployment"
    ]["extraArgs"]
    assert set(extra) == {"apiServer"}
    assert all(p["path"] != "/featureGates" for p in kubelet_patches(TENANT_HAMI))


def test_a_mirrors_registry_with_a_port_stays_the_registry():
    fake = hami_dra.hami_dra_values(TENANT_DRA, "127.0.0.1:5000/mirror/fake-driver:v1")["drivers"]
    assert fake["fake"]["image"] == {
        "registry": "127.0.0.1:5000",
        "repository": "mirror/fake-driver",
        "tag": "v1",
    }
