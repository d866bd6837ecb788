"""Flannel in a tenant, on the tenant's pod CIDR (Kamaji installs no CNI)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.helm import pinned_release

NAMESPACE = "kube-flannel"
CHART_REPO = "https://flannel-io.github.io/flannel/"


@dataclass(frozen=True)
class FlannelArgs:
    version: str
    pod_cidr: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]


def flannel_cni_conf() -> str:
    """flannel delegating to `ptp` instead of its default `bridge`.

    kindest/node ships only the host-local, loopback, ptp and portmap CNI binaries, and
    flannel's installer adds only its own: with the default delegate, pod sandboxes fail with
    "failed to find plugin bridge". ptp is what kind's own CNI uses. ptp adds no default
    route by itself, so the IPAM section asks for one next to flannel's network route.
    """
    conf = {
        "name": "cbr0",
        "cniVersion": "0.3.1",
        "plugins": [
            {
                "type": "flannel",
                "ipam": {"routes": [{"dst": "0.0.0.0/0"}]},
                "delegate": {"type": "ptp"},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2)


def flannel_values(pod_cidr: str) -> dict[str, Any]:
    # The controller-manager allocates node CIDRs from the tenant's podCidr; flannel must
    # route the same range or pods get addresses nobody routes.
    return {
        "podCidr": pod_cidr,
        "flannel": {"backend": "vxlan", "cniConf": flannel_cni_conf()},
    }


class Flannel(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: FlannelArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Flannel", name, None, opts)
        on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # flannel runs privileged pods: its namespace must allow them under Pod Security.
        namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={
                "name": NAMESPACE,
                "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
            },
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=args.depends_on)
            ),
        )
        self.release = pinned_release(
            f"{name}-chart",
            chart="flannel",
            repo=CHART_REPO,
            version=args.version,
            namespace=NAMESPACE,
            values=flannel_values(args.pod_cidr),
            create_namespace=False,
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=[namespace, *args.depends_on])
            ),
        )
        self.register_outputs({"podCidr": args.pod_cidr})
