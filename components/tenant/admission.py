"""Admission policies the program declares in a tenant, by the API version its Kubernetes serves."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def admission_policy_resources(
    name: str, manifests: list[dict[str, Any]], opts: pulumi.ResourceOptions
) -> list[pulumi.CustomResource]:
    """One typed resource per manifest (a MutatingAdmissionPolicy or its binding, v1beta1 or v1
    by the tenant's version), named ``<name>-<kind in lower case>``."""
    resources = []
    for manifest in manifests:
        version = manifest["apiVersion"].rsplit("/", 1)[1]
        resource_type = getattr(getattr(k8s.admissionregistration, version), manifest["kind"])
        resources.append(
            resource_type(
                f"{name}-{manifest['kind'].lower()}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=opts,
            )
        )
    return resources
