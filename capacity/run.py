"""The capacity run: create the mix's pods in their tenants, let HAMi (or, in a DRA tenant,
kube-scheduler with HAMi-DRA's claims) place them, read what it did, and always remove what the
run created (also on failure and on Ctrl-C)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from labcheck import dra
from labcheck.cluster import Cluster, ClusterError, ClusterFactory, Obj
from labcheck.context import default_service_account_probe
from labcheck.hami import Slice
from labcheck.objects import Created, Tracker
from labcheck.placement import TenantMap
from labcheck.runner import Interrupted, SignalGuard
from labcheck.spec import Spec, lock_burst_budget
from labcheck.waiting import Clock, wait_for

from .hours import HoursReport, card_infos, holdings, slice_hours
from .mix import Mix, MixError, check_tenants
from .plan import CONTAINER, PlannedPod, namespace_name, plan_pods, pod_manifest, run_labels
from .views import RegisteredCard, SharingView, read_slices, read_view

PLACED, UNFIT, REFUSED, PENDING = "placed", "did not fit", "refused", "pending"
# What the API server's RBAC authorizer says when it refuses a request (fact
# `kube-rbac-forbidden-message`): a missing permission, not a verdict on the pod.
RBAC_REFUSAL = " cannot create resource "
NODES_NEEDED = (
    "the run reads the cards HAMi registered on the nodes, so it needs `list nodes` "
    "(cluster-scoped: a ClusterRole; see docs/capacity.md, 'As a tenant user')"
)
SLICES_NEEDED = (
    "in a DRA tenant the run reads the cards from the driver's ResourceSlices, so it also "
    "needs `list resourceslices` (resource.k8s.io, cluster-scoped; docs/capacity.md)"
)


@dataclass
class PodResult:
    planned: PlannedPod
    namespace: str
    state: str = PENDING
    reason: str = ""  # HAMi's (or the API server's) words when not placed
    node: str = ""
    slices: list[Slice] = field(default_factory=list)
    settled_after: float | None = None  # seconds from the first create to placed / judged

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.planned.name}"


@dataclass
class CapacityResult:
    stack: str
    run_id: str
    mix: Mix
    pods: list[PodResult] = field(default_factory=list)
    maps: dict[str, TenantMap] = field(default_factory=dict)
    hours: HoursReport | None = None
    placement_seconds: float = 0.0  # first create to the last pod placed or judged
    interrupted: int | None = None
    cleanup_errors: list[str] = field(default_factory=list)
    cleaned: int = 0
    namespace: str = ""  # where the run's pods were created
    own_namespace: bool = True  # created (and deleted) by the run; False with --namespace
    notes: list[str] = field(default_factory=list)
    modes: dict[str, str] = field(default_factory=dict)  # tenant -> gpuSharing (hami, dra)

    def count(self, *states: str) -> int:
        return sum(p.state in states for p in self.pods)

    def cards_used(self) -> list[str]:
        return sorted({s.uuid for p in self.pods if p.state == PLACED for s in p.slices})

    def of_tenant(self, tenant: str) -> list[PodResult]:
        return [p for p in self.pods if p.planned.tenant == tenant]

    def verdict(self) -> str:
        placed, unfit = self.count(PLACED), self.count(UNFIT, REFUSED)
        line = (
            f"{placed} pods on {len(self.cards_used())} cards; whole GPUs would need "
            f"{self.mix.whole_gpus()}; {unfit} did not fit"
        )
        pending = self.count(PENDING)
        return line + (f"; {pending} still pending" if pending else "")


class Progress(Protocol):
    def update(self, result: CapacityResult, elapsed: float) -> None: ...


class _NoProgress:
    def update(self, result: CapacityResult, elapsed: float) -> None:
        pass


@dataclass
class RunSettings:
    timeout: float | None = None  # None: labcheck's burst budget, 5 s per pod (>= 60 s)
    poll_seconds: float = 0.25  # placement times are read at this step
    wall: Callable[[], float] = time.time  # Unix time, for HAMi's bind-time stamps
    # An existing namespace to create the pods in (neither created nor deleted by the run): a
    # tenant user who may not create namespaces (cluster-scoped) can still run a mix.
    namespace: str | None = None


def _await_service_account(cl: Cluster, ns: str, clock: Clock, timeout: float) -> None:
    """Pod admission refuses pods until the namespace's default ServiceAccount exists."""
    probe = default_service_account_probe(cl, ns)
    wait_for(probe, what=f"ServiceAccount {ns}/default", timeout=timeout, clock=clock)


def check_claim_names(mix: Mix, planned: list[PlannedPod], ns: str, modes: dict[str, str]) -> None:
    """In a DRA tenant HAMi-DRA 0.2.x names each pod's claim `<namespace>-<pod>-<container>`
    and the API server refuses a pod whose claim name is longer than 63 characters, after the
    webhook made the claim (fact `hami-dra-webhook-claim`). The run's own namespace leaves room
    for every entry name; a long --namespace may not: such a mix is refused before anything is
    created, with the limit named."""
    longest: dict[str, PlannedPod] = {}  # per entry, its DRA pod with the longest name
    for p in planned:
        if modes[p.tenant] == "dra" and len(p.name) >= len(longest.get(p.entry, p).name):
            longest[p.entry] = p
    lines = []
    for entry, p in longest.items():
        claim = dra.webhook_claim_name(ns, p.name, CONTAINER)
        over = len(claim) - dra.CLAIM_NAME_LIMIT
        if over <= 0:
            continue
        fix = "a shorter --namespace"
        if len(entry) > over:
            fix = f"an entry name of at most {len(entry) - over} characters or " + fix
        lines.append(
            f"  entry {entry}: in DRA tenant {p.tenant} HAMi-DRA names each pod's claim "
            f"<namespace>-<pod>-{CONTAINER}, which the API server allows at most "
            f"{dra.CLAIM_NAME_LIMIT} characters: pod {p.name} in namespace {ns} gives "
            f"{len(claim)}; use {fix}"
        )
    if lines:
        raise MixError("the mix's claim names are too long:\n" + "\n".join(lines))


def _read_nodes(tenant: str, cl: Cluster, mode: str) -> None:
    """Before anything is created: the run cannot report without the nodes (and a DRA
    tenant's slices), so a user who may not read them learns it at once, with the permission
    named."""
    reads: list[tuple[str, Callable[[], object]]] = [(NODES_NEEDED, cl.list_nodes)]
    if mode == "dra":
        reads.append((SLICES_NEEDED, lambda: read_slices(cl)))
    for needed, read in reads:
        try:
            read()
        except ClusterError as exc:
            if exc.status != 403:
                raise
            raise ClusterError(403, f"{tenant}: {needed}; {exc.message}") from None


def _create_namespace(tenant: str, cl: Cluster, ns: str, run_id: str) -> None:
    try:
        cl.create_namespace(ns, run_labels(run_id))
    except ClusterError as exc:
        if exc.status != 403:
            raise
        raise ClusterError(
            403,
            f"{tenant}: {exc.message}; a user who may not create namespaces can run the "
            "mix in a namespace it owns: --namespace NS",
        ) from None


def _observe(
    result: CapacityResult, pods: dict[str, Obj], tenant: str, elapsed: float, view: SharingView
) -> None:
    for rec in result.pods:
        if rec.planned.tenant != tenant or rec.state != PENDING:
            continue
        pod = pods.get(rec.planned.name)
        if pod is None:
            continue
        if view.placed(pod):
            rec.state, rec.settled_after = PLACED, elapsed
            rec.node = pod["spec"]["nodeName"]
            rec.slices = view.slices(pod)
        elif message := view.unfit(pod):
            rec.state, rec.reason, rec.settled_after = UNFIT, message, elapsed
        else:
            rec.reason = view.waiting(pod)


def run_capacity(
    spec: Spec,
    mix: Mix,
    *,
    factory: ClusterFactory,
    clock: Clock,
    run_id: str,
    progress: Progress | None = None,
    guard: SignalGuard | None = None,
    settings: RunSettings | None = None,
) -> CapacityResult:
    check_tenants(mix, spec)
    settings = settings or RunSettings()
    progress = progress or _NoProgress()
    timeout = settings.timeout or lock_burst_budget(mix.pod_count())
    entries = {e.name: e for e in mix.entries}
    own = settings.namespace is None
    ns = settings.namespace or namespace_name(run_id)
    result = CapacityResult(spec.stack, run_id, mix, namespace=ns, own_namespace=own)
    tracker = Tracker()
    modes = result.modes = {t: spec.tenant(t).gpu_sharing for t in mix.tenants}
    planned_pods = plan_pods(mix, run_id, shared=not own)
    check_claim_names(mix, planned_pods, ns, modes)
    clusters = {t: factory(spec.tenant(t).kubeconfig, t) for t in mix.tenants}
    try:
        for tenant, cl in clusters.items():
            _read_nodes(tenant, cl, modes[tenant])
        for tenant, cl in clusters.items() if own else ():
            _create_namespace(tenant, cl, ns, run_id)
            tracker.add(Created(cl, "namespace", ns))
        for cl in clusters.values() if own else ():
            _await_service_account(cl, ns, clock, spec.timeouts.api_seconds)
        starts: dict[str, float] = {}  # each tenant's first create: its pods' time zero
        for planned in planned_pods:
            starts.setdefault(planned.tenant, clock.now())
            rec = PodResult(planned, ns)
            result.pods.append(rec)
            cl = clusters[planned.tenant]
            body = pod_manifest(entries[planned.entry], planned.name, run_id, spec.test_image)
            if modes[planned.tenant] == "dra":  # deleted after the pod, whatever came of it
                tracker.add_webhook_claims(cl, ns, body)
            # Tracked before it is asked for: a Ctrl-C after the API server created the pod but
            # before the answer arrived must not leave it (cleanup takes a 404 as done).
            item = Created(cl, "pod", planned.name, ns)
            tracker.add(item)
            try:
                cl.create_pod(ns, body)
            except ClusterError as exc:
                # An admission refusal (HAMi's webhook, a quota) is a verdict on the pod; RBAC's
                # or any other failure is not.
                if exc.status != 403 or RBAC_REFUSAL in exc.message:
                    raise
                tracker.forget(item)
                rec.state, rec.reason, rec.settled_after = REFUSED, exc.message, 0.0
        waiting = Waiting(
            clusters, modes, ns, clock, starts, timeout, settings.poll_seconds, tracker
        )
        _wait_placed(result, waiting, progress)
        _explain(result, clusters, ns)
        _snapshot(result, clusters, modes, settings.wall())
    except Interrupted as exc:
        result.interrupted = exc.signum
    except ClusterError as exc:
        # The run fails with this error; a cleanup that fails too must be in its message.
        _clean(result, tracker, guard)
        if result.cleanup_errors:
            failed = cleanup_failure(result)
            raise ClusterError(exc.status, f"{exc.message}; cleanup {failed}") from exc
        raise
    finally:
        _clean(result, tracker, guard)
    return result


def _clean(result: CapacityResult, tracker: Tracker, guard: SignalGuard | None) -> None:
    if guard:
        guard.cleaning = True
    result.cleaned += len(tracker.items)
    result.cleanup_errors += tracker.cleanup()  # empties the tracker: a second call does nothing


def cleanup_failure(result: CapacityResult) -> str:
    """What a failed cleanup left, and the command that removes it."""
    what = "ns" if result.own_namespace else f"pods -n {result.namespace}"
    return (
        "FAILED: " + "; ".join(result.cleanup_errors) + " (delete by hand: kubectl "
        f"delete {what} -l capacity.lab/run-id={result.run_id})"
    )


@dataclass
class Waiting:
    """What the wait for placement polls: each tenant's API server and GPU-sharing mode."""

    clusters: dict[str, Cluster]
    modes: dict[str, str]
    namespace: str
    clock: Clock
    starts: dict[str, float]  # each tenant's first create
    timeout: float
    poll: float
    tracker: Tracker

    def track_claims(self, tenant: str, pods: dict[str, Obj]) -> None:
        """The claims the run's pods name as admitted, deleted by the run with them: those
        tracked before each create, and any a later HAMi-DRA names otherwise (with a suffix,
        shortened)."""
        for pod in pods.values():
            for name in dra.claim_names(pod):
                self.tracker.add_claim(self.clusters[tenant], name, self.namespace)


def _wait_placed(result: CapacityResult, w: Waiting, progress: Progress) -> None:
    first = min(w.starts.values(), default=w.clock.now())
    while True:
        for tenant, cl in w.clusters.items():
            ours = {p.planned.name for p in result.of_tenant(tenant)}
            pods = {
                p["metadata"]["name"]: p
                for p in cl.list_pods(w.namespace)
                if p["metadata"]["name"] in ours
            }
            view = read_view(w.modes[tenant], cl, w.namespace)
            if view.mode == "dra":
                w.track_claims(tenant, pods)
            start = w.starts.get(tenant, first)
            _observe(result, pods, tenant, w.clock.now() - start, view)
        elapsed = w.clock.now() - first
        progress.update(result, elapsed)
        if not result.count(PENDING) or elapsed >= w.timeout:
            settled = [p.settled_after for p in result.pods if p.settled_after is not None]
            result.placement_seconds = max(settled, default=0.0)
            return
        w.clock.sleep(min(w.poll, w.timeout - elapsed))


def _explain(result: CapacityResult, clusters: dict[str, Cluster], ns: str) -> None:
    """Add HAMi's FilteringFailed events to the reason of every pod that did not fit."""
    for rec in result.pods:
        if rec.state == UNFIT:
            try:
                events = clusters[rec.planned.tenant].list_events(ns, rec.planned.name)
            except ClusterError as exc:
                if exc.status != 403:
                    raise
                result.notes.append(
                    f"{rec.planned.tenant}: events of {ns} not readable (403 list events): "
                    "the reasons are the pods' scheduling conditions only"
                )
                return
            texts = [f"{e.get('reason', '')}: {e.get('message', '')}" for e in events]
            rec.reason = " | ".join([rec.reason, *dict.fromkeys(texts)])


def _snapshot(
    result: CapacityResult, clusters: dict[str, Cluster], modes: dict[str, str], now: float
) -> None:
    """The cards as HAMi (or DRA) holds them now (other workloads included), and the run's
    slice-hours: each pod for the mix's duration from its bind time, or until now when the mix
    gives none."""
    cards: dict[str, list[RegisteredCard]] = {}
    held, notes = [], []
    # The run's slice-hours are those of the pods its verdict counts as placed: one bound after
    # the wait ended is still pending in the verdict, and only the cards show it.
    durations = {p.key: p.planned.duration for p in result.pods if p.state == PLACED}
    ours = set(durations)
    for tenant, cl in clusters.items():
        nodes = cl.list_nodes()
        pods, namespace = _visible_pods(result, tenant, cl)
        view = _visible_view(result, tenant, cl, modes[tenant], namespace)
        result.maps[tenant] = view.tenant_map(tenant, nodes, pods)
        cards[tenant] = view.cards(nodes)
        mine = [p for p in pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" in ours]
        h, n = holdings(tenant, mine, now, durations, view)
        held += h
        notes += n
    since = min((h.start for h in held), default=now)
    until = max((h.end for h in held), default=now)
    result.hours = slice_hours(held, since, until, card_infos(cards), notes)


def _visible_pods(result: CapacityResult, tenant: str, cl: Cluster) -> tuple[list[Obj], str | None]:
    """Every pod of the tenant, for the cards' other workloads, and the namespace they were
    read in (None: all); a user who may list pods only in the run's namespace gets a table of
    that namespace's pods, and a note saying so."""
    try:
        return cl.list_pods(), None
    except ClusterError as exc:
        if exc.status != 403:
            raise
    result.notes.append(
        f"{tenant}: pods of other namespaces not readable (403 list pods at the cluster scope): "
        f"the cards show only the pods of {result.namespace}; they were placed among all"
    )
    return cl.list_pods(result.namespace), result.namespace


def _visible_view(
    result: CapacityResult, tenant: str, cl: Cluster, mode: str, namespace: str | None
) -> SharingView:
    """The tenant's claims where its pods were read, or in the run's namespace when the user
    may not list them at the cluster scope (with a note)."""
    try:
        return read_view(mode, cl, namespace)
    except ClusterError as exc:
        if exc.status != 403 or namespace is not None:
            raise
    result.notes.append(
        f"{tenant}: ResourceClaims of other namespaces not readable (403 at the cluster scope): "
        f"the cards show only the claims of {result.namespace}"
    )
    return read_view(mode, cl, result.namespace)
