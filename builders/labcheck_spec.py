"""The spec labcheck reads: what the lab is (tenants, nodes, GPUs, quotas) and how long to wait."""

from __future__ import annotations

from typing import Any

from builders.admission_policy import policy_api_version
from builders.control_plane import API_PORT
from builders.hami import QUOTA_NAME, QUOTA_NAMESPACE
from builders.lock_wait_policy import POD_GROUP_LABEL, POD_GROUP_VALUE
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
                "gpuSharing": t.gpu_sharing,
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
                "lockWait": (
                    {"label": POD_GROUP_LABEL, "value": POD_GROUP_VALUE}
                    if policy_api_version(t)
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
        # Only when set: a stack without mirrors keeps the spec it had.
        **(
            {"registryMirrors": {m.registry: m.mirror for m in cfg.registry_mirrors}}
            if cfg.registry_mirrors
            else {}
        ),
    }
