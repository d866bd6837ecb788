"""Checks 6-9, 11 and 12: HAMi webhook, fractional GPUs, oversubscription, node lock, limits,
and the placement of every slice on every card."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace

from ..cluster import Cluster, ClusterError, Obj, likely_cause
from ..context import RunContext, pod_summary
from ..hami import (
    ANN_BIND_PHASE,
    ANN_LOCK,
    ANN_NODE,
    ANN_REGISTER,
    NODE_UNREGISTERED,
    QUOTA_DENIAL,
    QUOTA_MEM_KEY,
    REGISTER_TICK_SECONDS,
    RES_GPU,
    SCHEDULER,
    SCHEDULER_SERVICE,
    CardState,
    apply_usage,
    is_hami_reason,
    node_cards,
    pending_reason,
    pod_slices,
    predict,
    quantity_int,
)
from ..objects import gpu_pod, run_labels
from ..picture import summary_line, text_bars
from ..placement import TenantMap, tenant_map
from ..result import CheckFailed, CheckSkipped, Evidence
from ..spec import Tenant
from ..waiting import WaitTimeout
from . import room

WEBHOOK_CAUSE = "HAMi webhook not reached; Konnectivity tunnel or kube-proxy on workers broken"
LOCK_WAIT_CAUSE = (
    "the tenant's MutatingAdmissionPolicy hami-gpu-pods-wait-for-node-lock or its binding is "
    "missing, or the API is off (v1.34-v1.35: the TenantControlPlane's apiServer extraArgs "
    "--feature-gates and --runtime-config); a burst of GPU pods then waits out "
    "kube-scheduler's backoff"
)
BIND_CAUSE = (
    "allocation never finished: the node lock or bind-phase is stuck (simulated: "
    "the lab agent is not completing allocations; real: device plugin Allocate failed)"
)


def _needs_gpus(t: Tenant) -> list[str]:
    nodes = t.gpu_nodes()
    if not nodes:
        raise CheckSkipped("no GPU nodes configured for this tenant")
    return nodes


def _gpu_summary(pod: Obj) -> str:
    ann = pod.get("metadata", {}).get("annotations") or {}
    return f"{pod_summary(pod)}, bind-phase {ann.get(ANN_BIND_PHASE, '-')}"


def _allocated(pod: Obj) -> bool:
    ann = pod.get("metadata", {}).get("annotations") or {}
    return pod.get("status", {}).get("phase") == "Running" and ann.get(ANN_BIND_PHASE) == "success"


def _check_scheduler(created: Obj) -> None:
    sched = created.get("spec", {}).get("schedulerName") or "default-scheduler"
    if sched != SCHEDULER:
        raise CheckFailed(f"schedulerName {SCHEDULER}", f"schedulerName is {sched}", WEBHOOK_CAUSE)


# A pod rejected as "node unregistered" is parked by kube-scheduler until an unrelated event or
# 5 min (podMaxInUnschedulablePodsDuration); one register tick after the node carries its
# registration HAMi knows it, so a pod created again after a full tick is scheduled at once.
UNREGISTERED_RETRY_SECONDS = REGISTER_TICK_SECONDS + 1
UNREGISTERED_CAUSE = "HAMi has not read the node's registration yet (15 s tick); retried"
# The Service gets its endpoint once the extender labels itself leader (on becoming leader or
# on its next register tick) and the pod is Ready: two ticks bound the wait.
ENDPOINTS_WAIT_SECONDS = 2 * REGISTER_TICK_SECONDS
ENDPOINTS_CAUSE = (
    "no Ready hami-scheduler pod labelled hami.io/scheduler-role=leader (the extender sets the "
    "label on its 15 s register tick): scheduler pod down or not leader. The webhook fails open "
    "meanwhile, so GPU pods would skip HAMi"
)


def _ready_addresses(slices: list[Obj]) -> list[str]:
    # EndpointSlice API: a nil `ready` condition means ready.
    return [
        addr
        for sl in slices
        for ep in sl.get("endpoints") or []
        if (ep.get("conditions") or {}).get("ready") is not False
        for addr in ep.get("addresses") or []
    ]


def _await_webhook_endpoints(ctx: RunContext, t: Tenant) -> float:
    """Wait (bounded) until the webhook's Service has a ready endpoint; return seconds waited."""
    cl = ctx.tenant(t)
    ns, svc = t.hami_namespace, SCHEDULER_SERVICE
    t0 = ctx.clock.now()

    def probe() -> tuple[list[str] | None, str]:
        slices = cl.list_endpoint_slices(ns, svc)
        ready = _ready_addresses(slices)
        return (ready or None), f"{len(slices)} EndpointSlice(s) of {ns}/{svc}, no ready endpoint"

    bound = min(ENDPOINTS_WAIT_SECONDS, ctx.timeouts.pod_seconds)
    try:
        ctx.wait(probe, f"a ready endpoint of Service {ns}/{svc}", bound)
    except WaitTimeout as exc:
        raise CheckFailed(
            f"a ready endpoint of Service {ns}/{svc} within {bound:g}s", exc.last, ENDPOINTS_CAUSE
        ) from None
    return ctx.clock.now() - t0


def _webhook_ready(ctx: RunContext, t: Tenant) -> float:
    """Before a tenant's first GPU pod: the webhook can be reached (waited for once per run)."""
    if t.name not in ctx.webhook_waits:
        try:
            ctx.webhook_waits[t.name] = _await_webhook_endpoints(ctx, t)
        except CheckFailed as exc:
            ctx.webhook_waits[t.name] = exc
    found = ctx.webhook_waits[t.name]
    if isinstance(found, CheckFailed):
        raise found
    return found


@dataclass
class _Attempt:
    body: Obj
    created: Obj  # what the API server returned
    created_at: float
    recreated: bool = False
    registered_at: float | None = None  # first seen: a candidate node's register annotation

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]


class PodRejected(ClusterError):
    """The API server refused to create a GPU pod (admission), as opposed to a later failure."""


def _create(ctx: RunContext, cl: Cluster, ns: str, body: Obj) -> _Attempt:
    at = ctx.clock.now()
    try:
        created = ctx.create_pod(cl, ns, body)
    except ClusterError as exc:
        raise PodRejected(exc.status, exc.message) from None
    _check_scheduler(created)
    return _Attempt(body, created, at)


def _candidate_nodes(t: Tenant, body: Obj) -> list[str]:
    want = (body["spec"].get("nodeSelector") or {}).get("kubernetes.io/hostname")
    return [want] if want else t.gpu_nodes()


def _registration_written(cl: Cluster, nodes: list[str]) -> bool:
    for node in nodes:
        ann = cl.get_node(node).get("metadata", {}).get("annotations") or {}
        if ann.get(ANN_REGISTER):
            return True
    return False


def _due_for_recreation(ctx: RunContext, t: Tenant, attempt: _Attempt, pod: Obj) -> bool:
    """Still rejected as unregistered a full register tick after the pod was created and a
    node carried its registration (HAMi can only read what is written)."""
    if attempt.recreated or pod.get("spec", {}).get("nodeName"):
        return False
    if NODE_UNREGISTERED not in pending_reason(pod, []):
        return False
    if attempt.registered_at is None:
        if not _registration_written(ctx.tenant(t), _candidate_nodes(t, attempt.body)):
            return False
        attempt.registered_at = ctx.clock.now()
    since = max(attempt.created_at, attempt.registered_at)
    return ctx.clock.now() - since >= UNREGISTERED_RETRY_SECONDS


def _await_allocated(ctx: RunContext, t: Tenant, ns: str, attempt: _Attempt, timeout: float) -> Obj:
    """Wait until the pod is allocated; re-create it once if HAMi had not read its node yet.

    The re-created pod keeps its name, so tracking and cleanup stay as they are. With or without
    something else requeueing such pods (the lab agent does), this only ever acts on a pod that
    is still rejected a full register tick after it was created."""
    cl = ctx.tenant(t)

    def probe() -> tuple[Obj | None, str]:
        pod = cl.get_pod(ns, attempt.name)
        if _allocated(pod):
            return pod, _gpu_summary(pod)
        if pod.get("status", {}).get("phase") in ("Failed", "Succeeded"):
            raise CheckFailed(
                f"GPU pod {attempt.name} Running and allocated",
                f"pod {attempt.name} ended: {_gpu_summary(pod)}",
                "container exited; check the image and its command",
            )
        seen = _gpu_summary(pod)
        if _due_for_recreation(ctx, t, attempt, pod):
            ctx.delete_pods(cl, ns, [attempt.name])
            _check_scheduler(ctx.create_pod(cl, ns, attempt.body))
            attempt.recreated = True
            seen += f"; re-created after {UNREGISTERED_RETRY_SECONDS}s"
        return None, seen

    return ctx.wait(probe, f"GPU pod {attempt.name} Running and allocated", timeout)


@contextlib.contextmanager
def gpu_pods(
    ctx: RunContext,
    t: Tenant,
    bodies: list[Obj],
    *,
    namespace: str | None = None,
    timeout: float | None = None,
    wait: bool = True,
    notes: list[str] | None = None,
    one_card: bool = False,
) -> Iterator[list[Obj]]:
    """Create GPU pods, wait until all are allocated, yield them, and always delete them.

    Pods that must be allocated are first held against the room the tenant's own GPU pods leave
    (skipped, naming them, when they do not fit; with `one_card`, all on one card).
    `notes` collects what the wait had to work around (webhook endpoints, re-created pods)."""
    cl = ctx.tenant(t)
    ns = namespace or ctx.namespace(t)
    names: list[str] = []
    notes = [] if notes is None else notes
    if wait:
        room.skip_unless_room(t, cl.get_node, cl.list_pods(), bodies, one_card=one_card)
    try:
        waited = _webhook_ready(ctx, t)
        if waited >= ctx.poll_seconds:
            notes.append(f"webhook endpoint ready after {waited:.0f}s")
        deadline = ctx.clock.now() + (timeout or ctx.timeouts.pod_seconds)
        attempts = []
        for body in bodies:
            names.append(body["metadata"]["name"])  # before creating: cleanup must see it
            attempts.append(_create(ctx, cl, ns, body))
        pods = [a.created for a in attempts]
        if wait:
            pods = []
            for attempt in attempts:
                left = max(deadline - ctx.clock.now(), 0.001)
                try:
                    pods.append(_await_allocated(ctx, t, ns, attempt, left))
                except WaitTimeout as exc:
                    raise CheckFailed(
                        f"{len(names)} GPU pod(s) Running with bind-phase success",
                        f"{attempt.name}: {exc.last}",
                        _pending_cause(exc.last, attempt),
                    ) from None
                ctx.record_placement(t, pods[-1])
            recreated = [a.name for a in attempts if a.recreated]
            if recreated:
                notes.append(f"re-created {recreated}: {UNREGISTERED_CAUSE}")
            _snapshot(ctx, t)
        yield pods
    finally:
        with contextlib.suppress(ClusterError, WaitTimeout, CheckFailed):
            ctx.delete_pods(cl, ns, names)  # leftovers stay tracked for the final cleanup


def _read_cards(cl: Cluster, t: Tenant) -> TenantMap:
    """The tenant's cards and the slices live pods hold on them (two list calls)."""
    nodes, pods = cl.list_nodes(), cl.list_pods()
    try:
        return tenant_map(t.name, nodes, pods)
    except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise CheckFailed(
            f"every {ANN_REGISTER} a JSON array of cards",
            f"{type(exc).__name__}: {exc}",
            "GPU agent (simulated) or device plugin (real) wrote a registration HAMi cannot read",
        ) from None


def _snapshot(ctx: RunContext, t: Tenant) -> None:
    """The batch is allocated: keep the tenant's cards if they are the run's fullest so far,
    for gpu.placement to draw (each check deletes its pods, so the end shows none of them).
    A failed read is noted for gpu.placement, never the failure of the check taking it."""
    during = ctx.check or "a GPU check"
    try:
        card_map = _read_cards(ctx.tenant(t), t)
    except ClusterError as exc:
        problem = str(exc)
    except CheckFailed as exc:
        problem = exc.seen
    else:
        ctx.keep_peak(replace(card_map, during=during))
        return
    ctx.snapshot_problems.setdefault(t.name, []).append(
        f"cards not read during {during}: {problem}"
    )


def _unregistered_cause(attempt: _Attempt | None) -> str:
    if attempt is not None and attempt.recreated:
        return (
            f"{UNREGISTERED_CAUSE} {UNREGISTERED_RETRY_SECONDS}s after the first try and it "
            f"persists: the extender is not the leader, or cannot parse the node's {ANN_REGISTER} "
            "annotation"
        )
    if attempt is not None and attempt.registered_at is None:
        return (
            f"HAMi rejects the node as unregistered and it has no {ANN_REGISTER} annotation: "
            "GPU agent (simulated) or device plugin (real) not registering cards"
        )
    return f"{UNREGISTERED_CAUSE} only after {UNREGISTERED_RETRY_SECONDS}s, beyond this wait"


def _pending_cause(seen: str, attempt: _Attempt | None = None) -> str:
    if NODE_UNREGISTERED in seen:
        return _unregistered_cause(attempt)
    if "lock" in seen.lower():
        return BIND_CAUSE
    if "allocating" in seen:
        return BIND_CAUSE
    if is_hami_reason(seen):
        return (
            "HAMi found no card with room (leftover GPU pods, or inventory smaller than configured)"
        )
    if "Pending on -" in seen:
        return "not scheduled: hami-scheduler down or its extender unreachable"
    return "pod did not start; see its events"


def _cards(ctx: RunContext, t: Tenant, node: str) -> list[CardState]:
    cards = node_cards(ctx.tenant(t).get_node(node))
    if not cards:
        raise CheckFailed(
            f"register annotation on {node}",
            "no hami.io/node-nvidia-register",
            "GPU agent (simulated) or device plugin (real) not registering cards",
        )
    return cards


def _live_cards(ctx: RunContext, t: Tenant, node: str) -> list[CardState]:
    cards = _cards(ctx, t, node)
    apply_usage(cards, ctx.tenant(t).list_pods(), node)
    return cards


def _labels(ctx: RunContext, check: str) -> dict[str, str]:
    return run_labels(ctx.run_id, check)


def lock_wait(ctx: RunContext, t: Tenant) -> str:
    """A GPU pod is admitted as a pod-group member, so HAMi's Bind waits for its node lock
    instead of failing into kube-scheduler's backoff. A server-side dry run: nothing is made."""
    _needs_gpus(t)
    if t.lock_wait is None:
        raise CheckSkipped(
            "the tenant's version serves no admission policy the lab switches on (before "
            "v1.34): a burst of GPU pods waits out kube-scheduler's backoff"
        )
    label, value = t.lock_wait.label, t.lock_wait.value
    body = gpu_pod(ctx.pod_name("lock-wait"), ctx.spec.test_image, _labels(ctx, "hami.lock-wait"),
                   mem_mb=1)  # fmt: skip
    admitted = ctx.tenant(t).create_pod(ctx.namespace(t), body, dry_run=True)
    found = (admitted.get("metadata", {}).get("labels") or {}).get(label)
    if found != value:
        raise CheckFailed(
            f"{label}={value} on a GPU pod",
            f"{label}={found}" if found else f"no {label} label",
            LOCK_WAIT_CAUSE,
        )
    return f"a GPU pod is admitted with {label}={value}: its Bind waits for HAMi's node lock"


# 6 --------------------------------------------------------------------------------------
def webhook(ctx: RunContext, t: Tenant) -> str:
    node = _needs_gpus(t)[0]
    mem = min(c.devmem for c in t.gpus[node]) // 10 or 1
    body = gpu_pod(
        ctx.pod_name("webhook"), ctx.spec.test_image, _labels(ctx, "hami.webhook"), mem_mb=mem
    )
    notes: list[str] = []
    with gpu_pods(ctx, t, [body], notes=notes) as pods:
        pod = pods[0]
    return "; ".join(
        [
            f"schedulerName {SCHEDULER}",
            f"{pod['metadata']['name']} allocated on {pod['spec'].get('nodeName')}",
            *notes,
        ]
    )


# 7 --------------------------------------------------------------------------------------
def inventory(ctx: RunContext, t: Tenant) -> str:
    parts = []
    for node in _needs_gpus(t):
        want = sorted((c.type, c.devmem, c.devcore, c.count) for c in t.gpus[node])
        obj = ctx.tenant(t).get_node(node)
        alloc = obj.get("status", {}).get("allocatable", {}).get(RES_GPU)
        expected = sum(c.count for c in t.gpus[node])
        if alloc is None or quantity_int(alloc) != expected:
            raise CheckFailed(
                f"{node} allocatable {RES_GPU}={expected} (cards x split)",
                f"{alloc}",
                "node capacity not patched (simulated agent) or "
                "device plugin not running; re-apply after a node re-registers",
            )
        have = sorted((c.type, c.devmem, c.devcore, c.count) for c in _cards(ctx, t, node))
        if have != want:
            raise CheckFailed(
                f"{node} registers {want}",
                f"{have}",
                "register annotation differs from the configured inventory",
            )
        parts.append(f"{node}: {len(have)} card(s), {RES_GPU}={expected}")
    return "; ".join(parts)


def sharing(ctx: RunContext, t: Tenant) -> str:
    node = _needs_gpus(t)[0]
    cards = _cards(ctx, t, node)
    k = max(2, min(3, min(c.count for c in cards)))
    mem = min(c.devmem for c in cards) // (k + 1)
    cores = min(c.devcore for c in cards) // (k + 1)
    bodies = [
        gpu_pod(
            ctx.pod_name("share", i),
            ctx.spec.test_image,
            _labels(ctx, "gpu.sharing"),
            mem_mb=mem,
            cores=cores,
            node=node,
            gpu_policy="binpack",
            node_policy=t.scheduler_policy.node,
        )
        for i in range(k)
    ]
    with gpu_pods(ctx, t, bodies, one_card=True) as pods:
        ids = {c.id for c in cards}
        uuids = set()
        for p in pods:
            slices = pod_slices(p)
            ann = p["metadata"].get("annotations") or {}
            where = (ann.get(ANN_NODE), p["spec"].get("nodeName"))
            if where != (node, node):
                raise CheckFailed(
                    f"vgpu-node and nodeName {node}",
                    f"{where}",
                    "scheduler accounting and binding disagree",
                )
            if len(slices) != 1 or (slices[0].mem_mb, slices[0].cores) != (mem, cores):
                raise CheckFailed(
                    f"one slice {mem}MB/{cores}% on {p['metadata']['name']}",
                    f"{slices}",
                    "HAMi ignored the gpumem/gpucores limits",
                )
            if slices[0].uuid not in ids:
                raise CheckFailed(
                    f"a card registered on {node}",
                    slices[0].uuid,
                    "allocation names a card the node does not register",
                )
            uuids.add(slices[0].uuid)
    if len(uuids) != 1:
        raise CheckFailed(
            f"{k} binpack pods share one card",
            f"cards {sorted(uuids)}",
            "binpack annotation ignored (webhook/extender version mismatch?)",
        )
    return f"{k} pods share {uuids.pop()} on {node}: {mem}MB/{cores}% each"


def _multi_card_node(t: Tenant) -> str | None:
    # Each entry of gpus[node] is one physical card (count is its split count).
    return next((n for n in t.gpu_nodes() if len(t.gpus[n]) >= 2), None)


def policy(ctx: RunContext, t: Tenant) -> str:
    _needs_gpus(t)
    node = _multi_card_node(t)
    if node is None:
        raise CheckSkipped("card placement policy needs 2+ cards on one node; none configured")
    configured = t.scheduler_policy.gpu
    order = [p for p in (configured, "spread", "binpack") if p in ("spread", "binpack")]
    evidence = []
    for pol in dict.fromkeys(order):
        cards = _live_cards(ctx, t, node)
        mem = min(c.devmem for c in cards) // 4
        want = predict(cards, [(mem, 0), (mem, 0)], pol).cards
        bodies = [
            gpu_pod(
                ctx.pod_name(f"{pol[:4]}", i),
                ctx.spec.test_image,
                _labels(ctx, "gpu.policy"),
                mem_mb=mem,
                node=node,
                gpu_policy=pol,
                node_policy=t.scheduler_policy.node,
            )
            for i in range(2)
        ]
        with gpu_pods(ctx, t, bodies) as pods:
            got = [pod_slices(p)[0].uuid if pod_slices(p) else "" for p in pods]
        same_want, same_got = want[0] == want[1], got[0] == got[1]
        if same_want != same_got:
            exp = "the same card" if same_want else "different cards"
            raise CheckFailed(
                f"{pol}: 2 pods on {exp} (predicted {want})",
                f"cards {got}",
                f"{pol} policy not applied by the HAMi scheduler",
            )
        evidence.append(f"{pol}: {'same card' if same_got else 'different cards'}")
    tag = f"configured gpu policy {configured}"
    return f"{node}: " + ", ".join(evidence) + f" ({tag})"


# 8 --------------------------------------------------------------------------------------
def oversubscription(ctx: RunContext, t: Tenant) -> str:
    node = _needs_gpus(t)[0]
    cards = _cards(ctx, t, node)
    filler = int(min(c.devmem for c in cards) * 0.6)
    fillers = [
        gpu_pod(
            ctx.pod_name("fill", i),
            ctx.spec.test_image,
            _labels(ctx, "gpu.oversubscription"),
            mem_mb=filler,
            node=node,
            gpu_policy="spread",
        )
        for i in range(len(cards))
    ]
    ns = ctx.namespace(t)
    with gpu_pods(ctx, t, fillers):
        live = _live_cards(ctx, t, node)
        remaining = max(c.devmem - c.usedmem for c in live)
        ask = remaining + 1
        if ask > max(c.devmem for c in live):
            raise CheckSkipped(f"cannot build a fair probe: {ask}MB exceeds every card")
        probe = gpu_pod(
            ctx.pod_name("over"),
            ctx.spec.test_image,
            _labels(ctx, "gpu.oversubscription"),
            mem_mb=ask,
            node=node,
        )
        with gpu_pods(ctx, t, [probe], wait=False):
            name = probe["metadata"]["name"]
            reason = _await_pending_reason(
                ctx,
                t,
                ns,
                name,
                (
                    "CardInsufficientMemory",
                    "NodeInsufficientDevice",
                    "NodeUnfitPod",
                    "AllocatedCardsInsufficientRequest",
                    "FilteringFailed",
                ),
            )
    return f"{ask}MB (> {remaining}MB left on any card) stays Pending: {reason[:120]}"


def _await_pending_reason(
    ctx: RunContext, t: Tenant, ns: str, name: str, reasons: tuple[str, ...]
) -> str:
    cl = ctx.tenant(t)

    def probe() -> tuple[str | None, str]:
        pod = cl.get_pod(ns, name)
        if pod.get("spec", {}).get("nodeName"):
            raise CheckFailed(
                f"{name} stays Pending",
                f"bound to {pod['spec']['nodeName']}",
                "HAMi over-committed the card (accounting lost, or the pod "
                "bypassed hami-scheduler)",
            )
        text = pending_reason(pod, cl.list_events(ns, name))
        hit = any(r in text for r in reasons)
        return (text if hit else None), (text or _gpu_summary(pod))

    try:
        return ctx.wait(probe, f"{name} Pending with a HAMi reason", ctx.timeouts.pod_seconds)
    except WaitTimeout as exc:
        raise CheckFailed(
            f"Pending with one of {list(reasons)}",
            exc.last,
            "hami-scheduler extender not consulted (pod Pending for another reason)",
        ) from None


def quota(ctx: RunContext, t: Tenant) -> str:
    _needs_gpus(t)
    q = t.quota
    if q is None:
        raise CheckSkipped("no GPU ResourceQuota configured for this tenant")
    cl = ctx.tenant(t)
    try:
        rq = cl.get_resource_quota(q.namespace, q.name)
    except ClusterError as exc:
        raise CheckFailed(
            f"ResourceQuota {q.namespace}/{q.name}", str(exc), likely_cause(exc)
        ) from None
    hard = (rq.get("spec", {}).get("hard") or {}).get(QUOTA_MEM_KEY)
    if hard is None or quantity_int(hard) != q.gpumem_mb:
        raise CheckFailed(
            f"{QUOTA_MEM_KEY}={q.gpumem_mb}",
            f"{hard}",
            "quota object differs from the configuration",
        )
    ask = q.gpumem_mb + 1
    body = gpu_pod(
        ctx.pod_name("quota"), ctx.spec.test_image, _labels(ctx, "gpu.quota"), mem_mb=ask
    )
    try:
        with gpu_pods(ctx, t, [body], namespace=q.namespace, wait=False):
            reason = _await_pending_reason(
                ctx, t, q.namespace, body["metadata"]["name"], ("ResourceQuotaNotFit",)
            )
            return f"{ask}MB in {q.namespace} admitted but held Pending: {reason[:100]}"
    except PodRejected as exc:
        if exc.status == 403 and QUOTA_DENIAL in exc.message:
            return f"{ask}MB pod in {q.namespace} rejected at admission: {exc.message[:140]}"
        raise CheckFailed(
            f"HTTP 403 '{QUOTA_DENIAL}', or Pending with ResourceQuotaNotFit",
            str(exc),
            _quota_rejection_cause(exc),
        ) from None


def _quota_rejection_cause(exc: ClusterError) -> str:
    # Kubernetes' ResourceQuota admission: 'exceeded quota: <name>, requested: ...'.
    if exc.status == 403 and "exceeded quota" in exc.message:
        return (
            "another ResourceQuota in the namespace rejected the pod first, so HAMi's GPU "
            "memory quota was not what refused it"
        )
    return likely_cause(exc)


# 9 --------------------------------------------------------------------------------------
def node_lock(ctx: RunContext, t: Tenant) -> str:
    node = _needs_gpus(t)[0]
    cards = _cards(ctx, t, node)
    n = ctx.timeouts.lock_burst_pods
    if n > sum(c.count for c in cards):
        raise CheckSkipped(f"{n} pods exceed the {sum(c.count for c in cards)} slots on {node}")
    mem = max(1, min(c.devmem for c in cards) // (2 * n))  # all n fit even on one card
    bodies = [
        gpu_pod(
            ctx.pod_name("lock", i),
            ctx.spec.test_image,
            _labels(ctx, "gpu.lock"),
            mem_mb=mem,
            node=node,
        )
        for i in range(n)
    ]
    t0 = ctx.clock.now()
    with gpu_pods(ctx, t, bodies, timeout=ctx.timeouts.lock_burst_seconds):
        took = ctx.clock.now() - t0
        released = _await_lock_free(ctx, t, node)
    return (
        f"{n} pods back to back on {node} allocated in {took:.1f}s "
        f"(bound {ctx.timeouts.lock_burst_seconds:g}s); {released}"
    )


def _await_lock_free(ctx: RunContext, t: Tenant, node: str) -> str:
    """Wait until no node lock is left; describe how long it took after the last bind."""
    cl = ctx.tenant(t)
    t0 = ctx.clock.now()

    def probe() -> tuple[str | None, str]:
        ann = cl.get_node(node).get("metadata", {}).get("annotations") or {}
        held = ann.get(ANN_LOCK)
        if held:
            return None, f"{ANN_LOCK}={held}"
        return f"no {ANN_LOCK} on {node} {ctx.clock.now() - t0:.0f}s after the last bind", ""

    try:
        return ctx.wait(probe, f"{ANN_LOCK} released on {node}", ctx.timeouts.api_seconds)
    except WaitTimeout as exc:
        raise CheckFailed(
            f"no {ANN_LOCK} on {node} after all binds", exc.last, BIND_CAUSE
        ) from None


# 11 -------------------------------------------------------------------------------------
def memory_limit(ctx: RunContext, t: Tenant) -> str:
    node = _needs_gpus(t)[0]
    if t.gpu_mode != "real":
        raise CheckSkipped(f"gpuMode {t.gpu_mode}: no real GPU, limit enforcement not testable")
    card = max(t.gpus[node], key=lambda c: c.devmem)
    ask = card.devmem // 4
    body = gpu_pod(
        ctx.pod_name("smi"),
        ctx.spec.smi_image,
        _labels(ctx, "gpu.memory-limit"),
        mem_mb=ask,
        node=node,
        command=["sleep", "3600"],
    )
    cmd = ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    with gpu_pods(ctx, t, [body]) as pods:
        try:
            out = ctx.tenant(t).exec_pod(ctx.namespace(t), pods[0]["metadata"]["name"], cmd)
        except ClusterError as exc:
            raise CheckFailed("nvidia-smi runs in the pod", str(exc), likely_cause(exc)) from None
    try:
        seen = int(out.strip().splitlines()[0].split()[0])
    except (IndexError, ValueError):
        raise CheckFailed(
            "nvidia-smi memory.total in MiB",
            repr(out[:120]),
            "nvidia-smi missing from the image or driver not injected",
        ) from None
    if abs(seen - ask) > max(16, ask // 50):
        raise CheckFailed(
            f"memory.total ~= {ask} MiB (the slice)",
            f"{seen} MiB",
            "HAMi-core (libvgpu) not injected: the container sees the whole card",
        )
    return f"nvidia-smi reports {seen} MiB for a {ask} MiB slice of {card.devmem} MiB"


# 12 -------------------------------------------------------------------------------------
def placement(ctx: RunContext, t: Tenant) -> Evidence:
    """What HAMi placed on every card: the fullest state a GPU check's pods reached this run,
    else (no GPU check ran, e.g. `--only gpu.placement` on a running lab) what it holds now.

    Read-only; the run draws the result (picture, JSON, text bars)."""
    _needs_gpus(t)
    card_map = ctx.peak_maps.get(t.name)
    if card_map is None:
        card_map = _read_cards(ctx.tenant(t), t)
    ctx.card_maps[t.name] = card_map
    problems = tuple(ctx.snapshot_problems.get(t.name, ()))
    text = f"{card_map.source}: {summary_line(card_map)}"
    if problems:
        text += f"; {len(problems)} GPU check batch(es) not read, see below"
    return Evidence(text, text_bars(card_map) + problems)
