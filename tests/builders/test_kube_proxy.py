"""The tenant's own kube-proxy (builders/kube_proxy.py): kubeadm's objects, the lab's config."""

from __future__ import annotations

import pytest
import yaml

from builders import kube_proxy
from labconfig.model import SUPPORTED_TENANT_MINORS
from labconfig.parse import parse_config
from planning.pulls import stack_pulls
from tests.support.pulumi_harness import lab_stack_config, stack_config

CFG = parse_config(lab_stack_config())
TENANT_A = CFG.tenants[0]
GPU = parse_config({**stack_config("gpu"), "sshPrivateKey": "k", "managementKubeconfig": "kc"})
REMOTE = next(t for t in GPU.tenants if t.worker_mode == "remote")


def at_version(version: str):
    return TENANT_A.model_copy(update={"kubernetes_version": version})


def config_of(objects: dict) -> dict:
    return yaml.safe_load(objects["config_map"]["data"]["config.conf"])


@pytest.mark.upstream("kube-proxy-max-per-core-zero-skips-the-conntrack-table")
@pytest.mark.parametrize("version", [f"v1.{m}.0" for m in SUPPORTED_TENANT_MINORS] + ["v1.36.3"])
def test_a_container_workers_kube_proxy_leaves_the_hosts_conntrack_table_alone(version):
    """kind's setting, for every version the config admits: no target, so neither
    nf_conntrack_max nor hashsize is written; the per-netns timeouts stay kube-proxy's."""
    objects = kube_proxy.manifests(at_version(version), "https://172.30.255.200:6443")
    config = config_of(objects)
    assert config["conntrack"] == {"maxPerCore": 0}
    assert config["apiVersion"] == "kubeproxy.config.k8s.io/v1alpha1"
    assert config["kind"] == "KubeProxyConfiguration"
    assert (config["mode"], config["clusterCIDR"]) == ("iptables", TENANT_A.pod_cidr)
    (container,) = objects["daemon_set"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/kube-proxy:{version}"


def test_a_remote_workers_kube_proxy_sizes_its_own_hosts_table():
    """A remote worker is a whole host: kube-proxy's defaults (maxPerCore 32768, min 131072)."""
    config = kube_proxy.configuration(REMOTE)
    assert "conntrack" not in config
    assert config["clusterCIDR"] == REMOTE.pod_cidr


@pytest.mark.upstream("kubeadm-kube-proxy-addon-objects")
def test_the_objects_are_kubeadms():
    """Names, RBAC and the DaemonSet as kubeadm's addon phase makes them
    (cmd/kubeadm/app/phases/addons/proxy at v1.35.4 and v1.36.3, the same manifests)."""
    objects = kube_proxy.manifests(TENANT_A, "https://172.30.255.200:6443")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects.values()] == [
        ("ServiceAccount", "kube-proxy"),
        ("ClusterRoleBinding", "kubeadm:node-proxier"),
        ("Role", "kube-proxy"),
        ("RoleBinding", "kube-proxy"),
        ("ConfigMap", "kube-proxy"),
        ("DaemonSet", "kube-proxy"),
    ]
    assert objects["cluster_role_binding"]["roleRef"]["name"] == "system:node-proxier"
    assert objects["role_binding"]["subjects"][0]["name"] == (
        "system:bootstrappers:kubeadm:default-node-token"
    )
    pod = objects["daemon_set"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["tolerations"] == [{"operator": "Exists"}]
    (container,) = pod["containers"]
    assert container["command"] == [
        "/usr/local/bin/kube-proxy",
        "--config=/var/lib/kube-proxy/config.conf",
        "--hostname-override=$(NODE_NAME)",
    ]
    assert container["securityContext"] == {"privileged": True}
    kubeconfig = yaml.safe_load(objects["config_map"]["data"]["kubeconfig.conf"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://172.30.255.200:6443"
    assert config_of(objects)["clientConnection"]["kubeconfig"] == (
        "/var/lib/kube-proxy/kubeconfig.conf"
    )


def test_the_image_it_runs_is_the_one_a_mirrored_site_is_told_to_hold():
    listed = {(p.image, p.puller) for p in stack_pulls(CFG).images}
    for tenant in CFG.tenants:
        assert (kube_proxy.image(tenant), tenant.name) in listed
