"""The Kubernetes objects the program declares in a tenant, applied to a real one.

pulumi-kubernetes sends a resource's inputs to the API server as the object (its type token
names the group, version and kind); here the same inputs go through `kubectl apply
--server-side` (TenantLab.apply_objects), in the order the program registered them
(pulumi_harness.kubernetes_object).
Helm releases are not objects: the chart's rendering goes through `helm` (workload_images.py
renders flannel's).
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.support.pulumi_harness import ProgramRun, Registration, kubernetes_object

KUBERNETES = "kubernetes:"
RELEASE = "kubernetes:helm.sh/v3:Release"


def on_tenant(run: ProgramRun, tenant: str) -> list[Registration]:
    """The program's registrations through the tenant's provider, in registration order."""
    provider = f"::{tenant}-provider::"
    return [
        r
        for r in run.resources
        if r.type.startswith(KUBERNETES) and provider in r.provider and not r.read
    ]


def objects(registrations: Iterable[Registration], *, parents: tuple[str, ...]) -> list[dict]:
    """Manifests of the registrations whose component (parent URN) ends with one of `parents`."""
    return [
        kubernetes_object(r)
        for r in registrations
        if r.type != RELEASE and r.parent.rsplit("::", 1)[-1] in parents
    ]
