"""The program's own declarations, for the host tier to create on the real daemon.

The whole program runs under the harness's mocks (tests/support/pulumi_harness.py), once per
session; its host reads go to `TierHost`: Kamaji's charts from the harness's cache, `docker`
commands to the tier's daemon (DOCKER_HOST), as `pulumi up` would run them.
"""

from __future__ import annotations

import functools
import ipaddress
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from components import host as program_host
from labconfig.addresses import NetworkPlan, plan_network
from labconfig.parse import parse_config
from tests.support.pulumi_harness import MockHost, ProgramRun, lab_stack_config, run_program

NETWORK_RESOURCE = "lab-network-bridge"


class TierHost(MockHost):
    """The harness's host, except that `docker` commands run for real."""

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        if list(argv[:1]) == ["docker"]:
            self.commands.append(list(argv))
            return program_host.Host().run(argv, timeout=timeout, env=env)
        return super().run(argv, timeout=timeout, env=env)


@functools.cache
def lab_run() -> tuple[ProgramRun, tuple[tuple[str, ...], ...]]:
    """The `lab` stack's registrations, and the docker commands the program ran for them."""
    host = TierHost()
    run = run_program(lab_stack_config(), host=host)
    return run, tuple(tuple(argv) for argv in host.commands)


def declared(resource: str) -> dict[str, Any]:
    """The inputs the program registers for one resource (by its Pulumi name)."""
    return lab_run()[0].named(resource).inputs


def lab_plan() -> NetworkPlan:
    return plan_network(parse_config(lab_stack_config()))


@dataclass(frozen=True)
class CreatedNetwork:
    inputs: dict[str, Any]  # the program's
    request: dict[str, Any]  # the provider's POST body
    inspect: dict[str, Any]  # `docker network inspect`
    probes: tuple[tuple[str, ...], ...]  # the docker commands the program ran

    @property
    def name(self) -> str:
        return self.inspect["Name"]

    @property
    def bridge(self) -> str:
        return f"br-{self.inspect['Id'][:12]}"


def assert_only_on_the_lab_network(container: dict[str, Any], network: CreatedNetwork) -> None:
    """`docker inspect` of a lab container: on the lab network alone, IPv4 only, its address in
    the container range and never in the MetalLB pool."""
    networks = container["NetworkSettings"]["Networks"]
    assert set(networks) == {network.name}
    address = ipaddress.ip_address(networks[network.name]["IPAddress"])
    plan = lab_plan()
    assert address in plan.container_range
    assert not plan.pool_start <= address <= plan.pool_end
    assert networks[network.name]["GlobalIPv6Address"] == ""
