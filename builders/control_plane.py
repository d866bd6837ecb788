"""The TenantControlPlane object Kamaji reconciles: API server, Konnectivity, kubelet patches."""

from __future__ import annotations

import ipaddress
from typing import Any

from builders import admission_policy, hami_dra
from builders.kamaji import DATASTORE
from labconfig.model import TenantConfig
from planning.footprint import control_plane_resources, konnectivity_server_resources

API_PORT = 6443
KONNECTIVITY_PORT = 8132
READY_TIMEOUT_SECONDS = 900
LAB_LABEL = "kamaji-hami-lab/tenant"
# kindest/node prepares /kubelet (and /kubelet.slice for the systemd driver) before kubelet
# starts, so pods stay out of the node container's own cgroups, as on kind's nodes. A remote
# host has no such cgroup, and kubelet refuses to start with a cgroupRoot that does not exist.
KIND_NODE_CGROUP_ROOT_PATCH: dict[str, Any] = {
    "op": "add",
    "path": "/cgroupRoot",
    "value": "/kubelet",
}
# Like kind's own nodes: systemd cgroups (kindest/node), swap tolerated instead of `swapoff -a`
# (which would hit the host from a privileged container), no image GC or disk eviction that a
# small lab disk would trigger.
KUBELET_PATCHES: list[dict[str, Any]] = [
    {"op": "add", "path": "/cgroupDriver", "value": "systemd"},
    {"op": "add", "path": "/failSwapOn", "value": False},
    {"op": "add", "path": "/imageGCHighThresholdPercent", "value": 100},
    {
        "op": "add",
        "path": "/evictionHard",
        "value": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
    },
]


def kubelet_patches(tenant: TenantConfig) -> list[dict[str, Any]]:
    patches = list(KUBELET_PATCHES)
    if tenant.worker_mode == "container":
        patches.append(KIND_NODE_CGROUP_ROOT_PATCH)
    if gates := hami_dra.feature_gates(tenant):
        patches.append({"op": "add", "path": "/featureGates", "value": gates})
    return patches


# The agent must run before the CNI makes nodes Ready: it is how the API server reaches them.
KONNECTIVITY_AGENT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
]


def dns_service_ip(service_cidr: str) -> str:
    """The tenth address of the service range, kubeadm's convention for CoreDNS."""
    return str(ipaddress.ip_network(service_cidr)[10])


def _flag_list(values: dict[str, bool]) -> str:
    return ",".join(f"{key}={str(on).lower()}" for key, on in sorted(values.items()))


def apiserver_extra_args(tenant: TenantConfig) -> list[str]:
    """kube-apiserver flags beyond Kamaji's own: what the tenant's admission policies need on
    its version. Kamaji appends them verbatim after its sorted flags, dropping only the flags
    it manages (internal/builders/controlplane/deployment.go:753-824 at the pinned commit)."""
    args = []
    if gates := {**admission_policy.feature_gates(tenant), **hami_dra.feature_gates(tenant)}:
        args.append(f"--feature-gates={_flag_list(gates)}")
    if apis := admission_policy.runtime_config(tenant):
        args.append(f"--runtime-config={_flag_list(apis)}")
    return args


def _deployment(tenant: TenantConfig) -> dict[str, Any]:
    # Always set, even empty: Kamaji resets the API server's flags when the extras change only
    # while extraArgs is set (deployment.go:1182-1208), so a flag the program stops passing
    # (a tenant moved to v1.36) would otherwise stay on the container.
    extra_args: dict[str, list[str]] = {"apiServer": apiserver_extra_args(tenant)}
    if gates := hami_dra.feature_gates(tenant):
        # The scheduler allocates the shares and the controller manager makes the claims.
        flag = f"--feature-gates={_flag_list(gates)}"
        extra_args |= {"scheduler": [flag], "controllerManager": [flag]}
    resources = control_plane_resources(tenant.control_plane_cpu_requests)
    return {"replicas": 1, "resources": resources, "extraArgs": extra_args}


def tenant_control_plane_manifest(tenant: TenantConfig, address: str) -> dict[str, Any]:
    return {
        "apiVersion": "kamaji.clastix.io/v1alpha1",
        "kind": "TenantControlPlane",
        "metadata": {
            "name": tenant.name,
            "namespace": tenant.name,
            "labels": {LAB_LABEL: tenant.name},
            "annotations": {
                # pulumi-kubernetes waits on this before the TCP counts as created.
                "pulumi.com/waitFor": "jsonpath={.status.kubernetesResources.version.status}=Ready",
                "pulumi.com/timeoutSeconds": str(READY_TIMEOUT_SECONDS),
            },
        },
        "spec": {
            "dataStore": DATASTORE,
            "controlPlane": {
                "deployment": _deployment(tenant),
                "service": {
                    "serviceType": "LoadBalancer",
                    "additionalMetadata": {
                        "annotations": {"metallb.io/loadBalancerIPs": address},
                        "labels": {LAB_LABEL: tenant.name},
                    },
                },
            },
            "kubernetes": {
                "version": tenant.kubernetes_version,
                "kubelet": {
                    "configurationJSONPatches": kubelet_patches(tenant),
                    "preferredAddressTypes": ["InternalIP", "ExternalIP", "Hostname"],
                },
            },
            "networkProfile": {
                "address": address,
                "port": API_PORT,
                "certSANs": [address],
                "serviceCidr": tenant.service_cidr,
                "podCidr": tenant.pod_cidr,
                "dnsServiceIPs": [dns_service_ip(tenant.service_cidr)],
            },
            "addons": {
                "coreDNS": {},
                # No kubeProxy: the program runs its own (builders/kube_proxy.py), whose
                # configuration Kamaji's addon would not let it set.
                "konnectivity": {
                    "server": {
                        "port": KONNECTIVITY_PORT,
                        "resources": konnectivity_server_resources(
                            tenant.control_plane_cpu_requests
                        ),
                    },
                    "agent": {
                        "mode": "DaemonSet",
                        "hostNetwork": True,
                        "tolerations": KONNECTIVITY_AGENT_TOLERATIONS,
                    },
                },
            },
        },
    }
