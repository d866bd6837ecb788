"""Command line: load the spec, run the checks, write reports, set the exit code."""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from .checks import ALL_CHECKS
from .cluster import ClusterFactory
from .context import RunContext
from .report import TerminalReporter, write_reports
from .runner import SignalGuard, run_checks
from .spec import Spec, SpecError, load_from_env, load_from_file, load_from_stack
from .waiting import Clock, SystemClock

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_spec_arguments(p: argparse.ArgumentParser) -> None:
    """Where the spec comes from (read by load_spec): a stack, a file or an env var."""
    src = p.add_mutually_exclusive_group()
    src.add_argument("--stack", help="read `pulumi stack output labcheckSpec` of this stack")
    src.add_argument("--spec", metavar="FILE", help="read the spec JSON from a file")
    src.add_argument("--spec-env", metavar="VAR", help="read the spec JSON from an env var")
    p.add_argument("--cwd", help="Pulumi project directory for --stack (default: current)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labcheck",
        description="Validate a deployed kamaji-hami lab (exit 0 only if no check failed).",
    )
    add_spec_arguments(p)
    p.add_argument(
        "--report-dir",
        type=Path,
        help="write labcheck-report.json, labcheck-junit.xml and the placement picture "
        "(labcheck-placement.png/.svg) here",
    )
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="run only matching check ids (repeatable), e.g. 'gpu.*'",
    )
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    return p


def load_spec(args: argparse.Namespace) -> Spec:
    if args.stack:
        return load_from_stack(args.stack, cwd=args.cwd)
    if args.spec:
        return load_from_file(args.spec)
    return load_from_env(args.spec_env)


def open_spec(parser: argparse.ArgumentParser, args: argparse.Namespace, prog: str) -> Spec | None:
    """The spec the arguments name; None once the reason it cannot be read is printed."""
    if not (args.stack or args.spec or args.spec_env):
        parser.error("one of --stack, --spec or --spec-env is required")
    try:
        return load_spec(args)
    except SpecError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None


def cluster_factory(spec: Spec, factory: ClusterFactory | None) -> ClusterFactory:
    """The given factory (tests' fakes), else the real client with the spec's API timeout."""
    if factory is not None:
        return factory
    from .kube import factory as kube_factory  # the kubernetes client loads only when used

    return kube_factory(spec.timeouts.api_seconds)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    factory: ClusterFactory | None = None,
    clock: Clock | None = None,
    run_id: str | None = None,
    guard: SignalGuard | None = None,
) -> int:
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        for c in ALL_CHECKS:
            out.write(f"{c.id:28} {'per tenant' if c.per_tenant else 'global':10} {c.title}\n")
        return EXIT_OK
    spec = open_spec(parser, args, "labcheck")
    if spec is None:
        return EXIT_USAGE
    factory = cluster_factory(spec, factory)
    run_id = run_id or secrets.token_hex(4)
    ctx = RunContext(spec=spec, factory=factory, clock=clock or SystemClock(), run_id=run_id)
    reporter = TerminalReporter(out, tty=out.isatty())
    reporter.header(spec.stack, run_id)
    own_guard = guard is None
    guard = guard or SignalGuard()
    if own_guard:
        guard.install()
    started = now_iso()
    try:
        outcome = run_checks(ctx, ALL_CHECKS, reporter, only=args.only, guard=guard)
    finally:
        if own_guard:
            guard.restore()
    files = []
    if args.report_dir:
        files = write_reports(
            outcome,
            args.report_dir,
            stack=spec.stack,
            run_id=run_id,
            started=started,
            finished=now_iso(),
            placement=ctx.card_maps,
        )
    reporter.summary(outcome, files)
    if outcome.interrupted is not None:
        return 128 + outcome.interrupted
    return EXIT_OK if outcome.ok else EXIT_FAILED
