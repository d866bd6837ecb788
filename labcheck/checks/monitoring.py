"""The lab's record over time is true: Prometheus scrapes every tenant, and what its series say
each card holds is what the tenant's own objects say, read the other way.

HAMi's scheduler counts a pod from the moment it chose the node (`hami.io/vgpu-node`) until the
pod ends or is deleted, with the slices of `hami.io/vgpu-devices-allocated` (upstream fact
hami-sched-metrics-per-container); HAMi-DRA's monitor counts each allocated claim for each pod it
is reserved for (hami-dra-monitor-exports-allocations). Prometheus's copy is at most one scrape
old, so a difference is read again after one scrape interval before it fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TypeVar

from ..cluster import ClusterError, Obj, likely_cause
from ..context import RunContext
from ..dra import CLAIMS, GROUP, SLICES, VERSION, cards, claim_slices
from ..hami import ANN_NODE, pod_slices
from ..prometheus import Prometheus, PrometheusError
from ..result import CheckFailed, CheckSkipped, Evidence
from ..spec import Monitoring, Tenant
from ..waiting import WaitTimeout, wait_for

ENDED = ("Succeeded", "Failed")
T = TypeVar("T")
# (namespace, pod, card) -> (MB, cores %)
Holdings = dict[tuple[str, str, str], tuple[int, int]]


def _monitoring(ctx: RunContext) -> Monitoring:
    if ctx.spec.monitoring is None:
        raise CheckSkipped("this stack has no Prometheus (monitoring.enabled is false)")
    return ctx.spec.monitoring


def _prometheus(ctx: RunContext, monitoring: Monitoring) -> Prometheus:
    return Prometheus(ctx.mgmt(), monitoring.prometheus)


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", duration))


def _settled(
    ctx: RunContext, interval: float, read: Callable[[], T], good: Callable[[T], bool]
) -> T:
    """`read()` until `good` holds of it, over two scrape intervals (Prometheus's copy is one
    scrape old at most); the last reading either way."""
    last: list[T] = []

    def probe() -> tuple[T | None, str]:
        last[:] = [read()]
        return (last[0] if good(last[0]) else None), "not yet"

    try:
        return wait_for(
            probe, what="settled", timeout=2 * interval, clock=ctx.clock, interval=interval
        )
    except WaitTimeout:
        return last[0]


def _target_error(ctx: RunContext, monitoring: Monitoring, job: str) -> str:
    """The last scrape error Prometheus keeps for the job's target."""
    try:
        answer = json.loads(ctx.mgmt().get_raw(f"{monitoring.prometheus}/api/v1/targets"))
    except (ClusterError, ValueError):
        return "its last error unread"
    for target in (answer.get("data") or {}).get("activeTargets") or []:
        if target.get("scrapePool") == job:
            return f"health {target.get('health')}: {target.get('lastError') or 'no error'}"
    return "no such target in Prometheus's configuration"


def targets_up(ctx: RunContext, t: Tenant) -> Evidence:
    monitoring = _monitoring(ctx)
    job = monitoring.jobs.get(t.name)
    if job is None:
        raise CheckFailed(f"a scrape job for {t.name}", "none in the spec", "run `pulumi up`")
    expr = f'up{{job="{job}"}}'
    prometheus = _prometheus(ctx, monitoring)
    interval = max(_seconds(monitoring.scrape_interval), 1.0)
    try:
        # A Prometheus installed moments ago has not scraped yet.
        samples = _settled(
            ctx, interval, lambda: prometheus.instant(expr), lambda s: bool(s) and s[0].value == 1
        )
        duration = prometheus.instant(f'scrape_duration_seconds{{job="{job}"}}')
    except (ClusterError, PrometheusError) as exc:
        cause = likely_cause(exc) if isinstance(exc, ClusterError) else ""
        raise CheckFailed("the lab's Prometheus answering", str(exc), cause) from None
    if not samples:
        raise CheckFailed(
            f"Prometheus scraping job {job}",
            "no such target after two scrape intervals",
            "Prometheus's configuration lacks the tenant: `pulumi up` installs it",
        )
    if samples[0].value != 1:
        raise CheckFailed(
            f"job {job} up (the tenant's HAMi metrics through its API server)",
            _target_error(ctx, monitoring, job),
            "401/403: the tenant's lab-metrics-reader token or Role (`pulumi up` restores "
            "them); 503: HAMi's scheduler has no ready leader pod behind its Service",
        )
    took = f"{duration[0].value * 1000:.0f} ms" if duration else "unknown"
    return Evidence(f"job {job} up, last scrape took {took}")


def _hami_holdings(pods: list[Obj]) -> Holdings:
    held: Holdings = {}
    for pod in pods:
        meta = pod.get("metadata", {})
        annotations = meta.get("annotations") or {}
        if ANN_NODE not in annotations or pod.get("status", {}).get("phase") in ENDED:
            continue
        for s in pod_slices(pod):
            key = (meta.get("namespace", ""), meta.get("name", ""), s.uuid)
            mem, cores = held.get(key, (0, 0))
            held[key] = (mem + s.mem_mb, cores + s.cores)
    return held


def _dra_holdings(claims: list[Obj], slices: list[Obj]) -> Holdings:
    known = cards(slices)
    held: Holdings = {}
    for claim in claims:
        namespace = claim.get("metadata", {}).get("namespace", "")
        users = (claim.get("status") or {}).get("reservedFor") or []
        for s in claim_slices(claim, known):
            for user in users:
                key = (namespace, user.get("name", ""), s.uuid)
                mem, cores = held.get(key, (0, 0))
                held[key] = (mem + s.mem_mb, cores + s.cores)
    return held


def _tenant_holdings(ctx: RunContext, t: Tenant) -> Holdings:
    cl = ctx.tenant(t)
    if t.gpu_sharing == "dra":
        return _dra_holdings(
            cl.list_custom(GROUP, VERSION, CLAIMS), cl.list_custom(GROUP, VERSION, SLICES)
        )
    return _hami_holdings(cl.list_pods())


def _recorded(prometheus: Prometheus, monitoring: Monitoring, tenant: str) -> Holdings:
    by = "namespace, pod, card"
    found: dict[tuple[str, str, str], list[int]] = {}
    for index, series in enumerate((monitoring.slices["memory"], monitoring.slices["cores"])):
        for sample in prometheus.instant(f'sum by ({by}) ({series}{{tenant="{tenant}"}})'):
            labels = sample.labels
            key = (labels.get("namespace", ""), labels.get("pod", ""), labels.get("card", ""))
            found.setdefault(key, [0, 0])[index] = round(sample.value)
    return {key: (mem, cores) for key, (mem, cores) in found.items()}


def _differences(objects: Holdings, metrics: Holdings) -> list[str]:
    lines = []
    for key in sorted(set(objects) | set(metrics)):
        namespace, pod, card = key
        have, say = objects.get(key), metrics.get(key)
        if have != say:
            seen = f"{say[0]} MB {say[1]} %" if say else "nothing"
            held = f"{have[0]} MB {have[1]} %" if have else "nothing"
            lines.append(f"{namespace}/{pod} on {card}: the objects say {held}, Prometheus {seen}")
    return lines


def metrics_match_objects(ctx: RunContext, t: Tenant) -> Evidence:
    monitoring = _monitoring(ctx)
    prometheus = _prometheus(ctx, monitoring)
    interval = max(_seconds(monitoring.scrape_interval), 1.0)
    what = "pods' HAMi annotations" if t.gpu_sharing != "dra" else "allocated claims"

    def read() -> tuple[Holdings, list[str]]:
        objects = _tenant_holdings(ctx, t)
        return objects, _differences(objects, _recorded(prometheus, monitoring, t.name))

    try:
        # At most one scrape behind: a difference must outlive two intervals to count.
        objects, differences = _settled(ctx, interval, read, lambda seen: not seen[1])
    except (ClusterError, PrometheusError) as exc:
        cause = likely_cause(exc) if isinstance(exc, ClusterError) else ""
        raise CheckFailed(f"the {what} and Prometheus readable", str(exc), cause) from None
    if differences:
        raise CheckFailed(
            f"Prometheus's slices equal to the {what}",
            f"{len(differences)} difference(s) over two scrape intervals",
            "; ".join(differences[:5]),
        )
    memory = sum(mem for mem, _ in objects.values())
    return Evidence(
        f"{len(objects)} slice(s), {memory} MB: the same in Prometheus and the {what}",
        tuple(f"{ns}/{pod} on {card}: {m} MB {c} %" for (ns, pod, card), (m, c) in objects.items()),
    )
