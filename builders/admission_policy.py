"""MutatingAdmissionPolicy manifests, by what the tenant's Kubernetes version serves.

The API is alpha from v1.32, beta but off in v1.34 and v1.35, GA and on from v1.36 (k/k
pkg/features/kube_features.go); its admission plugin is on whenever the feature gate is
(pkg/kubeapiserver/options/plugins.go `DefaultOffAdmissionPlugins`). Fact
`kube-mutating-admission-policy-stages`.
"""

from __future__ import annotations

from typing import Any

from labconfig.model import TenantConfig
from labconfig.versions import kubernetes_minor

FIRST_BETA = (1, 34)
FIRST_GA = (1, 36)
FEATURE_GATE = "MutatingAdmissionPolicy"
BETA_API = "admissionregistration.k8s.io/v1beta1"
GA_API = "admissionregistration.k8s.io/v1"
RESOURCES = ("mutatingadmissionpolicies", "mutatingadmissionpolicybindings")


def policy_api_version(tenant: TenantConfig) -> str | None:
    """The API the tenant's version serves the policy under (once its gate is on), or None
    where it has none the program switches on (before v1.34: alpha only) or needs none (the
    policies serve HAMi: a DRA tenant has no node lock to wait for)."""
    if tenant.gpu_sharing != "hami":
        return None
    minor = kubernetes_minor(tenant.kubernetes_version)
    if minor >= FIRST_GA:
        return GA_API
    if minor >= FIRST_BETA:
        return BETA_API
    return None


def feature_gates(tenant: TenantConfig) -> dict[str, bool]:
    """kube-apiserver feature gates the policies need on the tenant's version."""
    return {FEATURE_GATE: True} if policy_api_version(tenant) == BETA_API else {}


def runtime_config(tenant: TenantConfig) -> dict[str, bool]:
    """The policies' beta resources, which the tenant's kube-apiserver serves only when asked
    (only these two: the rest of the v1beta1 group stays off)."""
    if policy_api_version(tenant) != BETA_API:
        return {}
    return {f"{BETA_API}/{resource}": True for resource in RESOURCES}


def cel_string(text: str) -> str:
    """A CEL string literal of ``text``: a quote or backslash in it cannot end the literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mutating_policy(
    api_version: str,
    name: str,
    resource: str,
    conditions: dict[str, str],
    apply_configuration: str,
    *,
    binding_match: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """A policy that, on CREATE of a core ``resource`` meeting every condition (name -> CEL),
    applies ``apply_configuration`` (a CEL ApplyConfiguration expression), and its binding.
    Failure policy Ignore: the lab's policies speed things up; none may stop a create."""
    policy = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": [resource],
                    }
                ]
            },
            "matchConditions": [
                {"name": key, "expression": expression} for key, expression in conditions.items()
            ],
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": apply_configuration},
                }
            ],
        },
    }
    binding_spec: dict[str, Any] = {"policyName": name}
    if binding_match:
        binding_spec["matchResources"] = binding_match
    binding = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": binding_spec,
    }
    return [policy, binding]
