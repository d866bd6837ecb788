"""The kubelet-config Kamaji uploads for the program's TCP, made by the libraries Kamaji links
(kamaji_kubelet_config.py): its defaults, and what its typed decode does to the patches.

No Docker: the library program runs on the host (built with the real tier's Go caches).
"""

from __future__ import annotations

import jsonpointer
import kamaji_kubelet_config as kkc
import pytest
import yaml

from builders.control_plane import kubelet_patches, tenant_control_plane_manifest
from labconfig.model import TenantConfig

ADDRESS = "172.31.255.10"


def program_tcp(**tenant: object) -> dict:
    return tenant_control_plane_manifest(TenantConfig(name="tenant-a", **tenant), ADDRESS)


def with_patches(tcp: dict, patches: list[dict]) -> dict:
    tcp["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"] = patches
    return tcp


def test_the_request_is_what_upload_kubelet_config_takes_from_the_tcp():
    tcp = program_tcp(worker_mode="remote")
    request = kkc.request(tcp)
    assert request["cgroupDriver"] == ""  # the program leaves the deprecated cgroupfs unset
    assert request["clusterDNS"] == ["10.96.0.10"]
    assert request["clusterDomain"] == "cluster.local"
    assert request["patches"] == tcp["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    del tcp["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    tcp["spec"]["kubernetes"]["kubelet"]["cgroupfs"] = "cgroupfs"
    assert kkc.request(tcp)["patches"] is None
    assert kkc.request(tcp)["cgroupDriver"] == "cgroupfs"


@pytest.mark.upstream("kamaji-kubelet-config-upload")
def test_kamaji_sets_its_fields_over_the_kubelet_librarys_defaults():
    config = kkc.configuration(program_tcp())
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert config["kind"] == "KubeletConfiguration"
    # uploadconfig.go:80-90
    assert config["authentication"]["x509"]["clientCAFile"] == "/etc/kubernetes/pki/ca.crt"
    assert config["clusterDNS"] == ["10.96.0.10"]
    assert config["clusterDomain"] == "cluster.local"
    assert config["rotateCertificates"] is True
    assert config["staticPodPath"] == "/etc/kubernetes/manifests"
    assert "resolvConf" not in config
    # the v1.36 library's defaults, whatever the tenant's version
    assert config["failCgroupV1"] is True
    assert config["imageGCLowThresholdPercent"] == 80
    assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert len(config) == 83  # as many keys as Kamaji itself printed for this TCP


@pytest.mark.upstream("kamaji-kubelet-config-upload")
def test_without_patches_the_driver_is_left_out_and_the_defaults_stay():
    tcp = program_tcp(worker_mode="remote")
    del tcp["spec"]["kubernetes"]["kubelet"]["configurationJSONPatches"]
    plain = kkc.configuration(tcp)
    assert "cgroupDriver" not in plain
    assert plain["failSwapOn"] is True
    assert plain["imageGCHighThresholdPercent"] == 85
    assert "evictionHard" not in plain
    tcp["spec"]["kubernetes"]["kubelet"]["cgroupfs"] = "cgroupfs"
    assert kkc.configuration(tcp)["cgroupDriver"] == "cgroupfs"
    assert yaml.safe_load(kkc.content(tcp)) == kkc.configuration(tcp)


@pytest.mark.upstream("kamaji-kubelet-config-typed-decode")
@pytest.mark.parametrize(
    "fields",
    [
        {"worker_mode": "container"},
        {"worker_mode": "remote"},
        # the feature gate of a v1.35 DRA tenant (builders/hami_dra.py)
        {"gpu_sharing": "dra", "gpus": ({"model": "L4"},)},
    ],
    ids=["container", "remote", "dra-v1.35"],
)
def test_every_patch_the_program_gives_kamaji_survives_its_typed_decode(fields):
    tenant = TenantConfig(name="tenant-a", **fields)
    patches = kubelet_patches(tenant)
    assert patches, "the program patches the kubelet-config of every worker mode"
    config = kkc.configuration(tenant_control_plane_manifest(tenant, ADDRESS))
    for patch in patches:
        assert jsonpointer.resolve_pointer(config, patch["path"], None) == patch["value"], patch


@pytest.mark.upstream("kamaji-kubelet-config-typed-decode")
def test_a_patch_to_a_path_the_struct_lacks_is_dropped_without_an_error():
    mistyped = {"op": "add", "path": "/failCgroupv1", "value": False}
    config = kkc.configuration(with_patches(program_tcp(), [mistyped]))
    assert "failCgroupv1" not in config
    assert config["failCgroupV1"] is True  # what the patch meant to turn off stays on


@pytest.mark.upstream("kamaji-kubelet-config-typed-decode")
@pytest.mark.parametrize(
    ("patch", "error"),
    [
        (
            {"op": "replace", "path": "/nothere", "value": 1},
            "unable to apply JSON patching to KubeletConfiguration",
        ),
        (
            {"op": "add", "path": "/maxPods", "value": "many"},
            "unable to decode JSON to KubeletConfiguration",
        ),
    ],
)
def test_a_patch_kamaji_cannot_apply_or_decode_fails_its_phase(patch, error):
    with pytest.raises(kkc.KamajiRefusesPatches, match=error):
        kkc.content(with_patches(program_tcp(), [patch]))
