"""Helm releases pinned to a chart version, the way every component installs upstream charts."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

RELEASE_TIMEOUT_SECONDS = 600


def pinned_release(
    resource_name: str,
    *,
    chart: str,
    repo: str | None,
    version: str,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    release_name: str | None = None,
    create_namespace: bool = True,
) -> k8s.helm.v3.Release:
    """A Helm release that waits for its workloads, with a fixed name so objects are predictable."""
    return k8s.helm.v3.Release(
        resource_name,
        name=release_name or chart,
        chart=chart,
        version=version,
        # None for an OCI chart (`oci://…`), which names its registry itself.
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo) if repo else None,
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        timeout=RELEASE_TIMEOUT_SECONDS,
        # A failed install rolls back instead of leaving a half-installed chart behind.
        atomic=True,
        opts=opts,
    )
