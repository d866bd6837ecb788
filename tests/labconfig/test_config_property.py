"""Random stack configs: each one parses into a consistent address plan or names its key.

``parse_config`` must never fail with anything but ``ConfigError`` (the program turns that into
one clear line; any other exception is a traceback for a user typo). A slower property runs
the whole program under mocks for random configs.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from labconfig.addresses import plan_network
from labconfig.gpu_models import KNOWN_GPU_MODELS
from labconfig.model import ConfigError, LabConfig
from labconfig.parse import parse_config
from labconfig.stack import raw_stack_config
from tests.support.pulumi_harness import config_env, run_program

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 100), st.floats(allow_nan=False), st.text(max_size=8)
)
NAMES = st.one_of(
    st.sampled_from(["tenant-a", "tenant-b", "a", "x-worker-1", "kamaji-hami-lab"]),
    st.sampled_from(["Tenant_A", "", "-a", "a-", "a" * 41, "a.b"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,12}[a-z0-9]", fullmatch=True),
    SCALARS,
)


@st.composite
def ipv4_networks(draw: st.DrawFn, min_prefix: int = 0) -> str:
    prefix = draw(st.integers(min_prefix, 32))
    address = draw(st.integers(0, 2**32 - 1))
    return str(ipaddress.IPv4Network((address, prefix), strict=False))


@st.composite
def ipv4_addresses(draw: st.DrawFn) -> str:
    return str(ipaddress.IPv4Address(draw(st.integers(0, 2**32 - 1))))


NETWORK_TEXT = st.one_of(
    st.sampled_from(["172.30.0.0/16", "10.10.0.0/24", "192.168.1.0/30", "10.0.0.0/31"]),
    st.sampled_from(["255.255.255.255/32", "0.0.0.0/32", "fd00::/64", "172.30.0.1/16", "x", ""]),
    ipv4_networks(),
)
ADDRESS_TEXT = st.one_of(
    ipv4_addresses(),
    st.sampled_from(["172.30.255.210", "172.30.255.254", "fd00::1", "1.2.3", "", "x"]),
)
RANGE_TEXT = st.one_of(
    st.builds(lambda a, b: f"{a}-{b}", ADDRESS_TEXT, ADDRESS_TEXT),
    st.sampled_from(["", "172.30.255.200-172.30.255.250", "10.0.0.5", "-", "a-b-c"]),
    st.text(max_size=12),
)
GPU = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from([*KNOWN_GPU_MODELS, "l4", "A200", ""]), SCALARS)},
    optional={
        "count": st.one_of(st.integers(-1, 20), SCALARS),
        "memoryMb": st.one_of(st.integers(0, 2_000_000), SCALARS),
        "cores": st.integers(0, 150),
        "product": st.text(max_size=6),
    },
)
TENANT = st.fixed_dictionaries(
    {"name": NAMES},
    optional={
        "workers": st.one_of(st.integers(-1, 22), SCALARS),
        "gpus": st.one_of(st.lists(GPU, max_size=3), SCALARS),
        "address": st.one_of(ADDRESS_TEXT, SCALARS),
        "podCidr": st.one_of(NETWORK_TEXT, st.just("10.244.0.0/16")),
        "serviceCidr": st.one_of(NETWORK_TEXT, st.just("10.96.0.0/16")),
        "kubernetesVersion": st.sampled_from(["v1.35.0", "v1.34.0", "v1.29.0", "1.35", "v1.35"]),
        "gpuQuotaMb": st.one_of(st.integers(-1, 100_000), SCALARS),
        "schedulerPolicy": st.one_of(
            st.fixed_dictionaries({"node": st.sampled_from(["binpack", "spread", "x"])}), SCALARS
        ),
        "workerMode": st.sampled_from(["container", "remote", "ssh"]),
        "remoteWorkers": st.one_of(
            st.lists(st.fixed_dictionaries({"name": NAMES, "host": st.just("h")}), max_size=2),
            SCALARS,
        ),
        "gpuMode": st.sampled_from(["simulated", "nvml-mock", "real", "fake"]),
        "extraKey": SCALARS,
    },
)
RAW_CONFIG = st.fixed_dictionaries(
    {"tenants": st.one_of(st.lists(TENANT, max_size=4), SCALARS, st.lists(SCALARS, max_size=2))},
    optional={
        "subnet": st.one_of(NETWORK_TEXT, SCALARS),
        "gateway": st.one_of(ADDRESS_TEXT, SCALARS),
        "containerRange": st.one_of(NETWORK_TEXT, SCALARS),
        "poolRange": st.one_of(RANGE_TEXT, SCALARS),
        "managementClusterName": st.one_of(NAMES, SCALARS),
        "hamiSplitCount": st.one_of(st.integers(-1, 200), st.text(max_size=3)),
        "preflight": st.one_of(st.sampled_from(["true", "false", "yes", "maybe"]), SCALARS),
        "managementMode": st.sampled_from(["kind", "existing", "k3s"]),
        "managementKubeconfig": st.one_of(st.just("apiVersion: v1"), SCALARS),
        "managementStack": st.one_of(st.just("org/lab/lab"), SCALARS),
        "sshPrivateKey": st.one_of(st.just("-----BEGIN KEY-----"), SCALARS),
        "unknownKey": SCALARS,
    },
)


@st.composite
def near_valid_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly parseable: a random IPv4 subnet, pools and pinned addresses drawn inside it."""
    subnet = ipaddress.IPv4Network(
        (draw(st.integers(0, 2**32 - 1)), draw(st.integers(16, 29))), strict=False
    )
    inside = st.integers(0, subnet.num_addresses - 1).map(lambda i: str(subnet[i]))
    upper = st.integers(subnet.num_addresses // 2, subnet.num_addresses - 1)
    names = draw(
        st.lists(
            st.from_regex(r"t[a-z0-9]{0,5}", fullmatch=True), min_size=1, max_size=4, unique=True
        )
    )
    tenants = [
        {
            "name": name,
            "workers": draw(st.integers(1, 4)),
            **draw(
                st.fixed_dictionaries({}, optional={"address": upper.map(lambda i: str(subnet[i]))})
            ),
        }
        for name in names
    ]
    config: dict[str, Any] = {"tenants": tenants, "subnet": str(subnet)}
    if draw(st.booleans()):
        config["poolRange"] = draw(st.builds(lambda a, b: f"{a}-{b}", inside, inside))
    return config


def assert_plan_is_consistent(cfg: LabConfig) -> None:
    plan = plan_network(cfg)
    subnet, pool = plan.subnet, range(int(plan.pool_start), int(plan.pool_end) + 1)
    assert plan.pool_start in subnet and plan.pool_end in subnet
    assert int(subnet.network_address) not in pool and int(subnet.broadcast_address) not in pool
    assert plan.container_range.subnet_of(subnet)
    containers = plan.container_range
    assert (
        int(containers.broadcast_address) < pool.start
        or int(containers.network_address) >= pool.stop
    )
    assert int(plan.gateway) not in pool
    addresses = list(plan.tenant_addresses.values())
    assert list(plan.tenant_addresses) == [t.name for t in cfg.tenants]
    assert len(set(addresses)) == len(addresses)
    assert all(int(a) in pool for a in addresses)
    assert plan.dashboard_address == plan.pool_end and plan.pool_end not in addresses


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.one_of(RAW_CONFIG, near_valid_configs()))
# Regressions: the default gateway overflowed past 255.255.255.255 (AddressValueError), and a
# /29 service range broke the tenant manifest later (IndexError in dns_service_ip).
@example(raw={"tenants": [{"name": "a"}], "subnet": "255.255.255.255/32"})
@example(raw={"tenants": [{"name": "a"}], "subnet": "10.0.0.0/24", "poolRange": "10.0.0.5"})
@example(raw={"tenants": [{"name": "a", "serviceCidr": "10.96.0.0/29"}]})
@example(
    raw={
        "tenants": [
            {"name": "a", "workerMode": "remote", "remoteWorkers": [{"name": "g", "host": "h"}]},
            {"name": "b", "workerMode": "remote", "remoteWorkers": [{"name": "g", "host": "h"}]},
        ],
        "sshPrivateKey": "k",
    }
)
def test_any_raw_config_parses_consistently_or_names_its_key(raw: dict[str, Any]):
    try:
        cfg = parse_config(raw)
    except ConfigError as error:
        assert error.key and str(error).startswith(f"{error.key}: ")
        event("ConfigError")
        return
    event("valid")
    assert_plan_is_consistent(cfg)


# --- the whole program for random configs -------------------------------------------------

VALIDISH_TENANT = st.fixed_dictionaries(
    {"name": st.from_regex(r"t[a-z0-9]{0,6}", fullmatch=True)},
    optional={
        "workers": st.integers(0, 3),
        "gpus": st.lists(
            st.fixed_dictionaries(
                {"model": st.sampled_from([*KNOWN_GPU_MODELS, "A200"])},
                optional={"count": st.integers(1, 3)},
            ),
            max_size=2,
        ),
        "gpuQuotaMb": st.integers(1, 100_000),
        "serviceCidr": st.sampled_from(["10.96.0.0/16", "10.96.0.0/29"]),
        "gpuMode": st.sampled_from(["simulated", "nvml-mock"]),
    },
)
PROGRAM_CONFIG = st.fixed_dictionaries(
    {"tenants": st.lists(VALIDISH_TENANT, min_size=1, max_size=3)},
    optional={
        "subnet": st.sampled_from(["172.30.0.0/16", "10.10.0.0/24", "192.168.1.0/29"]),
        "preflight": st.sampled_from(["true", "false"]),
        "validate": st.sampled_from(["true", "false"]),
    },
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(config=PROGRAM_CONFIG)
# Regression: a /29 service range has no tenth address for CoreDNS (was an IndexError).
@example(config={"tenants": [{"name": "t", "workers": 1, "serviceCidr": "10.96.0.0/29"}]})
def test_program_registers_one_control_plane_per_tenant_and_one_container_per_worker(
    config: dict[str, Any],
):
    # Exactly what the program reads: the config map through pulumi.Config (raw_stack_config).
    seen = raw_stack_config(json.loads(config_env(config)))
    try:
        cfg = parse_config(seen)
    except ConfigError:
        event("invalid: SystemExit(32)")
        with pytest.raises(SystemExit) as info:
            run_program(config)
        assert info.value.code == 32  # the language host's "error already shown"
        return
    event("valid: program ran")
    run = run_program(config)
    kinds = Counter(r.type for r in run.resources)
    assert kinds["kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"] == len(cfg.tenants)
    assert kinds["docker:index/container:Container"] == sum(
        t.container_workers for t in cfg.tenants
    )
    names = sorted(r.name for r in run.of_type("docker:index/container:Container"))
    assert names == sorted(n for t in cfg.tenants for n in t.worker_names)


# --- the documented address rules as an independent oracle -----------------------------------


def broken_network_rules(raw: dict[str, Any]) -> set[str]:
    """The keys a near-valid config breaks, from the rules as README and Pulumi.yaml state them
    (not from labconfig/addresses.py): the container range is the subnet's lower half and holds
    the workers plus 4; the gateway is the subnet's first host; the default pool is the 50
    addresses below the broadcast, above the container range; a poolRange lies in the subnet
    off its first and last address, off the container range and the gateway, and holds one
    address per tenant and, last, the dashboard's; a pinned tenant address is in the pool, not
    the dashboard's, and pinned once; the default
    podCidr 10.244.0.0/16 and serviceCidr 10.96.0.0/16 stay off the lab subnet."""
    subnet = ipaddress.IPv4Network(raw["subnet"])
    first, last = int(subnet.network_address), int(subnet.broadcast_address)
    half = subnet.num_addresses // 2
    containers_last, gateway = first + half - 1, first + 1
    tenants = raw["tenants"]
    broken: set[str] = set()
    if half < sum(t["workers"] for t in tenants) + 4:
        broken.add("subnet")
    if "poolRange" in raw:
        start, end = (int(ipaddress.IPv4Address(a)) for a in raw["poolRange"].split("-"))
        pool_key = "poolRange"
        if (
            start > end
            or start <= first
            or end >= last
            or start <= containers_last
            or start <= gateway <= end
        ):
            broken.add(pool_key)
    else:
        end, pool_key = last - 1, "subnet"
        start = max(containers_last + 1, end - 50 + 1)
    if end - start + 1 < len(tenants) + 1:
        broken.add(pool_key)
    pinned: set[str] = set()
    for index, t in enumerate(tenants):
        if "address" in t:
            address = int(ipaddress.IPv4Address(t["address"]))
            if not start <= address < end or t["address"] in pinned:
                broken.add(f"tenants[{index}].address")
            pinned.add(t["address"])
        for key, default in (("podCidr", "10.244.0.0/16"), ("serviceCidr", "10.96.0.0/16")):
            if ipaddress.IPv4Network(default).overlaps(subnet):
                broken.add(f"tenants[{index}].{key}")
    return broken


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=near_valid_configs())
@example(raw={"tenants": [{"name": "t", "workers": 1}], "subnet": "10.0.0.0/24"})
@example(raw={"tenants": [{"name": "t", "workers": 4}], "subnet": "10.0.0.0/28"})
@example(raw={"tenants": [{"name": "t", "workers": 1}], "subnet": "10.244.0.0/24"})
@example(
    raw={
        "tenants": [{"name": "t", "workers": 1}, {"name": "u", "workers": 1}],
        "subnet": "10.0.0.0/24",
        "poolRange": "10.0.0.128-10.0.0.128",
    }
)
def test_near_valid_configs_pass_exactly_when_the_documented_rules_hold(raw: dict[str, Any]):
    broken = broken_network_rules(raw)
    try:
        cfg = parse_config(raw)
    except ConfigError as error:
        event("refused")
        assert error.key in broken, f"{error} (oracle: {sorted(broken) or 'valid'})"
        return
    event("valid")
    assert not broken, f"accepted, but the rules say {sorted(broken)}"
    plan = plan_network(cfg)
    pinned = {t["name"]: t["address"] for t in raw["tenants"] if "address" in t}
    assert {name: str(plan.tenant_addresses[name]) for name in pinned} == pinned
