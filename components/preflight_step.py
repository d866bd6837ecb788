"""HostPreflight: runs the host checks on `pulumi up`, before anything touches Docker."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_command as command

PROJECT_DIR = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class HostPreflightArgs:
    tenants: int
    workers: int


def preflight_command(tenants: int, workers: int, python: str = sys.executable) -> str:
    """The program's own interpreter runs the checks, so the host needs no other Python."""
    return f"{shlex.quote(python)} -m components.preflight --tenants {tenants} --workers {workers}"


class HostPreflight(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: HostPreflightArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:HostPreflight", name, None, opts)
        # A Command runs on create only, never in preview; triggers re-check a resized lab.
        self.check = command.local.Command(
            f"{name}-checks",
            create=preflight_command(args.tenants, args.workers),
            dir=str(PROJECT_DIR),
            triggers=[args.tenants, args.workers],
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"report": self.check.stderr})
