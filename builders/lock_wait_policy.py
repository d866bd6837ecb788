"""The admission policy that makes every HAMi GPU pod wait for HAMi's node lock in Bind.

HAMi v2.10.0 takes a node lock in Bind. A Bind that meets a held lock fails at once, and
kube-scheduler sends the pod to its error backoff (1 s doubling to 10 s), so a burst of GPU pods
on one node drags a tail of tens of seconds. A PodGroup member's Bind instead polls the lock
every 100 ms for `--node-lock-retry-timeout` (HAMi pkg/scheduler/scheduler.go:972-996); HAMi
calls a pod a member when it carries the label `scheduling.x-k8s.io/pod-group` with any value
(pkg/util/util.go:392-403). The tenant's own API server adds that label to the GPU pods HAMi
schedules, so a user's pods, labcheck's and the capacity tool's all get the wait
(docs/placement-time.md; facts `hami-v2.10-pod-group-bind-waits-for-lock`,
`kube-mutating-admission-policy-stages`).

The policy never touches a pod that already names a pod group (a real PodGroup of a gang
scheduler keeps its own), one that another scheduler places, or one HAMi's webhook is told to
ignore (`hami.io/webhook: ignore` on the pod or its namespace, as HAMi's chart selects).
Its failure policy is Ignore: a broken policy costs the wait, never a pod.
"""

from __future__ import annotations

from typing import Any

from builders.hami import SCHEDULER_NAME
from labconfig.model import TenantConfig
from labconfig.versions import kubernetes_minor

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # HAMi pkg/util/types.go:57
# Names no PodGroup object: the label only makes HAMi's Bind wait. A gang scheduler that reads
# it (scheduler-plugins' Coscheduling) never sees these pods: they go to HAMi's scheduler.
POD_GROUP_VALUE = "hami-node-lock-wait"
POLICY_NAME = "hami-gpu-pods-wait-for-node-lock"
GPU_RESOURCE = "nvidia.com/gpu"
# HAMi's chart: its webhook skips pods and namespaces labelled so (scheduler/webhook.yaml).
WEBHOOK_IGNORE = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
# MutatingAdmissionPolicy: beta and off in v1.34-v1.35 (its gate, and its v1beta1 API switched
# on), GA and on from v1.36 (k/k pkg/features/kube_features.go; the admission plugin is on by
# default whenever the gate is: pkg/kubeapiserver/options/plugins.go DefaultOffAdmissionPlugins).
FIRST_BETA = (1, 34)
FIRST_GA = (1, 36)
FEATURE_GATE = "MutatingAdmissionPolicy"
BETA_API = "admissionregistration.k8s.io/v1beta1"
GA_API = "admissionregistration.k8s.io/v1"


def policy_api_version(tenant: TenantConfig) -> str | None:
    """The API the tenant's version serves the policy under (once its gate is on), or None
    where it has none the program switches on (before v1.34: alpha only)."""
    minor = kubernetes_minor(tenant.kubernetes_version)
    if minor >= FIRST_GA:
        return GA_API
    if minor >= FIRST_BETA:
        return BETA_API
    return None


def feature_gates(tenant: TenantConfig) -> dict[str, bool]:
    """kube-apiserver feature gates the policy needs on the tenant's version."""
    return {FEATURE_GATE: True} if policy_api_version(tenant) == BETA_API else {}


def runtime_config(tenant: TenantConfig) -> dict[str, bool]:
    """API versions the tenant's kube-apiserver must serve beyond its defaults."""
    return {BETA_API: True} if policy_api_version(tenant) == BETA_API else {}


def asks_for_hami_gpu() -> str:
    """CEL: a container or init container asks for HAMi's GPU count (HAMi's webhook reads both,
    pkg/scheduler/webhook.go:74-110; limits, or requests where a container sets only those)."""
    per_container = (
        "has(c.resources) && ("
        f"(has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits) || "
        f"(has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests))"
    )
    init = "object.spec.initContainers"
    return (
        f"object.spec.containers.exists(c, {per_container}) || "
        f"(has({init}) && {init}.exists(c, {per_container}))"
    )


def policy_manifests(tenant: TenantConfig) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding, or nothing where the tenant's version has no
    policy API the program can switch on."""
    api_version = policy_api_version(tenant)
    if api_version is None:
        return []
    policy = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "Never",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "matchConditions": [
                {"name": "asks-for-a-hami-gpu", "expression": asks_for_hami_gpu()},
                {
                    # What HAMi's webhook hands to HAMi's scheduler (webhook.go:64-66,107-108).
                    "name": "placed-by-hami",
                    "expression": (
                        "!has(object.spec.schedulerName) || object.spec.schedulerName in "
                        f"['', 'default-scheduler', '{SCHEDULER_NAME}']"
                    ),
                },
                {
                    "name": "in-no-pod-group",
                    "expression": (
                        "!has(object.metadata.labels) || "
                        f"!('{POD_GROUP_LABEL}' in object.metadata.labels)"
                    ),
                },
            ],
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": (
                            "Object{metadata: Object.metadata{labels: "
                            f'{{"{POD_GROUP_LABEL}": "{POD_GROUP_VALUE}"}}}}}}'
                        )
                    },
                }
            ],
        },
    }
    binding = {
        "apiVersion": api_version,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "policyName": POLICY_NAME,
            "matchResources": {
                "namespaceSelector": {"matchExpressions": [dict(WEBHOOK_IGNORE)]},
                "objectSelector": {"matchExpressions": [dict(WEBHOOK_IGNORE)]},
            },
        },
    }
    return [policy, binding]
