"""The simulated-GPU agent's objects: its own files and config as ConfigMaps, least-privilege
RBAC, and the Deployment that runs them (gpu_agent ships as data, not as an image)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import gpu_agent
from builders.admission_policy import cel_string, mutating_policy, policy_api_version
from gpu_agent.hami import REGISTER_ANNOTATION, register_value
from labconfig.model import TenantConfig
from planning.footprint import GPU_AGENT_RESOURCES
from planning.gpu_inventory import node_inventory

NAMESPACE = "kube-system"
NAME = "hami-simulated-gpu-agent"
CODE_MOUNT = "/opt/agent/gpu_agent"
CONFIG_MOUNT = "/etc/gpu-agent"
AGENT_DIR = Path(gpu_agent.__file__).resolve().parent
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "kamaji-hami-lab"}


def agent_config(tenant: TenantConfig, split_count: int) -> dict[str, Any]:
    """Every worker of the tenant carries the tenant's configured cards."""
    return {
        "splitCount": split_count,
        "resyncSeconds": 2,
        "nodes": node_inventory(tenant.cards, tenant.worker_names),
    }


@functools.cache  # the same files for every tenant: read them once per program run
def _read_agent_files() -> tuple[tuple[str, str], ...]:
    return tuple((name, (AGENT_DIR / name).read_text()) for name in gpu_agent.RUNTIME_FILES)


def agent_source_files() -> dict[str, str]:
    return dict(_read_agent_files())


def _metadata(name: str = NAME) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "labels": LABELS}


def agent_manifests(config: dict[str, Any], image: str) -> dict[str, dict[str, Any]]:
    """ServiceAccount, least-privilege ClusterRole and binding, code and config, Deployment."""
    code = agent_source_files()
    config_json = json.dumps(config, sort_keys=True, indent=2)
    # A change of code or config rolls the pod; the ConfigMaps alone would not.
    checksum = hashlib.sha256(json.dumps([code, config_json], sort_keys=True).encode()).hexdigest()
    return {
        "service_account": {"metadata": _metadata()},
        "cluster_role": {
            "metadata": {"name": NAME, "labels": LABELS},
            "rules": gpu_agent.required_rbac_rules(),
        },
        "cluster_role_binding": {
            "metadata": {"name": NAME, "labels": LABELS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": NAME,
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        "code": {"metadata": _metadata(f"{NAME}-code"), "data": code},
        "config": {"metadata": _metadata(f"{NAME}-config"), "data": {"config.json": config_json}},
        "deployment": {
            "metadata": _metadata(),
            "spec": {
                "replicas": 1,
                # Never two agents at once: both would finish the same allocations.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                "template": {
                    "metadata": {"labels": LABELS, "annotations": {"checksum/agent": checksum}},
                    "spec": _pod_spec(image),
                },
            },
        },
    }


def _pod_spec(image: str) -> dict[str, Any]:
    return {
        "serviceAccountName": NAME,
        "priorityClassName": "system-cluster-critical",
        "containers": [
            {
                "name": "agent",
                "image": image,
                "command": ["python", "-m", "gpu_agent"],
                "workingDir": str(Path(CODE_MOUNT).parent),
                "env": [
                    {"name": "GPU_AGENT_CONFIG_FILE", "value": f"{CONFIG_MOUNT}/config.json"},
                    {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                    {"name": "PYTHONUNBUFFERED", "value": "1"},
                ],
                "resources": GPU_AGENT_RESOURCES,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [
                    {"name": "code", "mountPath": CODE_MOUNT, "readOnly": True},
                    {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                ],
            }
        ],
        "volumes": [
            {"name": "code", "configMap": {"name": f"{NAME}-code"}},
            {"name": "config", "configMap": {"name": f"{NAME}-config"}},
        ],
    }


REGISTRATION_POLICY = "hami-simulated-gpus-registered-at-join"


def registrations(tenant: TenantConfig, split_count: int) -> dict[str, str]:
    """Per node, the registration annotation exactly as the agent writes it."""
    config = gpu_agent.parse_config(agent_config(tenant, split_count))
    return {node: register_value(node, cards) for node, cards in config.nodes.items()}


def registration_policy_manifests(tenant: TenantConfig, split_count: int) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy that puts each simulated node's registration on its Node when
    the kubelet creates it (a worker's join or re-join), or nothing where the tenant's version
    has no policy API the program switches on.

    HAMi reads registrations when a Node is added and on a 15 s tick, never on an update
    (fact `hami-registration-read-on-tick`): registered by the agent moments after the add, a
    re-joined node stayed unknown to HAMi for up to 15 s, and a GPU pod met `node unregistered`.
    Registered in the add itself, HAMi knows the cards at once. The agent still owns the
    annotation: it writes the same value (gpu_agent/hami.py `register_value`), puts it back if
    it goes, and a pod rejected anyway is still requeued (docs/gpu-agent.md)."""
    api_version = policy_api_version(tenant)
    values = registrations(tenant, split_count) if api_version else {}
    if not values:
        return []
    nodes = "[" + ", ".join(cel_string(node) for node in values) + "]"
    table = "{" + ", ".join(f"{cel_string(n)}: {cel_string(v)}" for n, v in values.items()) + "}"
    annotations = "object.metadata.annotations"
    return mutating_policy(
        api_version,
        REGISTRATION_POLICY,
        "nodes",
        {
            "a-simulated-gpu-node": f"object.metadata.name in {nodes}",
            "not-registered-yet": (
                f"!has({annotations}) || !('{REGISTER_ANNOTATION}' in {annotations})"
            ),
        },
        "Object{metadata: Object.metadata{annotations: "
        f'{{"{REGISTER_ANNOTATION}": {table}[object.metadata.name]}}}}}}',
    )
