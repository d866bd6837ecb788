"""The provider model the network tests use (tests/support/docker_readback.py), without Docker:
the request it makes of the lab's declared inputs, and which read-backs would replace it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.docker_readback import (
    negotiated_api_version,
    network_attributes,
    network_create_request,
    network_planned_replacements,
    network_state,
)
from tests.support.pulumi_harness import lab_stack_config, run_program

MASQUERADE = {"com.docker.network.bridge.enable_ip_masquerade": "true"}
LAB_IPAM = {
    "Driver": "default",
    "Options": None,
    "Config": [{"Subnet": "172.30.0.0/16", "IPRange": "172.30.0.0/17", "Gateway": "172.30.0.1"}],
}
# `docker network inspect` of the lab network as Docker 20.10 returned it in the host tier.
INSPECT: dict[str, Any] = {
    "Name": "kamaji-hami-lab",
    "Id": "0f" * 32,
    "Scope": "local",
    "Driver": "bridge",
    "EnableIPv6": False,
    "IPAM": LAB_IPAM,
    "Internal": False,
    "Attachable": False,
    "Ingress": False,
    "Options": {**MASQUERADE, "com.docker.network.driver.mtu": "1500"},
    "Labels": {"app.kubernetes.io/part-of": "kamaji-hami-lab"},
}


def lab_inputs() -> dict[str, Any]:
    """What the program declares for the network (the harness's host: a 1500 MTU bridge)."""
    inputs = run_program(lab_stack_config()).named("lab-network-bridge").inputs
    return {**inputs, "options": {**MASQUERADE, "com.docker.network.driver.mtu": "1500"}}


@pytest.mark.upstream("docker-provider-network-create-request")
def test_the_request_for_the_lab_network_leaves_ipv6_to_the_daemon():
    body = network_create_request(network_attributes(lab_inputs()), "1.41")
    assert body == {
        "Name": "kamaji-hami-lab",
        "Driver": "bridge",
        "Scope": "",
        "IPAM": LAB_IPAM,  # the request's IPAM is what Docker reports
        "Internal": False,
        "Attachable": False,
        "Ingress": False,
        "ConfigOnly": False,
        "ConfigFrom": None,
        "Options": INSPECT["Options"],
        "Labels": {"app.kubernetes.io/part-of": "kamaji-hami-lab"},
        "CheckDuplicate": True,
    }
    assert "CheckDuplicate" not in network_create_request(network_attributes(lab_inputs()), "1.44")


@pytest.mark.upstream("docker-provider-network-create-request")
def test_only_values_getok_sees_are_sent():
    attributes = network_attributes(
        {"name": "n", "ipv6": True, "options": {}, "labels": [], "ipamConfigs": []}
    )
    body = network_create_request(attributes, "1.51")
    assert body["EnableIPv6"] is True
    assert body["Options"] is None and body["Labels"] is None
    assert body["IPAM"] == {"Driver": "default", "Options": None, "Config": None}
    aux = network_attributes(
        {"name": "n", "ipamConfigs": [{"subnet": "10.0.0.0/24", "auxAddress": {}}]}
    )
    assert network_create_request(aux, "1.51")["IPAM"]["Config"] == [{"Subnet": "10.0.0.0/24"}]


@pytest.mark.parametrize(
    ("daemon", "used"), [("1.41", "1.41"), ("1.51", "1.51"), ("1.52", "1.51"), ("1.9", "1.9")]
)
def test_the_client_uses_the_older_of_its_and_the_daemons_api_version(daemon: str, used: str):
    assert negotiated_api_version(daemon) == used


@pytest.mark.upstream("docker-provider-network-read")
def test_the_lab_networks_read_back_plans_nothing():
    assert network_planned_replacements(
        network_attributes(lab_inputs()), network_state(INSPECT)
    ) == (set())


def changed(**fields: Any) -> dict[str, Any]:
    inspect = copy.deepcopy(INSPECT)
    inspect.update(fields)
    return inspect


@pytest.mark.upstream("docker-provider-network-read")
@pytest.mark.parametrize(
    ("inspect", "replaced"),
    [
        # a daemon whose default-network-opts enable IPv6 (Docker >= 27): dual stack
        (
            changed(
                EnableIPv6=True,
                IPAM={
                    **INSPECT["IPAM"],
                    "Config": [*INSPECT["IPAM"]["Config"], {"Subnet": "fd00::/64"}],
                },
            ),
            {"ipv6", "ipam_config"},
        ),
        (changed(Options=MASQUERADE), {"options"}),  # the MTU option gone
        (changed(Labels={}), {"labels"}),
        (changed(IPAM={**INSPECT["IPAM"], "Options": {"x": "y"}}), {"ipam_options"}),
    ],
)
def test_a_read_back_that_differs_replaces_the_network(inspect: dict, replaced: set[str]):
    assert (
        network_planned_replacements(network_attributes(lab_inputs()), network_state(inspect))
        == replaced
    )


def test_computed_attributes_left_out_keep_what_docker_has():
    """`options`, `driver`, `internal` are Optional+Computed: left out, Docker's value stays."""
    declared = {k: v for k, v in lab_inputs().items() if k not in ("options", "driver")}
    read = network_state(changed(Options={"anything": "1"}, Driver="bridge", Internal=True))
    assert network_planned_replacements(network_attributes(declared), read) == set()
