"""The lab network's MTU, read from Docker's default bridge as kind does.

The probe itself runs a fake docker; a program run gets its answer from the harness's MockHost
(what the default bridge reports, or no daemon), never from the machine's Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.platform.network import (
    IPV6_OPTION,
    MTU_OPTION,
    MtuProbeFailed,
    bridge_options,
    creation_mtu,
    docker_default_bridge_mtu,
)
from tests.support.fake_tools import fake_tools, tool_env
from tests.support.pulumi_harness import (
    MockHost,
    lab_stack_config,
    run_program,
)

LAB = lab_stack_config()


PROBE_FORMAT = '{{ index .Options "com.docker.network.driver.mtu" }}'
FAKE_DOCKER = """\
echo "docker $*" >> "$CALLS"
[ "$*" = 'network inspect bridge -f {{ index .Options "com.docker.network.driver.mtu" }}' ]
printf '%s\\n' "$BRIDGE_MTU"
"""


@pytest.mark.upstream("kind-network-mtu-from-default-bridge")
@pytest.mark.parametrize(("mtu", "expected"), [("1400", 1400), ("", 0), ("<no value>", 0)])
def test_bridge_mtu_is_read_from_dockers_default_bridge_like_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mtu: str, expected: int
):
    """m1: kind's getDefaultNetworkMTU: the default bridge's driver MTU option, 0 when absent."""
    log = fake_tools(tmp_path, {"docker": FAKE_DOCKER})
    for key, value in {**tool_env(tmp_path), "BRIDGE_MTU": mtu}.items():
        monkeypatch.setenv(key, value)
    assert docker_default_bridge_mtu() == expected
    assert log.read_text().count("network inspect bridge") == 1


def test_a_failed_mtu_probe_is_not_taken_for_no_mtu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """m1/M1: Docker missing or failing is an error of the probe, not "the bridge sets none"."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MtuProbeFailed, match=r"No such file|not found"):
        docker_default_bridge_mtu()
    fake_tools(tmp_path, {"docker": 'echo "Cannot connect to the Docker daemon" >&2; exit 1'})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    with pytest.raises(MtuProbeFailed, match=r"Cannot connect to the Docker daemon"):
        docker_default_bridge_mtu()
    assert creation_mtu() == 0  # a create goes on without the option, as kind's does


@pytest.mark.upstream("kind-network-mtu-from-default-bridge", "docker-network-options-force-new")
@pytest.mark.parametrize("probe", ["1380", "1500", "fails"])
def test_a_second_up_never_changes_the_networks_options(probe: str):
    """M1 (network MTU): Docker replaces a network on any option change and the replacement
    deletes the kind cluster first. Whatever a later probe says (another MTU, a timeout, no
    daemon), the engine keeps the created options: they are ignore_changes, and kind too
    never touches an existing network."""
    host = MockHost(bridge_mtu=None if probe == "fails" else probe)
    for preview in (False, True):
        network = run_program(LAB, preview=preview, host=host).named("lab-network-bridge")
        assert network.ignore_changes == ["options"]
        assert network.delete_before_replace is True
    assert len(host.commands) == 2  # the probe ran in both, and nothing else did


@pytest.mark.upstream("kind-network-mtu-from-default-bridge")
def test_lab_network_carries_the_daemon_mtu():
    """m1: as kind creates its own network: masquerade, and the MTU only when it is known."""
    assert bridge_options(0) == {
        "com.docker.network.bridge.enable_ip_masquerade": "true",
        IPV6_OPTION: "false",
    }
    assert bridge_options(1450)[MTU_OPTION] == "1450"
    host = MockHost(bridge_mtu="1380")
    network = run_program(LAB, host=host).named("lab-network-bridge")
    assert host.commands == [
        ["docker", "network", "inspect", "bridge", "-f", PROBE_FORMAT],
    ]
    assert network.inputs["options"] == {
        "com.docker.network.bridge.enable_ip_masquerade": "true",
        IPV6_OPTION: "false",
        MTU_OPTION: "1380",
    }
    assert network.delete_before_replace is True


@pytest.mark.upstream("docker-network-enable-ipv6-option")
@pytest.mark.parametrize("probe", ["1380", None])
def test_the_lab_network_says_ipv6_off_in_its_driver_options(probe: str | None):
    """The provider never sends `ipv6 = false`; Docker >= 27 then reads IPv6 from this driver
    option, which a daemon's default-network-opts could set to true. Declared, it wins."""
    assert IPV6_OPTION == "com.docker.network.enable_ipv6"
    network = run_program(LAB, host=MockHost(bridge_mtu=probe)).named("lab-network-bridge")
    assert network.inputs["ipv6"] is False
    assert network.inputs["options"][IPV6_OPTION] == "false"
