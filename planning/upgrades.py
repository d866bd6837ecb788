"""A tenant's Kubernetes version change, judged against what the stack last deployed.

Kamaji's webhook refuses a TenantControlPlane downgrade and a skip of a minor, but
pulumi-kubernetes previews an update as a server-side dry run and takes a 403 from admission as
"cannot tell" (upstream fact `pulumi-kubernetes-preview-ignores-forbidden`): the refusal would
first show in `pulumi up`. So the program refuses them itself, from the version the stack's last
outputs hold, and says in the preview what an accepted change will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from labconfig.versions import kubernetes_minor


class UpgradeRefused(ValueError):
    """A version change neither Kamaji nor kubeadm performs."""


class Change(Enum):
    NEW = "new"  # no version on record: a first deployment (or outputs from before versions)
    SAME = "same"
    PATCH = "patch"
    MINOR = "minor"


def _patch(version: str) -> int:
    parts = version.strip().lstrip("v").split(".")
    return int(parts[2]) if len(parts) > 2 else 0


@dataclass(frozen=True)
class VersionChange:
    tenant: str
    previous: str | None
    wanted: str

    @property
    def change(self) -> Change:
        if self.previous is None:
            return Change.NEW
        if self.previous == self.wanted:
            return Change.SAME
        if kubernetes_minor(self.previous) == kubernetes_minor(self.wanted):
            return Change.PATCH
        return Change.MINOR

    @property
    def is_upgrade(self) -> bool:
        return self.change in (Change.PATCH, Change.MINOR)


def judge(tenant: str, index: int, previous: str | None, wanted: str) -> VersionChange:
    """The change from `previous` (the stack's last outputs) to `wanted`, or UpgradeRefused
    naming the config key, the two versions and the way that works."""
    found = VersionChange(tenant, previous, wanted)
    if previous is None or previous == wanted:
        return found
    key = f"tenants[{index}].kubernetesVersion"
    old, new = kubernetes_minor(previous), kubernetes_minor(wanted)
    if (new, _patch(wanted)) < (old, _patch(previous)):
        raise UpgradeRefused(
            f"{key}: {wanted} is older than {previous}, which tenant {tenant} runs: neither"
            " Kamaji nor kubeadm downgrades a cluster. Set it back to"
            f" {previous} or newer, or destroy the tenant and create it at {wanted}"
        )
    if new[0] != old[0] or new[1] - old[1] > 1:
        step = f"v{old[0]}.{old[1] + 1}"
        raise UpgradeRefused(
            f"{key}: {wanted} skips a minor version from {previous}, which tenant {tenant}"
            f" runs: Kubernetes upgrades one minor at a time. Upgrade to a {step} release first"
            f" (pulumi up), then to {wanted}"
        )
    return found


def judge_all(previous: dict[str, str], wanted: Sequence[tuple[str, str]]) -> list[VersionChange]:
    """Every tenant's change, in the config's order; `previous` maps tenant to version."""
    return [
        judge(name, index, previous.get(name), version)
        for index, (name, version) in enumerate(wanted)
    ]


def upgrade_steps(change: VersionChange, workers: Sequence[str], replaced: bool) -> str:
    """What `pulumi up` will do for an upgrade, in kubeadm's order, for the preview.

    `replaced`: worker containers, replaced by a node of the new image; remote hosts get the
    version's packages in place, their kubelet restarting with its pods (not drained).
    """
    how = (
        "drained, replaced by a node of the new image and joined again"
        if replaced
        else "given the version's kubeadm and kubelet packages in place (its pods stay)"
    )
    order = ", then ".join(workers) if workers else "no worker"
    steps = (
        f"tenant {change.tenant}: {change.previous} -> {change.wanted}. Kamaji upgrades the"
        f" control plane first; then one worker at a time ({order}) is {how}"
    )
    if not replaced:
        return steps
    return (
        f"{steps}. Pods a controller owns come back on another node or the new one, asking for"
        " the same GPU slices; pods nothing owns are not re-created (the drain lists them)"
    )
