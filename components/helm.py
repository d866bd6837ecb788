"""Helm releases of pinned charts, the way every component installs upstream charts."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from builders.kamaji import CERT_MANAGER_NAMESPACE, cert_manager_values
from labconfig.mirrors import ChartLocation

RELEASE_TIMEOUT_SECONDS = 600


def _release(
    resource_name: str,
    *,
    release_name: str,
    chart: pulumi.Input[str],
    version: str | None,
    repository_opts: k8s.helm.v3.RepositoryOptsArgs | None,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    create_namespace: bool,
    skip_crds: bool,
) -> k8s.helm.v3.Release:
    """A Helm release that waits for its workloads, with a fixed name so objects are predictable."""
    return k8s.helm.v3.Release(
        resource_name,
        name=release_name,
        chart=chart,
        version=version,
        repository_opts=repository_opts,
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        skip_crds=skip_crds or None,  # unset unless asked: a `false` would diff old releases
        timeout=RELEASE_TIMEOUT_SECONDS,
        # A failed install rolls back instead of leaving a half-installed chart behind.
        atomic=True,
        opts=opts,
    )


def pinned_release(
    resource_name: str,
    *,
    chart: ChartLocation,
    version: str,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    release_name: str | None = None,
    create_namespace: bool = True,
) -> k8s.helm.v3.Release:
    """A chart from a Helm repository or an OCI registry (upstream's, or the site's mirror)
    at a fixed version."""
    return _release(
        resource_name,
        release_name=release_name or chart.name,
        chart=chart.chart,
        version=version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None,
        namespace=namespace,
        values=values,
        opts=opts,
        create_namespace=create_namespace,
        skip_crds=False,
    )


def local_chart_release(
    resource_name: str,
    *,
    chart_dir: pulumi.Input[str],
    release_name: str,
    namespace: str,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    skip_crds: bool = False,
) -> k8s.helm.v3.Release:
    """A chart directory on the host, pinned by whatever put it there (a git commit)."""
    return _release(
        resource_name,
        release_name=release_name,
        chart=chart_dir,
        version=None,
        repository_opts=None,
        namespace=namespace,
        values=values,
        opts=opts,
        create_namespace=True,
        skip_crds=skip_crds,
    )


def cert_manager_release(
    resource_name: str, *, chart: ChartLocation, version: str, opts: pulumi.ResourceOptions
) -> k8s.helm.v3.Release:
    """cert-manager at a pinned version, its CRDs with it: the management cluster's (Kamaji's
    certificates) and a DRA tenant's (HAMi-DRA's webhook certificate)."""
    return pinned_release(
        resource_name,
        chart=chart,
        version=version,
        namespace=CERT_MANAGER_NAMESPACE,
        values=cert_manager_values(),
        opts=opts,
    )
