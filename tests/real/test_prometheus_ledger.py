"""Slice-hours that outlive the pods, and every dashboard query, on a real Prometheus 3.16.0
holding three hours of two tenants' HAMi series as the lab's Prometheus would have stored them.

The past is written as it would have been scraped: HAMi v2.10.0's series (the stand-in's, with
the target labels the program's scrape configs give) every scrape interval of the stack's
default, a staleness marker at the first scrape without a pod; then the program's recording
rules evaluated over the same time at the rule group's interval, with the markers a rule group
writes (prometheus.backfill_rules). A deleted pod is thus what it is in the lab: samples until
its last scrape, nothing after.

The expected figures are computed here from the scenario alone: a slice's GPU share is the
larger of its memory and compute fractions of its card, times the hours it lived.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import yaml
from binaries import bin_path
from controlplane import admin_conf
from prometheus import (
    PrometheusServer,
    ProxyPath,
    SeriesSamples,
    backfill_rules,
    host_address,
    serve_behind_service,
    with_staleness,
    write_block,
)

from builders.dashboard import dashboard_queries, resolved
from builders.labcheck_spec import monitoring_spec
from builders.prometheus_scrape import ScrapeTarget, hami_scrape_configs, job_name
from builders.slice_rules import rule_groups
from capacity.hours import holdings, slice_hours
from capacity.ledger import ledger_csv, ledger_rows, read_ledger
from capacity.records import ANN_BIND_TIME, BIND_SUCCESS
from labcheck.hami import ANN_ALLOCATED, ANN_BIND_PHASE, ANN_NODE
from labcheck.kube import KubeCluster
from labcheck.prometheus import Prometheus, Sample
from labcheck.spec import Monitoring
from labconfig.monitoring import MonitoringConfig
from labconfig.parse import parse_config
from tests.support.hami_metrics import (
    Card,
    Container,
    HamiState,
    Quota,
    Use,
    dra_samples,
    samples,
    vgpu_monitor_samples,
)
from tests.support.pulumi_harness import lab_stack_config

MINUTE = 60
SCRAPE = 30  # MonitoringConfig's default scrape_interval, checked below
WINDOW_HOURS = 3
# Series are written from 10 min before the window on, so the window starts with the cards'.
LEAD_IN = 10 * MINUTE


@dataclasses.dataclass(frozen=True)
class Slice:
    """A pod's container on a card from ``start`` to ``end`` minutes into the window."""

    tenant: str
    container: Container
    start: int
    end: int


CARDS = {
    "tenant-a": (Card("GPU-a0", "a-w1", 20000, index=0), Card("GPU-a1", "a-w1", 20000, index=1)),
    "tenant-b": (Card("GPU-b0", "b-w1", 80000),),
    "tenant-c": (Card("GPU-c0", "c-w1", 40000),),  # a DRA tenant: HAMi-DRA's monitor
}
DRA_TENANTS = {"tenant-c"}
SLICES = (
    # Four pods of a quarter of a card each (memory and cores) for exactly an hour, deleted an
    # hour and a half before the end of the window: one GPU-hour.
    *(
        Slice("tenant-a", Container("team-x", f"q{i}", 0, "a-w1", "GPU-a0", 5000, 25), 30, 90)
        for i in range(4)
    ),
    # Half the memory, a tenth of the compute, two hours: its share is a half, one GPU-hour.
    Slice("tenant-a", Container("team-y", "big", 0, "a-w1", "GPU-a1", 10000, 10), 10, 130),
    # A quarter of the memory, 30 % of the compute, half an hour: 0.15 GPU-hours.
    Slice("tenant-b", Container("ml", "p1", 0, "b-w1", "GPU-b0", 20000, 30), 60, 90),
    # A claim of a quarter of the memory and half the compute, an hour: 0.5 GPU-hours.
    Slice("tenant-c", Container("dra-ns", "d0", 0, "c-w1", "GPU-c0", 10000, 50), 20, 80),
)
# The vGPU monitor on tenant-a's GPU node (real cards): team-y/big uses 8000 of its 10000 MB,
# runs kernels until minute 70, none after (idle for the rest of its life: 0.5 GPU-hours).
IDLE_FROM = 70
VGPU_MONITOR_TENANTS = {"tenant-a": "a-w1"}


def uses_at(tenant: str, minute: float) -> list[Use]:
    big = [s for s in SLICES if s.container.pod == "big" and s.tenant == tenant]
    return [
        Use(
            "team-y",
            "big",
            "main",
            0,
            "GPU-a1",
            8000,
            10000,
            1000.0 if minute >= IDLE_FROM else 5.0,
        )
        for s in big
        if s.start <= minute < s.end
    ]


QUOTAS = {"tenant-a": (Quota("team-x", "nvidia.com/gpumem", 20000, 40000),)}
MIDDLE = 60  # minutes into the window: every pod above is running


@dataclasses.dataclass
class Ledger:
    prometheus: PrometheusServer
    window_start: float  # unix seconds, a whole minute
    window_end: float

    def at(self, minutes: int) -> float:
        return self.window_start + minutes * MINUTE


def state_at(tenant: str, minute: float) -> HamiState:
    return HamiState(
        cards=CARDS[tenant],
        containers=tuple(
            s.container for s in SLICES if s.tenant == tenant and s.start <= minute < s.end
        ),
        quotas=QUOTAS.get(tenant, ()),
    )


def scraped_past(
    target_config: dict, tenant: str, steps: list[float], start: float
) -> list[SeriesSamples]:
    """What the lab's Prometheus stores from ``tenant``'s HAMi at each scrape of ``steps``."""
    target = {
        "job": target_config["job_name"],
        "instance": target_config["static_configs"][0]["targets"][0],
        **target_config["static_configs"][0]["labels"],
    }
    values: dict[tuple, dict[float, float]] = defaultdict(dict)
    for step in steps:
        exported = dra_samples if tenant in DRA_TENANTS else samples
        for name, labels, value in exported(state_at(tenant, (step - start) / MINUTE)):
            key = tuple(sorted({**labels, **target, "__name__": name}.items()))
            values[key][step] = value
        if tenant in VGPU_MONITOR_TENANTS:  # the vGPU monitor job: instance is the node
            monitor = {"job": f"{target['job']}-vgpu-monitor", "tenant": tenant,
                       "instance": VGPU_MONITOR_TENANTS[tenant]}  # fmt: skip
            for name, labels, value in vgpu_monitor_samples(
                uses_at(tenant, (step - start) / MINUTE)
            ):
                key = tuple(sorted({**labels, **monitor, "__name__": name}.items()))
                values[key][step] = value
    return [(dict(key), with_staleness(steps, present)) for key, present in values.items()]


@pytest.fixture(scope="module")
def ledger(tmp_path_factory) -> Iterator[Ledger]:
    assert MonitoringConfig().scrape_interval == f"{SCRAPE}s"
    workdir = tmp_path_factory.mktemp("prometheus-ledger")
    # A window that ended ten minutes ago (whole minutes, so the subqueries' one-minute steps
    # fall on the scrapes), its pods long gone from the Prometheus head's time.
    end = (math.floor(time.time() / MINUTE) - 10) * MINUTE
    start = end - WINDOW_HOURS * 3600
    steps = [float(t) for t in range(int(start - LEAD_IN), int(end) + 1, SCRAPE)]
    targets = [
        ScrapeTarget(
            t,
            f"{t}.lab.invalid:6443",
            f"/secrets/{t}",
            dra=t in DRA_TENANTS,
            vgpu_monitor=t in VGPU_MONITOR_TENANTS,
        )
        for t in CARDS
    ]
    jobs = {config["job_name"]: config for config in hami_scrape_configs(targets, f"{SCRAPE}s")}
    assert f"{job_name('tenant-a')}-vgpu-monitor" in jobs  # the vGPU monitor's job, per node
    series = [
        s for t in targets for s in scraped_past(jobs[job_name(t.tenant)], t.tenant, steps, start)
    ]
    write_block(workdir / "data", series)
    groups = rule_groups(f"{SCRAPE}s")
    (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    promtool = [str(bin_path("promtool")), "check", "rules", str(workdir / "rules.yml")]
    check = subprocess.run(promtool, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    config = {
        "global": {"evaluation_interval": f"{SCRAPE}s"},
        "rule_files": [str(workdir / "rules.yml")],
    }
    # On an address of the host: `capacity --ledger` reads it through an API server's proxy.
    prometheus = PrometheusServer.start(workdir, config, host=host_address())
    try:
        rules = [rule for group in groups for rule in group["rules"]]
        backfill_rules(prometheus, rules, steps)
        yield Ledger(prometheus, start, end)
    finally:
        prometheus.stop()


# --- the expected figures, from the scenario alone --------------------------------------------


def card_of(s: Slice) -> Card:
    return next(c for c in CARDS[s.tenant] if c.uuid == s.container.uuid)


def hours(s: Slice) -> float:
    return (s.end - s.start) / 60


def share(s: Slice) -> float:
    return max(s.container.mb / card_of(s).total_mb, s.container.cores / 100)


def running(minute: int) -> list[Slice]:
    return [s for s in SLICES if s.start <= minute < s.end]


def totals(pairs) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = defaultdict(float)
    for key, value in pairs:
        out[key] += value
    return dict(out)


def expected_panels() -> dict[str, list[dict[tuple[str, ...], float]]]:
    """Per panel title, per query: {label values in `by` order: value}."""
    now = running(MIDDLE)
    cards = [(t, c) for t, cs in CARDS.items() for c in cs]
    return {
        "GPUs held, per tenant": [totals(((s.tenant,), share(s)) for s in now)],
        "Memory allocated per card (MB)": [
            totals(((s.tenant, s.container.uuid), s.container.mb) for s in now),
            {(t, c.uuid): c.total_mb for t, c in cards},
        ],
        "Compute allocated per card (%)": [
            totals(((s.tenant, s.container.uuid), s.container.cores) for s in now),
            {(t, c.uuid): 100 for t, c in cards},
        ],
        "Pods sharing each card": [totals(((s.tenant, s.container.uuid), 1) for s in now)],
        "Memory allocated per namespace (MB)": [
            totals(((s.tenant, s.container.namespace), s.container.mb) for s in now)
        ],
        "GPU quota used and limit, per namespace": [
            {(t, q.namespace, q.name): q.used for t, qs in QUOTAS.items() for q in qs},
            {(t, q.namespace, q.name): q.limit for t, qs in QUOTAS.items() for q in qs},
        ],
        "Memory used against allocated, real cards (MB)": [
            totals(
                ((t, u.uuid), u.used_mb) for t in VGPU_MONITOR_TENANTS for u in uses_at(t, MIDDLE)
            ),
            totals(((s.tenant, s.container.uuid), s.container.mb) for s in now),
        ],
        "GPU-hours over the range, per tenant and namespace": [
            totals(((s.tenant, s.container.namespace), share(s) * hours(s)) for s in SLICES),
            totals(
                (
                    (s.tenant, s.container.namespace),
                    share(s) * (s.end - max(s.start, IDLE_FROM)) / 60,
                )
                for s in SLICES
                if s.container.pod == "big" and s.end > IDLE_FROM
            ),
        ],
        "MB-hours and core-%-hours over the range, per tenant and card": [
            totals(((s.tenant, s.container.uuid), s.container.mb * hours(s)) for s in SLICES),
            totals(((s.tenant, s.container.uuid), s.container.cores * hours(s)) for s in SLICES),
        ],
    }


def by_labels(expr: str) -> list[str]:
    inner = expr.split("sum by (", 1)[1].split(")", 1)[0]
    return [label.strip() for label in inner.split(",")]


def panel_query(title: str) -> str:
    """The first query of the panel titled so."""
    return next(expr for t, expr in dashboard_queries() if t == title)


def result(ledger: Ledger, expr: str, at: float) -> dict[tuple[str, ...], float]:
    labels = by_labels(expr)
    return {
        tuple(row["metric"].get(label, "") for label in labels): float(row["value"][1])
        for row in ledger.prometheus.query(expr, at)
    }


@pytest.mark.upstream("hami-dra-monitor-exports-allocations")
def test_a_dra_tenants_claims_count_as_a_hami_tenants_pods(ledger: Ledger):
    gpu_hours = panel_query("GPU-hours over the range, per tenant and namespace")
    only_c = resolved(gpu_hours, f"{WINDOW_HOURS}h", tenant="tenant-c")
    assert result(ledger, only_c, ledger.window_end) == {("tenant-c", "dra-ns"): 0.5}


def test_the_scenario_is_the_issues_example():
    quarter_pods = [s for s in SLICES if s.container.namespace == "team-x"]
    assert len(quarter_pods) == 4 and sum(share(s) * hours(s) for s in quarter_pods) == 1.0


@pytest.mark.upstream(
    "promtool-backfill-writes-no-staleness-markers", "prom-subquery-sum-over-time"
)
def test_every_dashboard_query_returns_the_expected_figures(ledger: Ledger):
    expected = expected_panels()
    queries = dashboard_queries()
    assert sorted({title for title, _ in queries}) == sorted(expected)
    window = f"{WINDOW_HOURS}h"
    seen: dict[str, list] = defaultdict(list)
    for title, expr in queries:
        over_range = "$__range" in expr
        at = ledger.window_end if over_range else ledger.at(MIDDLE)
        seen[title].append(result(ledger, resolved(expr, window), at))
    for title, figures in expected.items():
        got = seen[title]
        assert len(got) == len(figures), title
        for one, want in zip(got, figures, strict=True):
            assert one.keys() == want.keys(), (title, one, want)
            for key, value in want.items():
                assert one[key] == pytest.approx(value, rel=1e-9), (title, key, one[key], value)


@pytest.mark.upstream(
    "promtool-backfill-writes-no-staleness-markers", "prom-subquery-sum-over-time"
)
def test_pods_deleted_an_hour_and_a_half_ago_are_in_the_ledger_and_not_now(ledger: Ledger):
    gpu_hours = panel_query("GPU-hours over the range, per tenant and namespace")
    ledger_now = result(ledger, resolved(gpu_hours, f"{WINDOW_HOURS}h"), ledger.window_end)
    assert ledger_now[("tenant-a", "team-x")] == pytest.approx(1.0, rel=1e-9)
    held = panel_query("GPUs held, per tenant")
    assert result(ledger, resolved(held, "1m"), ledger.window_end) == {}
    # the window's last hour alone holds none of the quarter pods' hours
    last_hour = result(ledger, resolved(gpu_hours, "1h"), ledger.window_end)
    assert ("tenant-a", "team-x") not in last_hour


def test_a_tenant_filter_keeps_only_that_tenants_figures(ledger: Ledger):
    gpu_hours = panel_query("GPU-hours over the range, per tenant and namespace")
    only_b = result(
        ledger, resolved(gpu_hours, f"{WINDOW_HOURS}h", tenant="tenant-b"), ledger.window_end
    )
    assert only_b == {("tenant-b", "ml"): pytest.approx(0.15, rel=1e-9)}


def test_capacity_ledger_reads_the_same_figures_through_the_management_api_server(
    ledger: Ledger, start_control_plane
):
    """`capacity --ledger`'s reading (capacity/ledger.py) through a real kube-apiserver's service
    proxy at the path the program gives it: a row per tenant, namespace and card, gone pods in."""
    # What the program puts in the stack's spec, read as `capacity --ledger` reads it.
    spec = Monitoring.model_validate(monitoring_spec(parse_config(lab_stack_config())))
    path = spec.prometheus
    plane = start_control_plane("prom-management", full=False)
    host, port = ledger.prometheus.url.removeprefix("http://").rsplit(":", 1)
    serve_behind_service(plane, ProxyPath.parse(f"{path}/"), host, int(port), pod="prometheus")
    management = KubeCluster(admin_conf(plane), "management", timeout=10)
    seconds = WINDOW_HOURS * 3600
    got = read_ledger(
        Prometheus(management, path), spec.over(f"{seconds}s"), seconds, ledger.window_end
    )
    rows = {(r.tenant, r.namespace, r.card): r for r in got.rows}
    keys = {(s.tenant, s.container.namespace, s.container.uuid) for s in SLICES}
    assert set(rows) == keys
    for key in keys:
        mine = [s for s in SLICES if (s.tenant, s.container.namespace, s.container.uuid) == key]
        row = rows[key]
        assert row.pods == len({s.container.pod for s in mine}), key
        assert row.mb_hours == pytest.approx(sum(s.container.mb * hours(s) for s in mine))
        assert row.core_hours == pytest.approx(sum(s.container.cores * hours(s) for s in mine))
        assert row.gpu_hours == pytest.approx(sum(share(s) * hours(s) for s in mine))
        idle = sum(share(s) * (s.end - max(s.start, IDLE_FROM)) / 60
                   for s in mine if s.container.pod == "big")  # fmt: skip
        assert row.idle_gpu_hours == pytest.approx(idle)
    assert "tenant-a,team-x,GPU-a0,20000.0,100.0,1.0,0.0,4" in ledger_csv(got)
    assert "tenant-a,team-y,GPU-a1,20000.0,20.0,1.0,0.5,1" in ledger_csv(got)


def as_pod_objects(ledger: Ledger, tenant: str) -> list[dict]:
    """The scenario's pods of a HAMi tenant as its API server lists them at the window's end:
    ended (Succeeded, not yet deleted), HAMi's annotations from their bind, the time their
    container finished: what `capacity --hours` reads."""
    pods = []
    for s in SLICES:
        if s.tenant != tenant:
            continue
        c = s.container
        finished = datetime.fromtimestamp(ledger.at(s.end), UTC).isoformat().replace("+00:00", "Z")
        pods.append(
            {
                "metadata": {
                    "namespace": c.namespace,
                    "name": c.pod,
                    "annotations": {
                        ANN_NODE: c.node,
                        ANN_ALLOCATED: f"{c.uuid},NVIDIA,{c.mb},{c.cores}:;",
                        ANN_BIND_PHASE: BIND_SUCCESS,
                        ANN_BIND_TIME: str(int(ledger.at(s.start))),
                    },
                },
                "spec": {"nodeName": c.node, "containers": [{"name": "main"}]},
                "status": {
                    "phase": "Succeeded",
                    "containerStatuses": [{"state": {"terminated": {"finishedAt": finished}}}],
                },
            }
        )
    return pods


def test_capacity_hours_and_the_ledger_agree_on_the_same_pods(ledger: Ledger):
    """The same pods read two ways: `capacity --hours` from their objects (bind time to
    finishedAt), the ledger from what Prometheus recorded while they ran. Whole-minute
    lifetimes, so the ledger's one-minute integral is exact; the only difference is which pods
    each can see: --hours only pods still listed, the ledger also deleted ones."""
    window = f"{WINDOW_HOURS * 3600}s"
    spec = Monitoring.model_validate(monitoring_spec(parse_config(lab_stack_config())))
    queries = spec.over(window)
    answers = {
        column: [
            Sample(dict(row["metric"]), float(row["value"][1]))
            for row in ledger.prometheus.query(expr, ledger.window_end)
        ]
        for column, expr in queries.items()
    }
    by_card: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in ledger_rows(answers):
        by_card[(row.tenant, row.card)][0] += row.mb_hours
        by_card[(row.tenant, row.card)][1] += row.core_hours
    for tenant in ("tenant-a", "tenant-b"):
        held, notes = holdings(tenant, as_pod_objects(ledger, tenant), ledger.window_end)
        assert notes == []
        report = slice_hours(held, ledger.window_start, ledger.window_end)
        cards = {uuid for (t, uuid) in report.by_tenant_card if t == tenant}
        assert cards == {uuid for (t, uuid) in by_card if t == tenant}
        for uuid in cards:
            hours_ = report.by_tenant_card[(tenant, uuid)]
            mb, cores = by_card[(tenant, uuid)]
            assert (hours_.mb_hours, hours_.core_hours) == (
                pytest.approx(mb, rel=1e-9),
                pytest.approx(cores, rel=1e-9),
            ), (tenant, uuid)
