"""A DRA tenant (gpuSharing dra): HAMi-DRA's Helm values, the cards its fake kubelet plugin
publishes, and the feature gate Kubernetes needs for shared devices where it is still alpha.

HAMi-DRA (Project-HAMi/HAMi-DRA, docs/upstream-facts/tenant.md `hami-dra-*`) turns the
`nvidia.com/gpu`, `nvidia.com/gpumem` (MiB) and `nvidia.com/gpucores` limits of a pod into a
ResourceClaim on its device class; the Kubernetes scheduler then allocates a share of a card
(consumed memory and cores) to each claim. No HAMi scheduler and no simulated-GPU agent run in
such a tenant.
"""

from __future__ import annotations

import uuid
from typing import Any

import yaml

from builders.flannel import NAMESPACE as FLANNEL_NAMESPACE
from builders.kamaji import CERT_MANAGER_NAMESPACE
from labconfig.gpu_models import GpuModel
from labconfig.model import TenantConfig
from labconfig.versions import kubernetes_minor

NAMESPACE = "hami-dra"
# Pods its webhook (failurePolicy Fail) never sees, so a webhook that is down stops none of the
# lab's own: its release's namespace, kube-system, flannel's, cert-manager's.
WEBHOOK_EXCLUDED_NAMESPACES = ["kube-system", FLANNEL_NAMESPACE, CERT_MANAGER_NAMESPACE]
WORKLOAD_NAMESPACE = "gpu-workloads"  # where the docs' pods go, as in a HAMi tenant
RELEASE = "hami-dra"
# The real NVIDIA plugin's driver and class names, for the fake one too (as HAMi-DRA's own e2e
# runs it): a pod, quota or selector written for real cards works unchanged.
DRIVER = "hami-core-gpu.project-hami.io"
DEVICE_CLASS = DRIVER
DEVICE_TYPE = "hami-gpu"  # the attribute the class's CEL selector matches
CONSUMABLE_CAPACITY_GATE = "DRAConsumableCapacity"
CARD_UUID_NAMESPACE = uuid.UUID("2f0e6c1d-9b8a-4d7e-8c3f-647261206c61")
# Alpha (off) in v1.34 and v1.35, beta (on) from v1.36: k8s.io/kubernetes pkg/features.
FIRST_MINOR_WITH_GATE_ON = 36


def feature_gates(tenant: TenantConfig) -> dict[str, bool]:
    """What every component of a DRA tenant needs turned on to share a device."""
    if tenant.gpu_sharing != "dra":
        return {}
    if kubernetes_minor(tenant.kubernetes_version) >= (1, FIRST_MINOR_WITH_GATE_ON):
        return {}
    return {CONSUMABLE_CAPACITY_GATE: True}


def device(name: str, card: GpuModel, card_id: str) -> dict[str, Any]:
    """One card in the fake plugin's config: shareable, its memory (MiB, as HAMi counts it) and
    cores (percent) consumable in steps of 1 MiB and 1 %. As in HAMi, a claim that asks no
    memory takes all of it, and one that asks no cores takes none (no compute limit)."""
    memory = f"{card.memory_mb}Mi"
    return {
        "name": name,
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": DEVICE_TYPE},
            "productName": {"string": card.product},
            "uuid": {"string": card_id},
        },
        "capacity": {
            "cores": {
                "value": str(card.cores),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": str(card.cores), "step": "1"},
                },
            },
            "memory": {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
        },
    }


def card_uuid(node: str, index: int) -> str:
    """Stable per node and card, in NVML's form: a re-created worker publishes the same UUIDs."""
    return f"GPU-{uuid.uuid5(CARD_UUID_NAMESPACE, f'{node}/{index}')}"


def fake_driver_config(cards: list[GpuModel], nodes: list[str]) -> dict[str, Any]:
    """The fake plugin's `config.yaml`: per node by name, the tenant's cards of each worker."""
    return {
        "nodes": {
            node: {
                "devices": [
                    device(f"gpu-{index}", card, card_uuid(node, index))
                    for index, card in enumerate(cards)
                ]
            }
            for node in nodes
        }
    }


def hami_dra_values(tenant: TenantConfig, fake_driver_image: str) -> dict[str, Any]:
    """The chart's values: its fake plugin on, under the real driver's names, with the tenant's
    inventory; the real NVIDIA plugin off; cert-manager (in the tenant) serves the webhook."""
    repository, _, tag = fake_driver_image.rpartition(":")
    registry, _, path = repository.partition("/")
    return {
        "drivers": {
            "nvidia": {"enabled": False},
            "fake": {
                "enabled": True,
                "driverName": DRIVER,
                "deviceClassName": DEVICE_CLASS,
                "image": {"registry": registry, "repository": path, "tag": tag},
                "configMap": {
                    "inlineData": yaml.safe_dump(
                        fake_driver_config(tenant.cards, tenant.worker_names), sort_keys=False
                    )
                },
            },
        },
        "webhook": {
            "config": {
                "scope": {
                    "enabled": True,
                    "excludeReleaseNamespace": True,
                    "excludedNamespaces": WEBHOOK_EXCLUDED_NAMESPACES,
                }
            }
        },
        "certs": {"certManager": {"enabled": True}},
    }
