"""Slice-hours: what HAMi (or DRA) allotted, per tenant and per card, over a window (pure).

A pod holds its slices (`hami.io/vgpu-devices-allocated`: card UUID, MB, cores; in a DRA tenant
its claims' allocations, capacity.views) from the moment it was bound (`hami.io/bind-time`, Unix
seconds; DRA: PodScheduled's transition) until it ends: the latest `finishedAt` of its
containers once it Succeeded or Failed, else the end of the window (still running), or, in a
capacity run, bind time + the mix's duration. MB·hours and core-%·hours are those slices times
the part of that lifetime inside the window. Cards are keyed by UUID, so tenants whose workers
share one physical card add up on one row. This is allocation, not use: see docs/capacity.md.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from labcheck.cluster import Obj
from labcheck.placement import pod_key

from .views import HAMI, RegisteredCard, SharingView

ENDED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class CardInfo:
    uuid: str
    type: str
    devmem: int
    where: tuple[str, ...]  # "tenant/node" of every registration of this UUID


@dataclass(frozen=True)
class Holding:
    """One pod's slice of one card over the pod's lifetime (Unix seconds)."""

    tenant: str
    pod: str  # namespace/name
    uuid: str
    mem_mb: int
    cores: int
    start: float
    end: float

    def seconds_in(self, since: float, until: float) -> float:
        return max(0.0, min(self.end, until) - max(self.start, since))


@dataclass
class Hours:
    mb_hours: float = 0.0
    core_hours: float = 0.0  # core-%·hours: 100 = one whole card's compute for an hour
    pods: set[str] = field(default_factory=set)

    def add(self, h: Holding, seconds: float) -> None:
        self.mb_hours += h.mem_mb * seconds / 3600
        self.core_hours += h.cores * seconds / 3600
        self.pods.add(h.pod)


@dataclass
class HoursReport:
    since: float
    until: float
    by_tenant: dict[str, Hours] = field(default_factory=dict)
    by_card: dict[str, Hours] = field(default_factory=dict)
    by_tenant_card: dict[tuple[str, str], Hours] = field(default_factory=dict)
    cards: dict[str, CardInfo] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # pods left out, and why


def _finished_at(pod: Obj) -> float | None:
    ends = []
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        stamp = ((cs.get("state") or {}).get("terminated") or {}).get("finishedAt")
        if stamp:
            ends.append(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    return max(ends) if ends else None


def lifetime(
    pod: Obj, now: float, duration: int | None = None, view: SharingView = HAMI
) -> tuple[float, float] | str:
    """(start, end) of the pod's slices, or why it has none to count."""
    start = view.start(pod)
    if isinstance(start, str):
        return start
    if duration is not None:
        return start, start + duration
    if pod.get("status", {}).get("phase") in ENDED:
        end = _finished_at(pod)
        if end is None:
            return "ended, but no container finishedAt"
        return start, max(start, end)
    return start, max(start, now)


def holdings(
    tenant: str,
    pods: Iterable[Obj],
    now: float,
    durations: Mapping[str, int | None] | None = None,
    view: SharingView = HAMI,
) -> tuple[list[Holding], list[str]]:
    """The slices of `pods` (one tenant's API server), and a note per pod left out. A pod
    listed in `durations` (namespace/name) is counted for that long from its bind time."""
    durations = durations or {}
    out: list[Holding] = []
    notes: list[str] = []
    for pod in sorted(pods, key=pod_key):
        if not view.asks(pod):
            continue  # no GPU pod of the tenant's mode
        span = lifetime(pod, now, durations.get(pod_key(pod)), view)
        if isinstance(span, str):
            notes.append(f"{tenant}: {pod_key(pod)}: {span}")
            continue
        slices = view.slices(pod)
        out += [Holding(tenant, pod_key(pod), s.uuid, s.mem_mb, s.cores, *span) for s in slices]
    return out, notes


def card_infos(cards_by_tenant: Mapping[str, Iterable[RegisteredCard]]) -> dict[str, CardInfo]:
    """Every registered card by UUID; a UUID two tenants register is one physical card."""
    seen: dict[str, CardInfo] = {}
    for tenant, cards in cards_by_tenant.items():
        for c in cards:
            held = seen.get(c.uuid)
            where = (*held.where, f"{tenant}/{c.node}") if held else (f"{tenant}/{c.node}",)
            seen[c.uuid] = CardInfo(c.uuid, c.type, c.devmem, where)
    return seen


def slice_hours(
    held: Iterable[Holding],
    since: float,
    until: float,
    cards: Mapping[str, CardInfo] | None = None,
    notes: Iterable[str] = (),
) -> HoursReport:
    report = HoursReport(since, until, cards=dict(cards or {}), notes=list(notes))
    for h in held:
        seconds = h.seconds_in(since, until)
        if seconds <= 0:
            continue
        report.by_tenant.setdefault(h.tenant, Hours()).add(h, seconds)
        report.by_card.setdefault(h.uuid, Hours()).add(h, seconds)
        report.by_tenant_card.setdefault((h.tenant, h.uuid), Hours()).add(h, seconds)
    return report


def _card_cells(report: HoursReport, uuid: str) -> tuple[str, str]:
    info = report.cards.get(uuid)
    if info is None:
        return "(not registered)", ""
    return info.type, " ".join(info.where)


def rows(report: HoursReport) -> list[dict[str, str]]:
    """Per tenant and card, then a total per tenant (card `*`) and per card (tenant `*`)."""
    out = []

    def row(tenant: str, uuid: str, h: Hours) -> dict[str, str]:
        kind, where = _card_cells(report, uuid) if uuid != "*" else ("", "")
        return {
            "tenant": tenant,
            "card": uuid,
            "type": kind,
            "nodes": where,
            "mb_hours": f"{h.mb_hours:.1f}",
            "core_pct_hours": f"{h.core_hours:.1f}",
            "pods": str(len(h.pods)),
        }

    for (tenant, uuid), h in sorted(report.by_tenant_card.items()):
        out.append(row(tenant, uuid, h))
    for tenant, h in sorted(report.by_tenant.items()):
        out.append(row(tenant, "*", h))
    for uuid, h in sorted(report.by_card.items()):
        out.append(row("*", uuid, h))
    return out


CSV_FIELDS = ("tenant", "card", "type", "nodes", "mb_hours", "core_pct_hours", "pods")


def to_csv(report: HoursReport) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows(report))
    return buf.getvalue()


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def table(report: HoursReport) -> list[str]:
    hours = (report.until - report.since) / 3600
    width = max([10, *(len(t) for t in report.by_tenant)])
    lines = [
        f"slice-hours {_stamp(report.since)} .. {_stamp(report.until)} ({hours:.2f} h), "
        "allocated (not measured use)",
        f"{'TENANT':{width}} {'CARD':34} {'TYPE':24} {'MB·h':>11} {'core-%·h':>9} {'PODS':>4}",
    ]
    for r in rows(report):
        card = r["card"] if r["card"] != "*" else "(all cards)"
        tenant = r["tenant"] if r["tenant"] != "*" else "(all)"
        lines.append(
            f"{tenant:{width}} {card:34} {r['type'][:24]:24} {r['mb_hours']:>11} "
            f"{r['core_pct_hours']:>9} {r['pods']:>4}"
        )
    shared = [c for c in report.cards.values() if len({w.split("/")[0] for w in c.where}) > 1]
    lines += [f"shared card {c.uuid}: {', '.join(c.where)} (summed by UUID)" for c in shared]
    lines += [f"left out: {n}" for n in report.notes]
    return lines
