"""`python -m preflight`: check this host for a stack (its config and last deployment) or for
the plan given as flags; the HostPreflight command runs it with flags inside `pulumi up`."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from labconfig.base import UNREAD_SECRET
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from labconfig.preflight_checks import PREFLIGHT_CHECKS
from labconfig.stack import raw_stack_config
from planning.footprint import CONTROL_PLANE
from planning.host_plan import HostPlan, Sizing, host_plan
from preflight.checks import TOOL_INSTALL, check_host, report
from preflight.host_facts import (
    Run,
    error_text,
    read_host_facts,
)


def _run(args: list[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout


def stack_config_values(config_json: str) -> tuple[dict[str, str], list[str]]:
    """`pulumi config --json` as Pulumi's config map and its secret keys; secrets stay unread.

    A secret's value is not printed without --show-secrets: a placeholder stands for it, since
    the preflight needs to know only that it is set.
    """
    values, secrets = {}, []
    for key, entry in json.loads(config_json).items():
        if entry.get("secret"):
            secrets.append(key)
        if "value" in entry:
            values[key] = entry["value"]
        elif entry.get("secret"):
            values[key] = UNREAD_SECRET
    return values, secrets


def deployed_sizing(export_json: str) -> Sizing | None:
    """The record the stack's HostPreflight command left in its stdout at the last update."""
    resources = json.loads(export_json).get("deployment", {}).get("resources") or []
    for resource in resources:
        if resource.get("type") == "command:local:Command" and "HostPreflight$" in resource.get(
            "urn", ""
        ):
            return Sizing.from_record(resource.get("outputs", {}).get("stdout"))
    return None


def plan_from_stack(stack: str, run: Run = _run) -> tuple[HostPlan | None, Sizing | None]:
    values, secrets = stack_config_values(run(["pulumi", "config", "--stack", stack, "--json"]))
    cfg = parse_config(raw_stack_config(values, secrets))
    if not cfg.preflight:
        return None, None
    previous = deployed_sizing(run(["pulumi", "stack", "export", "--stack", stack]))
    return host_plan(cfg), previous


def _tenant_version(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("=")
    if not (name and sep and version):
        raise argparse.ArgumentTypeError(f"expected NAME=VERSION, got {text!r}")
    return name, version


def _accepted(text: str) -> tuple[str, str]:
    name, sep, why = text.partition("=")
    if name not in PREFLIGHT_CHECKS or not (sep and why.strip()):
        raise argparse.ArgumentTypeError(
            f"expected CHECK=WHY with CHECK one of {', '.join(PREFLIGHT_CHECKS)}, got {text!r}"
        )
    return name, why


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m preflight", description="Check this host for the kamaji-hami-lab."
    )
    parser.add_argument("--stack", help="read the plan from this stack (pulumi config, state)")
    parser.add_argument(
        "--tenants", type=int, help="tenants in the lab (one control plane each); with --workers"
    )
    parser.add_argument("--workers", type=int, help="container workers in all tenants")
    parser.add_argument(
        "--control-plane-cpus",
        type=float,
        action="append",
        default=[],
        help="a tenant's control plane CPU requests, once per tenant in order "
        f"(default: {CONTROL_PLANE.cpus:g} each)",
    )
    parser.add_argument(
        "--kube-proxy-version",
        action="append",
        default=[],
        help="a tenant version with workers here",
    )
    parser.add_argument(
        "--tenant-version",
        type=_tenant_version,
        action="append",
        default=[],
        metavar="NAME=VERSION",
        help="a tenant's Kubernetes version (the host's kubectl talks to every tenant)",
    )
    parser.add_argument(
        "--management-version", help="the kind management cluster's Kubernetes version"
    )
    parser.add_argument("--network", default="kamaji-hami-lab", help="the lab's Docker network")
    parser.add_argument(
        "--subnet",
        default="172.30.0.0/16",
        help="the lab network's subnet: no host route or other Docker network in it (%(default)s)",
    )
    parser.add_argument(
        "--kind-cluster",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the management cluster is kind on this host (managementMode kind); "
        "--no-kind-cluster for an existing one",
    )
    parser.add_argument(
        "--kamaji-charts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the lab installs Kamaji, whose charts are built here with git and helm",
    )
    parser.add_argument(
        "--accept",
        type=_accepted,
        action="append",
        default=[],
        metavar="CHECK=WHY",
        help="a check accepted knowingly: still run, a failure reported as a warning with WHY",
    )
    parser.add_argument("--previous", help="the stdout of the previous run (its sizing record)")
    return parser


class StackUnreadable(Exception):
    """The stack's config or state could not be read; the message says why."""


def _stack_plan(stack: str, run: Run) -> tuple[HostPlan | None, Sizing | None]:
    try:
        return plan_from_stack(stack, run)
    except ConfigError as error:
        raise StackUnreadable(f"invalid stack config: {error}") from None
    except FileNotFoundError as error:
        tool = str(error.filename or "pulumi")
        hint = TOOL_INSTALL.get(tool)
        raise StackUnreadable(
            f"cannot read stack {stack}: {tool} is not on PATH" + (f"; {hint}" if hint else "")
        ) from None
    except (OSError, subprocess.SubprocessError) as error:
        raise StackUnreadable(f"cannot read stack {stack}: {error_text(error)}") from None


def _flags_plan(args: argparse.Namespace) -> tuple[HostPlan, Sizing | None]:
    plan = HostPlan(
        sizing=Sizing(args.tenants, args.workers, tuple(args.control_plane_cpus)),
        kube_proxy_versions=tuple(sorted(set(args.kube_proxy_version))),
        kind_cluster=args.kind_cluster,
        network_name=args.network,
        subnet=args.subnet,
        kamaji_charts=args.kamaji_charts,
        tenant_versions=tuple(args.tenant_version),
        management_version=args.management_version,
        accepted=tuple(args.accept),
    )
    return plan, Sizing.from_record(args.previous)


def main(argv: list[str] | None = None, run: Run = _run) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.stack and (args.tenants is None or args.workers is None):
        parser.error("give --stack, or --tenants and --workers")
    if args.control_plane_cpus and len(args.control_plane_cpus) != args.tenants:
        parser.error("give --control-plane-cpus once per tenant, or not at all")
    try:
        plan, previous = _stack_plan(args.stack, run) if args.stack else _flags_plan(args)
    except StackUnreadable as error:
        print(f"preflight: {error}", file=sys.stderr)
        return 1
    if plan is None:
        print("preflight: skipped (off, or nothing of this stack runs here)", file=sys.stderr)
        return 0
    findings = check_host(read_host_facts(run), plan, previous)
    accepted = dict(plan.accepted)
    print(report(findings, accepted), file=sys.stderr)
    failed = [f for f in findings if not f.ok and f.check not in accepted]
    if failed:
        print(f"preflight: {len(failed)} check(s) failed; run the fixes above", file=sys.stderr)
        return 1
    print(plan.sizing.record())  # the baseline the next run of the command compares against
    return 0
