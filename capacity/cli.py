"""Command line: a capacity run of a mix, or the slice-hours of what the tenants run now."""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from labcheck.cli import add_spec_arguments, load_spec, now_iso
from labcheck.cluster import ClusterError, ClusterFactory, likely_cause
from labcheck.prometheus import Prometheus, PrometheusError
from labcheck.runner import SignalGuard
from labcheck.spec import Spec, SpecError
from labcheck.waiting import Clock, SystemClock, WaitTimeout

from .hours import Holding, card_infos, holdings, slice_hours, table, to_csv
from .ledger import ledger_csv, ledger_json, ledger_table, read_ledger
from .mix import Mix, MixError, load_mix, parse_duration
from .report import TerminalProgress, terminal_lines, write_reports
from .run import RunSettings, run_capacity
from .views import RegisteredCard, read_view

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m capacity",
        description="How many cards a workload mix takes with HAMi's slices (--mix), or the "
        "slice-hours each tenant holds (--hours). Needs a running lab.",
    )
    add_spec_arguments(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--mix", metavar="FILE", help="run this workload mix (YAML)")
    what.add_argument(
        "--hours",
        action="store_true",
        help="slice-hours of the pods the tenants run now, over --last (allocation, not use)",
    )
    what.add_argument(
        "--ledger",
        action="store_true",
        help="slice-hours and GPU-hours per tenant, namespace and card over --last, from the "
        "lab's Prometheus: pods deleted since are in it",
    )
    p.add_argument(
        "--last", default="24h", help="--hours or --ledger window ending now (default 24h)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for placement (default: 5 s per pod, at least 60 s)",
    )
    p.add_argument(
        "--compare",
        metavar="TENANT,TENANT",
        help="run every entry of the mix in each of these tenants (instead of the tenant it "
        "names) and report them side by side: e.g. a HAMi tenant and a DRA tenant with the "
        "same cards",
    )
    p.add_argument(
        "--namespace",
        metavar="NS",
        help="create the pods in this existing namespace of every tenant of the mix, and delete "
        "only them (default: a namespace of the run's own, created and deleted; a tenant user "
        "who may not create namespaces needs this)",
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        help="write capacity-report.json, capacity-hours.csv and capacity-placement.png/.svg",
    )
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    factory: ClusterFactory | None = None,
    clock: Clock | None = None,
    wall: Callable[[], float] = time.time,
    run_id: str | None = None,
    guard: SignalGuard | None = None,
) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.stack or args.spec or args.spec_env):
        parser.error("one of --stack, --spec or --spec-env is required")
    if not (args.mix or args.hours or args.ledger):
        parser.error("one of --mix FILE, --hours or --ledger is required")
    try:
        spec = load_spec(args)
        mix = load_mix(args.mix) if args.mix else None
        if args.compare:
            if mix is None:
                raise MixError("--compare needs --mix FILE")
            mix = mix.in_tenants([t.strip() for t in args.compare.split(",") if t.strip()])
        window = parse_duration(args.last)
    except (SpecError, MixError) as exc:
        print(f"capacity: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        print(f"capacity: --last {exc}", file=sys.stderr)
        return EXIT_USAGE
    if factory is None:
        from labcheck.kube import factory as kube_factory

        factory = kube_factory(spec.timeouts.api_seconds)
    try:
        if args.ledger:
            return _ledger(spec, factory, wall(), window, args.report_dir, out)
        if mix is None:
            return _hours(spec, factory, wall(), window, args.report_dir, out)
        return _run(spec, mix, factory, clock or SystemClock(), wall, run_id, guard, args, out)
    except MixError as exc:
        print(f"capacity: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClusterError as exc:
        print(f"capacity: {exc} ({likely_cause(exc)})", file=sys.stderr)
        return EXIT_FAILED
    except WaitTimeout as exc:
        print(f"capacity: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except PrometheusError as exc:
        print(f"capacity: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _run(
    spec: Spec,
    mix: Mix,
    factory: ClusterFactory,
    clock: Clock,
    wall: Callable[[], float],
    run_id: str | None,
    guard: SignalGuard | None,
    args: argparse.Namespace,
    out: TextIO,
) -> int:
    run_id = run_id or secrets.token_hex(4)
    progress = TerminalProgress(out, tty=out.isatty())
    own_guard = guard is None
    guard = guard or SignalGuard()
    if own_guard:
        guard.install()
    try:
        result = run_capacity(
            spec,
            mix,
            factory=factory,
            clock=clock,
            run_id=run_id,
            progress=progress,
            guard=guard,
            settings=RunSettings(timeout=args.timeout, wall=wall, namespace=args.namespace),
        )
    finally:
        if own_guard:
            guard.restore()
        progress.end()
    files = write_reports(result, args.report_dir, when=now_iso()) if args.report_dir else []
    out.write("\n".join(terminal_lines(result)) + "\n")
    for f in files:
        out.write(f"wrote {f}\n")
    if result.interrupted is not None:
        return 128 + result.interrupted
    return EXIT_FAILED if result.cleanup_errors or result.count("pending") else EXIT_OK


def _hours(
    spec: Spec,
    factory: ClusterFactory,
    now: float,
    window: int,
    report_dir: Path | None,
    out: TextIO,
) -> int:
    """Every pod HAMi (or DRA) placed in every tenant, as the API servers list them now."""
    held: list[Holding] = []
    notes: list[str] = []
    cards: dict[str, list[RegisteredCard]] = {}
    for t in spec.tenants:
        cl = factory(t.kubeconfig, t.name)
        view = read_view(t.gpu_sharing, cl)
        cards[t.name] = view.cards(cl.list_nodes())
        h, n = holdings(t.name, cl.list_pods(), now, view=view)
        held += h
        notes += n
    report = slice_hours(held, now - window, now, card_infos(cards), notes)
    out.write("\n".join(table(report)) + "\n")
    _write_reports(report_dir, {"capacity-hours.csv": to_csv(report)}, out)
    return EXIT_OK


def _write_reports(report_dir: Path | None, files: dict[str, str], out: TextIO) -> None:
    """Each file's text into `report_dir` (none given: nothing written), saying so."""
    if not report_dir:
        return
    report_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = report_dir / name
        path.write_text(text)
        out.write(f"wrote {path}\n")


def _ledger(
    spec: Spec,
    factory: ClusterFactory,
    now: float,
    window: int,
    report_dir: Path | None,
    out: TextIO,
) -> int:
    """Slice-hours from the lab's Prometheus: every pod of the window, gone ones included."""
    if spec.monitoring is None:
        print(
            "capacity: this stack has no Prometheus (monitoring.enabled is false): "
            "--hours reads the pods that exist now",
            file=sys.stderr,
        )
        return EXIT_USAGE
    management = factory(spec.management.kubeconfig, "management")
    prometheus = Prometheus(management, spec.monitoring.prometheus)
    ledger = read_ledger(prometheus, spec.monitoring.over(f"{window}s"), window, now)
    out.write("\n".join(ledger_table(ledger)) + "\n")
    files = {"ledger.csv": ledger_csv(ledger), "ledger.json": ledger_json(ledger)}
    _write_reports(report_dir, files, out)
    return EXIT_OK
