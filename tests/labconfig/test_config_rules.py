"""Each config rule, at its edge: the value just allowed passes, the one just past is named.

Written against the rules as the docs state them (Pulumi.yaml, README's config section), so that
deleting or loosening a rule in labconfig/model.py or labconfig/addresses.py fails a test
(issue 13: mutation testing found these rules unpinned).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pulumi
import pytest

from labconfig.addresses import plan_network
from labconfig.kamaji_sources import KAMAJI_SOURCES
from labconfig.model import MAX_CARDS_PER_WORKER, ConfigError
from labconfig.node_images import WORKER_IMAGES
from labconfig.parse import parse_config
from labconfig.stack import raw_stack_config

PINNED_133 = "kindest/node:v1.33.0@sha256:" + "a" * 64  # a digest of the right shape

SSH = {"sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n"}
DIGEST = "sha256:" + "0123456789abcdef" * 4


def tenant(**fields: Any) -> dict[str, Any]:
    return {"tenants": [{"name": "a", **fields}]}


def remote(**fields: Any) -> dict[str, Any]:
    host = {"name": "gpu-1", "host": "gpu-1.example"}
    return {"tenants": [{"name": "a", "workerMode": "remote", "remoteWorkers": [host], **fields}]}


def image(version: str, digest: str = DIGEST) -> str:
    return f"kindest/node:{version}@{digest}"


def refused(raw: dict[str, Any], key: str, gist: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.key == key, str(info.value)
    assert str(info.value).startswith(f"{key}: ")
    assert gist in str(info.value)


# --- tenants ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "a1", "a-b", "x" * 40, "a--b"])
def test_tenant_names_that_are_dns_labels_pass(name: str):
    assert parse_config({"tenants": [{"name": name}]}).tenants[0].name == name


@pytest.mark.parametrize(
    "name", ["A", "1a", "-a", "a-", "a_b", "a.b", "ab\n", "a b", "é", "x" * 41, ""]
)
def test_tenant_names_that_are_not_dns_labels_are_named(name: str):
    with pytest.raises(ConfigError) as info:
        parse_config({"tenants": [{"name": name}]})
    assert info.value.key == "tenants[0].name"
    assert any(
        gist in str(info.value)
        for gist in ("must be a DNS label", "at most 40 characters", "at least 1 character")
    )


@pytest.mark.parametrize("name", ["Lab", "lab_1", "lab\n"])
def test_network_and_cluster_names_must_be_dns_labels(name: str):
    for key in ("networkName", "managementClusterName"):
        refused({**tenant(), key: name}, key, "must be a DNS label")


@pytest.mark.parametrize("minor", [31, 36])
def test_kubernetes_versions_at_both_ends_of_kamajis_range_pass(minor: int):
    version = f"v1.{minor}.0"
    cfg = parse_config(tenant(kubernetesVersion=version, workerImage=image(version)))
    assert cfg.tenants[0].kubernetes_version == version
    assert cfg.tenants[0].node_image == image(version)


def test_a_version_below_kubeadms_v1beta4_is_refused_with_why():
    refused(
        tenant(kubernetesVersion="v1.30.14", workerImage=image("v1.30.14")),
        "tenants[0].kubernetesVersion",
        "must be v1.31.0 or newer: the workers join with kubeadm's v1beta4 config",
    )


@pytest.mark.upstream("kamaji-kubeadm-ceiling")
@pytest.mark.parametrize("version", ["v1.37.0", "v1.37.2", "v1.38.0"])
def test_a_version_above_kamajis_kubeadm_is_refused_naming_the_ceiling_and_why(version: str):
    refused(
        tenant(kubernetesVersion=version, workerImage=image(version)),
        "tenants[0].kubernetesVersion",
        f"{version} is newer than v1.36, the newest tenant version Kamaji 26.8.2-edge runs: its "
        "webhook refuses a TenantControlPlane above the kubeadm it is built with (v1.36)",
    )


@pytest.mark.upstream("kamaji-kubeadm-ceiling")
def test_the_ceiling_follows_the_pinned_kamaji(monkeypatch: pytest.MonkeyPatch):
    """A Kamaji whose kubeadm is newer raises the ceiling: nothing else in the lab holds it."""
    newer = replace(KAMAJI_SOURCES["26.8.2-edge"], tag="26.9.9-edge", kubeadm_version="v1.37.0")
    monkeypatch.setitem(KAMAJI_SOURCES, "26.9.9-edge", newer)
    raw = tenant(kubernetesVersion="v1.37.0", workerImage=image("v1.37.0"))
    refused(raw, "tenants[0].kubernetesVersion", "Kamaji 26.8.2-edge")
    cfg = parse_config({**raw, "kamajiImageTag": "26.9.9-edge"})
    assert cfg.tenants[0].kubernetes_version == "v1.37.0"


@pytest.mark.parametrize("version", ["1.35.0", "v1.35", "v2.35.0", "v1.35.0-rc.1", "v1.35.0\n"])
def test_kubernetes_version_must_look_like_a_release(version: str):
    refused(tenant(kubernetesVersion=version), "tenants[0].kubernetesVersion", "like v1.35.0")


def test_the_default_version_uses_the_pinned_kind_image():
    (t,) = parse_config(tenant()).tenants
    assert t.kubernetes_version == "v1.36.4"
    assert t.node_image == WORKER_IMAGES["v1.36.4"]
    assert t.node_image.startswith("kindest/node:v1.36.4@sha256:")
    assert len(t.node_image.split("@sha256:")[1]) == 64


@pytest.mark.parametrize(
    "bad",
    [
        image("v1.35.0", "sha256:" + "0" * 63),
        image("v1.35.0", "sha256:" + "0" * 65),
        image("v1.35.0", "sha256:" + "A" * 64),
        image("v1.35.0", "sha512:" + "0" * 64),
        "kindest/node:v1.35.0",
        "kindest/nodes:v1.35.0@" + DIGEST,
        image("v1.35.0") + "\n",
        "kindest/node:v1.35@" + DIGEST,
        "127.0.0.1:5000/kindest/node:v1.35.0",
        "127.0.0.1:/" + image("v1.35.0"),
    ],
)
def test_a_node_image_must_be_pinned_by_a_full_digest(bad: str):
    refused(tenant(workerImage=bad), "tenants[0].workerImage", "pinned by digest")
    refused({**tenant(), "managementNodeImage": bad}, "managementNodeImage", "pinned by digest")


@pytest.mark.parametrize(
    "ok",
    [
        image("v1.35.0"),
        "registry.example/mirror/" + image("v1.35.2"),
        # a site mirror with a port (the host tier's loopback registry is one)
        "127.0.0.1:5000/" + image("v1.35.4"),
        "mirror.example:8443/lab/" + image("v1.35.0"),
    ],
)
def test_a_pinned_node_image_passes_with_or_without_a_registry(ok: str):
    raw = tenant(kubernetesVersion="v1.35.0", workerImage=ok)
    cfg = parse_config({**raw, "managementNodeImage": ok})
    assert (cfg.tenants[0].node_image, cfg.management_node_image) == (ok, ok)


@pytest.mark.parametrize(("workers", "ok"), [(0, False), (1, True), (20, True), (21, False)])
def test_workers_per_tenant_are_one_to_twenty(workers: int, ok: bool):
    raw = {**tenant(workers=workers), "subnet": "10.0.0.0/16"}
    if ok:
        assert len(parse_config(raw).tenants[0].worker_names) == workers
    else:
        refused(raw, "tenants[0].workers", "than or equal to")


def test_container_worker_names_count_from_one():
    assert parse_config(tenant(workers=2)).tenants[0].worker_names == ["a-worker-1", "a-worker-2"]


def test_real_gpus_on_container_workers_are_named():
    refused(
        tenant(gpuMode="real"),
        "tenants[0].gpuMode",
        "real GPUs need workerMode remote",
    )


def test_real_gpus_on_remote_workers_pass_without_the_simulated_limit():
    cfg = parse_config(
        {**remote(gpuMode="real", gpus=[{"model": "H100-80GB", "count": 16}]), **SSH}
    )
    (t,) = cfg.tenants
    assert (t.worker_names, t.container_workers, len(t.cards)) == (["gpu-1"], 0, 16)


# --- the numeric limits of a tenant's GPU inventory, at their boundaries -------------------
# Real cards on a remote host: no simulated-memory rule stands in front of the field limits.


def real_cards(*gpus: dict[str, Any]) -> dict[str, Any]:
    return {**remote(gpuMode="real", gpus=list(gpus)), **SSH}


def test_a_worker_holds_at_most_16_cards_over_all_its_entries():
    """16 cards in one entry or split over several pass; a 17th, in either form, is refused
    with the key of what overflows (the entry's count, or the list when they add up)."""
    for gpus in ([{"model": "L4", "count": 16}], [{"model": "L4", "count": 8}] * 2):
        assert len(parse_config(real_cards(*gpus)).tenants[0].cards) == MAX_CARDS_PER_WORKER == 16
    refused(
        real_cards({"model": "L4", "count": 17}),
        "tenants[0].gpus[0].count",
        "less than or equal to 16 (got 17)",
    )
    refused(
        real_cards({"model": "L4", "count": 16}, {"model": "T4"}),
        "tenants[0].gpus",
        "17 cards on each worker (the counts of all entries added up): a worker holds at most 16",
    )
    tiny = {"model": "tiny", "memoryMb": 1024}
    refused(  # simulated workers too
        tenant(gpus=[{**tiny, "count": 9}, {**tiny, "count": 8}]),
        "tenants[0].gpus",
        "17 cards on each worker",
    )


@pytest.mark.parametrize(
    ("field", "fits", "too_far", "gist"),
    [
        ("count", 1, 0, "greater than or equal to 1 (got 0)"),
        ("cores", 1, 0, "greater than or equal to 1 (got 0)"),
        ("cores", 100, 101, "less than or equal to 100 (got 101)"),
        ("memoryMb", 1024, 1023, "greater than or equal to 1024 (got 1023)"),
        ("memoryMb", 1_048_576, 1_048_577, "less than or equal to 1048576 (got 1048577)"),
    ],
)
def test_each_card_limit_holds_at_its_boundary(field: str, fits: int, too_far: int, gist: str):
    card = {"model": "custom", "product": "NVIDIA Custom", "memoryMb": 2048}
    parsed = parse_config(real_cards({**card, field: fits})).tenants[0].cards
    value = {"count": len(parsed), "cores": parsed[0].cores, "memoryMb": parsed[0].memory_mb}
    assert value[field] == fits
    refused(real_cards({**card, field: too_far}), f"tenants[0].gpus[0].{field}", gist)


def test_the_gpu_quota_and_the_split_count_hold_at_their_boundaries():
    assert parse_config(tenant(gpuQuotaMb=1)).tenants[0].gpu_quota_mb == 1
    refused(tenant(gpuQuotaMb=0), "tenants[0].gpuQuotaMb", "greater than or equal to 1 (got 0)")
    for split in (1, 100):
        assert parse_config({**tenant(), "hamiSplitCount": split}).hami_split_count == split
    refused(
        {**tenant(), "hamiSplitCount": 101},
        "hamiSplitCount",
        "less than or equal to 100 (got 101)",
    )


def test_remote_workers_need_a_host_and_the_ssh_key():
    refused(
        {"tenants": [{"name": "a", "workerMode": "remote"}], **SSH},
        "tenants[0].remoteWorkers",
        "needs at least one host",
    )
    refused(remote(), "sshPrivateKey", "remote workers need the SSH key")


def test_remote_worker_names_are_unique_within_a_tenant():
    hosts = [{"name": "g", "host": "h1"}, {"name": "g", "host": "h2"}]
    refused(
        {"tenants": [{"name": "a", "workerMode": "remote", "remoteWorkers": hosts}], **SSH},
        "tenants[0].remoteWorkers[1].name",
        "duplicate worker name 'g'",
    )


def test_remote_workers_on_a_container_tenant_are_named():
    refused(
        tenant(remoteWorkers=[{"name": "g", "host": "h"}]),
        "tenants[0].remoteWorkers",
        "only used with workerMode remote",
    )


def test_remote_workers_take_no_address_from_the_container_range():
    # 20 remote hosts on a subnet whose container range holds 8: only container workers count.
    hosts = [{"name": f"g{i}", "host": f"h{i}"} for i in range(20)]
    raw = {"tenants": [{"name": "a", "workerMode": "remote", "remoteWorkers": hosts}], **SSH}
    plan = plan_network(parse_config({**raw, "subnet": "10.0.0.0/28"}))
    assert plan.container_range.num_addresses == 8


def test_the_remote_ssh_port_is_a_tcp_port():
    for port, ok in ((1, True), (65535, True), (0, False), (65536, False)):
        host = {"name": "g", "host": "h", "port": port}
        raw = {"tenants": [{"name": "a", "workerMode": "remote", "remoteWorkers": [host]}], **SSH}
        if ok:
            assert parse_config(raw).tenants[0].remote_workers[0].port == port
        else:
            refused(raw, "tenants[0].remoteWorkers[0].port", "than or equal to")


# --- management mode --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["managementKubeconfig", "managementStack"])
def test_existing_cluster_settings_are_refused_in_kind_mode(key: str):
    refused({**tenant(), key: "x"}, key, "only used with managementMode existing")


def test_existing_mode_needs_exactly_one_source():
    gist = "existing needs exactly one of managementKubeconfig (secret) or managementStack"
    refused({**tenant(), "managementMode": "existing"}, "managementMode", gist)
    both = {"managementKubeconfig": "apiVersion: v1", "managementStack": "org/lab/lab"}
    refused({**tenant(), "managementMode": "existing", **both}, "managementMode", gist)
    for one in ({"managementKubeconfig": "apiVersion: v1"}, {"managementStack": "org/lab/lab"}):
        assert parse_config({**tenant(), "managementMode": "existing", **one}).management_mode


@pytest.mark.parametrize(
    ("value", "ok"), [("90s", True), ("5m", True), ("5h", False), ("m", False)]
)
def test_the_hami_node_lock_timeout_is_seconds_or_minutes(value: str, ok: bool):
    raw = {**tenant(), "hamiNodeLockTimeout": value}
    if ok:
        assert parse_config(raw).hami_node_lock_timeout == value
    else:
        refused(raw, "hamiNodeLockTimeout", "must be a duration such as 90s or 5m")


def test_a_validation_error_shows_the_value_it_got():
    with pytest.raises(ConfigError) as info:
        parse_config({**tenant(), "hamiSplitCount": 0})
    assert str(info.value) == ("hamiSplitCount: Input should be greater than or equal to 1 (got 0)")


def test_a_missing_key_names_it_without_a_value():
    with pytest.raises(ConfigError) as info:
        parse_config({"tenants": [{}]})
    assert str(info.value) == "tenants[0].name: Field required"


# --- the MetalLB pool (netplan) ----------------------------------------------------------------

SUBNET = {"subnet": "10.0.0.0/24"}  # containers 10.0.0.0/25, gateway 10.0.0.1


@pytest.mark.parametrize(
    ("pool", "gist"),
    [
        ("10.0.0.200-10.0.0.255", "off its first/last address"),  # the broadcast address
        ("10.0.0.0-10.0.0.10", "off its first/last address"),  # the network address
        ("10.0.0.127-10.0.0.130", "overlaps the container range 10.0.0.0/25"),  # its last one
        ("10.0.0.100-10.0.0.200", "overlaps the container range 10.0.0.0/25"),
        ("10.0.1.1-10.0.1.9", "off its first/last address"),
        ("10.0.0.200-10.0.0.199", "starts after it ends"),
        ("10.0.0.200", "must be a range like"),
        ("10.0.0.200-10.0.0.x", "is not an IP address"),
    ],
)
def test_a_pool_off_the_allowed_addresses_is_named(pool: str, gist: str):
    refused({**tenant(), **SUBNET, "poolRange": pool}, "poolRange", gist)


def test_a_pool_holding_the_gateway_is_named():
    raw = {**tenant(), **SUBNET, "gateway": "10.0.0.200", "poolRange": "10.0.0.190-10.0.0.210"}
    refused(raw, "poolRange", "pool includes the gateway 10.0.0.200")
    raw = {**raw, "poolRange": "10.0.0.200-10.0.0.210"}  # the gateway as the first address
    refused(raw, "poolRange", "pool includes the gateway 10.0.0.200")
    raw = {**raw, "poolRange": "10.0.0.190-10.0.0.200"}  # ... and as the last
    refused(raw, "poolRange", "pool includes the gateway 10.0.0.200")


def test_a_pool_right_at_the_allowed_edges_passes():
    # first address after the container range, last one before the broadcast
    plan = plan_network(parse_config({**tenant(), **SUBNET, "poolRange": "10.0.0.128-10.0.0.254"}))
    assert (str(plan.pool_start), str(plan.pool_end), plan.pool_size) == (
        "10.0.0.128",
        "10.0.0.254",
        127,
    )
    no_dashboard = {"monitoring": {"grafana": False}}
    plan = plan_network(
        parse_config(
            {**tenant(), **SUBNET, **no_dashboard, "poolRange": " 10.0.0.200 - 10.0.0.200"}
        )
    )
    assert plan.pool_range == "10.0.0.200-10.0.0.200"  # a one-address pool, spaces trimmed


def test_a_pool_just_right_for_the_tenants_and_the_dashboard_passes_and_one_short_is_named():
    two = {"tenants": [{"name": "a"}, {"name": "b"}], **SUBNET}
    plan = plan_network(parse_config({**two, "poolRange": "10.0.0.200-10.0.0.202"}))
    assert [str(a) for a in plan.tenant_addresses.values()] == ["10.0.0.200", "10.0.0.201"]
    assert str(plan.dashboard_address) == "10.0.0.202"  # the pool's last
    refused(
        {**two, "poolRange": "10.0.0.200-10.0.0.201"},
        "poolRange",
        "has 2 addresses for 2 tenants and the dashboard",
    )
    # Without Grafana (or without monitoring) the tenants have the whole pool.
    for off in ({"grafana": False}, {"enabled": False}):
        plan = plan_network(
            parse_config({**two, "monitoring": off, "poolRange": "10.0.0.200-10.0.0.201"})
        )
        assert (len(plan.tenant_addresses), plan.dashboard_address) == (2, None)


def test_the_default_pool_is_the_fifty_addresses_below_the_broadcast():
    plan = plan_network(parse_config({**tenant(), **SUBNET}))
    assert (str(plan.gateway), str(plan.container_range)) == ("10.0.0.1", "10.0.0.0/25")
    assert (plan.pool_range, plan.pool_size) == ("10.0.0.205-10.0.0.254", 50)


def test_the_default_pool_shrinks_to_what_is_above_the_container_range():
    plan = plan_network(parse_config({**tenant(), "subnet": "10.0.0.0/26"}))
    assert (str(plan.container_range), plan.pool_range) == ("10.0.0.0/27", "10.0.0.32-10.0.0.62")


@pytest.mark.parametrize(
    ("gateway", "ok"),
    [("10.0.0.0", False), ("10.0.0.255", False), ("10.0.1.1", False), ("10.0.0.254", True)],
)
def test_the_gateway_is_a_host_address_of_the_subnet(gateway: str, ok: bool):
    raw = {**tenant(), **SUBNET, "gateway": gateway, "poolRange": "10.0.0.200-10.0.0.210"}
    if ok:
        assert str(plan_network(parse_config(raw)).gateway) == gateway
    else:
        refused(raw, "gateway", "is not a host address of subnet 10.0.0.0/24")


def test_the_container_range_holds_the_workers_and_four_more():
    # a /29 holds 8: four workers fit, five do not
    fits = {**tenant(workers=4), "subnet": "10.0.0.0/28"}
    assert plan_network(parse_config(fits)).container_range.num_addresses == 8
    refused(
        {**tenant(workers=5), "subnet": "10.0.0.0/28"},
        "subnet",
        "10.0.0.0/29 holds 8 addresses; the lab needs 9 for 5 workers",
    )
    refused(
        {**tenant(workers=5), **SUBNET, "containerRange": "10.0.0.0/29"},
        "containerRange",
        "the lab needs 9 for 5 workers",
    )


def test_a_container_range_outside_the_subnet_is_named():
    refused(
        {**tenant(), **SUBNET, "containerRange": "10.0.1.0/25"},
        "containerRange",
        "10.0.1.0/25 is not inside subnet 10.0.0.0/24",
    )


@pytest.mark.parametrize(
    ("subnet", "gist"),
    [
        ("10.0.0.0/31", "too small"),
        ("10.0.0.1/24", "is not a network in CIDR form"),
        ("fd00::/64", "is IPv6"),
    ],
)
def test_a_subnet_that_cannot_hold_the_lab_is_named(subnet: str, gist: str):
    refused({**tenant(), "subnet": subnet}, "subnet", gist)


def test_the_smallest_subnet_with_room_passes():
    plan = plan_network(parse_config({**tenant(), "subnet": "10.0.0.0/28"}))
    assert (plan.pool_range, len(plan.tenant_addresses)) == ("10.0.0.8-10.0.0.14", 1)


@pytest.mark.parametrize(("cidr", "ok"), [("10.96.0.0/28", True), ("10.96.0.0/29", False)])
def test_the_service_range_holds_coredns_at_its_tenth_address(cidr: str, ok: bool):
    raw = tenant(serviceCidr=cidr)
    if ok:
        assert parse_config(raw).tenants[0].service_cidr == cidr
    else:
        refused(raw, "tenants[0].serviceCidr", "CoreDNS takes address #10")


@pytest.mark.parametrize(
    ("fields", "key", "gist"),
    [
        ({"podCidr": "172.30.1.0/24"}, "tenants[0].podCidr", "overlaps the lab subnet"),
        ({"serviceCidr": "172.30.0.0/24"}, "tenants[0].serviceCidr", "overlaps the lab subnet"),
        ({"podCidr": "10.96.0.0/12"}, "tenants[0].serviceCidr", "overlaps podCidr 10.96.0.0/12"),
        ({"podCidr": "10.244.0.1/16"}, "tenants[0].podCidr", "not a network in CIDR form"),
    ],
)
def test_tenant_ranges_that_collide_are_named(fields: dict, key: str, gist: str):
    refused(tenant(**fields), key, gist)


def test_pinned_tenant_addresses_must_be_in_the_pool_and_distinct():
    pool = {**SUBNET, "poolRange": "10.0.0.200-10.0.0.210"}
    refused({**tenant(address="10.0.0.211"), **pool}, "tenants[0].address", "outside the pool")
    refused({**tenant(address="10.0.0.199"), **pool}, "tenants[0].address", "outside the pool")
    two = {"tenants": [{"name": "a", "address": "10.0.0.209"}, {"name": "b"}], **pool}
    assert {k: str(v) for k, v in plan_network(parse_config(two)).tenant_addresses.items()} == {
        "a": "10.0.0.209",
        "b": "10.0.0.200",
    }
    refused({**tenant(address="10.0.0.210"), **pool}, "tenants[0].address", "the dashboard's")
    same = {
        "tenants": [{"name": "a", "address": "10.0.0.205"}, {"name": "b", "address": "10.0.0.205"}]
    }
    refused({**same, **pool}, "tenants[1].address", "already pinned by tenant 'a'")


# --- reading the stack config ------------------------------------------------------------------


def test_the_raw_reader_reads_every_project_key_between_foreign_ones():
    raw = raw_stack_config(
        {
            "aws:region": "x",
            "kamaji-hami-lab:hamiSplitCount": "7",
            "kamaji:other": "x",
            "kamaji-hami-lab:preflight": "false",
            "kubernetes:context": "x",
            "kamaji-hami-lab:tenants": '[{"name": "a"}]',
            "zzz:last": "x",
        }
    )
    assert raw == {"hamiSplitCount": 7, "preflight": False, "tenants": [{"name": "a"}]}
    cfg = parse_config(raw)
    assert (cfg.hami_split_count, cfg.preflight) == (7, False)


def test_the_raw_reader_reads_this_project_whatever_project_the_process_runs(
    monkeypatch: pytest.MonkeyPatch,
):
    # The preflight reads the stack's map outside a program, where the SDK's project is unset.
    monkeypatch.setattr(pulumi.runtime.settings.SETTINGS, "project", "other-project")
    raw = raw_stack_config({"kamaji-hami-lab:subnet": "10.0.0.0/24", "other-project:subnet": "x"})
    assert raw == {"subnet": "10.0.0.0/24"}


def test_the_raw_reader_keeps_the_secret_keys_it_is_given():
    key = "kamaji-hami-lab:sshPrivateKey"
    raw = raw_stack_config({key: "-----BEGIN KEY-----"}, secret_keys=[key])
    assert raw["sshPrivateKey"].get_secret_value() == "-----BEGIN KEY-----"
    with pytest.raises(ConfigError, match=r"^sshPrivateKey: is a secret: set it with pulumi"):
        raw_stack_config({key: "-----BEGIN KEY-----"})
    empty = raw_stack_config({key: ""}, secret_keys=[key])  # set, but empty: stays empty
    assert empty["sshPrivateKey"].get_secret_value() == ""


# --- what mutation testing found unpinned (issue 13) ------------------------------------------


def test_a_custom_card_and_a_known_one_keep_the_cores_given():
    gpus = [{"model": "RTX", "memoryMb": 2048, "cores": 50}, {"model": "L4", "cores": 30}]
    cards = parse_config(tenant(gpus=gpus)).tenants[0].cards
    assert [(c.product, c.memory_mb, c.cores) for c in cards] == [
        ("RTX", 2048, 50),
        ("NVIDIA L4", 23034, 30),
    ]


@pytest.mark.parametrize("gpus", [[], [{"model": "T4"}, {"model": "T4"}], [{"model": "L4"}]])
def test_nvml_mock_needs_exactly_one_gpu_entry(gpus: list):
    refused(
        tenant(gpuMode="nvml-mock", gpus=gpus),
        "tenants[0].gpus",
        "nvml-mock simulates one card model per node from its profiles: give exactly one entry",
    )


@pytest.mark.parametrize(
    ("raw", "key", "message"),
    [
        ({"gateway": "fd00::1"}, "gateway", "'fd00::1' is IPv6; the lab network is IPv4 only"),
        ({"gateway": "x"}, "gateway", "'x' is not an IP address"),
        ({"containerRange": "x"}, "containerRange", "'x' is not a network in CIDR form"),
        ({"poolRange": "x-10.0.0.200"}, "poolRange", "'x' is not an IP address"),
        ({"poolRange": "10.0.0.200-fd00::1"}, "poolRange", "'fd00::1' is IPv6"),
        (
            {"poolRange": "10.0.0.200-10.0.0.201-10.0.0.202"},
            "poolRange",
            "'10.0.0.201-10.0.0.202' is not an IP address",  # split at the first '-'
        ),
    ],
)
def test_each_network_key_is_named_with_what_is_wrong(raw: dict, key: str, message: str):
    refused({**tenant(), **SUBNET, **raw}, key, message)


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"serviceCidr": "x"}, "tenants[0].serviceCidr"),
        ({"podCidr": "x"}, "tenants[0].podCidr"),
        ({"address": "x"}, "tenants[0].address"),
    ],
)
def test_each_tenant_network_key_is_named(fields: dict, key: str):
    refused(tenant(**fields), key, "'x' is not")


def test_a_four_address_subnet_is_judged_by_its_container_range():
    # Four addresses pass the size floor; the half kept for containers then holds too few.
    refused({**tenant(), "subnet": "10.0.0.0/30"}, "subnet", "10.0.0.0/31 holds 2 addresses")
    refused({**tenant(), "subnet": "10.0.0.0/31"}, "subnet", "10.0.0.0/31 is too small")


def test_a_default_pool_too_small_for_the_tenants_names_the_subnet():
    hosts = [{"name": f"g{i}", "host": f"h{i}"} for i in range(8)]
    tenants = [
        {"name": f"t{i}", "workerMode": "remote", "remoteWorkers": [host]}
        for i, host in enumerate(hosts)
    ]
    refused(
        {"tenants": tenants, "subnet": "10.0.0.0/28", **SSH},
        "subnet",
        "pool 10.0.0.8-10.0.0.14 has 7 addresses for 8 tenants",
    )


def test_a_pool_ending_on_the_container_ranges_first_address_overlaps_it():
    raw = {**tenant(), **SUBNET, "containerRange": "10.0.0.64/26"}
    refused(
        {**raw, "poolRange": "10.0.0.50-10.0.0.64"},
        "poolRange",
        "pool overlaps the container range 10.0.0.64/26",
    )
    plan = plan_network(parse_config({**raw, "poolRange": "10.0.0.50-10.0.0.63"}))
    assert plan.pool_range == "10.0.0.50-10.0.0.63"


def test_a_duplicate_tenant_names_the_first_one_too():
    with pytest.raises(ConfigError) as info:
        parse_config({"tenants": [{"name": "b"}, {"name": "a"}, {"name": "a"}]})
    assert str(info.value) == "tenants[2].name: duplicate tenant name 'a' (also tenants[1])"


@pytest.mark.parametrize(
    ("tenant", "key", "message"),
    [
        (
            {"gpuMode": "nvml-mock", "gpus": [{"model": "A100-40GB"}]},
            "tenants[0].gpuMode",
            "simulated cards only",
        ),
        ({"gpus": []}, "tenants[0].gpus", "needs the cards its plugin publishes"),
        (
            {"kubernetesVersion": "v1.33.0", "workerImage": PINNED_133},
            "tenants[0].kubernetesVersion",
            "needs v1.34 or newer",
        ),
        ({"gpuQuotaMb": 1024}, "tenants[0].gpuQuotaMb", "HAMi's setting"),
        ({"schedulerPolicy": {"node": "spread"}}, "tenants[0].schedulerPolicy", "HAMi's setting"),
    ],
)
def test_a_dra_tenant_refuses_what_it_cannot_do(tenant, key, message):
    base = {"name": "tenant-dra", "gpuSharing": "dra", "gpus": [{"model": "L4"}]}
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        parse_config({"tenants": [{**base, **tenant}]})
    assert error.value.key == key


def test_hami_and_dra_tenants_take_the_same_large_cards():
    cards = [{"model": "A100-80GB", "count": 16}]
    for sharing in ("hami", "dra"):
        cfg = parse_config({"tenants": [{"name": "t", "gpuSharing": sharing, "gpus": cards}]})
        assert len(cfg.tenants[0].cards) == 16


@pytest.mark.parametrize(
    "image", ["ghcr.io/x/fake@sha256:" + "a" * 64, "fake-driver:v1", "ghcr.io/x/fake"]
)
def test_the_fake_plugins_image_must_be_registry_repository_and_tag(image):
    with pytest.raises(ConfigError, match="registry/repository:tag") as error:
        parse_config({"hamiDraFakeDriverImage": image, "tenants": [{"name": "t"}]})
    assert error.value.key == "hamiDraFakeDriverImage"


@pytest.mark.upstream("hami-dra-chart-images")
def test_the_fake_plugins_image_must_name_a_release_not_latest():
    image = "ghcr.io/project-hami/hami-dra-fake-driver:latest"
    with pytest.raises(ConfigError, match="not latest") as error:
        parse_config({"hamiDraFakeDriverImage": image, "tenants": [{"name": "t"}]})
    assert error.value.key == "hamiDraFakeDriverImage"
    assert "ghcr.io/project-hami/hami-dra-fake-driver:v0.2.0" in str(error.value)


@pytest.mark.upstream("hami-dra-chart-images")
def test_the_default_chart_and_fake_plugin_are_the_checked_release():
    cfg = parse_config({"tenants": [{"name": "t"}]})
    assert cfg.hami_dra_chart_version == "0.2.2"
    assert cfg.hami_dra_fake_driver_image == "ghcr.io/project-hami/hami-dra-fake-driver:v0.2.0"


def test_a_preflight_check_is_accepted_by_its_name_and_with_why():
    cfg = parse_config(
        {"preflightAccept": {"cgroup v2": "node image built for v1"}, "tenants": [{"name": "t"}]}
    )
    assert cfg.preflight_accept == {"cgroup v2": "node image built for v1"}
    with pytest.raises(ConfigError, match="no host check is named 'cgroupv2': one of cgroup v2,"):
        parse_config({"preflightAccept": {"cgroupv2": "typo"}, "tenants": [{"name": "t"}]})
    with pytest.raises(ConfigError, match="say why 'memory' is accepted") as error:
        parse_config({"preflightAccept": {"memory": " "}, "tenants": [{"name": "t"}]})
    assert error.value.key == "preflightAccept"
