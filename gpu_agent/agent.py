"""Level-triggered reconcile: every pass recomputes from what the API server holds now."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import hami
from .config import Config
from .kube import ApiError, AuthError, Conflict, KubeApi, NotFound, Obj

LOG = logging.getLogger("gpu_agent")

# Bound, unfinished pods only: that is every allocation to finish. A lock owner outside the
# list (mid-bind, finished or gone) is looked up by GET before its lock is judged.
POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
MAX_CONFLICT_RETRIES = 5
TERMINAL_PHASES = ("Succeeded", "Failed")

EXIT_OK, EXIT_BUG, EXIT_CONFIG, EXIT_AUTH = 0, 1, 2, 3


@dataclass
class PassSummary:
    registered: list[str] = field(default_factory=list)  # nodes whose annotation/labels we set
    capacity: list[str] = field(default_factory=list)  # nodes whose nvidia.com/gpu we set
    completed: list[str] = field(default_factory=list)  # "ns/pod" set to bind-phase success
    released: list[str] = field(default_factory=list)  # "node ns/pod reason"
    errors: list[str] = field(default_factory=list)

    @property
    def actions(self) -> int:
        return len(self.registered) + len(self.capacity) + len(self.completed) + len(self.released)


def _meta(obj: Obj) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Obj) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


def _key(pod: Obj) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


class _Pass:
    def __init__(self, api: KubeApi, config: Config) -> None:
        self.api, self.config, self.s = api, config, PassSummary()
        self.nodes: dict[str, Obj] = {}  # our nodes, latest copy we have seen

    def guard(self, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Contain one item's failure to that item; only auth errors end the pass."""
        try:
            fn(*args)
        except AuthError:
            raise
        except ApiError as exc:
            self.s.errors.append(f"{what}: {exc}")
            LOG.warning("%s failed, retrying next pass: %s", what, exc)

    # registration
    def register(self, name: str) -> None:
        node = self.nodes[name]
        want = hami.register_cards(name, self.config.nodes[name])
        meta: dict[str, Any] = {}
        if hami.decode_register(_annotations(node).get(hami.REGISTER_ANNOTATION)) != want:
            meta["annotations"] = {hami.REGISTER_ANNOTATION: hami.encode_register(want)}
        labels = _meta(node).get("labels") or {}
        missing = {k: v for k, v in self.config.node_labels.items() if labels.get(k) != v}
        if missing:
            meta["labels"] = missing
        if meta:  # we own these keys: no resourceVersion precondition needed
            node = self.nodes[name] = self.api.patch_node_metadata(name, {"metadata": meta})
            self.s.registered.append(name)
            LOG.info("registered node=%s cards=%d set=%s", name, len(want), sorted(meta))

        total = str(sum(c.count for c in self.config.nodes[name]))
        ops = _capacity_ops(node.get("status"), total)
        if ops:
            self.nodes[name] = self.api.patch_node_status(name, ops)
            self.s.capacity.append(name)
            LOG.info("set capacity node=%s %s=%s", name, hami.GPU_RESOURCE, total)

    # allocation completion
    def is_candidate(self, pod: Obj) -> bool:
        ann = _annotations(pod)
        node = ann.get(hami.NODE_ANNOTATION)
        return (
            ann.get(hami.BIND_PHASE_ANNOTATION) == hami.PHASE_ALLOCATING
            and hami.TO_ALLOCATE_ANNOTATION in ann  # only NVIDIA allocations are ours
            and node in self.nodes
            and (pod.get("spec") or {}).get("nodeName") == node
            and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
        )

    def complete(self, pod: Obj) -> None:
        ns, name = _meta(pod)["namespace"], _meta(pod)["name"]
        node = _annotations(pod)[hami.NODE_ANNOTATION]
        for _ in range(MAX_CONFLICT_RETRIES):
            if not self.is_candidate(pod):
                break  # someone else finished or changed it meanwhile
            patch: dict[str, str] = {hami.BIND_PHASE_ANNOTATION: hami.PHASE_SUCCESS}
            value = _annotations(pod)[hami.TO_ALLOCATE_ANNOTATION]
            if hami.needs_allocation(value):
                patch[hami.TO_ALLOCATE_ANNOTATION] = hami.erase_to_allocate(value)
            rv = _meta(pod).get("resourceVersion")
            body = {"metadata": {"annotations": patch, "resourceVersion": rv}}
            try:  # the precondition keeps us from erasing a newer pod's value
                try:
                    self.api.patch_pod(ns, name, body)
                except Conflict:
                    pod = self.api.get_pod(ns, name)
                    continue
            except NotFound:
                LOG.info("pod gone before completion pod=%s/%s node=%s", ns, name, node)
                break
            self.s.completed.append(f"{ns}/{name}")
            LOG.info("completed allocation pod=%s/%s node=%s", ns, name, node)
            break
        else:
            raise Conflict(409, f"pod {ns}/{name} kept changing")
        # Done, vanished or finished by someone else: in each case a lock it holds is stale.
        self.release(node, lambda v: hami.owns_lock(v, ns, name), f"{ns}/{name}", "allocated")

    # locks
    def release(self, name: str, still_stale: Callable[[str], bool], owner: str, why: str) -> None:
        node = self.nodes[name]
        for _ in range(MAX_CONFLICT_RETRIES):
            value = _annotations(node).get(hami.LOCK_ANNOTATION)
            if value is None or not still_stale(value):
                return
            rv = _meta(node).get("resourceVersion")
            body = {
                "metadata": {"annotations": {hami.LOCK_ANNOTATION: None}, "resourceVersion": rv}
            }
            try:
                self.nodes[name] = self.api.patch_node_metadata(name, body)
            except Conflict:  # node changed (kubelet, scheduler): re-read and re-judge
                node = self.nodes[name] = self.api.get_node(name)
                continue
            self.s.released.append(f"{name} {owner} {why}")
            LOG.info("released lock node=%s owner=%s reason=%s", name, owner, why)
            return
        raise Conflict(409, f"lock on {name} kept changing")

    def release_if_orphaned(self, name: str, bound: dict[tuple[str, str], Obj]) -> None:
        value = _annotations(self.nodes[name]).get(hami.LOCK_ANNOTATION)
        owner = hami.lock_owner(value) if value else None
        if owner is None:
            return  # no lock, or a legacy timestamp-only one the scheduler expires itself
        pod = bound.get(owner)
        if pod is None:
            try:
                pod = self.api.get_pod(*owner)
            except NotFound:
                pod = None
        why = _stale_reason(pod, name)
        if why:  # compare the exact value: a new lock by anyone is a different string
            self.release(name, lambda v: v == value, "/".join(owner), why)


def _capacity_ops(status: Obj | None, total: str) -> list[Obj]:
    # allocatable too: kubelet copies capacity there within ~10 s anyway, and HAMi's
    # scheduler health check reads allocatable.
    ops: list[Obj] = [] if status else [{"op": "add", "path": "/status", "value": {}}]
    for part in ("capacity", "allocatable"):
        current = (status or {}).get(part)
        if current is None:
            ops.append({"op": "add", "path": f"/status/{part}", "value": {}})
        if current is None or str(current.get(hami.GPU_RESOURCE)) != total:
            ops.append({"op": "add", "path": f"/status/{part}/nvidia.com~1gpu", "value": total})
    return ops


def _stale_reason(pod: Obj | None, node: str) -> str | None:
    """Why a lock held by `pod` on `node` can go, or None when its owner may still need it."""
    if pod is None:
        return "owner-gone"
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return "owner-finished"
    phase = _annotations(pod).get(hami.BIND_PHASE_ANNOTATION)
    # Bound here and already past allocation: we (or a previous run of us) finished it
    # but the release did not land. Binding is final, so this cannot flip back.
    if (pod.get("spec") or {}).get("nodeName") == node and phase in (
        hami.PHASE_SUCCESS,
        hami.PHASE_FAILED,
    ):
        return "owner-allocated"
    return None


def reconcile_once(api: KubeApi, config: Config) -> PassSummary:
    """One pass: list nodes and pods once, then write only what differs from the target."""
    p = _Pass(api, config)
    # Nodes before pods: a lock seen here was taken by a pod that already existed, so it
    # is in the pod list unless it is gone or still unbound.
    for node in api.list_nodes():
        name = _meta(node).get("name")
        if name in config.nodes:
            p.nodes[name] = node
    pods = api.list_pods(POD_SELECTOR)
    for name in list(p.nodes):
        p.guard(f"register {name}", p.register, name)
    for pod in pods:
        if p.is_candidate(pod):
            p.guard(f"complete {_key(pod)}", p.complete, pod)
    bound = {(_meta(q).get("namespace"), _meta(q).get("name")): q for q in pods}
    for name in list(p.nodes):
        p.guard(f"lock check {name}", p.release_if_orphaned, name, bound)
    return p.s


def run(api: KubeApi, config: Config, stop_event: threading.Event) -> int:
    """Reconcile until stop_event is set; return the process exit code."""
    LOG.info("gpu agent started nodes=%s resync=%ss", sorted(config.nodes), config.resync_seconds)
    while not stop_event.is_set():
        busy = False
        try:
            summary = reconcile_once(api, config)
            busy = summary.actions > 0
        except AuthError as exc:
            LOG.error("fatal, exiting: %s", exc)
            return EXIT_AUTH
        except ApiError as exc:  # list failed (5xx, timeout...): try again next pass
            LOG.warning("pass failed, retrying: %s", exc)
        except Exception:  # a bug: exit so it shows as a restart instead of a silent loop
            LOG.exception("unexpected error, exiting")
            return EXIT_BUG
        stop_event.wait(config.busy_resync_seconds if busy else config.resync_seconds)
    LOG.info("gpu agent stopping")
    return EXIT_OK
