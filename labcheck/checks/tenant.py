"""Checks 3 and 4: the tenant API answers and the right workers joined it."""

from __future__ import annotations

from ..cluster import ClusterError, Obj, likely_cause, server_of
from ..context import RunContext
from ..result import CheckFailed
from ..spec import Tenant


def api_reachable(ctx: RunContext, t: Tenant) -> str:
    cl = ctx.tenant(t)
    server = server_of(t.kubeconfig)
    if t.address not in server:
        raise CheckFailed(
            f"kubeconfig server on {t.endpoint}",
            server,
            "kubeconfig built from admin.svc (in-cluster name) instead of admin.conf",
        )
    try:
        version = cl.version()
        ready = cl.get_raw("/readyz").strip()
    except ClusterError as exc:
        raise CheckFailed(
            f"GET /version and /readyz on {server}", str(exc), likely_cause(exc)
        ) from None
    if ready != "ok":
        raise CheckFailed(
            "/readyz says ok",
            ready[:200],
            "an API server health check fails (datastore unreachable?); see /readyz?verbose",
        )
    return f"{version.get('gitVersion', '?')} at {server}, /readyz ok"


def _ready(node: Obj) -> str:
    for c in node.get("status", {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status", "Unknown")
    return "Unknown"


def workers_joined(ctx: RunContext, t: Tenant) -> str:
    nodes = {n["metadata"]["name"]: n for n in ctx.tenant(t).list_nodes()}
    missing = [n for n in t.nodes if n not in nodes]
    if missing:
        raise CheckFailed(
            f"nodes {t.nodes} joined",
            f"missing {missing}; present {sorted(nodes) or 'none'}",
            "kubeadm join failed (token RBAC not "
            "ready yet, inotify/conntrack host limits, or cgroup driver mismatch)",
        )
    extra = sorted(set(nodes) - set(t.nodes))
    if extra:
        raise CheckFailed(
            f"only {t.nodes}",
            f"also {extra}",
            "a worker joined the wrong tenant (join command from another TCP)",
        )
    not_ready = {n: _ready(nodes[n]) for n in t.nodes if _ready(nodes[n]) != "True"}
    if not_ready:
        raise CheckFailed(
            "all workers Ready",
            f"not Ready: {not_ready}",
            "no CNI (flannel) yet, or kubelet/kube-proxy crash-looping",
        )
    return f"{len(t.nodes)} node(s) Ready: {', '.join(t.nodes)}"
