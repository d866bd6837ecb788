"""The lab's Docker network: IPv4 only, fixed subnet, created before anything else."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_docker as docker

from components import host
from labconfig.addresses import NetworkPlan

# Docker NATs the bridge so nodes reach registries; kind sets the same option on its network.
MASQUERADE_OPTION = "com.docker.network.bridge.enable_ip_masquerade"
MTU_OPTION = "com.docker.network.driver.mtu"
# The provider never sends `ipv6 = false` (it sends only non-zero values), and Docker >= 27 then
# takes IPv6 from this driver option, which the daemon's default-network-opts fill in when the
# request leaves it out: stated here, it wins over them. Docker 17.03 to 26 parse it and let the
# request's own EnableIPv6 (false) decide (docs/upstream-facts/host-tier.md).
IPV6_OPTION = "com.docker.network.enable_ipv6"
PROBE_TIMEOUT_SECONDS = 10


class MtuProbeFailed(Exception):
    """`docker network inspect bridge` failed or timed out: the daemon's MTU is unknown."""


def docker_default_bridge_mtu() -> int:
    """The MTU of Docker's default bridge, read the way kind reads it; 0 when the bridge sets
    none. Raises MtuProbeFailed when Docker did not answer.

    A new user-defined network does not inherit the daemon's MTU, so kind copies it from the
    default bridge; on hosts below 1500 (cloud VMs, VPNs) pulls stall otherwise. Read-only, so
    it may run in preview like any other program-time read (through components/host.py).
    """
    try:
        result = host.current.run(
            [
                "docker",
                "network",
                "inspect",
                "bridge",
                "-f",
                '{{ index .Options "com.docker.network.driver.mtu" }}',
            ],
            timeout=PROBE_TIMEOUT_SECONDS,
        )
    except (OSError, host.CommandTimedOut) as error:
        raise MtuProbeFailed(str(error)) from error
    if result.returncode != 0:
        raise MtuProbeFailed(result.stderr.strip() or f"exit code {result.returncode}")
    lines = result.stdout.splitlines()
    if len(lines) != 1 or not lines[0].strip().isdigit():
        return 0  # "<no value>": the bridge has no MTU option, the daemon's default applies
    return int(lines[0])


def creation_mtu() -> int:
    """The MTU a network created now gets. A failed probe leaves it out, as kind does
    (getDefaultNetworkMTU returns 0 on any error); the warning says so, since only a create
    reads it (the options are ignore_changes)."""
    try:
        return docker_default_bridge_mtu()
    except MtuProbeFailed as error:
        pulumi.log.warn(
            f"Could not read the MTU of Docker's default bridge ({error}). A lab network "
            "created now gets Docker's default MTU; an existing one keeps its options."
        )
        return 0


def bridge_options(mtu: int) -> dict[str, str]:
    """kind's network options: masquerade, plus the daemon's MTU when it is known; and IPv6
    off, whatever the daemon's defaults say."""
    options = {MASQUERADE_OPTION: "true", IPV6_OPTION: "false"}
    if mtu > 0:
        options[MTU_OPTION] = str(mtu)
    return options


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
        mtu = creation_mtu()  # no config key: kind follows the daemon too
        self.network = docker.Network(
            f"{name}-bridge",
            name=args.name,
            driver="bridge",
            ipv6=False,
            ipam_configs=[ipam_config(args.plan)],
            options=bridge_options(mtu),
            labels=[
                docker.NetworkLabelArgs(label="app.kubernetes.io/part-of", value="kamaji-hami-lab")
            ],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=args.after,
                # The name is fixed and Docker refuses to remove a network with endpoints:
                # a replacement first deletes what is attached (the kind node, the workers,
                # through their inputs), then the network, then re-creates them all.
                delete_before_replace=True,
                # Docker replaces a network on any option change, and a replacement deletes
                # everything on it. The options are fixed when it is created, as kind never
                # touches an existing network: a later probe (slow, failed, or a daemon MTU
                # that changed) never rebuilds the lab. A new MTU: `--replace` the network.
                # Likewise a lab network made before IPV6_OPTION was declared keeps its options
                # (the engine diffs the state's old inputs for them) and is not replaced; it is
                # IPv4-only unless a Docker >= 27 with IPv6 default-network-opts made it (that
                # one differs in `ipv6` already: `make destroy`, then `make up`).
                ignore_changes=["options"],
            ),
        )
        self.name = self.network.name
        self.subnet = str(args.plan.subnet)
        self.mtu = mtu
        self.register_outputs({"name": self.name, "subnet": self.subnet, "mtu": self.mtu})
