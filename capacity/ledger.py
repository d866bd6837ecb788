"""The ledger: slice-hours per tenant, namespace and card over a window, from the lab's
Prometheus, so pods deleted since are in it (capacity --hours reads only the pods that exist).

Each figure is the integral of a recorded series (builders/slice_rules.py) one sample a minute:
MB·hours and core-%·hours as HAMi (or DRA) allotted them, and GPU-hours, where a slice counts
as the larger of its memory and compute fractions of its card (four pods of 25 % for an hour
are one GPU-hour). Allocation, not use; a time Prometheus did not scrape a tenant counts zero.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from labcheck.prometheus import Prometheus, Sample

KEYS = ("tenant", "namespace", "card")


@dataclass
class LedgerRow:
    tenant: str
    namespace: str
    card: str
    mb_hours: float = 0.0
    core_hours: float = 0.0  # 100 = one whole card's compute for an hour
    gpu_hours: float = 0.0
    # Of those, held by containers that ran no kernel for 5 minutes (real cards only).
    idle_gpu_hours: float = 0.0
    pods: int = 0


@dataclass
class Ledger:
    seconds: int  # the window's length
    until: float  # Unix seconds: the window ends here
    queries: dict[str, str]  # what Prometheus was asked, per column
    rows: list[LedgerRow] = field(default_factory=list)

    def totals(self, key: str) -> dict[str, float]:
        """gpu_hours (or another column) summed per tenant."""
        sums: dict[str, float] = {}
        for row in self.rows:
            sums[row.tenant] = sums.get(row.tenant, 0.0) + getattr(row, key)
        return sums


def ledger_rows(answers: Mapping[str, list[Sample]]) -> list[LedgerRow]:
    """One row per (tenant, namespace, card) found in any column's answer."""
    rows: dict[tuple[str, ...], LedgerRow] = {}
    for column, samples in answers.items():
        for sample in samples:
            key = tuple(sample.labels.get(k, "") for k in KEYS)
            row = rows.setdefault(key, LedgerRow(*key))
            setattr(row, column, int(sample.value) if column == "pods" else sample.value)
    return [rows[k] for k in sorted(rows)]


def read_ledger(
    prometheus: Prometheus, queries: Mapping[str, str], seconds: int, until: float
) -> Ledger:
    """`queries`: PromQL per column over the `seconds` before `until` (the spec's,
    Monitoring.over)."""
    answers = {column: prometheus.instant(expr, at=until) for column, expr in queries.items()}
    return Ledger(seconds, until, dict(queries), ledger_rows(answers))


def ledger_table(ledger: Ledger) -> list[str]:
    head = f"{'tenant':<14} {'namespace':<18} {'card':<40} {'pods':>4} {'MB·h':>12} "
    head += f"{'core-%·h':>10} {'GPU·h':>8} {'idle GPU·h':>10}"
    title = f"slice-hours over the last {ledger.seconds / 3600:g} h (from the lab's Prometheus)"
    lines = [title, head]
    for r in ledger.rows:
        lines.append(
            f"{r.tenant:<14} {r.namespace:<18} {r.card:<40} {r.pods:>4} {r.mb_hours:>12.1f} "
            f"{r.core_hours:>10.1f} {r.gpu_hours:>8.3f} {r.idle_gpu_hours:>10.3f}"
        )
    if not ledger.rows:
        lines.append("(no slice was held in the window)")
    for tenant, hours in sorted(ledger.totals("gpu_hours").items()):
        lines.append(f"{tenant}: {hours:.3f} GPU-hours")
    return lines


def ledger_csv(ledger: Ledger) -> str:
    out = io.StringIO()
    fields = list(LedgerRow.__dataclass_fields__)
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in ledger.rows:
        writer.writerow(asdict(row))
    return out.getvalue()


def ledger_json(ledger: Ledger) -> str:
    return json.dumps(
        {
            "window": f"{ledger.seconds}s",
            "until": ledger.until,
            "queries": ledger.queries,
            "rows": [asdict(r) for r in ledger.rows],
            "gpuHoursByTenant": ledger.totals("gpu_hours"),
        },
        indent=2,
    )
