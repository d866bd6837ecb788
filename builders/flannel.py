"""flannel's CNI config and Helm values for a tenant's pod CIDR."""

from __future__ import annotations

import json
from typing import Any

NAMESPACE = "kube-flannel"


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
