"""The thin boundary every check talks to, plus kubeconfig helpers.

Objects cross the boundary as plain JSON dicts exactly as the API server sends them
(camelCase keys), so fakes need no client models.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol

Obj = dict[str, Any]


class ClusterError(Exception):
    """An API call failed. status 0 means no HTTP answer (network, TLS, timeout)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def denied(self) -> bool:
        return self.status in (401, 403)


class Cluster(Protocol):
    """What labcheck needs from one API server with one set of credentials."""

    label: str

    def version(self) -> Obj: ...
    def get_raw(self, path: str, query: list[tuple[str, str]] | None = None) -> str: ...
    def list_nodes(self) -> list[Obj]: ...
    def get_node(self, name: str) -> Obj: ...
    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[Obj]: ...
    def get_pod(self, namespace: str, name: str) -> Obj: ...
    def create_pod(self, namespace: str, body: Obj, dry_run: bool = False) -> Obj: ...
    def delete_pod(self, namespace: str, name: str) -> None: ...
    def pod_logs(self, namespace: str, name: str) -> str: ...
    def exec_pod(self, namespace: str, name: str, command: list[str]) -> str: ...
    def port_forward(self, namespace: str, name: str, port: int, payload: bytes) -> bytes: ...
    def list_events(self, namespace: str, object_name: str) -> list[Obj]: ...
    def create_namespace(self, name: str, labels: dict[str, str]) -> Obj: ...
    def delete_namespace(self, name: str) -> None: ...
    def get_resource_quota(self, namespace: str, name: str) -> Obj: ...
    def list_endpoint_slices(self, namespace: str, service: str) -> list[Obj]: ...
    def list_workloads(self, namespace: str) -> list[Obj]: ...
    def get_config_map(self, namespace: str, name: str) -> Obj: ...
    def get_deployment(self, namespace: str, name: str) -> Obj: ...
    def get_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj: ...
    def list_custom(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[Obj]: ...
    def create_custom(
        self,
        group: str,
        version: str,
        plural: str,
        body: Obj,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj: ...
    def delete_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> None: ...


# Builds a Cluster from a kubeconfig dict; label names it in evidence.
ClusterFactory = Callable[[dict[str, Any], str], Cluster]


# Pod admission (ServiceAccount plugin) refuses a pod whose ServiceAccount does not exist yet,
# with 403 "error looking up service account <ns>/default: ..."; the controller manager creates
# `default` in each new namespace shortly after the namespace.
SERVICE_ACCOUNT_LOOKUP = "error looking up service account"
NO_SERVICE_ACCOUNT_CAUSE = (
    "the namespace has no default ServiceAccount yet, which pod admission requires: the "
    "tenant's kube-controller-manager (serviceaccount controller) is down or lagging"
)


def likely_cause(err: ClusterError) -> str:
    """Map an API failure to the lab component that most likely broke."""
    text = err.message.lower()
    if "no agent available" in text:
        return (
            "Konnectivity: no agent connected (konnectivity-agent DaemonSet in the tenant "
            "down, or port 8132 on the TCP LoadBalancer unreachable)"
        )
    if "context deadline exceeded" in text and "webhook" in text:
        return (
            "admission webhook unreachable through the Konnectivity tunnel "
            "(or kube-proxy on the workers broken)"
        )
    if SERVICE_ACCOUNT_LOOKUP in text:
        return NO_SERVICE_ACCOUNT_CAUSE
    if err.status == 0:
        return (
            "API server unreachable: MetalLB address not announced, TCP pod down, or "
            "wrong address in kubeconfig"
        )
    if err.status == 401:
        return "credentials rejected (kubeconfig from another control plane or rotated certs)"
    if err.status == 403:
        return "RBAC forbids the request for this user"
    if err.status == 404:
        return "object or API not found (CRD not installed or wrong namespace/name)"
    if err.status >= 500:
        return "API server or an aggregated/proxied backend failed"
    return "unexpected API error"


def _current(doc: dict[str, Any]) -> tuple[Obj, Obj, Obj]:
    """Return (context, cluster entry, user entry) of a kubeconfig's current context."""
    contexts = {c["name"]: c.get("context", {}) for c in doc.get("contexts", [])}
    name = doc.get("current-context") or next(iter(contexts), None)
    if name not in contexts:
        raise ValueError("kubeconfig has no usable current-context")
    ctx = contexts[name]
    clusters = {c["name"]: c for c in doc.get("clusters", [])}
    users = {u["name"]: u for u in doc.get("users", [])}
    if ctx.get("cluster") not in clusters or ctx.get("user") not in users:
        raise ValueError("kubeconfig context points at a missing cluster or user")
    return ctx, clusters[ctx["cluster"]], users[ctx["user"]]


def server_of(doc: dict[str, Any]) -> str:
    return str(_current(doc)[1].get("cluster", {}).get("server", ""))


def cross_kubeconfig(target: dict[str, Any], creds_from: dict[str, Any]) -> dict[str, Any]:
    """Kubeconfig that trusts and dials `target` but presents `creds_from`'s user.

    Using the target's own CA keeps TLS valid, so a refusal proves authentication or
    authorization failed rather than the handshake.
    """
    _, cluster, _ = _current(target)
    _, _, user = _current(creds_from)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": copy.deepcopy(cluster.get("cluster", {}))}],
        "users": [{"name": "foreign", "user": copy.deepcopy(user.get("user", {}))}],
        "contexts": [{"name": "cross", "context": {"cluster": "target", "user": "foreign"}}],
        "current-context": "cross",
    }
