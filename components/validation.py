"""Validation: the last step of the graph runs the labcheck suite against the fresh lab."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_command as command

from components.platform.host_preflight import project_python
from components.tenant.control_plane import API_PORT
from components.tenant.hami import QUOTA_NAME, QUOTA_NAMESPACE
from labconfig.addresses import NetworkPlan
from labconfig.model import LabConfig

TOOLS_IMAGE = "busybox:1.37.0"
GPU_TEST_IMAGE = "registry.k8s.io/pause:3.10"


def labcheck_spec(
    cfg: LabConfig,
    plan: NetworkPlan,
    stack: str,
    management_kubeconfig: str,
    tenant_kubeconfigs: dict[str, str],
    inventories: dict[str, dict[str, list[dict[str, Any]]]],
) -> dict[str, Any]:
    """What labcheck needs to know about the lab; it holds kubeconfigs, so it is a secret."""
    return {
        "stack": stack,
        "management": {
            "kubeconfig": management_kubeconfig,
            "kamajiNamespace": "kamaji-system",
            "datastore": "default",
        },
        "tenants": [
            {
                "name": t.name,
                "namespace": t.name,
                "kubeconfig": tenant_kubeconfigs[t.name],
                "address": str(plan.tenant_addresses[t.name]),
                "port": API_PORT,
                "nodes": t.worker_names,
                "gpuMode": t.gpu_mode,
                "gpus": {
                    node: [
                        {**card, "count": card.get("count", cfg.hami_split_count)} for card in cards
                    ]
                    for node, cards in inventories.get(t.name, {}).items()
                },
                "schedulerPolicy": {"node": t.scheduler_policy.node, "gpu": t.scheduler_policy.gpu},
                "quota": (
                    {"namespace": QUOTA_NAMESPACE, "name": QUOTA_NAME, "gpumemMB": t.gpu_quota_mb}
                    if t.gpu_quota_mb
                    else None
                ),
            }
            for t in cfg.tenants
        ],
        "timeouts": {
            "apiSeconds": 10,
            "podSeconds": 120,
            "lockBurstPods": 5,
            "lockBurstSeconds": 60,
        },
        "testImage": GPU_TEST_IMAGE,
        "toolsImage": TOOLS_IMAGE,
    }


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
