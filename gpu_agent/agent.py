"""Reconcile from cached nodes and pods that LIST + WATCH keep current.

A full pass (reconcile_once, Agent.relist) lists nodes and pods and judges everything: it
is level-triggered, so a restart or a missed event converges. Between relists, watch
events update the caches and only what they touch is judged again (Agent.flush).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import hami
from .config import Config
from .kube import ApiError, AuthError, Conflict, Gone, KubeApi, NotFound, Obj, Unprocessable

LOG = logging.getLogger("gpu_agent")

# Bound, unfinished pods only: that is every allocation to finish. A lock owner outside the
# list (mid-bind, finished or gone) is looked up by GET before its lock is judged.
POD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
# Unbound pods waiting for a scheduler: where pods HAMi rejected as "node unregistered" are.
UNSCHEDULED_SELECTOR = "spec.nodeName=,status.phase=Pending"
UNREGISTERED_REASON = "node unregistered"  # HAMi's Filter text for a node it has not read
# A node annotation only the agent writes: changing it is a Node update event, which makes
# kube-scheduler retry every pod an extender rejected.
REQUEUE_ANNOTATION = "gpu-agent.lab/requeue-after-register"
MAX_CONFLICT_RETRIES = 5
# How long a 401/403 may last before the agent gives up (exit 3). A kube-apiserver that has just
# started answers 403 ("clusterrole ... not found") until its RBAC caches have synced, and can
# be reached before it is ready: a restart of the tenant's API server must not end the agent.
AUTH_GRACE_SECONDS = 30.0
TERMINAL_PHASES = ("Succeeded", "Failed")

EXIT_OK, EXIT_BUG, EXIT_CONFIG, EXIT_AUTH = 0, 1, 2, 3
RESOURCES = ("nodes", "pods")
PodKey = tuple[str, str]


@dataclass
class PassSummary:
    registered: list[str] = field(default_factory=list)  # nodes whose annotation/labels we set
    capacity: list[str] = field(default_factory=list)  # nodes whose nvidia.com/gpu we set
    completed: list[str] = field(default_factory=list)  # "ns/pod" set to bind-phase success
    released: list[str] = field(default_factory=list)  # "node ns/pod reason"
    requeued: list[str] = field(default_factory=list)  # "ns/pod" rejected as node unregistered
    errors: list[str] = field(default_factory=list)

    @property
    def actions(self) -> int:
        done = (self.registered, self.capacity, self.completed, self.released, self.requeued)
        return sum(map(len, done))


def _meta(obj: Obj) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Obj) -> dict[str, str]:
    return _meta(obj).get("annotations") or {}


def _key(pod: Obj) -> str:
    return f"{_meta(pod).get('namespace')}/{_meta(pod).get('name')}"


def _pod_key(pod: Obj) -> PodKey:
    return (_meta(pod).get("namespace") or "", _meta(pod).get("name") or "")


class _Pass:
    def __init__(
        self, api: KubeApi, config: Config, nodes: dict[str, Obj], pods: dict[PodKey, Obj]
    ) -> None:
        self.api, self.config, self.s = api, config, PassSummary()
        self.nodes = nodes  # our nodes, latest copy we have seen (our writes update it)
        self.pods = pods  # bound, unfinished pods as listed or watched, and our writes' results
        self.unseen_owner: list[str] = []  # nodes locked by a pod we have not seen yet
        self.lock_judged: set[PodKey] = set()  # owners whose lock complete() already judged
        self.locks_seen: set[str] = set()  # nodes whose new lock a write's response showed

    def store_node(self, name: str, node: Obj) -> Obj:
        """Cache a node the server returned. Its lock can be one no event has shown yet: the
        event, older than this copy, is then dropped, so the lock is judged in this pass."""
        if _annotations(node).get(hami.LOCK_ANNOTATION) != _annotations(self.nodes[name]).get(
            hami.LOCK_ANNOTATION
        ):
            self.locks_seen.add(name)
        self.nodes[name] = node
        return node

    def guard(self, what: str, fn: Callable[..., Any], *args: Any) -> bool:
        """Contain one item's failure to that item; only auth errors end the pass."""
        try:
            fn(*args)
        except AuthError:
            raise
        except ApiError as exc:
            self.s.errors.append(f"{what}: {exc}")
            LOG.warning("%s failed, retrying later: %s", what, exc)
            return False
        return True

    # registration
    def register(self, name: str) -> None:
        node = self.nodes[name]
        cards = self.config.nodes[name]
        value = hami.register_value(name, cards)
        current = _annotations(node).get(hami.REGISTER_ANNOTATION)
        meta: dict[str, Any] = {}
        # Same text is the usual case; else compare decoded (another writer's formatting).
        if current != value and hami.decode_register(current) != hami.register_cards(name, cards):
            meta["annotations"] = {hami.REGISTER_ANNOTATION: value}
        labels = _meta(node).get("labels") or {}
        missing = {k: v for k, v in self.config.node_labels.items() if labels.get(k) != v}
        if missing:
            meta["labels"] = missing
        if meta:  # we own these keys: no resourceVersion precondition needed
            node = self.store_node(name, self.api.patch_node_metadata(name, {"metadata": meta}))
            self.s.registered.append(name)
            LOG.info("registered node=%s cards=%d set=%s", name, len(cards), sorted(meta))

        total = str(sum(c.count for c in self.config.nodes[name]))
        patch = _capacity_patch(node.get("status"), total)
        if patch:
            self.store_node(name, self.api.patch_node_status(name, patch))
            self.s.capacity.append(name)
            LOG.info("set capacity node=%s %s=%s", name, hami.GPU_RESOURCE, total)

    # pods rejected while HAMi had not read a registration yet
    def requeue_rejected(self, name: str) -> None:
        """Touch `name` if some pod was rejected as "node unregistered", so it is retried.

        HAMi reads registrations only on a node add and on its 15 s tick, and writes nothing
        when it does; kube-scheduler retries a pod an extender rejected only on a cluster
        event (or after 5 min). Called once HAMi has surely read our registration of `name`.
        """
        pods = self.api.list_pods(UNSCHEDULED_SELECTOR).items
        waiting = sorted(_key(p) for p in pods if _rejected_as_unregistered(p))
        if not waiting:
            return
        version = _meta(self.nodes[name]).get("resourceVersion") or ""
        body = {"metadata": {"annotations": {REQUEUE_ANNOTATION: version}}}
        self.store_node(name, self.api.patch_node_metadata(name, body))  # our key: no precondition
        self.s.requeued.extend(waiting)
        LOG.info("requeued pods rejected as unregistered node=%s pods=%s", name, ",".join(waiting))

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
            try:
                try:
                    self._remember(self.api.patch_pod(ns, name, _completion_patch(pod)))
                except (Unprocessable, Conflict):  # a `test` failed: re-read and re-judge
                    pod = self._remember(self.api.get_pod(ns, name))
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
        self.lock_judged.add((ns, name))  # once per pass: a failed release is retried later
        self.release(node, lambda v: hami.owns_lock(v, ns, name), f"{ns}/{name}", "allocated")

    def _remember(self, pod: Obj) -> Obj:
        """Cache a pod the server just returned: the events still on their way (the kubelet's
        status write before our patch, the echo of the patch) are then older and dropped, not
        taken for a pod that still needs completing (a second patch, a 422 and a GET)."""
        key = _pod_key(pod)
        if key in self.pods:  # only pods the watch keeps: a finished one leaves with DELETED
            self.pods[key] = pod
        return pod

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
                self.store_node(name, self.api.patch_node_metadata(name, body))
            except Conflict:  # node changed (kubelet, scheduler): re-read and re-judge
                node = self.store_node(name, self.api.get_node(name))
                continue
            self.s.released.append(f"{name} {owner} {why}")
            LOG.info("released lock node=%s owner=%s reason=%s", name, owner, why)
            return
        raise Conflict(409, f"lock on {name} kept changing")

    def release_if_orphaned(self, name: str, may_get: bool = True) -> None:
        value = _annotations(self.nodes[name]).get(hami.LOCK_ANNOTATION)
        owner = hami.lock_owner(value) if value else None
        if owner is None:
            return  # no lock, or a legacy timestamp-only one the scheduler expires itself
        pod = self.pods.get(owner)
        fetched = False
        if pod is None:
            if not may_get:  # usually mid-bind: its pod event is on the way
                self.unseen_owner.append(name)
                return
            try:
                pod = self.api.get_pod(*owner)
                fetched = True
            except NotFound:
                pod = None
        why = _stale_reason(pod, name)
        if why:  # compare the exact value: a new lock by anyone is a different string
            self.release(name, lambda v: v == value, "/".join(owner), why)
        elif fetched:  # alive but unbound, so no event tells us when it goes: look again
            self.unseen_owner.append(name)


def _capacity_patch(status: Obj | None, total: str) -> Obj | None:
    """A merge patch of nodes/status setting nvidia.com/gpu, or None when both already match.

    RFC 7386 merges maps: a missing capacity/allocatable map is created and the kubelet's
    cpu/memory/pods beside it are kept. (A JSON Patch `add` of an empty map replaces one a
    kubelet wrote a moment earlier.) allocatable too: kubelet copies capacity there within
    ~10 s anyway, and HAMi's scheduler health check reads allocatable.
    """
    wrong = {
        part: {hami.GPU_RESOURCE: total}
        for part in ("capacity", "allocatable")
        if str(((status or {}).get(part) or {}).get(hami.GPU_RESOURCE)) != total
    }
    return {"status": wrong} if wrong else None


def _annotation_path(key: str) -> str:
    """RFC 6901 pointer to an annotation: '~' and '/' in the key are escaped."""
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def _completion_patch(pod: Obj) -> list[Obj]:
    """JSON Patch that finishes an allocation only if what we judged is still there.

    The `test` ops pin exactly what the decision read (the pod's uid, bind-phase
    `allocating`, the to-allocate value), so a kubelet status write in between changes
    nothing, while the scheduler rewriting the allocation makes the server answer 422.
    A resourceVersion precondition would fail on every such status write.
    """
    ann = _annotations(pod)
    value = ann[hami.TO_ALLOCATE_ANNOTATION]
    phase_path = _annotation_path(hami.BIND_PHASE_ANNOTATION)
    value_path = _annotation_path(hami.TO_ALLOCATE_ANNOTATION)
    uid = _meta(pod).get("uid")
    ops: list[Obj] = [{"op": "test", "path": "/metadata/uid", "value": uid}] if uid else []
    ops += [
        {"op": "test", "path": phase_path, "value": hami.PHASE_ALLOCATING},
        {"op": "test", "path": value_path, "value": value},
    ]
    if hami.needs_allocation(value):
        ops.append({"op": "replace", "path": value_path, "value": hami.erase_to_allocate(value)})
    ops.append({"op": "replace", "path": phase_path, "value": hami.PHASE_SUCCESS})
    return ops


def _older(event_obj: Obj, cached: Obj | None) -> bool:
    """True when a watch event shows an object older than the cached copy.

    The cache also takes the responses to our own PATCHes, so the echo of an earlier write
    can arrive after a later one and would roll the cache back (D2). resourceVersions are
    compared as integers: Kubernetes v1.35 makes them comparable within one resource type
    (KEP-5504; with etcd they are its modification revisions). A value that is not an
    integer (another storage) is never judged older, which is the behaviour before.
    """
    if cached is None:
        return False
    try:
        return int(_meta(event_obj)["resourceVersion"]) <= int(_meta(cached)["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


def _rejected_as_unregistered(pod: Obj) -> bool:
    """The scheduler's PodScheduled=False condition names HAMi's "node unregistered"."""
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        and UNREGISTERED_REASON in (c.get("message") or "")
        for c in (pod.get("status") or {}).get("conditions") or []
    )


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


class Agent:
    """Caches of our nodes and of the bound, unfinished pods, kept current by LIST + WATCH.

    relist() lists both and judges everything; apply() takes one watch event into the
    caches and marks what it touches; flush() judges only what is marked; step() does a
    relist when one is needed or due, else a flush. follow() reads one watch stream.
    run() calls these from several threads, serialised by self.cond.
    """

    def __init__(
        self, api: KubeApi, config: Config, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.api, self.config, self.clock = api, config, clock
        self.cond = threading.Condition()
        self.nodes: dict[str, Obj] = {}  # configured nodes only
        self.pods: dict[PodKey, Obj] = {}
        self.version = dict.fromkeys(RESOURCES, "")  # where each watch resumes
        self.synced = dict.fromkeys(RESOURCES, False)  # False: the next step relists
        self.generation = 0  # bumped by relist: streams on the old caches are dropped
        self.relist_due = 0.0  # the periodic relist
        self.listed_at = float("-inf")  # a relist a watch asks for waits resync_seconds after
        # Marked by events (dicts as ordered sets: work happens in event order).
        self.dirty_nodes: dict[str, None] = {}
        self.dirty_pods: dict[PodKey, None] = {}
        self.gone: set[PodKey] = set()  # left the pod watch: deleted or finished
        self.retry: dict[tuple[str, Any], float] = {}  # ("node"|"pod", key) -> when
        self.owner_wait: dict[str, tuple[str, float]] = {}  # node -> (lock value, when)
        self.requeue_at: dict[str, float] = {}  # node -> when HAMi has read our registration
        self.failure: BaseException | None = None  # from a watch thread, raised by step()
        self.refused_since: dict[str, float] = {}  # "pass"/"watch <res>" -> first 401/403
        self.closed = False

    # ------------------------------------------------------------------ passes
    def relist(self) -> PassSummary:
        """LIST nodes and pods, replace the caches and judge everything (level-triggered)."""
        self.synced = dict.fromkeys(RESOURCES, False)  # a failed LIST is retried next step
        self.generation += 1
        self.listed_at = self.clock()
        # Nodes before pods: a lock seen here was taken by a pod that already existed, so it
        # is in the pod list unless it is gone or still unbound.
        nodes = self.api.list_nodes()
        pods = self.api.list_pods(POD_SELECTOR)
        self.nodes = {}
        for node in nodes.items:
            name = _meta(node).get("name")
            if name in self.config.nodes:
                self.nodes[name] = node
        self.pods = {_pod_key(p): p for p in pods.items}
        self.version = {"nodes": nodes.resource_version, "pods": pods.resource_version}
        self.synced = dict.fromkeys(RESOURCES, True)
        self.relist_due = self.listed_at + self.config.relist_seconds
        self.dirty_nodes = dict.fromkeys(self.nodes)
        self.dirty_pods = dict.fromkeys(self.pods)
        self.gone, self.retry, self.owner_wait = set(), {}, {}
        with self.cond:
            self.cond.notify_all()  # watch threads wait for a list to start from
        return self.flush(full=True)

    def flush(self, full: bool = False) -> PassSummary:
        """Judge what events marked (everything when full), plus retries that are due."""
        now = self.clock()
        look_up: set[str] = set()  # nodes whose unseen lock owner is GET now
        for (kind, key), due in list(self.retry.items()):
            if due <= now:
                del self.retry[kind, key]
                if kind == "node":
                    self.dirty_nodes[key] = None
                    look_up.add(key)
                else:
                    self.dirty_pods[key] = None
        for name, (value, due) in list(self.owner_wait.items()):
            if due <= now:
                del self.owner_wait[name]
                node = self.nodes.get(name)
                if node is not None and _annotations(node).get(hami.LOCK_ANNOTATION) == value:
                    look_up.add(name)  # the same lock, its owner still unseen: GET it now
                    self.dirty_nodes[name] = None
        settled = [name for name, due in self.requeue_at.items() if due <= now]
        dirty_nodes, dirty_pods, gone = self.dirty_nodes, self.dirty_pods, self.gone
        self.dirty_nodes, self.dirty_pods, self.gone = {}, {}, set()
        if not (dirty_nodes or dirty_pods or gone or settled):
            return PassSummary()

        p = _Pass(self.api, self.config, self.nodes, self.pods)
        # One node event retries every such pod: one look and at most one touch. A refusal
        # (401/403) propagates before the entries are dropped: a relist does not re-arm them.
        target = next((name for name in settled if name in self.nodes), None)
        looked = not target or p.guard(f"requeue after {target}", p.requeue_rejected, target)
        for name in settled:
            del self.requeue_at[name]
        if not looked:
            self.requeue_at[target] = now + self.config.resync_seconds
        for name in [n for n in self.nodes if n in dirty_nodes]:
            if not p.guard(f"register {name}", p.register, name):
                self.retry[("node", name)] = now + self.config.resync_seconds
        if self.config.requeue_after_register_seconds:  # HAMi reads what we wrote by then
            for name in {*p.s.registered, *p.s.capacity}:
                self.requeue_at[name] = now + self.config.requeue_after_register_seconds
        for key in dirty_pods:
            pod = self.pods.get(key)
            if (
                pod is not None
                and p.is_candidate(pod)
                and not p.guard(f"complete {_key(pod)}", p.complete, pod)
            ):
                self.retry[("pod", key)] = now + self.config.resync_seconds
        for name in list(self.nodes):
            value = _annotations(self.nodes[name]).get(hami.LOCK_ANNOTATION)
            owner = hami.lock_owner(value) if value else None
            seen = name in dirty_nodes or name in p.locks_seen
            if owner is None or not (seen or owner in dirty_pods or owner in gone):
                continue
            if owner in p.lock_judged:
                continue
            may_get = full or name in look_up or owner in gone
            if not p.guard(f"lock check {name}", p.release_if_orphaned, name, may_get):
                self.retry[("node", name)] = now + self.config.resync_seconds
        for name in p.unseen_owner:  # normally bound within moments; else look it up then
            value = _annotations(self.nodes[name]).get(hami.LOCK_ANNOTATION) or ""
            if self.owner_wait.get(name, ("",))[0] != value:  # a busy node cannot delay it
                self.owner_wait[name] = (value, now + self.config.resync_seconds)
        return p.s

    def step(self) -> PassSummary:
        """Relist when a watch asked for it or it is due; otherwise judge what changed."""
        if self.failure is not None:
            raise self.failure
        if self.clock() >= self._relist_at():
            return self.relist()
        return self.flush()

    def _relist_at(self) -> float:
        if all(self.synced.values()):
            return self.relist_due
        # Asked for by a watch (410, ERROR) or after a failed LIST: soon, but never in a
        # tight loop against a server that keeps answering 410.
        return self.listed_at + self.config.resync_seconds

    def next_due(self) -> float:
        """When step() has work even if no event arrives."""
        dues = [self._relist_at(), *self.retry.values(), *self.requeue_at.values()]
        dues += [due for _, due in self.owner_wait.values()]
        return min(dues)

    # ------------------------------------------------------------------ events
    def apply(self, resource: str, event: Obj) -> None:
        """Take one watch event into the caches and mark what it touches."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":  # 410 Expired (history compacted) or another stream error
            self.synced[resource] = False
            LOG.info("watch %s: %s; relisting", resource, obj.get("message") or obj)
            return
        version = _meta(obj).get("resourceVersion")
        if version:
            self.version[resource] = str(version)
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only the version moves
        if resource == "nodes":
            name = _meta(obj).get("name")
            if name not in self.config.nodes or _older(obj, self.nodes.get(name)):
                return
            if kind == "DELETED":
                self.nodes.pop(name, None)
                return
            if name not in self.nodes:  # (re)joined: allocations may have waited for it
                for key, pod in self.pods.items():
                    if _annotations(pod).get(hami.NODE_ANNOTATION) == name:
                        self.dirty_pods[key] = None
            self.nodes[name] = obj
            self.dirty_nodes[name] = None
        else:
            key = _pod_key(obj)
            if _older(obj, self.pods.get(key)):
                return
            if kind == "DELETED":  # deleted, or finished (it left the field selector)
                self.pods.pop(key, None)
                self.gone.add(key)
            else:
                self.pods[key] = obj
                self.dirty_pods[key] = None

    def follow(self, resource: str, timeout_seconds: float) -> int:
        """Read one watch stream of `resource` from the last version seen until it ends.

        Returns the number of events applied. A stream that ends is simply followed again
        from where it stopped; a 410 or an ERROR event makes the next step() relist.
        """
        with self.cond:
            if not self.synced[resource] or self.closed:
                return 0
            generation, version = self.generation, self.version[resource]
        stream = None
        applied = 0
        try:
            if resource == "nodes":
                stream = self.api.watch_nodes(version, timeout_seconds)
            else:
                stream = self.api.watch_pods(version, timeout_seconds, POD_SELECTOR)
            self.accepted(f"watch {resource}")
            for event in stream:
                with self.cond:
                    if generation != self.generation or self.closed:
                        break  # relisted meanwhile: the next stream starts at the list
                    self.apply(resource, event)
                    applied += 1
                    self.cond.notify_all()
                    if not self.synced[resource]:
                        break
        except Gone as exc:
            with self.cond:
                if generation == self.generation:
                    self.synced[resource] = False
                    LOG.info("watch %s: %s; relisting", resource, exc)
                    self.cond.notify_all()
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return applied

    # ------------------------------------------------------------------ threads
    def pump(self, resource: str, stop: threading.Event) -> None:
        """Watch thread: follow `resource` until stopped; hand fatal errors to step()."""
        while True:
            with self.cond:
                while not (stop.is_set() or self.closed or self.synced[resource]):
                    self.cond.wait(1.0)
                if stop.is_set() or self.closed:
                    return
            started = self.clock()
            try:
                applied = self.follow(resource, self.config.relist_seconds)
            except AuthError as exc:
                if self.refused_for_good(exc, f"watch {resource}"):
                    self._fail(exc)
                    return
                LOG.warning("watch %s refused, retrying: %s", resource, exc)
                stop.wait(self.config.resync_seconds)
                continue
            except ApiError as exc:  # dropped connection, 5xx...: resume from the version
                LOG.warning("watch %s failed, resuming: %s", resource, exc)
                stop.wait(self.config.resync_seconds)
                continue
            except Exception as exc:  # a bug: let the main loop exit with it
                self._fail(exc)
                return
            quick = applied == 0 and self.clock() - started < 1.0
            if quick and self.synced[resource]:  # a stream that ends at once: no tight loop
                stop.wait(self.config.resync_seconds)

    def accepted(self, source: str) -> None:
        """`source` ("pass", "watch nodes", "watch pods") got through: refusals start over."""
        with self.cond:
            self.refused_since.pop(source, None)

    def refused_for_good(self, exc: AuthError, source: str) -> bool:
        """Whether `exc` ends the agent: a TLS or token-file failure at once; a 401/403 once
        `source` has been refused for AUTH_GRACE_SECONDS without getting through meanwhile."""
        if exc.status not in (401, 403):
            return True
        with self.cond:
            now = self.clock()
            return now - self.refused_since.setdefault(source, now) >= AUTH_GRACE_SECONDS

    def _fail(self, exc: BaseException) -> None:
        with self.cond:
            self.failure = exc
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def reconcile_once(api: KubeApi, config: Config) -> PassSummary:
    """One full pass: list nodes and pods once, then write only what differs from the target."""
    return Agent(api, config).relist()


def run(
    api: KubeApi,
    config: Config,
    stop_event: threading.Event,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Reconcile until stop_event is set; return the process exit code.

    One thread per resource reads its watch; this thread does every LIST and write.
    """
    LOG.info("gpu agent started nodes=%s relist=%ss", sorted(config.nodes), config.relist_seconds)
    agent = Agent(api, config, clock)
    for resource in RESOURCES:
        threading.Thread(
            target=agent.pump, args=(resource, stop_event), name=f"watch-{resource}", daemon=True
        ).start()
    try:
        while not stop_event.is_set():
            try:
                with agent.cond:
                    agent.step()
                    agent.accepted("pass")  # after a refusal, step() is a whole relist
                    wait = agent.next_due() - clock()
                    if wait > 0 and not (agent.dirty_nodes or agent.dirty_pods or agent.gone):
                        # woken by an event; 1 s at most so a stop request is seen soon
                        agent.cond.wait(min(wait, 1.0))
            except AuthError as exc:
                if exc is agent.failure or agent.refused_for_good(exc, "pass"):
                    LOG.error("fatal, exiting: %s", exc)
                    return EXIT_AUTH
                # The marks of an interrupted pass are lost: the next step, after the pause,
                # is a whole relist (so that its success means the refusal is over).
                LOG.warning("refused, relisting: %s", exc)
                with agent.cond:
                    agent.synced = dict.fromkeys(RESOURCES, False)
                    agent.listed_at = float("-inf")
                stop_event.wait(config.resync_seconds)
            except ApiError as exc:  # a LIST failed (5xx, timeout...): relist after a pause
                LOG.warning("pass failed, retrying: %s", exc)
                stop_event.wait(config.resync_seconds)
            except Exception:  # a bug: exit so it shows as a restart instead of a silent loop
                LOG.exception("unexpected error, exiting")
                return EXIT_BUG
    finally:
        agent.close()
    LOG.info("gpu agent stopping")
    return EXIT_OK
