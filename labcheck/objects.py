"""Manifests for the test objects, and the tracker that guarantees their removal."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import CHECK_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RUN_ID_LABEL, dra
from .cluster import Cluster, ClusterError, Obj
from .hami import ANN_GPU_POLICY, ANN_NODE_POLICY, RES_CORES, RES_GPU, RES_MEM

HTTP_PORT = 8080


def run_labels(run_id: str, check: str = "") -> dict[str, str]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, RUN_ID_LABEL: run_id}
    if check:
        labels[CHECK_LABEL] = check.replace(".", "-")[:63]
    return labels


def _pod(
    name: str,
    labels: dict[str, str],
    container: Obj,
    node: str | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {
        "containers": [container],
        "restartPolicy": "Never",
        # Test pods die instantly so GPU accounting frees up between checks.
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    meta: Obj = {"name": name, "labels": dict(labels)}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def tools_pod(name: str, image: str, token: str, labels: dict[str, str]) -> Obj:
    """busybox that logs a token and serves it over HTTP (logs/exec/port-forward probes)."""
    script = (
        f"mkdir -p /www && echo {token} > /www/index.html && echo {token} && "
        f"exec httpd -f -p {HTTP_PORT} -h /www"
    )
    container = {
        "name": "tools",
        "image": image,
        "command": ["sh", "-c", script],
        "ports": [{"containerPort": HTTP_PORT}],
    }
    return _pod(name, labels, container)


def gpu_pod(
    name: str,
    image: str,
    labels: dict[str, str],
    *,
    mem_mb: int,
    cores: int = 0,
    gpus: int = 1,
    node: str | None = None,
    gpu_policy: str | None = None,
    node_policy: str | None = None,
    command: list[str] | None = None,
) -> Obj:
    limits = {RES_GPU: str(gpus), RES_MEM: str(mem_mb)}
    if cores:
        limits[RES_CORES] = str(cores)
    container: Obj = {"name": "gpu", "image": image, "resources": {"limits": limits}}
    if command:
        container["command"] = command
    ann = {}
    # Explicit per-pod policies: the check must not depend on cluster defaults.
    if gpu_policy:
        ann[ANN_GPU_POLICY] = gpu_policy
    if node_policy:
        ann[ANN_NODE_POLICY] = node_policy
    return _pod(name, labels, container, node, ann)


@dataclass
class Created:
    cluster: Cluster
    kind: str  # "pod" | "namespace" | "resourceclaim"
    name: str
    namespace: str = ""


@dataclass
class Tracker:
    """Everything this run created, deleted newest first by exact name only."""

    items: list[Created] = field(default_factory=list)

    def add(self, item: Created) -> None:
        self.items.append(item)

    def add_claim(self, cluster: Cluster, name: str, namespace: str) -> None:
        """A ResourceClaim HAMi-DRA's webhook made (or will make) for one of our pods: only a
        webhook on pod DELETE that fails open removes it (fact `hami-dra-claim-cleanup`), so
        the run deletes it too. Tracked once."""
        if not any(
            (i.kind, i.name, i.namespace) == ("resourceclaim", name, namespace) for i in self.items
        ):
            self.add(Created(cluster, "resourceclaim", name, namespace))

    def add_webhook_claims(self, cluster: Cluster, namespace: str, pod: Obj) -> None:
        """Before `pod` is created in a DRA tenant: the claims HAMi-DRA's webhook will make for
        it, by the names it gives them. It makes them while it admits the pod and keeps them if
        the API server then refuses the pod."""
        for name in dra.webhook_claim_names(namespace, pod):
            self.add_claim(cluster, name, namespace)

    def forget(self, item: Created) -> None:
        self.items = [i for i in self.items if i is not item]

    def cleanup(self) -> list[str]:
        """Delete everything still tracked; return error strings (empty = clean)."""
        errors = []
        for item in reversed(self.items):
            try:
                if item.kind == "pod":
                    item.cluster.delete_pod(item.namespace, item.name)
                elif item.kind == "resourceclaim":
                    item.cluster.delete_custom(
                        dra.GROUP, dra.VERSION, dra.CLAIMS, item.name, item.namespace
                    )
                else:
                    item.cluster.delete_namespace(item.name)
            except ClusterError as exc:
                if exc.status != 404:
                    where = f"{item.namespace}/" if item.namespace else ""
                    errors.append(f"{item.cluster.label}: {item.kind} {where}{item.name}: {exc}")
        self.items.clear()
        return errors
