"""Checks 1, 2 and part of 4: the management cluster and the TenantControlPlanes."""

from __future__ import annotations

import ipaddress

from ..cluster import ClusterError, Obj, likely_cause
from ..context import RunContext
from ..objects import run_labels
from ..result import CheckFailed
from ..spec import Tenant

KAMAJI = ("kamaji.clastix.io", "v1alpha1")
METALLB = ("metallb.io", "v1beta1")
CERT_MANAGER = ("cert-manager.io", "v1")
PROBE_POOL = "192.0.2.10-192.0.2.10"  # TEST-NET-1: never overlaps a real pool


def _not_ready(w: Obj) -> str:
    want = w.get("spec", {}).get("replicas", 1)
    have = w.get("status", {}).get("readyReplicas", 0) or 0
    if have < want:
        return f"{w.get('kind', '?')}/{w['metadata']['name']} {have}/{want} ready"
    return ""


def kamaji_ready(ctx: RunContext) -> str:
    m = ctx.spec.management
    cl = ctx.mgmt()
    workloads = cl.list_workloads(m.kamaji_namespace)
    if not any(
        "kamaji" in w["metadata"]["name"] and w.get("kind") == "Deployment" for w in workloads
    ):
        raise CheckFailed(
            f"a Kamaji controller Deployment in {m.kamaji_namespace}",
            f"workloads: {[w['metadata']['name'] for w in workloads] or 'none'}",
            "Kamaji chart not installed or installed in another namespace",
        )
    bad = [s for s in (_not_ready(w) for w in workloads) if s]
    if bad:
        raise CheckFailed(
            "all Kamaji workloads ready",
            "; ".join(bad),
            "controller or datastore (kamaji-etcd) pods not ready; check "
            "their events (PVC pending, OOM, image pull)",
        )
    try:
        ds = cl.get_custom(*KAMAJI, "datastores", m.datastore)
    except ClusterError as exc:
        raise CheckFailed(
            f"DataStore/{m.datastore}",
            str(exc),
            "kamaji-etcd.deploy=false and no DataStore created, or wrong defaultDatastoreName",
        ) from None
    driver = ds.get("spec", {}).get("driver", "?")
    return f"{len(workloads)} workload(s) ready; DataStore/{m.datastore} driver {driver}"


def webhooks_serving(ctx: RunContext) -> str:
    """Dry-run creates pass through the validating webhooks but persist nothing."""
    cl = ctx.mgmt()
    name = f"labcheck-{ctx.run_id}-probe"
    meta = {"name": name, "labels": run_labels(ctx.run_id, "mgmt.webhooks")}
    issuer = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "ClusterIssuer",
        "metadata": meta,
        "spec": {"selfSigned": {}},
    }
    try:
        cl.create_custom(*CERT_MANAGER, "clusterissuers", issuer, dry_run=True)
    except ClusterError as exc:
        raise CheckFailed(
            "cert-manager webhook admits a dry-run ClusterIssuer",
            str(exc),
            "cert-manager webhook not serving (pod not ready or its CA injection incomplete)",
        ) from None
    pools = cl.list_custom(*METALLB, "ipaddresspools")
    if not pools:
        raise CheckFailed(
            "at least one MetalLB IPAddressPool",
            "none",
            "MetalLB pool never created (webhook race at install?)",
        )
    ns = pools[0]["metadata"]["namespace"]
    pool = {
        "apiVersion": "metallb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": meta,
        "spec": {"addresses": [PROBE_POOL], "autoAssign": False},
    }
    try:
        cl.create_custom(*METALLB, "ipaddresspools", pool, namespace=ns, dry_run=True)
    except ClusterError as exc:
        raise CheckFailed(
            "MetalLB webhook admits a dry-run IPAddressPool",
            str(exc),
            "MetalLB controller webhook not serving",
        ) from None
    return f"cert-manager and MetalLB ({ns}) webhooks admitted dry-run objects"


def _in_pools(address: str, pools: list[Obj]) -> bool:
    ip = ipaddress.ip_address(address)
    for p in pools:
        for entry in p.get("spec", {}).get("addresses") or []:
            if "-" in entry:
                lo, hi = (ipaddress.ip_address(x.strip()) for x in entry.split("-", 1))
                if lo <= ip <= hi:
                    return True
            elif ip in ipaddress.ip_network(entry, strict=False):
                return True
    return False


def tcp_ready(ctx: RunContext, t: Tenant) -> str:
    cl = ctx.mgmt()
    try:
        tcp = cl.get_custom(*KAMAJI, "tenantcontrolplanes", t.name, namespace=t.namespace)
    except ClusterError as exc:
        raise CheckFailed(
            f"TenantControlPlane {t.namespace}/{t.name}", str(exc), likely_cause(exc)
        ) from None
    status = tcp.get("status", {})
    state = status.get("kubernetesResources", {}).get("version", {}).get("status", "")
    if state != "Ready":
        raise CheckFailed(
            "status.kubernetesResources.version.status Ready",
            state or "no status",
            "TCP still provisioning or its pods crash; "
            f"see `kubectl -n {t.namespace} describe tcp {t.name}`",
        )
    endpoint = status.get("controlPlaneEndpoint", "")
    if endpoint != t.endpoint:
        raise CheckFailed(
            f"controlPlaneEndpoint {t.endpoint}",
            endpoint or "empty",
            "LoadBalancer got another IP: metallb.io/loadBalancerIPs annotation "
            "missing or the address is outside the pool",
        )
    pools = cl.list_custom(*METALLB, "ipaddresspools")
    if pools and not _in_pools(t.address, pools):
        raise CheckFailed(
            f"{t.address} inside a MetalLB IPAddressPool",
            "address outside every pool",
            "pool and pinned addresses configured inconsistently",
        )
    version = tcp.get("spec", {}).get("kubernetes", {}).get("version", "?")
    return f"Ready {version} at {endpoint}"


def tcp_distinct(ctx: RunContext) -> str:
    cl = ctx.mgmt()
    seen: dict[str, str] = {}
    for t in ctx.spec.tenants:
        tcp = cl.get_custom(*KAMAJI, "tenantcontrolplanes", t.name, namespace=t.namespace)
        ep = tcp.get("status", {}).get("controlPlaneEndpoint", "")
        host = ep.rsplit(":", 1)[0]
        if host in seen:
            raise CheckFailed(
                "one distinct endpoint per tenant",
                f"{t.name} and {seen[host]} share {host}",
                "two TCPs pinned to the same MetalLB address",
            )
        seen[host] = t.name
    return ", ".join(f"{n}={h}" for h, n in seen.items())


def management_has_no_workers(ctx: RunContext) -> str:
    mgmt_nodes = {n["metadata"]["name"] for n in ctx.mgmt().list_nodes()}
    workers = {n for t in ctx.spec.tenants for n in t.nodes}
    leaked = sorted(mgmt_nodes & workers)
    if leaked:
        raise CheckFailed(
            "no tenant worker registered in the management cluster",
            f"management has {leaked}",
            "worker joined with the management kubeconfig/join command",
        )
    return f"management nodes: {sorted(mgmt_nodes)}"
