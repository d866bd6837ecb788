"""Pods a worker's leave script drains: what the program's listing says of each, and where
each ends up.

Two pods on the leaving worker, both with the annotation HAMi's scheduler writes on a pod it
placed on a card (`hami.io/vgpu-devices-allocated`, HAMi's format: card UUID, vendor, MiB,
cores, `:` per device, `;` per container): a Deployment's (its ReplicaSet re-creates it
elsewhere) and a bare pod (nothing re-creates it; `kubectl drain --force` deletes it). The
tier runs no HAMi scheduler, so they request no nvidia.com/gpu and carry the annotation as
written here: what the listing reads is the annotation, not how it got there.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tenant_lab import POD_TIMEOUT_SECONDS, TenantLab, pod_manifest, wait_pod

HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
SHARE = "GPU-6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b,NVIDIA,4000,25:;"
SLEEP = ["python", "-c", "import time; time.sleep(86400)"]


def deployment(name: str, image: str) -> dict[str, Any]:
    template = pod_manifest(name, "", image, SLEEP)
    spec = {key: value for key, value in template["spec"].items() if key != "nodeName"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {HAMI_ALLOCATED: SHARE}},
                "spec": {**spec, "restartPolicy": "Always", "terminationGracePeriodSeconds": 1},
            },
        },
    }


def bare_pod(name: str, node: str, image: str) -> dict[str, Any]:
    pod = pod_manifest(name, node, image, SLEEP)
    pod["metadata"]["annotations"] = {HAMI_ALLOCATED: SHARE}
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


@dataclass
class Placed:
    """The two pods on the leaving worker, as they were before the leave."""

    tenant: str
    node: str
    deployment: str
    deployment_pod: dict[str, Any]
    bare: str

    @property
    def deployment_pod_name(self) -> str:
        return self.deployment_pod["metadata"]["name"]

    def listing_lines(self) -> list[str]:
        """The leave script's lines for the two pods (builders/scripts.py LEAVING_PODS_TEMPLATE)."""
        return [
            f"  default/{self.deployment_pod_name}: its ReplicaSet re-creates it; "
            f"GPU slices {SHARE}",
            f"  default/{self.bare}: no controller owns it, it is not re-created; "
            f"GPU slices {SHARE}",
        ]


def app_pods(lab: TenantLab, tenant: str, app: str) -> list[dict[str, Any]]:
    return lab.get(tenant, "pods", "-n", "default", "-l", f"app={app}")["items"]


def place(lab: TenantLab, tenant: str, node: str, others: list[str], prefix: str) -> Placed:
    """The Deployment (its pod on `node`: the `others` cordoned while it is placed) and the
    bare pod, both Running on `node`."""
    name, bare = f"{prefix}-gpu-app", f"{prefix}-gpu-bare"
    for other in others:
        lab.kubectl(tenant, "cordon", other)
    try:
        lab.kubectl_apply(tenant, json.dumps(deployment(name, lab.agent_image)))
        pod = wait_running(lab, tenant, name, node)
    finally:
        for other in others:
            lab.kubectl(tenant, "uncordon", other)
    lab.kubectl_apply(tenant, json.dumps(bare_pod(bare, node, lab.agent_image)))
    found = wait_pod(lab, tenant, bare, ("Running",))
    assert found["status"].get("phase") == "Running", found["status"]
    return Placed(tenant, node, name, pod, bare)


def wait_running(
    lab: TenantLab, tenant: str, app: str, node: str | None, not_uid: str = ""
) -> dict[str, Any]:
    """The Deployment's pod Running on `node` (on any node if None), another than the pod of
    UID `not_uid`."""
    deadline = time.monotonic() + POD_TIMEOUT_SECONDS
    while True:
        pods = [
            p
            for p in app_pods(lab, tenant, app)
            if node in (None, p["spec"].get("nodeName"))
            and p["metadata"]["uid"] != not_uid
            and p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        if pods:
            return pods[0]
        assert time.monotonic() < deadline, (
            f"{tenant}: no pod of {app} Running on {node} in {POD_TIMEOUT_SECONDS}s: "
            + lab.kubectl(tenant, "get", "pods", "-n", "default", "-o", "wide")
        )
        time.sleep(1)


def daemonset_pods(lab: TenantLab, tenant: str, node: str) -> list[str]:
    """namespace/name of the DaemonSet pods on `node`."""
    pods = lab.get(tenant, "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "DaemonSet"
    ]


def listed(stderr: str) -> list[str]:
    """The leave script's listing: the indented lines right after `draining ...; the pods it
    runs:` (kubectl drain's own output follows)."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("draining ")), None)
    assert start is not None, f"the leave script listed nothing (drained nothing?):\n{stderr}"
    found = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        found.append(line)
    return found


def remove(lab: TenantLab, placed: Placed) -> None:
    lab.kubectl(placed.tenant, "delete", "deployment", placed.deployment, "-n", "default",
                "--ignore-not-found", "--wait")  # fmt: skip
    lab.kubectl(placed.tenant, "delete", "pod", placed.bare, "-n", "default",
                "--ignore-not-found", "--wait")  # fmt: skip
