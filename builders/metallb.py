"""MetalLB's Helm values (native L2 mode) and the address pool objects for the lab subnet."""

from __future__ import annotations

from typing import Any

NAMESPACE = "metallb-system"
POOL_NAME = "lab-pool"


def metallb_values() -> dict[str, Any]:
    # Native mode: no FRR speaker and no FRR-K8s, which v0.16+ would otherwise pull in.
    return {"speaker": {"frr": {"enabled": False}}, "frrk8s": {"enabled": False}}


def pool_manifests(pool_range: str) -> list[dict[str, Any]]:
    """The IPAddressPool (a range, never a CIDR) and the L2Advertisement that announces it."""
    return [
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "IPAddressPool",
            "metadata": {"name": POOL_NAME, "namespace": NAMESPACE},
            "spec": {"addresses": [pool_range], "autoAssign": True},
        },
        {
            "apiVersion": "metallb.io/v1beta1",
            "kind": "L2Advertisement",
            "metadata": {"name": POOL_NAME, "namespace": NAMESPACE},
            "spec": {"ipAddressPools": [POOL_NAME]},
        },
    ]
