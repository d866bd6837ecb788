"""The lab network on a real Docker daemon, created as pulumi-docker's provider creates it.

The inputs are the ones the program registers for `lab-network-bridge` (the whole program
runs under the harness's mocks; its MTU probe reaches the tier's daemon, as `pulumi up`'s
would); the request is what terraform-provider-docker v4.5.0 sends for them
(tests/support/docker_readback.py), POSTed to the daemon's API; `docker network inspect`
then shows what Docker made, and the provider's Read of it plans nothing.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from pathlib import Path

import pytest
from docker_host import Docker
from program import CreatedNetwork, lab_plan

from components.platform.network import (
    IPV6_OPTION,
    MASQUERADE_OPTION,
    MTU_OPTION,
    bridge_options,
)
from tests.support.docker_readback import (
    daemon_network,
    network_attributes,
    network_planned_replacements,
    network_state,
)


def global_ipv6(ip_addr_output: str) -> list[str]:
    """The IPv6 addresses other than link-local in `ip -o addr` output."""
    return [
        line.split()[3]
        for line in ip_addr_output.splitlines()
        if " inet6 " in line and "scope link" not in line
    ]


@pytest.mark.upstream("docker-provider-network-create-request")
def test_the_provider_never_sends_ipv6_false(lab_network: CreatedNetwork):
    """GetOk skips a false bool: the program's driver option says it instead."""
    assert lab_network.inputs["ipv6"] is False
    assert "EnableIPv6" not in lab_network.request
    assert lab_network.request["Options"][IPV6_OPTION] == "false"
    assert lab_network.request["IPAM"]["Driver"] == "default"


def engine_version(docker: Docker) -> tuple[int, int]:
    """(major, minor) of the daemon's Engine version (`20.10.24+dfsg1`: (20, 10))."""
    version = docker.run("version", "--format", "{{.Server.Version}}").stdout.strip()
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


@pytest.mark.upstream("docker-network-enable-ipv6-option")
def test_the_daemon_takes_the_ipv6_option_and_keeps_it(docker: Docker, lab_network: CreatedNetwork):
    """The engine accepts the option, makes the network IPv4-only and reads the option back
    (no `options` diff), as the model of its createNetwork says for this version."""
    made = daemon_network(lab_network.request, engine_version(docker))
    assert lab_network.inspect["EnableIPv6"] is made["EnableIPv6"] is False
    assert lab_network.inspect["Options"] == made["Options"]
    assert lab_network.inspect["Options"][IPV6_OPTION] == "false"


@pytest.mark.upstream("docker-network-enable-ipv6-option")
def test_the_daemon_parses_the_ipv6_option(docker: Docker, lab_network: CreatedNetwork):
    """The option is read, not passed through: a value that is not a bool is refused."""
    request = {
        **lab_network.request,
        "Name": f"{lab_network.name}-ipv6-probe",
        "Options": {**lab_network.request["Options"], IPV6_OPTION: "maybe"},
        "IPAM": {"Driver": "default", "Config": [{"Subnet": "198.18.0.0/24"}]},
    }
    version = docker.api_version()
    status, _, body = docker.api("POST", f"/v{version}/networks/create", request)
    if status == 201:
        docker.api("DELETE", f"/networks/{body['Id']}")
    assert status in (400, 500), body  # 20.10 answers 500, 27+ 400 (InvalidParameter)
    assert IPV6_OPTION in body["message"] and "maybe" in body["message"]
    with pytest.raises(ValueError, match="not a valid bool"):
        daemon_network(request, engine_version(docker))


@pytest.mark.upstream("docker-provider-network-create-request")
def test_the_network_is_ipv4_only_with_the_planned_subnet_gateway_and_range(
    lab_network: CreatedNetwork,
):
    plan = lab_plan()
    inspect = lab_network.inspect
    assert inspect["Driver"] == "bridge"
    assert inspect["EnableIPv6"] is False
    assert inspect["IPAM"]["Config"] == [
        {
            "Subnet": str(plan.subnet),
            "Gateway": str(plan.gateway),
            "IPRange": str(plan.container_range),
        }
    ]
    assert inspect["Labels"] == {"app.kubernetes.io/part-of": "kamaji-hami-lab"}
    addresses = subprocess.run(
        ["ip", "-o", "addr", "show", "dev", lab_network.bridge],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"inet {plan.gateway}/{plan.subnet.prefixlen} " in addresses
    assert global_ipv6(addresses) == []


@pytest.mark.upstream("kind-network-mtu-from-default-bridge")
def test_mtu_and_masquerade_are_as_declared(docker: Docker, lab_network: CreatedNetwork):
    """The program probed the tier's default bridge (kind's way) and declared its MTU; the
    bridge carries it, and Docker masquerades the subnet."""
    assert ("docker", "network", "inspect", "bridge") in {p[:4] for p in lab_network.probes}
    default_bridge = json.loads(docker.run("network", "inspect", "bridge").stdout)[0]
    mtu = int(default_bridge["Options"].get(MTU_OPTION, "0") or 0)
    assert lab_network.inputs["options"] == bridge_options(mtu)
    assert lab_network.inspect["Options"] == lab_network.inputs["options"]
    assert lab_network.inspect["Options"][MASQUERADE_OPTION] == "true"
    if mtu:
        assert Path(f"/sys/class/net/{lab_network.bridge}/mtu").read_text().strip() == str(mtu)
    nat = subprocess.run(
        ["iptables", "-t", "nat", "-S", "POSTROUTING"], capture_output=True, text=True, check=True
    ).stdout
    subnet = lab_network.inspect["IPAM"]["Config"][0]["Subnet"]
    assert f"-A POSTROUTING -s {subnet} ! -o {lab_network.bridge} -j MASQUERADE" in nat


@pytest.mark.upstream("docker-provider-network-read")
def test_what_docker_reads_back_gives_the_provider_no_diff(lab_network: CreatedNetwork):
    attributes = network_attributes(lab_network.inputs)
    state = network_state(lab_network.inspect)
    assert network_planned_replacements(attributes, state) == set()
    assert state["scope"] == "local" and state["ipv6"] is False


def test_a_container_on_the_network_gets_an_ipv4_address_in_the_container_range(
    docker: Docker, busybox: str, lab_network: CreatedNetwork
):
    """Docker's ip_range keeps containers below the MetalLB pool; no IPv6 on them either."""
    plan = lab_plan()
    name = f"host-tier-net-{os.getpid()}"
    result = docker.run(
        "run", "--rm", "--name", name, "--network", lab_network.inspect["Name"], busybox,
        "ip", "-o", "addr", "show", "dev", "eth0",
    )  # fmt: skip
    inet = [line.split()[3] for line in result.stdout.splitlines() if " inet " in line]
    assert len(inet) == 1, result.stdout
    address = ipaddress.ip_interface(inet[0])
    assert address.network == plan.subnet
    assert address.ip in plan.container_range
    assert not plan.pool_start <= address.ip <= plan.pool_end
    assert global_ipv6(result.stdout) == []
