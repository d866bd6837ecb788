"""The spec labcheck reads: what the lab is (tenants, nodes, GPUs, quotas) and how long to wait."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from builders.admission_policy import policy_api_version
from builders.control_plane import API_PORT
from builders.hami import QUOTA_NAME, QUOTA_NAMESPACE
from builders.lock_wait_policy import POD_GROUP_LABEL, POD_GROUP_VALUE
from builders.monitoring_values import NAMESPACE as MONITORING_NAMESPACE
from builders.monitoring_values import PROMETHEUS_SERVICE
from builders.prometheus_scrape import job_name
from builders.registry_mirrors import holds_credentials, registry_files
from builders.slice_rules import SLICE_CORES, SLICE_MEMORY, ledger_queries
from labconfig.addresses import NetworkPlan
from labconfig.model import LabConfig, kind_node_container

TOOLS_IMAGE = "busybox:1.37.0"
GPU_TEST_IMAGE = "registry.k8s.io/pause:3.10"

# How labcheck's node pod redacts a line of a registry file before one of its digests
# (labcheck/node_files.py, `sed -E` per line): from `Authorization` (any case) through the
# next `=`, the rest of the line becomes "<redacted>". Spelled case by case, as sed -E has it.
AUTHORIZATION_VALUE = re.compile(
    r"([Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn][^=\n]*=)[^\n]*"
)
REDACTED = '"<redacted>"'
# The modes install_files_script gives the files (builders/registry_mirrors.py).
PRIVATE_MODE, PUBLIC_MODE = "600", "644"


def redact(text: str) -> str:
    """The text with every Authorization header's value replaced, as labcheck's pod does."""
    return AUTHORIZATION_VALUE.sub(rf"\1 {REDACTED}", text)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def expected_registry_files(cfg: LabConfig) -> dict[str, Any] | None:
    """What labcheck finds in each node the program writes registry files into: each file's
    mode, size and digests (of the text, and of the text with credentials redacted; never the
    text), and those nodes with the Command that writes them. None without mirrors."""
    files = registry_files(cfg.registry_mirrors, cfg.mirror_auth())
    if not files:
        return None
    management = (
        {kind_node_container(cfg.management_cluster_name): "management-registry-mirrors"}
        if cfg.management_mode == "kind"
        else {}
    )
    return {
        "files": [
            {
                "path": path,
                "mode": PRIVATE_MODE if holds_credentials(text) else PUBLIC_MODE,
                "size": len(text.encode()),
                "sha256": _sha256(text),
                "redactedSha256": _sha256(redact(text)),
            }
            for path, text in sorted(files.items())
        ],
        "managementNodes": management,
        # Container workers only: a remote worker's containerd is its owner's to configure.
        "tenantNodes": {
            t.name: {node: f"{node}-registry-mirrors" for node in t.worker_names}
            for t in cfg.tenants
            if t.worker_mode == "container"
        },
    }


def monitoring_spec(cfg: LabConfig) -> dict[str, Any]:
    """Where the lab's Prometheus answers: its HTTP API through the management cluster's
    service proxy (no address or port-forward of its own), and how often it scrapes."""
    return {
        "prometheus": (
            f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services/http:{PROMETHEUS_SERVICE}:80/proxy"
        ),
        "scrapeInterval": cfg.monitoring.scrape_interval,
        "jobs": {t.name: job_name(t.name) for t in cfg.tenants},
        # The ledger's columns over Grafana's `$__range`: the host tools hold no PromQL.
        "ledger": ledger_queries(),
        "slices": {"memory": SLICE_MEMORY, "cores": SLICE_CORES},
    }


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
                "kubernetesVersion": t.kubernetes_version,
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
        **({"monitoring": monitoring_spec(cfg)} if cfg.monitoring.enabled else {}),
        # Only when set: a stack without mirrors keeps the spec it had.
        **(
            {
                "registryMirrors": {m.registry: m.mirror for m in cfg.registry_mirrors},
                "registryFiles": expected_registry_files(cfg),
            }
            if cfg.registry_mirrors
            else {}
        ),
    }
