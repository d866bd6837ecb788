"""A tenant's kube-proxy, as kubeadm's addon phase makes it, with the lab's own configuration.

The objects are kubeadm's (cmd/kubeadm/app/phases/addons/proxy at the tenant's version:
ServiceAccount, ClusterRoleBinding to system:node-proxier, the Role and RoleBinding that let a
joining node read the ConfigMap, the ConfigMap, the DaemonSet). Kamaji's kube-proxy addon is
left off: its configuration is kubeadm's default, which cannot be changed (Kamaji rewrites the
ConfigMap on every reconcile), and that default makes kube-proxy size the host's conntrack
table. In a worker container that write is refused and kube-proxy exits; kind's own nodes skip
it with `conntrack.maxPerCore: 0` (docs/design.md, "The host's conntrack table stays the host's").
"""

from __future__ import annotations

from typing import Any

import yaml

from builders.control_plane import API_PORT
from labconfig.model import TenantConfig
from planning.pulls import kube_proxy_image

NAMESPACE = "kube-system"
NAME = "kube-proxy"  # kubeadm's names: ServiceAccount, Role, RoleBinding, ConfigMap, DaemonSet
CLUSTER_ROLE_BINDING = "kubeadm:node-proxier"
CLUSTER_ROLE = "system:node-proxier"  # the API server's bootstrap role
BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
CONFIG_KEY = "config.conf"
CONFIG_DIR = "/var/lib/kube-proxy"
KUBECONFIG_KEY = "kubeconfig.conf"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LABELS = {"k8s-app": NAME}


def image(tenant: TenantConfig) -> str:
    """kubeadm's image for the tenant's version: the tenant's workers pull it through the
    site's registry mirrors like every other image (planning/pulls.py lists it)."""
    return kube_proxy_image(tenant)


def conntrack(tenant: TenantConfig) -> dict[str, int]:
    """A container worker shares the host's conntrack table, which only the host may size
    (nf_conntrack_max is read-only outside the initial netns): `maxPerCore: 0` makes kube-proxy
    leave it alone, hashsize included, as kind does. A remote worker is a host of its own,
    where kube-proxy sizes its table as on any kubeadm node (its defaults). The per-netns
    timeouts stay kube-proxy's defaults in both: a worker's netns may write them."""
    return {"maxPerCore": 0} if tenant.worker_mode == "container" else {}


def configuration(tenant: TenantConfig) -> dict[str, Any]:
    """The KubeProxyConfiguration (kube-proxy's own kubeproxy.config.k8s.io/v1alpha1):
    kubeadm's (bind address, kubeconfig, the pod CIDR as clusterCIDR), mode iptables (kube-
    proxy's Linux default, named so a new default does not change the lab), and `conntrack`."""
    config: dict[str, Any] = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "bindAddress": "0.0.0.0",
        "clientConnection": {"kubeconfig": f"{CONFIG_DIR}/{KUBECONFIG_KEY}"},
        "clusterCIDR": tenant.pod_cidr,
        "mode": "iptables",
    }
    if settings := conntrack(tenant):
        config["conntrack"] = settings
    return config


def kubeconfig(endpoint: str) -> dict[str, Any]:
    """kubeadm's: the API server at `endpoint`, the pod's service account token and CA."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "default",
                "cluster": {
                    "certificate-authority": f"{SERVICE_ACCOUNT_DIR}/ca.crt",
                    "server": endpoint,
                },
            }
        ],
        "contexts": [
            {
                "name": "default",
                "context": {"cluster": "default", "namespace": "default", "user": "default"},
            }
        ],
        "current-context": "default",
        "users": [{"name": "default", "user": {"tokenFile": f"{SERVICE_ACCOUNT_DIR}/token"}}],
    }


def api_endpoint(address: str) -> str:
    """The tenant's API server as its workers reach it: its MetalLB address."""
    return f"https://{address}:{API_PORT}"


def _metadata(name: str = NAME, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, **({"labels": labels} if labels else {})}


def _pod_spec(tenant: TenantConfig) -> dict[str, Any]:
    return {
        "priorityClassName": "system-node-critical",
        "containers": [
            {
                "name": NAME,
                "image": image(tenant),
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "/usr/local/bin/kube-proxy",
                    f"--config={CONFIG_DIR}/{CONFIG_KEY}",
                    "--hostname-override=$(NODE_NAME)",
                ],
                "securityContext": {"privileged": True},
                "volumeMounts": [
                    {"mountPath": CONFIG_DIR, "name": NAME},
                    {"mountPath": "/run/xtables.lock", "name": "xtables-lock", "readOnly": False},
                    {"mountPath": "/lib/modules", "name": "lib-modules", "readOnly": True},
                ],
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
                ],
            }
        ],
        "hostNetwork": True,
        "serviceAccountName": NAME,
        "volumes": [
            {"name": NAME, "configMap": {"name": NAME}},
            {
                "name": "xtables-lock",
                "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"},
            },
            {"name": "lib-modules", "hostPath": {"path": "/lib/modules"}},
        ],
        "tolerations": [{"operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }


def manifests(tenant: TenantConfig, endpoint: str) -> dict[str, dict[str, Any]]:
    """kubeadm's kube-proxy objects for `tenant`, by kind (keys: service_account,
    cluster_role_binding, role, role_binding, config_map, daemon_set)."""
    return {
        "service_account": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _metadata()},
        "cluster_role_binding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE_BINDING},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CLUSTER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        "role": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _metadata(),
            "rules": [
                {
                    "verbs": ["get"],
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "resourceNames": [NAME],
                }
            ],
        },
        "role_binding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _metadata(),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": [
                {"kind": "Group", "name": BOOTSTRAP_GROUP, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
        "config_map": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _metadata(labels={"app": NAME}),
            "data": {
                KUBECONFIG_KEY: yaml.safe_dump(kubeconfig(endpoint), sort_keys=False),
                CONFIG_KEY: yaml.safe_dump(configuration(tenant), sort_keys=False),
            },
        },
        "daemon_set": {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": _metadata(labels=LABELS),
            "spec": {
                "selector": {"matchLabels": LABELS},
                "updateStrategy": {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": LABELS}, "spec": _pod_spec(tenant)},
            },
        },
    }
