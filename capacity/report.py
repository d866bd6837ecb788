"""What a capacity run shows: progress while pods are placed, the terminal table, the JSON
report, the CSV of slice-hours and labcheck's placement picture."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from matplotlib import rc_context

from labcheck.picture import card_line, render, summary_line

from . import __version__
from .hours import rows, table, to_csv
from .run import PENDING, PLACED, CapacityResult, cleanup_failure

JSON_NAME = "capacity-report.json"
CSV_NAME = "capacity-hours.csv"
PNG_NAME, SVG_NAME = "capacity-placement.png", "capacity-placement.svg"


@dataclass
class TerminalProgress:
    """One line, rewritten on a terminal; a new line per change elsewhere (logs, CI)."""

    out: TextIO
    tty: bool = False
    _last: str = field(default="", init=False)

    def update(self, result: CapacityResult, elapsed: float) -> None:
        total = len(result.pods)
        placed, pending = result.count(PLACED), result.count(PENDING)
        unfit = total - placed - pending
        counts = f"{placed}/{total} placed, {unfit} did not fit, {pending} pending"
        if self.tty:
            self.out.write(f"\rplacing: {counts}, {elapsed:.0f} s ")
            self.out.flush()
        elif counts != self._last:
            self.out.write(f"placing: {counts} ({elapsed:.0f} s)\n")
        self._last = counts

    def end(self) -> None:
        if self.tty and self._last:
            self.out.write("\n")


def placement_times(result: CapacityResult, tenant: str | None = None) -> dict[str, float]:
    # A pod placed at the first poll settled after 0.0 s: a time like any other.
    pods = result.pods if tenant is None else result.of_tenant(tenant)
    times = [p.settled_after for p in pods if p.state == PLACED and p.settled_after is not None]
    if not times:
        return {}
    return {"median": statistics.median(times), "last": max(times)}


def tenant_summary(result: CapacityResult, tenant: str) -> dict[str, Any]:
    """One tenant's part of the run: what a side-by-side comparison puts in a column."""
    pods = result.of_tenant(tenant)
    placed = [p for p in pods if p.state == PLACED]
    hours = result.hours.by_tenant.get(tenant) if result.hours else None
    return {
        "gpuSharing": result.modes.get(tenant, ""),
        "pods": len(pods),
        "podsPlaced": len(placed),
        "cardsUsed": len({s.uuid for p in placed for s in p.slices}),
        "wholeGpuBaseline": sum(p.planned.gpus for p in pods),
        "didNotFit": sum(p.state not in (PLACED, PENDING) for p in pods),
        "stillPending": sum(p.state == PENDING for p in pods),
        "placementSeconds": placement_times(result, tenant),
        "mbHours": round(hours.mb_hours, 1) if hours else 0.0,
        "corePctHours": round(hours.core_hours, 1) if hours else 0.0,
    }


def side_by_side(result: CapacityResult) -> list[str]:
    """The compared tenants in columns, one row per question (empty unless a comparison)."""
    tenants = list(result.mix.compared)
    if not tenants:
        return []
    cols = {t: tenant_summary(result, t) for t in tenants}

    def seconds(t: str, key: str) -> str:
        value = cols[t]["placementSeconds"].get(key)
        return "-" if value is None else f"{value:.1f} s"

    rows = [
        ("GPU sharing", lambda t: cols[t]["gpuSharing"]),
        ("pods placed", lambda t: f"{cols[t]['podsPlaced']}/{cols[t]['pods']}"),
        ("cards used", lambda t: str(cols[t]["cardsUsed"])),
        ("whole GPUs", lambda t: str(cols[t]["wholeGpuBaseline"])),
        ("did not fit", lambda t: str(cols[t]["didNotFit"])),
        ("still pending", lambda t: str(cols[t]["stillPending"])),
        ("placed, median", lambda t: seconds(t, "median")),
        ("placed, last", lambda t: seconds(t, "last")),
        ("MB·h", lambda t: f"{cols[t]['mbHours']:.1f}"),
        ("core-%·h", lambda t: f"{cols[t]['corePctHours']:.1f}"),
    ]
    width = max(14, *(len(t) for t in tenants))
    lines = ["side by side (each tenant's times from its own first create):"]
    lines.append(f"  {'':16}" + "".join(f"{t:>{width + 2}}" for t in tenants))
    for label, cell in rows:
        lines.append(f"  {label:16}" + "".join(f"{cell(t):>{width + 2}}" for t in tenants))
    return lines


def terminal_lines(result: CapacityResult) -> list[str]:
    mix = result.mix.name or "mix"
    lines = [f"capacity {__version__}: stack {result.stack}, run {result.run_id}, {mix}"]
    used = set(result.cards_used())
    for tenant, m in result.maps.items():
        lines.append(f"{tenant}: {summary_line(m)}")
        for card in m.cards:
            mark = "*" if card.id in used else " "
            lines.append(f" {mark} {card_line(card)}")
    if used:
        lines.append("   (* = a card this run's pods use)")
    for p in result.pods:
        if p.state not in (PLACED,):
            lines.append(f"{p.state}: {p.planned.tenant} {p.key}: {p.reason}")
    times = placement_times(result)
    if times:
        # Pods still pending never settled: the last verdict is not "all settled".
        pending = result.count(PENDING)
        settled = (
            f"{pending} still pending at the timeout"
            if pending
            else f"all settled after {result.placement_seconds:.1f} s"
        )
        lines.append(
            f"placement: median {times['median']:.1f} s, last {times['last']:.1f} s after the "
            f"first create; {settled}"
        )
    if result.hours is not None and result.hours.by_tenant:
        lines += table(result.hours)
    lines += side_by_side(result)
    lines += [f"note: {n}" for n in result.notes]
    if result.interrupted is not None:
        lines.append("INTERRUPTED: the run stopped early; what it created was removed")
    cleanup = f"cleanup: deleted {result.cleaned} object(s) by name"
    if result.cleanup_errors:
        cleanup += "; " + cleanup_failure(result)
    lines.append(cleanup)
    lines.append(result.verdict())
    return lines


def to_json(result: CapacityResult) -> dict[str, Any]:
    placed = [p for p in result.pods if p.state == PLACED]
    return {
        "tool": f"capacity {__version__}",
        "stack": result.stack,
        "runId": result.run_id,
        "mix": result.mix.name,
        "verdict": result.verdict(),
        "podsPlaced": len(placed),
        "cardsUsed": result.cards_used(),
        "wholeGpuBaseline": result.mix.whole_gpus(),
        "wholeGpuBaselinePlaced": sum(p.planned.gpus for p in placed),
        "didNotFit": [
            {"tenant": p.planned.tenant, "pod": p.key, "state": p.state, "reason": p.reason}
            for p in result.pods
            if p.state not in (PLACED, PENDING)
        ],
        "stillPending": [
            {"tenant": p.planned.tenant, "pod": p.key, "reason": p.reason}
            for p in result.pods
            if p.state == PENDING
        ],
        "placementSeconds": {
            # null while pods are still pending: they never settled
            "allSettled": None if result.count(PENDING) else result.placement_seconds,
            **placement_times(result),
        },
        "pods": [
            {
                "tenant": p.planned.tenant,
                "entry": p.planned.entry,
                "pod": p.key,
                "state": p.state,
                "node": p.node,
                "slices": [{"card": s.uuid, "memMb": s.mem_mb, "cores": s.cores} for s in p.slices],
                "settledAfterSeconds": p.settled_after,
            }
            for p in result.pods
        ],
        "cards": {t: m.to_json() for t, m in result.maps.items()},
        "byTenant": {t: tenant_summary(result, t) for t in result.mix.tenants},
        "compared": list(result.mix.compared),
        "sliceHours": rows(result.hours) if result.hours else [],
        "namespace": result.namespace,
        "notes": result.notes,
        "interrupted": result.interrupted is not None,
        "cleanupErrors": result.cleanup_errors,
    }


def write_reports(result: CapacityResult, directory: Path, *, when: str) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / JSON_NAME
    out.write_text(json.dumps(to_json(result), indent=2) + "\n")
    files = [out]
    if result.hours is not None:
        csv = directory / CSV_NAME
        csv.write_text(to_csv(result.hours))
        files.append(csv)
    if result.maps:
        files += write_picture(result, directory, when=when)
    return files


def write_picture(result: CapacityResult, directory: Path, *, when: str) -> list[Path]:
    """labcheck's picture of the cards, read once the run's pods were placed."""
    during = f"mix {result.mix.name}" if result.mix.name else "the capacity run"
    maps = [replace(m, during=during) for m in result.maps.values()]
    fig = render(maps, stack=result.stack, run_id=result.run_id, when=when)
    png, svg = directory / PNG_NAME, directory / SVG_NAME
    fig.savefig(png, dpi=110)
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "capacity"}):
        fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
