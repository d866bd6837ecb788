"""The TenantControlPlane manifest and its kubelet patches (builders/control_plane.py)."""

from __future__ import annotations

import pytest

from builders.control_plane import dns_service_ip, kubelet_patches, tenant_control_plane_manifest
from labconfig.addresses import plan_network
from labconfig.parse import parse_config
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
    service = spec["controlPlane"]["service"]
    assert service["serviceType"] == "LoadBalancer"
    assert service["additionalMetadata"]["annotations"] == {"metallb.io/loadBalancerIPs": address}
    assert spec["kubernetes"]["version"] == "v1.36.4"
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
    assert spec["addons"]["coreDNS"] == {}


@pytest.mark.upstream("kamaji-kube-proxy-addon-is-kubeadms-default")
def test_kamajis_kube_proxy_addon_is_off_in_every_stack():
    """Its configuration cannot be the lab's (Kamaji rewrites it); the program runs its own
    (builders/kube_proxy.py)."""
    for tenant in (*CFG.tenants, *GPU.tenants):
        address = str(PLAN.tenant_addresses["tenant-a"])
        addons = tenant_control_plane_manifest(tenant, address)["spec"]["addons"]
        assert "kubeProxy" not in addons and addons.keys() == {"coreDNS", "konnectivity"}


def _requests(tcp: dict) -> dict[str, dict[str, str]]:
    """Each control plane container's requests, and the Konnectivity server's."""
    resources = {
        **tcp["spec"]["controlPlane"]["deployment"]["resources"],
        "konnectivityServer": tcp["spec"]["addons"]["konnectivity"]["server"]["resources"],
    }
    for name, each in resources.items():
        assert each["limits"].keys() == {"memory"}, name  # a CPU limit would throttle
    return {name: each["requests"] for name, each in resources.items()}


def test_control_plane_requests_default_to_the_pinned_values():
    tcp = tenant_control_plane_manifest(TENANT_A, str(PLAN.tenant_addresses["tenant-a"]))
    assert _requests(tcp) == {
        "apiServer": {"cpu": "250m", "memory": "512Mi"},
        "controllerManager": {"cpu": "100m", "memory": "128Mi"},
        "scheduler": {"cpu": "50m", "memory": "64Mi"},
        "konnectivityServer": {"cpu": "50m", "memory": "64Mi"},
    }
    resources = tcp["spec"]["controlPlane"]["deployment"]["resources"]
    assert resources["apiServer"]["limits"]["memory"] == "1536Mi"


def test_a_tenant_s_control_plane_cpu_requests_reach_its_manifest_only():
    config = lab_stack_config()
    config["tenants"][1]["controlPlaneCpuRequests"] = {
        "apiServer": "100m",
        "controllerManager": 0.05,  # a number in the stack file
        "konnectivityServer": "1",
    }
    cfg = parse_config(config)
    plan = plan_network(cfg)
    lowered = _requests(
        tenant_control_plane_manifest(cfg.tenants[1], plan.tenant_addresses["tenant-b"])
    )
    assert {name: each["cpu"] for name, each in lowered.items()} == {
        "apiServer": "100m",
        "controllerManager": "0.05",
        "scheduler": "50m",  # not set: the default
        "konnectivityServer": "1",
    }
    assert {name: each["memory"] for name, each in lowered.items()} == {
        "apiServer": "512Mi",
        "controllerManager": "128Mi",
        "scheduler": "64Mi",
        "konnectivityServer": "64Mi",
    }
    other = tenant_control_plane_manifest(cfg.tenants[0], plan.tenant_addresses["tenant-a"])
    assert _requests(other)["apiServer"]["cpu"] == "250m"


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
