"""UpgradeGuard: each tenant's Kubernetes version, judged against the stack's last deployment."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from planning.upgrades import UpgradeRefused, VersionChange, judge_all, upgrade_steps

# The stack output that records each tenant's version (components/outputs.py writes it).
TENANTS_OUTPUT = "tenants"
VERSION_KEY = "kubernetesVersion"


@dataclass(frozen=True)
class TenantVersion:
    name: str
    version: str
    workers: tuple[str, ...]
    replaced: bool  # container workers: replaced by a node of the new image


@dataclass(frozen=True)
class UpgradeGuardArgs:
    tenants: Sequence[TenantVersion]
    # `org/project/stack` of this very stack: its last outputs are what runs.
    stack: str


def last_versions(outputs: Any) -> dict[str, str]:
    """Tenant name to version, from the `tenants` output of the last deployment; empty when
    there is none (a new stack) or it came from a program that did not record versions."""
    if not isinstance(outputs, Mapping):
        return {}
    return {
        name: entry[VERSION_KEY]
        for name, entry in outputs.items()
        if isinstance(entry, Mapping) and isinstance(entry.get(VERSION_KEY), str)
    }


class UpgradeGuard(pulumi.ComponentResource):
    """Reads the versions the stack last deployed (a reference to its own outputs, read in
    preview too) and refuses a downgrade or a skipped minor before anything changes: the
    control planes take their version through `version(name)`, so a refused change updates
    nothing. An accepted upgrade is described in the preview, in the order it will run."""

    def __init__(
        self, name: str, args: UpgradeGuardArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:UpgradeGuard", name, None, opts)
        reference = pulumi.StackReference(
            f"{name}-last-deployment",
            stack_name=args.stack,
            opts=pulumi.ResourceOptions(parent=self),
        )
        tenants = {t.name: t for t in args.tenants}

        def judged(outputs: Any) -> dict[str, str]:
            try:
                changes = judge_all(
                    last_versions(outputs), [(t.name, t.version) for t in args.tenants]
                )
            except UpgradeRefused as refused:
                # One error line, no traceback (fact pulumi-python-run-error-no-traceback).
                raise pulumi.RunError(str(refused)) from None
            for change in changes:
                _announce(change, tenants[change.tenant])
            return {change.tenant: change.wanted for change in changes}

        self.versions: pulumi.Output[dict[str, str]] = reference.get_output(TENANTS_OUTPUT).apply(
            judged
        )
        self.register_outputs({})

    def version(self, tenant: str) -> pulumi.Output[str]:
        return self.versions.apply(lambda versions: versions[tenant])


def _announce(change: VersionChange, tenant: TenantVersion) -> None:
    if change.is_upgrade:
        pulumi.log.info(upgrade_steps(change, tenant.workers, tenant.replaced))
