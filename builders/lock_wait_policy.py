"""The admission policy that makes every HAMi GPU pod wait for HAMi's node lock in Bind.

HAMi v2.10.0 takes a node lock in Bind. A Bind that meets a held lock fails at once, and
kube-scheduler sends the pod to its error backoff (1 s doubling to 10 s), so a burst of GPU pods
on one node drags a tail of tens of seconds. A PodGroup member's Bind instead polls the lock
every 100 ms for `--node-lock-retry-timeout` (HAMi pkg/scheduler/scheduler.go:972-996); HAMi
calls a pod a member when it carries the label `scheduling.x-k8s.io/pod-group` with a non-empty
value (pkg/util/util.go:392-403). The tenant's own API server adds that label to the GPU pods
HAMi schedules, so a user's pods, labcheck's and the capacity tool's all get the wait
(docs/placement-time.md; facts `hami-v2.10-pod-group-bind-waits-for-lock`,
`kube-mutating-admission-policy-stages`).

The policy never touches a pod that already names a pod group (a real PodGroup of a gang
scheduler keeps its own), one that another scheduler places, or one HAMi's webhook is told to
ignore (`hami.io/webhook: ignore` on the pod or its namespace, as HAMi's chart selects).
"""

from __future__ import annotations

from typing import Any

from builders.admission_policy import mutating_policy, policy_api_version
from builders.hami import SCHEDULER_NAME
from labconfig.model import TenantConfig

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # HAMi pkg/util/types.go:57
# Names no PodGroup object: the label only makes HAMi's Bind wait. A gang scheduler that reads
# it (scheduler-plugins' Coscheduling) never sees these pods: they go to HAMi's scheduler.
POD_GROUP_VALUE = "hami-node-lock-wait"
POLICY_NAME = "hami-gpu-pods-wait-for-node-lock"
# What makes a container one of HAMi's NVIDIA pods: any of its resource names in the limits
# (HAMi's chart: resourceName, resourceMem, resourceCores, resourceMemPercentage). A container
# with only the memory or cores limits gets nvidia.com/gpu from HAMi's webhook (defaultGPUNum 1,
# pkg/device/nvidia/device.go:397-415), which runs after this policy, and HAMi reads limits only.
HAMI_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
)
# HAMi's chart: its webhook skips pods and namespaces labelled so (scheduler/webhook.yaml).
WEBHOOK_IGNORE = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}


def asks_for_hami_gpu() -> str:
    """CEL: a container or init container limits one of HAMi's NVIDIA resources (HAMi's webhook
    reads both kinds of container, pkg/scheduler/webhook.go:74-110)."""
    names = "[" + ", ".join(f"'{name}'" for name in HAMI_RESOURCES) + "]"
    per_container = (
        f"has(c.resources) && has(c.resources.limits) && {names}.exists(r, r in c.resources.limits)"
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
    labels = "object.metadata.labels"
    return mutating_policy(
        api_version,
        POLICY_NAME,
        "pods",
        {
            "asks-for-a-hami-gpu": asks_for_hami_gpu(),
            # What HAMi's webhook hands to HAMi's scheduler (webhook.go:64-66,107-108).
            "placed-by-hami": (
                "!has(object.spec.schedulerName) || object.spec.schedulerName in "
                f"['', 'default-scheduler', '{SCHEDULER_NAME}']"
            ),
            # HAMi ignores an empty value (util.go:396), so it names no group either.
            "in-no-pod-group": (
                f"!has({labels}) || !('{POD_GROUP_LABEL}' in {labels}) || "
                f"{labels}['{POD_GROUP_LABEL}'] == ''"
            ),
        },
        "Object{metadata: Object.metadata{labels: "
        f'{{"{POD_GROUP_LABEL}": "{POD_GROUP_VALUE}"}}}}}}',
        binding_match={
            "namespaceSelector": {"matchExpressions": [dict(WEBHOOK_IGNORE)]},
            "objectSelector": {"matchExpressions": [dict(WEBHOOK_IGNORE)]},
        },
    )
