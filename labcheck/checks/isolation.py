"""Check 10: credentials and GPU pods stay inside their tenant."""

from __future__ import annotations

from collections import Counter

from ..cluster import ClusterError, cross_kubeconfig
from ..context import RunContext
from ..hami import ANN_NODE
from ..result import CheckFailed, CheckSkipped, Evidence
from ..spec import Tenant

# Reads that any admin could do; a foreign user must get 401/403 on every one.
PROBE_PATHS = (
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/secrets",
    "/api/v1/pods",
    "/apis/apps/v1/deployments",
)


# What a refusal says about the target: 401 = it does not know the credentials (separate CAs
# and tokens, as Kamaji gives every tenant); 403 = it authenticated them as one of its own
# identities and only RBAC stands between them and the reads (a shared CA or token).
REFUSAL_MEANING = {
    401: "credentials unknown there",
    403: "credentials authenticated there, RBAC denies the reads",
}


def _refused(ctx: RunContext, target: dict, creds: dict, label: str) -> tuple[list[str], str]:
    """Return the paths the foreign credentials could read (empty = isolated) and how the
    refusals answered, e.g. '401 x5 (credentials unknown there)'."""
    cl = ctx.factory(cross_kubeconfig(target, creds), label)
    leaks, inconclusive, codes = [], [], Counter()
    for path in PROBE_PATHS:
        try:
            cl.get_raw(path)
            leaks.append(path)
        except ClusterError as exc:
            if not exc.denied:
                inconclusive.append(f"{path}: {exc}")
            codes[exc.status] += 1
    if inconclusive:
        # Not reaching the server proves nothing: fail rather than pass silently.
        raise CheckFailed(
            f"{label}: HTTP 401/403 on every read",
            "; ".join(inconclusive),
            "target API unreachable, so isolation could not be tested",
        )
    answers = ", ".join(
        f"{code} x{n} ({REFUSAL_MEANING[code]})" for code, n in sorted(codes.items())
    )
    return leaks, f"{label}: {answers}"


def cross_tenant(ctx: RunContext) -> Evidence:
    tenants = ctx.spec.tenants
    if len(tenants) < 2:
        raise CheckSkipped("only one tenant configured")
    pairs = []
    for a in tenants:
        for b in tenants:
            if a is b:
                continue
            label = f"{a.name}-creds@{b.name}"
            leaks, answers = _refused(ctx, b.kubeconfig, a.kubeconfig, label)
            if leaks:
                raise CheckFailed(
                    f"{a.name} credentials refused by {b.name}",
                    f"{a.name} read {b.name} {leaks}",
                    _leak_cause(a, b, leaks),
                )
            pairs.append(answers)
    return Evidence(f"{len(pairs)} ordered pair(s): every read refused with 401/403", tuple(pairs))


def _leak_cause(a: Tenant, b: Tenant, leaks: list[str]) -> str:
    if len(leaks) == len(PROBE_PATHS):
        return "tenants share a CA or the same admin credentials"
    # Some reads refused (403): b knows the identity but grants it less than admin.
    return (
        f"{b.name} authenticates {a.name}'s credentials (a shared CA or token) and an RBAC "
        "binding there lets that identity read"
    )


def management_refused(ctx: RunContext, t: Tenant) -> Evidence:
    label = f"{t.name}-creds@management"
    leaks, answers = _refused(ctx, ctx.spec.management.kubeconfig, t.kubeconfig, label)
    if leaks:
        raise CheckFailed(
            f"{t.name} credentials refused by the management API",
            f"read {leaks}",
            "tenant kubeconfig carries management credentials",
        )
    return Evidence(
        f"management API refused {len(PROBE_PATHS)} reads with {t.name} credentials", (answers,)
    )


def gpu_placement(ctx: RunContext, t: Tenant) -> str:
    """All GPU pods seen in this tenant (ours and live ones) sit on its own nodes."""
    own = set(t.nodes)
    seen = list(ctx.placements.get(t.name, []))
    for p in ctx.tenant(t).list_pods():
        ann = p.get("metadata", {}).get("annotations") or {}
        if ANN_NODE in ann:
            seen.append((p["metadata"]["name"], ann[ANN_NODE], p["spec"].get("nodeName") or ""))
    if not seen:
        raise CheckSkipped("no GPU pod was placed in this tenant during the run")
    foreign = [(pod, hn, nn) for pod, hn, nn in seen if hn not in own or (nn and nn not in own)]
    if foreign:
        raise CheckFailed(
            f"GPU pods only on {sorted(own)}",
            f"{foreign[:3]}",
            "HAMi scheduler of this tenant sees another tenant's nodes "
            "(shared extender or wrong kubeconfig)",
        )
    return f"{len(seen)} GPU pod placement(s), all on {sorted(own)}"
