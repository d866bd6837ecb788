"""The TenantControlPlane manifest and its kubelet patches (builders/control_plane.py)."""

from __future__ import annotations

import pytest

from builders.control_plane import dns_service_ip, kubelet_patches, tenant_control_plane_manifest
from labconfig.addresses import plan_network
from labconfig.parse import parse_config
from planning.footprint import CONTROL_PLANE_RESOURCES
from tests.support.pulumi_harness import lab_stack_config, stack_config

CFG = parse_config(lab_stack_config())
TENANT_A, TENANT_B = CFG.tenants
PLAN = plan_network(CFG)
GPU = parse_config({**stack_config("gpu"), "sshPrivateKey": "k", "managementKubeconfig": "kc"})


def test_tenant_control_plane_fields():
    address = str(PLAN.tenant_addresses["tenant-a"])
    tcp = tenant_control_plane_manifest(TENANT_A, address)
    spec = tcp["spec"]
    assert tcp["metadata"]["name"] == tcp["metadata"]["namespace"] == "tenant-a"
    assert tcp["metadata"]["annotations"]["pulumi.com/waitFor"] == (
        "jsonpath={.status.kubernetesResources.version.status}=Ready"
    )
    assert spec["controlPlane"]["deployment"]["replicas"] == 1
    assert spec["controlPlane"]["deployment"]["resources"] == CONTROL_PLANE_RESOURCES
    assert CONTROL_PLANE_RESOURCES["apiServer"]["limits"]["memory"] == "1536Mi"
    service = spec["controlPlane"]["service"]
    assert service["serviceType"] == "LoadBalancer"
    assert service["additionalMetadata"]["annotations"] == {"metallb.io/loadBalancerIPs": address}
    assert spec["kubernetes"]["version"] == "v1.35.0"
    patches = {
        p["path"]: p["value"] for p in spec["kubernetes"]["kubelet"]["configurationJSONPatches"]
    }
    assert patches["/cgroupDriver"] == "systemd"
    assert patches["/failSwapOn"] is False
    assert patches["/imageGCHighThresholdPercent"] == 100
    net = spec["networkProfile"]
    assert (net["address"], net["port"], net["certSANs"]) == (address, 6443, [address])
    assert (net["podCidr"], net["serviceCidr"], net["dnsServiceIPs"]) == (
        "10.244.0.0/16",
        "10.96.0.0/16",
        ["10.96.0.10"],
    )
    konnectivity = spec["addons"]["konnectivity"]
    assert konnectivity["server"]["port"] == 8132
    assert konnectivity["agent"]["mode"] == "DaemonSet"
    assert konnectivity["agent"]["hostNetwork"] is True
    assert {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in (konnectivity["agent"]["tolerations"])
    assert spec["addons"]["coreDNS"] == {} and spec["addons"]["kubeProxy"] == {}


def test_dns_service_ip_is_the_tenth_address():
    assert dns_service_ip("10.100.0.0/16") == "10.100.0.10"


@pytest.mark.upstream("kind-kubelet-cgroup-root")
def test_kindest_node_workers_run_pods_under_kinds_kubelet_cgroup():
    """T10: kindest/node prepares /kubelet(.slice); a remote host has no such cgroup."""
    container = {p["path"]: p["value"] for p in kubelet_patches(TENANT_A)}
    assert container["/cgroupRoot"] == "/kubelet"
    assert container["/cgroupDriver"] == "systemd"
    remote = {p["path"] for p in kubelet_patches(GPU.tenants[0])}
    assert "/cgroupRoot" not in remote and "/cgroupDriver" in remote
    spec = tenant_control_plane_manifest(TENANT_A, "172.30.255.205")["spec"]
    assert spec["kubernetes"]["kubelet"]["configurationJSONPatches"] == kubelet_patches(TENANT_A)
