"""A tenant's Kubernetes version, read at every place it lives: the stack's config (the spec),
the TenantControlPlane's spec and status on the management cluster, the API server's /version
and each node's kubelet. A control plane whose status stays behind its spec can still report
Ready (Kamaji keeps the last version it ran when its webhook refuses a new one), and a kubelet
on a fixed worker image drifts from the control plane with nothing else saying so.

The control plane's four must be equal; a kubelet may differ within the skew Kubernetes allows
(upstream fact `kubernetes-kubelet-skew`): never newer than the API server, at most three minor
versions older (two below v1.25). A skew it allows passes, said as such."""

from __future__ import annotations

import re

from ..cluster import ClusterError, likely_cause
from ..context import RunContext
from ..result import CheckFailed, CheckSkipped, Evidence
from ..spec import Tenant
from .management import KAMAJI

VERSION = re.compile(r"v(\d+)\.(\d+)\.(\d+)")
KUBELET_MAX_MINORS_OLDER = 3
KUBELET_MAX_MINORS_OLDER_BEFORE_1_25 = 2


def release(version: str) -> str:
    """`vX.Y.Z` of a version string (an API server may add build metadata: `v1.35.4+k3s1`)."""
    match = VERSION.match(version or "")
    return match.group(0) if match else version or "none"


def minor_of(version: str) -> tuple[int, int] | None:
    match = VERSION.match(version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def kubelet_skew(kubelet: str, api_server: str) -> str | None:
    """Why a kubelet of `kubelet` may not talk to an API server of `api_server` (None: it may)."""
    have, serve = minor_of(kubelet), minor_of(api_server)
    if have is None or serve is None:
        return f"kubelet {kubelet or 'none'} is no Kubernetes version"
    if have > serve:
        return f"kubelet {kubelet} is newer than the API server {api_server}"
    allowed = KUBELET_MAX_MINORS_OLDER if have >= (1, 25) else KUBELET_MAX_MINORS_OLDER_BEFORE_1_25
    behind = serve[1] - have[1] if have[0] == serve[0] else None
    if behind is None or behind > allowed:
        return f"kubelet {kubelet} is more than {allowed} minor versions older than {api_server}"
    return None


def versions_agree(ctx: RunContext, t: Tenant) -> Evidence:
    if t.kubernetes_version is None:
        raise CheckSkipped("the spec names no kubernetesVersion for this tenant")
    try:
        tcp = ctx.mgmt().get_custom(*KAMAJI, "tenantcontrolplanes", t.name, namespace=t.namespace)
        served = ctx.tenant(t).version().get("gitVersion", "")
        nodes = ctx.tenant(t).list_nodes()
    except ClusterError as exc:
        raise CheckFailed(
            "the TenantControlPlane, /version and the nodes readable", str(exc), likely_cause(exc)
        ) from None
    wanted = t.kubernetes_version
    tcp_spec = tcp.get("spec", {}).get("kubernetes", {}).get("version", "")
    tcp_status = (
        tcp.get("status", {}).get("kubernetesResources", {}).get("version", {}).get("version", "")
    )
    describe = f"kubectl -n {t.namespace} describe tenantcontrolplane {t.name}"
    places = (
        (
            "the TenantControlPlane's spec.kubernetes.version",
            tcp_spec,
            f"the stack's tenant says {wanted}: `pulumi up` sets it (or someone edited the "
            f"TenantControlPlane since: {describe})",
        ),
        (
            "its status.kubernetesResources.version.version",
            tcp_status,
            "Kamaji has not rolled the control plane to its spec: it is still upgrading, or "
            f"refused the version (its webhook and conditions: {describe})",
        ),
        (
            "the API server's /version",
            release(served),
            f"the control plane's pods run another version than Kamaji reports: {describe}",
        ),
    )
    for where, seen, fix in places:
        if seen != wanted:
            raise CheckFailed(f"{where} {wanted} (the stack's)", seen or "none", fix)
    lines = [f"stack, TenantControlPlane spec and status, /version: {wanted}"]
    skewed = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        kubelet = node.get("status", {}).get("nodeInfo", {}).get("kubeletVersion", "")
        if why := kubelet_skew(kubelet, served):
            raise CheckFailed(
                f"every kubelet within the skew Kubernetes allows of {release(served)}",
                f"{name}: {why}",
                "the worker's image carries another Kubernetes: give the tenant a workerImage "
                "of its version and re-create the worker (`pulumi up --replace` of its "
                "container)",
            )
        if release(kubelet) != release(served):
            skewed.append(name)
            lines.append(f"{name}: kubelet {kubelet}, within the skew Kubernetes allows")
        else:
            lines.append(f"{name}: kubelet {kubelet}")
    summary = f"{wanted} everywhere" if not skewed else f"{wanted}; {len(skewed)} kubelet(s) older"
    return Evidence(f"{summary} ({len(nodes)} node(s))", tuple(lines))
