"""Resource arguments the components build, as plain values: Docker network, worker container."""

from __future__ import annotations

import pulumi_docker as docker

from components.platform.network import bridge_options, ipam_config
from components.tenant.workers import node_container_args
from labconfig.addresses import plan_network
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

CFG = parse_config(lab_stack_config())
PLAN = plan_network(CFG)


def test_network_is_one_ipv4_ipam_entry_with_a_container_range():
    ipam = ipam_config(PLAN)
    assert (ipam.subnet, ipam.gateway, ipam.ip_range) == (
        "172.30.0.0/16",
        "172.30.0.1",
        "172.30.0.0/17",
    )
    assert bridge_options(0) == {
        "com.docker.network.bridge.enable_ip_masquerade": "true",
        "com.docker.network.enable_ipv6": "false",
    }


def test_worker_container_has_kinds_node_flags():
    args = node_container_args("tenant-a-worker-1", "tenant-a", "img-id", "kamaji-hami-lab")
    assert args["privileged"] is True
    assert args["hostname"] == args["name"] == "tenant-a-worker-1"
    # label=disable: what Docker adds to a privileged container anyway
    # (T2, tests/components/test_workers.py)
    assert set(args["security_opts"]) == {
        "seccomp=unconfined",
        "apparmor=unconfined",
        "label=disable",
    }
    assert args["tmpfs"] == {"/tmp": "", "/run": ""}
    assert args["cgroupns_mode"] == "private" and args["init"] is False and args["tty"] is True
    assert (args["restart"], args["max_retry_count"]) == ("on-failure", 1)
    mounts = {(v.container_path, v.host_path, v.read_only) for v in args["volumes"]}
    assert mounts == {("/var", None, None), ("/lib/modules", "/lib/modules", True)}
    assert [n.name for n in args["networks_advanced"]] == ["kamaji-hami-lab"]
    assert isinstance(args["networks_advanced"][0], docker.ContainerNetworksAdvancedArgs)
