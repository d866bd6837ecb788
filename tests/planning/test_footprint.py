"""What the lab asks of its host: each tenant's control plane and one rollout surge
(planning/footprint.py), as the preflight compares it with the host."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders.monitoring_values import grafana_values, prometheus_values
from labconfig.monitoring import MonitoringConfig
from labconfig.parse import parse_config
from planning.footprint import (
    CONTROL_PLANE,
    GPU_STACK,
    MANAGEMENT,
    MONITORING,
    WORKER,
    Footprint,
    lab_footprint,
)
from planning.host_plan import Sizing, host_plan
from preflight.checks import check_host
from tests.support.made_up_hosts import GOOD, PLAN, failed
from tests.support.pulumi_harness import lab_stack_config

# 100m + 50m + 25m + 25m: what a tenant on a small host may ask.
SMALL = {
    "apiServer": "100m",
    "controllerManager": "50m",
    "scheduler": "25m",
    "konnectivityServer": "25m",
}


def lab_with(*requests: dict[str, str] | None) -> dict:
    """The lab stack, its tenants' controlPlaneCpuRequests set where given."""
    config = lab_stack_config()
    for tenant, cpu in zip(config["tenants"], requests, strict=True):
        if cpu is not None:
            tenant["controlPlaneCpuRequests"] = cpu
    return config


def test_the_lab_stack_needs_its_parts_and_one_more_control_plane_pod():
    """Two tenants of one worker each, and the monitoring: 3.65 CPUs, 5888 MB, 17 GB, within 4
    CPUs and 8 GB."""
    footprint = host_plan(parse_config(lab_stack_config())).sizing.footprint
    surge = Footprint(cpus=0.45, memory_mb=0, disk_gb=0)
    parts = MANAGEMENT + (CONTROL_PLANE + GPU_STACK) * 2 + WORKER * 2 + MONITORING
    assert footprint == parts + surge
    assert (round(footprint.cpus, 2), footprint.memory_mb, footprint.disk_gb) == (3.65, 5888, 17)
    assert footprint.cpus <= 4 and footprint.memory_mb <= 8192


def test_the_surge_is_one_pod_of_the_largest_tenant():
    """Kamaji's rollout (maxSurge 100%) adds a second pod of one tenant at a time: the largest
    tenant's CPU requests (the kind node's memory is the host's, far above the requests)."""
    cpus = [0.45, 1.2, 0.2]
    tenants = sum((replace(CONTROL_PLANE, cpus=c) + GPU_STACK for c in cpus), Footprint(0, 0, 0))
    surge = Footprint(cpus=1.2, memory_mb=0, disk_gb=0)
    assert lab_footprint(cpus, 1) == MANAGEMENT + tenants + surge + WORKER + MONITORING
    assert lab_footprint([], 0, monitoring=False) == MANAGEMENT  # no tenant, nothing rolls


def test_the_monitoring_asks_memory_and_no_cpu_the_tenants_rollouts_need():
    """What Prometheus and Grafana request is what the footprint counts; no CPU request."""
    values = prometheus_values(MonitoringConfig(), [])
    grafana = grafana_values("172.30.255.254", admin_secret=False)
    requests = [values["server"]["resources"]["requests"], grafana["resources"]["requests"]]
    assert all("cpu" not in r for r in requests)
    assert sum(int(r["memory"].removesuffix("Mi")) for r in requests) == MONITORING.memory_mb
    assert MONITORING.cpus == 0
    off = host_plan(parse_config({**lab_stack_config(), "monitoring": {"enabled": False}}))
    on = host_plan(parse_config(lab_stack_config()))
    assert on.sizing.footprint.memory_mb - off.sizing.footprint.memory_mb == 384


def test_a_tenant_s_control_plane_cpu_requests_move_the_footprint():
    cfg = parse_config(lab_with(SMALL, {"apiServer": "1"}))
    sizing = host_plan(cfg).sizing
    assert sizing.control_plane_cpus == (0.2, 1.2)
    # 1.2 management + 0.2 + 1.2 control planes + 0.5 GPU stacks + 0.6 workers + 1.2 surge
    assert sizing.footprint.cpus == pytest.approx(4.9)
    assert sizing.footprint.memory_mb == 5888  # memory requests stay as they are


def test_a_stack_with_the_default_requests_keeps_its_sizing():
    """Set to the defaults, or not set: the plan (and so the preflight's command line) is the
    one of a stack without the key."""
    default = {"apiServer": "0.25", "controllerManager": "100m", "scheduler": "50m"}
    for config in (lab_stack_config(), lab_with(default, None)):
        assert host_plan(parse_config(config)).sizing == Sizing(tenants=2, workers=2)


def test_the_preflight_s_cpu_estimate_follows_the_requests():
    """A 3-CPU host: too small for the lab's default requests (3.65), enough for two tenants
    that lower theirs (1.2 + 0.4 + 0.5 + 0.6 + 0.2 = 2.9)."""
    host = replace(GOOD, cpus=3)
    assert "CPUs" in failed(host, PLAN)
    small = host_plan(parse_config(lab_with(SMALL, SMALL)))
    assert "CPUs" not in failed(host, replace(PLAN, sizing=small.sizing))
    assert {f.check: f.detail for f in check_host(host, replace(PLAN, sizing=small.sizing))}[
        "CPUs"
    ] == "3 (lab requests 2.9)"
