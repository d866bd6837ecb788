"""Manifest, values and argument builders, checked as plain functions."""

from __future__ import annotations

import json

import pulumi_docker as docker
import pytest

from builders.control_plane import dns_service_ip, kubelet_patches, tenant_control_plane_manifest
from builders.flannel import flannel_cni_conf, flannel_values
from builders.hami import (
    device_plugin_values,
    gpu_quota_manifest,
    hami_values,
    runtime_class_manifest,
)
from builders.kamaji import cert_manager_values, kamaji_values
from builders.metallb import metallb_values, pool_manifests
from builders.simulated_gpus import agent_config, agent_manifests
from components.platform.network import bridge_options, ipam_config
from components.tenant.workers import node_container_args
from labconfig.addresses import plan_network
from labconfig.gpu_models import hami_card_type
from labconfig.parse import parse_config
from planning.footprint import CONTROL_PLANE_RESOURCES
from tests.support.pulumi_harness import lab_stack_config, stack_config

CFG = parse_config(lab_stack_config())
TENANT_A, TENANT_B = CFG.tenants
PLAN = plan_network(CFG)


def test_network_is_one_ipv4_ipam_entry_with_a_container_range():
    ipam = ipam_config(PLAN)
    assert (ipam.subnet, ipam.gateway, ipam.ip_range) == (
        "172.30.0.0/16",
        "172.30.0.1",
        "172.30.0.0/17",
    )
    assert bridge_options(0) == {"com.docker.network.bridge.enable_ip_masquerade": "true"}


def test_metallb_native_mode_and_pool_range():
    values = metallb_values()
    assert values["speaker"]["frr"]["enabled"] is False
    assert values["frrk8s"]["enabled"] is False
    pool, l2 = pool_manifests(PLAN.pool_range)
    assert pool["kind"] == "IPAddressPool" and pool["apiVersion"] == "metallb.io/v1beta1"
    assert pool["spec"]["addresses"] == ["172.30.255.205-172.30.255.254"]
    assert pool["metadata"]["namespace"] == l2["metadata"]["namespace"] == "metallb-system"
    assert l2["kind"] == "L2Advertisement"
    assert l2["spec"]["ipAddressPools"] == [pool["metadata"]["name"]]


def test_kamaji_values_pin_the_image_and_shrink_etcd():
    values = kamaji_values("26.8.2-edge", 1, "2Gi")
    assert values["image"] == {"tag": "26.8.2-edge", "pullPolicy": "IfNotPresent"}
    assert values["telemetry"] == {"disabled": True}
    etcd = values["kamaji-etcd"]
    assert etcd["deploy"] is True and etcd["replicas"] == 1
    assert etcd["persistentVolumeClaim"] == {"size": "2Gi"}
    assert values["defaultDatastoreName"] == etcd["datastore"]["name"] == "default"
    assert cert_manager_values() == {"crds": {"enabled": True}}


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


def test_worker_container_has_kinds_node_flags():
    args = node_container_args("tenant-a-worker-1", "tenant-a", "img-id", "kamaji-hami-lab")
    assert args["privileged"] is True
    assert args["hostname"] == args["name"] == "tenant-a-worker-1"
    # label=disable: what Docker adds to a privileged container anyway
    # (T2, tests/components/test_workers.py)
    assert set(args["security_opts"]) == {
        "seccomp=unconfined",
        "apparmor=unconfined",
        "label=disable",
    }
    assert args["tmpfs"] == {"/tmp": "", "/run": ""}
    assert args["cgroupns_mode"] == "private" and args["init"] is False and args["tty"] is True
    assert (args["restart"], args["max_retry_count"]) == ("on-failure", 1)
    mounts = {(v.container_path, v.host_path, v.read_only) for v in args["volumes"]}
    assert mounts == {("/var", None, None), ("/lib/modules", "/lib/modules", True)}
    assert [n.name for n in args["networks_advanced"]] == ["kamaji-hami-lab"]
    assert isinstance(args["networks_advanced"][0], docker.ContainerNetworksAdvancedArgs)


def test_flannel_routes_the_tenant_pod_cidr_through_ptp():
    values = flannel_values("10.250.0.0/16")
    assert values["podCidr"] == "10.250.0.0/16"
    conf = json.loads(values["flannel"]["cniConf"])
    assert conf == json.loads(flannel_cni_conf())
    flannel = conf["plugins"][0]
    assert flannel["type"] == "flannel"
    assert flannel["delegate"]["type"] == "ptp"  # kindest/node has no bridge plugin
    assert {"dst": "0.0.0.0/0"} in flannel["ipam"]["routes"]


def test_hami_values_for_simulated_gpus():
    values = hami_values(TENANT_B, 10, "5m")
    image = values["scheduler"]["kubeScheduler"]["image"]
    assert image == {
        "registry": "registry.k8s.io",
        "repository": "kube-scheduler",
        "tag": "v1.35.0",
    }
    assert "--node-lock-timeout=5m" in values["scheduler"]["extender"]["extraArgs"]
    assert values["scheduler"]["defaultSchedulerPolicy"] == {
        "nodeSchedulerPolicy": "binpack",
        "gpuSchedulerPolicy": "spread",
    }
    assert values["devicePlugin"]["enabled"] is False
    assert values["devicePlugin"]["deviceSplitCount"] == 10
    assert values["mockDevicePlugin"] == {"enabled": True}
    assert "nodeLockExpire" not in json.dumps(values)  # ignored upstream: never rely on it


def test_gpu_quota_uses_hamis_key():
    quota = gpu_quota_manifest(81920)
    assert quota["spec"]["hard"] == {"limits.nvidia.com/gpumem": "81920"}


def test_card_types_as_hami_registers_them():
    assert hami_card_type("NVIDIA L4") == "NVIDIA L4"
    assert hami_card_type("Tesla T4") == "NVIDIA-Tesla T4"


def test_agent_config_lists_every_worker_with_its_cards():
    config = agent_config(TENANT_B, 10)
    assert config["splitCount"] == 10
    assert config["nodes"] == {
        "tenant-b-worker-1": [{"type": "NVIDIA L4", "devmem": 23034, "devcore": 100}] * 2
    }


def test_agent_manifests_are_least_privilege_and_pinned():
    m = agent_manifests(agent_config(TENANT_A, 10), "python:3@sha256:" + "f" * 64)
    for rule in m["cluster_role"]["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    pod = m["deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].endswith("f" * 64)
    assert container["command"] == ["python", "-m", "gpu_agent"]
    assert container["resources"]["limits"]["memory"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == m["service_account"]["metadata"]["name"]
    assert "__main__.py" in m["code"]["data"] and "agent.py" in m["code"]["data"]
    config = json.loads(m["config"]["data"]["config.json"])
    assert list(config["nodes"]) == ["tenant-a-worker-1"]


def test_agent_pod_rolls_when_code_or_config_changes():
    def checksum(split: int) -> str:
        m = agent_manifests(agent_config(TENANT_A, split), "img")
        return m["deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/agent"]

    assert checksum(10) == checksum(10)
    assert checksum(10) != checksum(5)


@pytest.mark.upstream("hami-extender-client-rate-flags")
def test_hami_extender_talks_to_its_api_server_at_50_qps():
    """D6: client-go's 5 QPS / burst 10 throttled every Bind to ~1.3 s in a 20-pod burst."""
    args = hami_values(TENANT_A, 10, "5m")["scheduler"]["extender"]["extraArgs"]
    assert args[-2:] == ["--kube-qps=50", "--kube-burst=100"]
    assert args[:3] == ["--debug", "-v=4", "--node-lock-timeout=5m"]


GPU = parse_config({**stack_config("gpu"), "sshPrivateKey": "k", "managementKubeconfig": "kc"})
NVML = parse_config(stack_config("nvml"))


@pytest.mark.upstream("hami-chart-runtime-class-is-a-hook")
def test_real_gpus_use_a_runtime_class_the_lab_owns_not_the_charts_hook():
    """T14: the chart's RuntimeClass is a pre-install hook that uninstall leaves behind."""
    plugin = device_plugin_values(GPU.tenants[0], 10)
    assert plugin["runtimeClassName"] == "nvidia"
    assert plugin["createRuntimeClass"] is False
    assert runtime_class_manifest() == {"metadata": {"name": "nvidia"}, "handler": "nvidia"}
    assert "createRuntimeClass" not in device_plugin_values(TENANT_A, 10)


@pytest.mark.upstream("hami-plugin-and-monitor-load-nvml-by-name")
def test_nvml_mock_library_is_on_both_hami_containers_library_path():
    """T1: both containers dlopen libnvidia-ml.so.1 by name; each sees nvml-mock's driver
    root at its own mount (/driver-root in the plugin, the node's /var at /hostvar)."""
    (tenant,) = NVML.tenants
    plugin = device_plugin_values(tenant, 10)
    assert plugin["nvidiaDriverRoot"] == "/var/lib/nvml-mock/driver"
    assert plugin["extraEnvs"] == [{"name": "LD_LIBRARY_PATH", "value": "/driver-root/usr/lib64"}]
    assert plugin["monitor"] == {
        "extraEnvs": [
            {"name": "LD_LIBRARY_PATH", "value": "/hostvar/lib/nvml-mock/driver/usr/lib64"}
        ]
    }
    for other in (TENANT_A, GPU.tenants[0]):
        assert "extraEnvs" not in device_plugin_values(other, 10)


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
