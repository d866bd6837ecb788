"""`python -m labcheck.sharing`: which pods hold which slices of each tenant's cards, now (what
`make sharing` runs).

Read-only: per tenant two reads, the nodes (HAMi's card registrations) and the pods (HAMi's
allocation annotations), modelled by labcheck.placement as gpu.placement models them. It prints
a table per card and draws labcheck.picture's picture of the same numbers; it creates nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from .cli import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    add_spec_arguments,
    cluster_factory,
    now_iso,
    open_spec,
)
from .cluster import ClusterError, ClusterFactory, likely_cause
from .picture import FILLS, FREE, render, summary_line, text_bar
from .placement import CardMap, TenantMap, tenant_map
from .spec import Spec

PNG_NAME = "sharing.png"
RUN_ID = "sharing"  # the picture's title names a run; this one is a read, not a labcheck run


def cores_text(cores: int) -> str:
    # HAMi's gpucores 0 (or unset) sets no limit: the pod shares the card's compute freely.
    return f"{cores}%" if cores else "no limit"


def card_rows(card: CardMap) -> list[str]:
    """The card and its bar, a row per pod (marked with its fill in the bar), then what is free."""
    head = f"  {card.node} #{card.index} {card.type} {card.devmem} MB {text_bar(card)}"
    names = [s.pod for s in card.segments] + ["free"]
    width = max(len(n) for n in names)
    rows = [head] + [
        f"    {FILLS[i % len(FILLS)]} {s.pod:<{width}} {s.mem_mb:>6} MB {cores_text(s.cores):>8}"
        for i, s in enumerate(card.segments)
    ]
    free_cores = max(card.devcore - card.used_cores, 0)
    room = card.no_room or f"next pod up to {card.largest_free_mb} MB"
    rows.append(
        f"    {FREE} {'free':<{width}} {card.free_mb:>6} MB {f'{free_cores}%':>8}  "
        f"{card.slots_used}/{card.count} slots taken, {room}"
    )
    return rows


def table(m: TenantMap) -> list[str]:
    lines = [f"{m.tenant}: {summary_line(m)}"]
    for card in m.cards:
        lines += card_rows(card)
    lines += [f"  stray slice (on a card no node registers): {s}" for s in m.stray]
    return lines


def read_tenant(spec: Spec, factory: ClusterFactory, name: str) -> TenantMap:
    """Two LIST calls with the tenant's admin kubeconfig; raises ClusterError or ValueError."""
    tenant = spec.tenant(name)
    cluster = factory(tenant.kubeconfig, f"tenant {name}")
    return tenant_map(name, cluster.list_nodes(), cluster.list_pods())


def write_picture(maps: Sequence[TenantMap], directory: Path, *, stack: str, when: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / PNG_NAME
    render(maps, stack=stack, run_id=RUN_ID, when=when).savefig(path, dpi=110)
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labcheck.sharing",
        description="Print which pods hold which GPU slices on each tenant's cards, and draw "
        "it (read-only: creates nothing).",
    )
    add_spec_arguments(p)
    p.add_argument("--report-dir", type=Path, help=f"write the picture ({PNG_NAME}) here")
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    factory: ClusterFactory | None = None,
    when: str | None = None,
) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    spec = open_spec(parser, args, "sharing")
    if spec is None:
        return EXIT_USAGE
    factory = cluster_factory(spec, factory)
    when = when or now_iso()
    out.write(f"GPU sharing in stack {spec.stack}, live at {when}\n")
    maps, failed = [], False
    for tenant in spec.tenants:
        if not tenant.gpu_nodes():
            out.write(f"{tenant.name}: no GPU node\n")
            continue
        try:
            m = read_tenant(spec, factory, tenant.name)
        except ClusterError as exc:
            out.write(f"{tenant.name}: not read: {exc} ({likely_cause(exc)})\n")
            failed = True
            continue
        except (ValueError, KeyError, TypeError) as exc:  # a registration HAMi cannot read
            out.write(f"{tenant.name}: not read: a card registration is not HAMi's JSON ({exc})\n")
            failed = True
            continue
        maps.append(m)
        out.write("\n".join(table(m)) + "\n")
    if args.report_dir and maps:
        out.write(f"picture: {write_picture(maps, args.report_dir, stack=spec.stack, when=when)}\n")
    return EXIT_FAILED if failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
