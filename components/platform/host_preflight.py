"""HostPreflight: runs the host checks inside `pulumi up`, before anything touches Docker."""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_command as command

from planning.host_plan import HostPlan

PROJECT_DIR = Path(__file__).resolve().parents[2]


def project_python(python: str = sys.executable, project_dir: Path = PROJECT_DIR) -> str:
    """The program's interpreter, relative to the project when it lives there (Pulumi.yaml's
    `.venv`): the command line is then the same in every checkout and on every machine, so a
    preview or `up` from elsewhere plans no update of the check."""
    absolute = os.path.abspath(python)  # not resolved: a venv's python is a symlink
    for root in {str(project_dir), str(project_dir.resolve())}:
        relative = os.path.relpath(absolute, root)
        if not relative.startswith(os.pardir + os.sep):
            return relative
    return absolute


@dataclass(frozen=True)
class HostPreflightArgs:
    plan: HostPlan


def preflight_command(plan: HostPlan, python: str | None = None) -> str:
    """The program's own interpreter runs the checks, so the host needs no other Python."""
    python = python or project_python()
    args = [
        python,
        "-m",
        "preflight",
        "--tenants",
        str(plan.sizing.tenants),
        "--workers",
        str(plan.sizing.workers),
        *(
            a
            for cpus in plan.sizing.control_plane_cpus
            for a in ("--control-plane-cpus", str(cpus))
        ),
        *(a for version in plan.kube_proxy_versions for a in ("--kube-proxy-version", version)),
        # kubectl's skew is checked against every API server it will talk to.
        *(a for name, v in plan.tenant_versions for a in ("--tenant-version", f"{name}={v}")),
        *(["--management-version", plan.management_version] if plan.management_version else []),
        "--network",
        plan.network_name,
        "--subnet",
        plan.subnet,
        "--kind-cluster" if plan.kind_cluster else "--no-kind-cluster",
        "--kamaji-charts" if plan.kamaji_charts else "--no-kamaji-charts",
        *(a for name, why in plan.accepted for a in ("--accept", f"{name}={why}")),
    ]
    return shlex.join(args)


def preflight_update_command(plan: HostPlan, python: str | None = None) -> str:
    """On an update the lab is running: the previous run's stdout (its sizing record, which
    pulumi-command passes as PULUMI_COMMAND_STDOUT) is the baseline for memory and disk."""
    return f'{preflight_command(plan, python)} --previous "${{PULUMI_COMMAND_STDOUT:-}}"'


class HostPreflight(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: HostPreflightArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:HostPreflight", name, None, opts)
        # Never runs in preview. Any change of the plan changes the command line, which is an
        # update (no triggers: they would replace, and a replacement runs `create` against the
        # full footprint on a host where the lab already runs). `make up` runs it every time.
        self.check = command.local.Command(
            f"{name}-checks",
            create=preflight_command(args.plan),
            update=preflight_update_command(args.plan),
            # No `dir`: pulumi-command runs in the provider's working directory, which the
            # engine sets to the project's root (Pulumi.yaml has no `main`), where the
            # relative interpreter and `-m preflight` resolve.
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"report": self.check.stderr})
