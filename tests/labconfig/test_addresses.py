"""Subnet math: the pool comes from the subnet and keeps clear of everything else."""

from __future__ import annotations

from ipaddress import IPv4Address, ip_network

import pytest

from labconfig.addresses import plan_network
from labconfig.model import ConfigError
from labconfig.parse import parse_config


def plan(**top):
    tenants = top.pop("tenants", [{"name": "tenant-a"}, {"name": "tenant-b"}])
    return plan_network(parse_config({"tenants": tenants, **top}))


def test_default_plan_for_the_lab_subnet():
    p = plan()
    assert str(p.subnet) == "172.30.0.0/16"
    assert p.gateway == IPv4Address("172.30.0.1")
    assert str(p.container_range) == "172.30.0.0/17"
    assert p.pool_range == "172.30.255.205-172.30.255.254"
    assert p.tenant_addresses == {
        "tenant-a": IPv4Address("172.30.255.205"),
        "tenant-b": IPv4Address("172.30.255.206"),
    }


@pytest.mark.parametrize("subnet", ["10.10.0.0/24", "192.168.77.0/25", "172.30.0.0/16"])
def test_pool_is_a_range_inside_the_subnet_and_outside_the_container_range(subnet):
    p = plan(subnet=subnet)
    net = ip_network(subnet)
    pool = range(int(p.pool_start), int(p.pool_end) + 1)
    assert "/" not in p.pool_range  # a range, never a CIDR
    assert p.pool_start in net and p.pool_end in net
    assert int(net.network_address) not in pool
    assert int(net.broadcast_address) not in pool
    assert int(p.gateway) not in pool
    assert not any(
        int(a) in pool
        for a in (p.container_range.network_address, p.container_range.broadcast_address)
    )
    assert int(p.container_range.broadcast_address) < int(p.pool_start)
    assert all(int(a) in pool for a in p.tenant_addresses.values())
    assert len(set(p.tenant_addresses.values())) == 2


def test_pinned_address_is_kept_and_others_fill_around_it():
    p = plan(tenants=[{"name": "a"}, {"name": "b", "address": "172.30.255.205"}, {"name": "c"}])
    assert p.tenant_addresses == {
        "a": IPv4Address("172.30.255.206"),
        "b": IPv4Address("172.30.255.205"),
        "c": IPv4Address("172.30.255.207"),
    }


@pytest.mark.parametrize(
    ("top", "key", "fragment"),
    [
        ({"subnet": "fd00::/64"}, "subnet", "IPv6"),
        ({"subnet": "172.30.0.1/16"}, "subnet", "not a network"),
        ({"poolRange": "172.30.0.10-172.30.0.20"}, "poolRange", "overlaps the container range"),
        ({"poolRange": "172.31.0.10-172.31.0.20"}, "poolRange", "inside"),
        ({"poolRange": "172.30.255.250-172.30.255.240"}, "poolRange", "starts after it ends"),
        ({"poolRange": "172.30.255.250"}, "poolRange", "must be a range"),
        ({"poolRange": "172.30.255.250-172.30.255.250"}, "poolRange", "1 addresses for 2 tenants"),
        (
            {"gateway": "172.30.255.250", "poolRange": "172.30.255.240-172.30.255.254"},
            "poolRange",
            "gateway",
        ),
        ({"gateway": "10.0.0.1"}, "gateway", "not a host address"),
        ({"containerRange": "10.0.0.0/24"}, "containerRange", "not inside"),
        (
            {"tenants": [{"name": "a", "podCidr": "172.30.8.0/21"}]},
            "tenants[0].podCidr",
            "overlaps the lab subnet",
        ),
        (
            {"tenants": [{"name": "a", "serviceCidr": "10.244.0.0/20"}]},
            "tenants[0].serviceCidr",
            "overlaps podCidr",
        ),
        (
            {"tenants": [{"name": "a", "address": "172.30.1.1"}]},
            "tenants[0].address",
            "outside the pool",
        ),
        (
            {
                "tenants": [
                    {"name": "a", "address": "172.30.255.210"},
                    {"name": "b", "address": "172.30.255.210"},
                ]
            },
            "tenants[1].address",
            "already pinned by tenant 'a'",
        ),
    ],
)
def test_bad_network_config_names_the_key(top, key, fragment):
    with pytest.raises(ConfigError) as info:
        plan(**top)
    assert info.value.key == key
    assert fragment in str(info.value)


def test_more_tenants_than_pool_addresses_is_refused():
    tenants = [{"name": f"t{i}"} for i in range(3)]
    with pytest.raises(ConfigError, match="3 tenants"):
        plan(tenants=tenants, poolRange="172.30.255.250-172.30.255.251")


def test_small_subnet_counts_workers():
    tenants = [{"name": "a", "workers": 6}]
    with pytest.raises(ConfigError, match="6 workers"):
        plan(tenants=tenants, subnet="10.0.0.0/28")
    assert plan(tenants=[{"name": "a", "workers": 2}], subnet="10.0.0.0/28").pool_size >= 1
