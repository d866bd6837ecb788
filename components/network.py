"""The lab's Docker network: IPv4 only, fixed subnet, created before anything else."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_docker as docker

from components.netplan import NetworkPlan

# Docker NATs the bridge so nodes reach registries; kind sets the same option on its network.
BRIDGE_OPTIONS = {"com.docker.network.bridge.enable_ip_masquerade": "true"}


@dataclass(frozen=True)
class LabNetworkArgs:
    name: str
    plan: NetworkPlan
    after: list[pulumi.Resource] = field(default_factory=list)  # e.g. the host preflight


def ipam_config(plan: NetworkPlan) -> docker.NetworkIpamConfigArgs:
    """One IPv4 IPAM entry; `ip_range` keeps container addresses below the MetalLB pool."""
    return docker.NetworkIpamConfigArgs(
        subnet=str(plan.subnet),
        gateway=str(plan.gateway),
        ip_range=str(plan.container_range),
    )


class LabNetwork(pulumi.ComponentResource):
    name: pulumi.Output[str]

    def __init__(
        self, name: str, args: LabNetworkArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:LabNetwork", name, None, opts)
        self.network = docker.Network(
            f"{name}-bridge",
            name=args.name,
            driver="bridge",
            ipv6=False,
            ipam_configs=[ipam_config(args.plan)],
            options=BRIDGE_OPTIONS,
            labels=[
                docker.NetworkLabelArgs(label="app.kubernetes.io/part-of", value="kamaji-hami-lab")
            ],
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.after),
        )
        self.name = self.network.name
        self.subnet = str(args.plan.subnet)
        self.register_outputs({"name": self.name, "subnet": self.subnet})
