"""The sharing dashboard, built with Grafana's foundation SDK: every tenant, card and namespace
over time, and the slice-hours of the chosen range.

Panels read the `lab:` series of builders/slice_rules.py (HAMi and HAMi-DRA tenants alike) and
HAMi's quota series. The JSON imports into any Grafana with a Prometheus data source of uid
`prometheus` (the lab's Grafana provisions it under that uid).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import table as gtable
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from builders.slice_rules import (
    CARD_CORES,
    CARD_MEMORY,
    CARD_SLICES,
    HAMI_SLICE,
    MIB,
    SLICE_CORES,
    SLICE_IDLE_SHARE,
    SLICE_MEMORY,
    SLICE_SHARE,
    renamed,
    slice_hours_expr,
)

DASHBOARD_UID = "kamaji-hami-lab-sharing"
DATASOURCE_UID = "prometheus"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
TENANTS = 'tenant=~"$tenant"'
NAMESPACES = f'{TENANTS}, namespace=~"$namespace"'
QUOTA_LABELS = "tenant, namespace, quota_name"
# HAMi's vGPU monitor (real cards), its `device_uuid` as the lab's `card`.
USED_MEMORY_BYTES = renamed(f"hami_vgpu_memory_used_bytes{{{TENANTS}}}", HAMI_SLICE)


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    over_range: bool = False  # one figure for the dashboard's whole range: a table


PANELS: tuple[Panel, ...] = (
    Panel(
        "GPUs held, per tenant",
        "Each slice counts as the larger of its memory and compute fractions of its card: "
        "four pods of 25 % are one GPU.",
        "none",
        (Query(f"sum by (tenant) ({SLICE_SHARE}{{{TENANTS}}})", "{{tenant}}"),),
    ),
    Panel(
        "Memory allocated per card (MB)",
        "What HAMi (or DRA) allotted on each card, against the card's memory.",
        "decmbytes",
        (
            Query(f"sum by (tenant, card) ({SLICE_MEMORY}{{{TENANTS}}})", "{{tenant}} {{card}}"),
            Query(
                f"sum by (tenant, card) ({CARD_MEMORY}{{{TENANTS}}})", "{{tenant}} {{card}} total"
            ),
        ),
    ),
    Panel(
        "Compute allocated per card (%)",
        "Cores percent allotted on each card (100 = the whole card), against the card's.",
        "percent",
        (
            Query(f"sum by (tenant, card) ({SLICE_CORES}{{{TENANTS}}})", "{{tenant}} {{card}}"),
            Query(
                f"sum by (tenant, card) ({CARD_CORES}{{{TENANTS}}})", "{{tenant}} {{card}} total"
            ),
        ),
    ),
    Panel(
        "Pods sharing each card",
        "Pods holding a slice of the card.",
        "none",
        (Query(f"sum by (tenant, card) ({CARD_SLICES}{{{TENANTS}}})", "{{tenant}} {{card}}"),),
    ),
    Panel(
        "Memory allocated per namespace (MB)",
        "",
        "decmbytes",
        (
            Query(
                f"sum by (tenant, namespace) ({SLICE_MEMORY}{{{NAMESPACES}}})",
                "{{tenant}}/{{namespace}}",
            ),
        ),
    ),
    Panel(
        "GPU quota used and limit, per namespace",
        "HAMi's ResourceQuota accounting (namespaces with a quota on HAMi's resources).",
        "none",
        (
            Query(
                f"sum by ({QUOTA_LABELS}) (hami_resource_quota_used{{{NAMESPACES}}})",
                "{{tenant}}/{{namespace}} {{quota_name}} used",
            ),
            Query(
                f"sum by ({QUOTA_LABELS}) (hami_resource_quota_limit{{{NAMESPACES}}})",
                "{{tenant}}/{{namespace}} {{quota_name}} limit",
            ),
        ),
    ),
    Panel(
        "Memory used against allocated, real cards (MB)",
        "HAMi's vGPU monitor: what the containers use of their slices (only on real or NVML "
        "cards; a simulated tenant has no use to show).",
        "decmbytes",
        (
            Query(
                f"sum by (tenant, card) ({USED_MEMORY_BYTES}) / {MIB}",
                "{{tenant}} {{card}} used",
            ),
            Query(
                f"sum by (tenant, card) ({SLICE_MEMORY}{{{TENANTS}}})",
                "{{tenant}} {{card}} allocated",
            ),
        ),
    ),
    Panel(
        "GPU-hours over the range, per tenant and namespace",
        "Slice-hours of the pods of the range, also those gone since; idle: held by containers "
        "that ran no kernel for 5 minutes (real cards).",
        "none",
        (
            Query(
                slice_hours_expr(f"{SLICE_SHARE}{{{NAMESPACES}}}", "tenant, namespace", "$__range"),
                "",
            ),
            Query(
                slice_hours_expr(
                    f"{SLICE_IDLE_SHARE}{{{NAMESPACES}}}", "tenant, namespace", "$__range"
                ),
                "",
            ),
        ),
        over_range=True,
    ),
    Panel(
        "MB-hours and core-%-hours over the range, per tenant and card",
        "",
        "none",
        (
            Query(slice_hours_expr(f"{SLICE_MEMORY}{{{TENANTS}}}", "tenant, card", "$__range"), ""),
            Query(slice_hours_expr(f"{SLICE_CORES}{{{TENANTS}}}", "tenant, card", "$__range"), ""),
        ),
        over_range=True,
    ),
)


def _variable(name: str, query: str) -> gdash.QueryVariable:
    return (
        gdash.QueryVariable(name)
        .label(name)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _target(query: Query, ref: str, instant: bool) -> gprom.Dataquery:
    target = gprom.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(ref)
    return target.instant().format(PromQueryFormat.TABLE) if instant else target


def _panel(panel: Panel) -> gts.Panel | gtable.Panel:
    built = (gtable.Panel() if panel.over_range else gts.Panel()).title(panel.title)
    built = built.description(panel.description).unit(panel.unit).datasource(DATASOURCE)
    built = built.height(8).span(24 if panel.over_range else 12)
    for index, query in enumerate(panel.queries):
        built = built.with_target(_target(query, chr(ord("A") + index), panel.over_range))
    return built


def dashboard_json() -> str:
    board = (
        gdash.Dashboard("GPU sharing across tenants")
        .uid(DASHBOARD_UID)
        .tags(["kamaji-hami-lab", "hami"])
        .time("now-6h", "now")
        .refresh("1m")
        .readonly()
        .with_variable(_variable("tenant", f"label_values({CARD_MEMORY}, tenant)"))
        .with_variable(
            _variable("namespace", f"label_values({SLICE_MEMORY}{{{TENANTS}}}, namespace)")
        )
    )
    for panel in PANELS:
        board = board.with_panel(_panel(panel))
    return json.dumps(board.build(), cls=JSONEncoder, indent=2, sort_keys=True)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL with Grafana's variables) of every query of the dashboard."""
    return [(panel.title, query.expr) for panel in PANELS for query in panel.queries]


def resolved(expr: str, window: str, tenant: str = ".*", namespace: str = ".*") -> str:
    """A query as Grafana sends it for a range and a choice of the variables."""
    return (
        expr.replace("$__range", window).replace("$tenant", tenant).replace("$namespace", namespace)
    )
