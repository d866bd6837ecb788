"""Validation: the last step of the graph runs the labcheck suite against the fresh lab."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command

from components.platform.host_preflight import project_python


def labcheck_command(report_dir: str, python: str | None = None) -> str:
    python = python or project_python()
    return (
        f"{shlex.quote(python)} -m labcheck --spec-env LABCHECK_SPEC "
        f"--report-dir {shlex.quote(report_dir)}"
    )


@dataclass(frozen=True)
class ValidationArgs:
    spec_json: pulumi.Input[str]
    report_dir: str
    triggers: list[pulumi.Input[Any]]
    depends_on: list[pulumi.Resource]


class Validation(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: ValidationArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Validation", name, None, opts)
        self.run = command.local.Command(
            f"{name}-labcheck",
            create=labcheck_command(args.report_dir),
            # No `dir`: pulumi-command runs in the project root, where the engine starts its
            # provider, so every checkout plans the same input.
            environment={"LABCHECK_SPEC": pulumi.Output.secret(args.spec_json)},
            # Any change to the lab's parts replaces this step, so it runs again.
            triggers=args.triggers,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=args.depends_on,
                # Every labcheck wait is bounded; a badly broken lab still ends well within this.
                custom_timeouts=pulumi.CustomTimeouts(create="40m"),
            ),
        )
        self.report_dir = args.report_dir
        self.register_outputs({"reportDir": self.report_dir})
