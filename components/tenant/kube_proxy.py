"""KubeProxy: the tenant's kube-proxy, the program's own instead of Kamaji's addon, so its
configuration is the lab's (builders/kube_proxy.py: a container worker's kube-proxy leaves
the host's conntrack table alone, as kind's does)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from builders.kube_proxy import api_endpoint, configuration, image, manifests
from builders.scripts import kamaji_kube_proxy_gone_wait_script
from labconfig.model import TenantConfig


@dataclass(frozen=True)
class KubeProxyArgs:
    tenant: TenantConfig
    address: str  # the tenant's API address, as its workers reach it
    provider: k8s.Provider
    kubeconfig: pulumi.Input[str]  # the tenant's admin kubeconfig, a secret
    control_plane_identity: pulumi.Input[str]
    depends_on: list[pulumi.Resource]


class KubeProxy(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: KubeProxyArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:KubeProxy", name, None, opts)
        m = manifests(args.tenant, api_endpoint(args.address))
        # Kamaji's addon, on in labs deployed before the program ran its own, must be gone
        # first: its objects have the same names.
        self.addon_gone = command.local.Command(
            f"{name}-kamaji-addon-gone",
            create=kamaji_kube_proxy_gone_wait_script(),
            environment={"LAB_KUBECONFIG": args.kubeconfig},
            triggers=[args.control_plane_identity],
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.depends_on),
        )
        child = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=[self.addon_gone]
        )
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata=m["service_account"]["metadata"], opts=child
        )
        crb = m["cluster_role_binding"]
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=crb["metadata"],
            role_ref=crb["roleRef"],
            subjects=crb["subjects"],
            opts=child,
        )
        # A joining node's kubeadm reads the ConfigMap with its bootstrap token (kubeadm's own).
        role = k8s.rbac.v1.Role(
            f"{name}-config-reader",
            metadata=m["role"]["metadata"],
            rules=m["role"]["rules"],
            opts=child,
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-config-reader",
            metadata=m["role_binding"]["metadata"],
            role_ref=m["role_binding"]["roleRef"],
            subjects=m["role_binding"]["subjects"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[role])),
        )
        config = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=m["config_map"]["metadata"],
            data=m["config_map"]["data"],
            opts=child,
        )
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=m["daemon_set"]["metadata"],
            spec=m["daemon_set"]["spec"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[account, binding, config])
            ),
        )
        self.register_outputs(
            {
                "image": image(args.tenant),
                "conntrack": configuration(args.tenant).get("conntrack", {}),
            }
        )
