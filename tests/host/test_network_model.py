"""The provider model the network tests use (tests/support/docker_readback.py), without Docker:
the request it makes of the lab's declared inputs, and which read-backs would replace it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.platform.network import IPV6_OPTION, MTU_OPTION
from tests.support.docker_readback import (
    daemon_network,
    negotiated_api_version,
    network_attributes,
    network_create_request,
    network_planned_replacements,
    network_state,
    pulumi_ignore_changes,
)
from tests.support.pulumi_harness import MockHost, lab_stack_config, run_program

MASQUERADE = {"com.docker.network.bridge.enable_ip_masquerade": "true"}
# The options the program declares on a host whose default bridge reports MTU 1500.
LAB_OPTIONS = {**MASQUERADE, IPV6_OPTION: "false", MTU_OPTION: "1500"}
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
    "Options": LAB_OPTIONS,
    "Labels": {"app.kubernetes.io/part-of": "kamaji-hami-lab"},
}


def lab_network_registration():
    """The program's `lab-network-bridge` on a host whose default bridge has MTU 1500."""
    return run_program(lab_stack_config(), host=MockHost(bridge_mtu="1500")).named(
        "lab-network-bridge"
    )


def lab_inputs() -> dict[str, Any]:
    """What the program declares for the network."""
    return lab_network_registration().inputs


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
        (changed(Options={**MASQUERADE, IPV6_OPTION: "false"}), {"options"}),  # no MTU
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


# daemon.json of a host that wants IPv6 on every new bridge network (Docker >= 24 reads it).
IPV6_BY_DEFAULT = {"bridge": {IPV6_OPTION: "true"}}
# Each engine with the API version its daemon reports.
ENGINES = {(20, 10): "1.41", (24, 0): "1.43", (26, 1): "1.45", (27, 0): "1.46", (28, 5): "1.51"}


@pytest.mark.upstream("docker-network-enable-ipv6-option")
@pytest.mark.parametrize("engine", ENGINES)
def test_a_daemon_whose_defaults_enable_ipv6_still_makes_the_lab_network_ipv4_only(
    engine: tuple[int, int],
):
    """The provider leaves `ipv6 = false` out; the lab's driver option says it instead, and a
    request's option wins over the daemon's default-network-opts: IPv4 only on every engine,
    and what Docker reads back gives the provider no diff."""
    attributes = network_attributes(lab_inputs())
    request = network_create_request(attributes, negotiated_api_version(ENGINES[engine]))
    made = daemon_network(request, engine, IPV6_BY_DEFAULT)
    assert made["EnableIPv6"] is False
    inspect = changed(**made)
    assert network_planned_replacements(attributes, network_state(inspect)) == set()


@pytest.mark.upstream("docker-network-enable-ipv6-option")
def test_how_the_daemon_resolves_ipv6():
    """The model of moby's createNetwork the test above relies on."""
    bare: dict[str, Any] = {"Name": "n", "Driver": "bridge", "Options": None}
    # left out: 27+ takes the daemon's default option, older engines a false bool
    assert daemon_network(bare, (28, 5), IPV6_BY_DEFAULT)["EnableIPv6"] is True
    assert daemon_network(bare, (27, 0), IPV6_BY_DEFAULT)["EnableIPv6"] is True
    assert daemon_network(bare, (26, 1), IPV6_BY_DEFAULT) == {
        "EnableIPv6": False,
        "Options": {IPV6_OPTION: "true"},  # merged all the same: a read-back `options` diff
    }
    assert daemon_network(bare, (20, 10), IPV6_BY_DEFAULT) == {"EnableIPv6": False, "Options": {}}
    # a value in the request: the option is dropped from 27 on
    explicit = {**bare, "EnableIPv6": True, "Options": {IPV6_OPTION: "false"}}
    assert daemon_network(explicit, (28, 5)) == {"EnableIPv6": True, "Options": {}}
    with pytest.raises(ValueError, match="not a valid bool"):
        daemon_network({**bare, "Options": {IPV6_OPTION: "maybe"}}, (20, 10))


@pytest.mark.upstream("pulumi-ignore-changes-keeps-old-inputs")
def test_an_existing_lab_network_is_not_replaced_for_the_ipv6_option():
    """A lab network created before the program declared IPV6_OPTION: its state holds the old
    options; `ignore_changes` makes the engine diff those, so nothing is replaced."""
    registration = lab_network_registration()
    old_options = {k: v for k, v in LAB_OPTIONS.items() if k != IPV6_OPTION}
    old_inputs = {**registration.inputs, "options": old_options}
    state = network_state(changed(Options=old_options))
    diffed = pulumi_ignore_changes(registration.inputs, old_inputs, registration.ignore_changes)
    assert network_planned_replacements(network_attributes(diffed), state) == set()
    # without ignore_changes the new key alone would replace the network and the lab on it
    new = network_attributes(registration.inputs)
    assert network_planned_replacements(new, state) == {"options"}
