"""A DRA tenant's GPU pods, as a user writes them for HAMi (`nvidia.com/gpu`, `gpumem`,
`gpucores`, no scheduler name): HAMi-DRA's webhook turns them into ResourceClaims, the Kubernetes
scheduler allocates each a share of a card (facts `hami-dra-webhook-claim`,
`dra-consumable-capacity-allocation`). The claims are deleted with the pods: HAMi-DRA's own
cleanup is a best-effort webhook (fact `hami-dra-claim-cleanup`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..cluster import ClusterError, Obj, likely_cause
from ..context import RunContext, pod_summary
from ..dra import (
    CLAIMS,
    DRIVER,
    GROUP,
    UNFIT_MESSAGE,
    VERSION,
    allocation_results,
    claim_names,
    placed,
    quantity,
)
from ..hami import RES_CORES, RES_GPU, RES_MEM, pending_reason
from ..objects import gpu_pod, run_labels
from ..result import CheckFailed, Evidence
from ..spec import Tenant
from ..waiting import WaitTimeout

WEBHOOK_CAUSE = (
    "HAMi-DRA's webhook did not rewrite the pod (not running, or its namespace scope leaves "
    "this namespace out)"
)
DELETE_WEBHOOK_CAUSE = (
    "HAMi-DRA's validating webhook (validate.hami.io, pods DELETE, failurePolicy Ignore) did not "
    "delete it: not running or not registered; a pod created again under that name is refused "
    "(its claim already exists)"
)
SCHEDULER_CAUSE = (
    "no device with room for the claim (the fake plugin's slices, or DRAConsumableCapacity off "
    "in the scheduler)"
)


def _node_and_card(t: Tenant) -> tuple[str, int, int, int]:
    """The first GPU node, its card count, and the smallest card's MB and cores."""
    node = next(iter(t.gpu_nodes()), None)
    if node is None:
        raise CheckFailed("a GPU node in the tenant", "none configured", "the stack's gpus")
    cards = t.gpus[node]
    return node, len(cards), min(c.devmem for c in cards), min(c.devcore for c in cards)


def _claims(ctx: RunContext, t: Tenant, ns: str, pod: Obj) -> list[Obj]:
    cl = ctx.tenant(t)
    found = []
    for name in claim_names(pod):
        ctx.tracker.add_claim(cl, name, ns)
        try:
            found.append(cl.get_custom(GROUP, VERSION, CLAIMS, name, ns))
        except ClusterError as exc:
            if exc.status != 404:
                raise
    return found


def _await(ctx: RunContext, t: Tenant, ns: str, name: str, what: str, done) -> tuple[Obj, list]:
    cl = ctx.tenant(t)

    def probe() -> tuple[tuple[Obj, list[Obj]] | None, str]:
        pod = cl.get_pod(ns, name)
        claims = _claims(ctx, t, ns, pod)
        seen = pending_reason(pod, []) or pod_summary(pod)
        return ((pod, claims) if done(pod, claims) else None), seen

    return ctx.wait(probe, what, ctx.timeouts.pod_seconds)


def _placed(ctx: RunContext, t: Tenant, ns: str, name: str) -> tuple[Obj, list[Obj]]:
    try:
        return _await(ctx, t, ns, name, f"{name} placed with its claim allocated", placed)
    except WaitTimeout as exc:
        raise CheckFailed(f"{name} placed", exc.last, SCHEDULER_CAUSE) from None


def _create(ctx: RunContext, t: Tenant, ns: str, body: Obj) -> None:
    ctx.tracker.add_webhook_claims(ctx.tenant(t), ns, body)
    try:
        ctx.create_pod(ctx.tenant(t), ns, body)
    except ClusterError as exc:
        name = body["metadata"]["name"]
        raise CheckFailed(f"{name} created", str(exc), likely_cause(exc)) from None


def _recreated(ctx: RunContext, t: Tenant, ns: str, body: Obj) -> str:
    """The pod deleted and created again under its name, as `kubectl delete -f` then
    `kubectl apply -f` do: HAMi-DRA's validating webhook deletes a pod's claims with it (fact
    `hami-dra-claim-cleanup`), else the webhook refuses the new pod, its claim name taken."""
    cl, name = ctx.tenant(t), body["metadata"]["name"]
    named = claim_names(cl.get_pod(ns, name))  # as the webhook named them, whatever its version
    ctx.delete_pods(cl, ns, [name])

    def claims_gone() -> tuple[bool | None, str]:
        left = []
        for claim in named:
            try:
                found = cl.get_custom(GROUP, VERSION, CLAIMS, claim, ns)
            except ClusterError as exc:
                if exc.status != 404:
                    raise
                continue
            if not found["metadata"].get("deletionTimestamp"):  # nobody deleted it
                raise CheckFailed(
                    f"{name}'s claim deleted with it", f"{claim} kept", DELETE_WEBHOOK_CAUSE
                )
            left.append(claim)
        return (True if not left else None), f"{left} being deleted"

    try:
        ctx.wait(claims_gone, f"{name}'s claim gone with it", ctx.timeouts.pod_seconds)
    except WaitTimeout as exc:
        raise CheckFailed(
            f"{name}'s claim deleted with it", exc.last, DELETE_WEBHOOK_CAUSE
        ) from None
    _create(ctx, t, ns, body)
    _placed(ctx, t, ns, name)
    return f"{name} deleted and created again under its name: its claim went with it, placed again"


@contextlib.contextmanager
def _cleaned(ctx: RunContext, t: Tenant, names: list[str]) -> Iterator[str]:
    """The run's namespace for pods `names`; they are always deleted, then their claims."""
    cl = ctx.tenant(t)
    ns = ctx.namespace(t)
    try:
        yield ns
    finally:
        with contextlib.suppress(ClusterError, WaitTimeout):
            ctx.delete_pods(cl, ns, names)
        for item in [i for i in ctx.tracker.items if i.kind == "resourceclaim" and i.cluster is cl]:
            try:
                item.cluster.delete_custom(GROUP, VERSION, CLAIMS, item.name, item.namespace)
            except ClusterError as exc:
                if exc.status != 404:  # gone with its pod (HAMi-DRA's webhook): done too
                    continue
            ctx.tracker.forget(item)


def _check_rewrite(pod: Obj, claims: list[Obj], mem_mb: int, cores: int) -> None:
    name = pod["metadata"]["name"]
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits") or {}
    left = sorted(set(limits) & {RES_GPU, RES_MEM, RES_CORES})
    if left or len(claims) != 1:
        raise CheckFailed(
            f"{name}: GPU limits turned into one claim",
            f"limits {left} kept, {len(claims)} claim(s)",
            WEBHOOK_CAUSE,
        )
    request = claims[0]["spec"]["devices"]["requests"][0].get("exactly") or {}
    asks = (request.get("capacity") or {}).get("requests") or {}
    got = (quantity(asks.get("memory", "0")) // 2**20, quantity(asks.get("cores", "0")))
    if request.get("deviceClassName") != DRIVER or got != (mem_mb, cores):
        raise CheckFailed(
            f"{name}'s claim: class {DRIVER}, {mem_mb} MiB, {cores} % cores",
            f"class {request.get('deviceClassName')}, {got[0]} MiB, {got[1]} % cores",
            "HAMi-DRA's device config differs from the lab's (driver or units)",
        )


def sharing(ctx: RunContext, t: Tenant) -> Evidence:
    """Two pods of a third of a card each: rewritten into claims, both on one device of the node,
    each with its own share ID and exactly the capacity it asked; the first one's claim goes
    with it, so the same pod can be created again."""
    node, _, mem, cores = _node_and_card(t)
    mem, cores = mem // 3, cores // 3
    labels = run_labels(ctx.run_id, "dra.sharing")
    bodies = [
        gpu_pod(ctx.pod_name("dra-share", i), ctx.spec.test_image, labels, mem_mb=mem,
                cores=cores, node=node)
        for i in range(2)
    ]  # fmt: skip
    with _cleaned(ctx, t, [b["metadata"]["name"] for b in bodies]) as ns:
        for body in bodies:
            _create(ctx, t, ns, body)
        cl = ctx.tenant(t)
        for body in bodies:  # the webhook made the claims while it admitted the pods
            stored = cl.get_pod(ns, body["metadata"]["name"])
            _check_rewrite(stored, _claims(ctx, t, ns, stored), mem, cores)
        results = []
        for body in bodies:
            pod, claims = _placed(ctx, t, ns, body["metadata"]["name"])
            results += [(pod["metadata"]["name"], r) for r in allocation_results(claims[0])]
        again = _recreated(ctx, t, ns, bodies[0])
    devices = {(r["pool"], r["device"]) for _, r in results}
    shares = {r.get("shareID") for _, r in results}
    if len(results) != 2 or len(devices) != 1 or None in shares or len(shares) != 2:
        raise CheckFailed(
            "two claims on one device, each with its own share ID",
            f"devices {sorted(devices)}, share IDs {sorted(map(str, shares))}",
            "the device is not shareable (allowMultipleAllocations dropped: the gate)",
        )
    lines = []
    for name, r in results:
        used = r.get("consumedCapacity") or {}
        got = (quantity(used.get("memory", "0")) // 2**20, quantity(used.get("cores", "0")))
        if got != (mem, cores):
            raise CheckFailed(
                f"{name} consumes {mem} MiB and {cores} % of the device",
                f"{got[0]} MiB, {got[1]} %",
                "the device's requestPolicy rounds the request (the fake plugin's config)",
            )
        lines.append(f"{name}: {r['device']} share {r['shareID']}, {mem} MiB, {cores} %")
    ((pool, device),) = devices
    return Evidence(f"2 pods share {pool}/{device}: {mem} MiB, {cores} % each", [*lines, again])


def exhaustion(ctx: RunContext, t: Tenant) -> str:
    """One pod of 60 % of a card per card on the node: all placed; one more stays Unschedulable
    with the scheduler's reason."""
    node, count, mem, _ = _node_and_card(t)
    mem = mem * 6 // 10
    labels = run_labels(ctx.run_id, "dra.exhaustion")
    bodies = [
        gpu_pod(ctx.pod_name("dra-full", i), ctx.spec.test_image, labels, mem_mb=mem, node=node)
        for i in range(count + 1)
    ]
    *fitting, extra = bodies
    with _cleaned(ctx, t, [b["metadata"]["name"] for b in bodies]) as ns:
        for body in fitting:  # one after another: each finds the cards as the last left them
            _create(ctx, t, ns, body)
            _placed(ctx, t, ns, body["metadata"]["name"])
        name = extra["metadata"]["name"]
        _create(ctx, t, ns, extra)
        try:
            pod, _ = _await(
                ctx, t, ns, name, f"{name} Unschedulable",
                lambda p, c: UNFIT_MESSAGE in pending_reason(p, []) or placed(p, c),
            )  # fmt: skip
        except WaitTimeout as exc:
            raise CheckFailed(f"{name} Unschedulable", exc.last, SCHEDULER_CAUSE) from None
    if pod.get("spec", {}).get("nodeName"):
        raise CheckFailed(
            f"{name} left Unschedulable: {count} card(s) of {node} hold 60 % each",
            f"placed on {pod['spec']['nodeName']}",
            "the scheduler over-allocates the device (consumable capacity not enforced)",
        )
    return f"{count} pod(s) of {mem} MiB placed on {node}; one more: {pending_reason(pod, [])}"
