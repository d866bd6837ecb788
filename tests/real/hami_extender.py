"""HAMi v2.10.0's scheduler extender played in Python, for the real kube-scheduler (issue 20).

The real kube-scheduler calls it over HTTP as it calls HAMi's (`filterVerb: filter`, `bindVerb:
bind`, `nodeCacheCapable: true`, the config HAMi's chart renders: ``scheduler_config``). What it
does, and in which order, follows HAMi v2.10.0's source:

- Filter (pkg/scheduler/scheduler.go:1067-1154): forget the pod's earlier allocation
  (``TakeAndDeletePod``), fit it on a card of a registered node, count it at once
  (``podManager.AddPod``), then one merge patch of the pod with the allocation annotations
  (test_agent_real.HamiScheduler.filter); answer that node only. No node lock here. The card
  is chosen as labcheck models HAMi's fit and spread score (labcheck.hami.CardState).
- Bind (:998-1065): ``acquireNodeLocks``; a pod that is not a PodGroup member (label
  ``scheduling.x-k8s.io/pod-group``, pkg/util/util.go:392) tries the lock once, a member retries
  every 100 ms for ``--node-lock-retry-timeout`` (:972-996). ``LockNode`` / ``SetNodeLock``
  (pkg/util/nodelock/nodelock.go:129-290): GET the node; a held, unexpired lock whose owner pod
  exists (a GET of that pod) is contention; else ``SetNodeLock``: GET the node, then (retried
  by ``DefaultStrategy`` on a 409: 5 steps from 100 ms, factor 2, jitter 0.5) GET it again and
  a merge patch of ``hami.io/mutex.lock`` with its resourceVersion. Then the pod's
  ``bind-phase: allocating`` and ``bind-time``, then the Binding. Any failure releases the
  pod's own lock (``ReleaseNodeLock``: a GET, and only for its own lock a GET and a patch) and
  answers ``Error`` (kube-scheduler: a binding error).
- Every request goes through one client (``HamiClient``), as every request of HAMi's goes
  through its one clientset: one client-go token bucket of ``--kube-qps``/``--kube-burst``,
  which the event recorder shares (a ``FilteringSucceed`` per Filter, a ``BindingSucceed`` or
  ``BindingFailed`` per Bind, posted in the background), over kept-alive connections.
- The lock is freed by whoever completes the allocation: here the real gpu_agent.
- Which nodes HAMi knows (``NodeRegistry``): it reads registrations when its node informer
  reports a node added or deleted, and on a 15 s ticker from its start, never on an update
  (pkg/scheduler/scheduler.go:372, :258-260, :410-440); a node it has not read fails Filter
  with ``node unregistered`` (:850-851); a deleted node is forgotten (``onDelNode``).

Where it differs: Python answers each call in about a millisecond more than Go does; HAMi's
informers (its pod and node listers) are not modelled: Filter and Bind read the pod from what
kube-scheduler sent, and the node's registration once at start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import io
import json
import queue
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from test_agent_real import (
    BIND_TIME,
    LOCK,
    MERGE,
    PHASE,
    REGISTER,
    HamiScheduler,
    Rest,
    annotations,
    rfc3339_now,
)

from labcheck.hami import CardState

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"  # pkg/util/types.go:57
LOCK_RETRY_POLL = 0.1  # acquireNodeLocks: time.After(100 * time.Millisecond)
SET_LOCK_STEPS, SET_LOCK_FIRST, SET_LOCK_FACTOR, SET_LOCK_JITTER = 5, 0.1, 2.0, 0.5
# cmd/scheduler/main.go:75-80: the flags' defaults, for a flag the program does not pass
# (--kube-qps/--kube-burst: client.DefaultQPS/DefaultBurst = client-go's rest.DefaultQPS 5 and
# rest.DefaultBurst 10, pkg/util/client/options.go:30-31).
FLAG_DEFAULTS = {
    "--node-lock-timeout": "5m",
    "--node-lock-retry-timeout": "28s",
    "--kube-qps": "5",
    "--kube-burst": "10",
}
# The resources the chart's managedResources helper names for NVIDIA (templates/_helpers.tpl).
# The NVIDIA resources the chart lists as the extender's, ignoredByScheduler
# (charts/hami/templates/_helpers.tpl:195-202, values.yaml:25-29): kube-scheduler's own fit
# check never sees them.
MANAGED = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/priority",
)
MEM_PERCENT = "nvidia.com/gpumem-percentage"


class Contention(Exception):
    """nodelock.ErrNodeLockContention."""


class TokenBucket:
    """client-go's ``flowcontrol.NewTokenBucketRateLimiter(qps, burst)`` (util/flowcontrol/
    throttle.go:63-64, v0.36.3): golang.org/x/time/rate's Limiter, whose ``Wait`` reserves the
    next token in call order: the bucket refills at ``qps`` up to ``burst``, may go negative,
    and the caller sleeps for the deficit (rate.go:337-380, ``reserveN``)."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps, self.burst, self.clock, self.sleep = qps, burst, clock, sleep
        self.tokens, self.last = float(burst), clock()
        self.lock = threading.Lock()
        self.waited = 0.0  # seconds every caller slept, summed

    def reserve(self) -> float:
        """Take the next token; the seconds until it is there."""
        with self.lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.qps)
            self.last = now
            self.tokens -= 1
            delay = -self.tokens / self.qps if self.tokens < 0 else 0.0
            self.waited += delay
            return delay

    def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            self.sleep(delay)


class HamiClient:
    """HAMi's one clientset (pkg/util/client/client.go:58-92): every request waits on the one
    token bucket ``kubernetes.NewForConfigAndClient`` gives it (client-go kubernetes/
    clientset.go:496-502, rest/request.go:666-680) and reuses kept-alive connections.
    ``requests`` counts them by method and path kind; it answers as ``Rest`` does."""

    def __init__(self, api: Rest, qps: float, burst: int) -> None:
        self.api = api
        self.bucket = TokenBucket(qps, burst)
        self.requests: Counter[str] = Counter()
        self.host = api.server.removeprefix("https://")
        self.idle: queue.SimpleQueue[http.client.HTTPSConnection] = queue.SimpleQueue()
        self.count_lock = threading.Lock()

    def call(self, method: str, path: str, body: Any = None, content_type: str = MERGE) -> dict:
        self.bucket.wait()
        with self.count_lock:
            self.requests[f"{method} {_kind(path)}"] += 1
        data = None if body is None else json.dumps(body).encode()
        headers = {
            "Authorization": f"Bearer {self.api.token}",
            "Content-Type": content_type if method == "PATCH" else "application/json",
        }
        while True:
            connection, reused = self._connection()
            sent = False
            try:
                connection.request(method, path, body=data, headers=headers)
                sent = True
                response = connection.getresponse()
                payload = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                # A kept-alive connection the server had closed: once more on a new one, unless
                # a write may already have reached the server (a second Binding would be a 409).
                if reused and (not sent or method == "GET"):
                    continue
                raise
            self.idle.put(connection)
            if response.status >= 400:
                url = self.api.server + path
                raise urllib.error.HTTPError(
                    url, response.status, response.reason, response.headers, io.BytesIO(payload)
                )
            return json.loads(payload or b"{}")

    def _connection(self) -> tuple[http.client.HTTPSConnection, bool]:
        """An idle kept-alive connection (True), else a new one (False)."""
        try:
            return self.idle.get_nowait(), True
        except queue.Empty:
            fresh = http.client.HTTPSConnection(self.host, context=self.api.context, timeout=10)
            return fresh, False

    def node(self, name: str) -> dict:
        return self.call("GET", f"/api/v1/nodes/{name}")

    def pod(self, name: str, namespace: str) -> dict:
        return self.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")

    def close(self) -> None:
        while True:
            try:
                self.idle.get_nowait().close()
            except queue.Empty:
                return


class EventRecorder:
    """HAMi's event recorder (pkg/scheduler/event.go:45-53): events posted in the background
    through the same client, so they take tokens from the same bucket."""

    def __init__(self, client: HamiClient) -> None:
        self.client = client
        self.pending: queue.SimpleQueue[dict | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def record(self, pod: dict, reason: str, message: str) -> None:
        meta = pod["metadata"]
        self.pending.put(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                },
                "reason": reason,
                "message": message,
                "type": "Normal" if reason.endswith("Succeed") else "Warning",
                "source": {"component": "hami-scheduler"},
            }
        )

    def _send(self) -> None:
        while (event := self.pending.get()) is not None:
            with contextlib.suppress(urllib.error.HTTPError, OSError):
                ns = event["metadata"]["namespace"]
                self.client.call("POST", f"/api/v1/namespaces/{ns}/events", event)

    def close(self) -> None:
        self.pending.put(None)
        self.thread.join(timeout=10)


@dataclasses.dataclass
class BindRecord:
    placed_at: float | None = None  # time.monotonic() when its Binding was accepted
    contended: int = 0  # Bind calls that met a held lock and failed


def _request(pod: dict) -> tuple[int, int, int | None] | None:
    """(MB, cores %, memory % of a card or None) of a one-GPU pod, or None when it asks for no
    HAMi resource."""
    limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
    if "nvidia.com/gpu" not in limits:
        return None
    mem, cores = limits.get("nvidia.com/gpumem", "0"), limits.get("nvidia.com/gpucores", "0")
    pct = quantity(limits[MEM_PERCENT]) if MEM_PERCENT in limits else None
    return quantity(mem), quantity(cores), pct


def _card_mem(card: CardState, mem: int, pct: int | None) -> int:
    """What a card gives a pod: its MB, or `Totalmem * pct / 100` for a percentage of the card
    (pkg/device/nvidia/device.go:780-783)."""
    return card.devmem * pct // 100 if pct is not None and not mem else mem


# The API server stores a quantity canonically: a limit of 30000 comes back as "30k".
SUFFIXES = {"k": 10**3, "M": 10**6, "G": 10**9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(value: str) -> int:
    """An integer resource.Quantity's Value(), as HAMi reads its limits."""
    for suffix, factor in SUFFIXES.items():
        if value.endswith(suffix) and value[: -len(suffix)].isdigit():
            return int(value[: -len(suffix)]) * factor
    return int(value)


class HamiExtender:
    """One node's HAMi extender; see the module docstring. ``records``: per "ns/name"."""

    def __init__(self, api: Rest, node: str, extra_args: list[str]) -> None:
        """``extra_args``: the extender flags the program gives HAMi (builders/hami.py)."""
        self.node = node
        self.lock_expire = flag_seconds(extra_args, "--node-lock-timeout")
        self.lock_retry_timeout = flag_seconds(extra_args, "--node-lock-retry-timeout")
        qps, burst = flag_value(extra_args, "--kube-qps"), flag_value(extra_args, "--kube-burst")
        self.api = HamiClient(api, float(qps), int(burst))
        self.events = EventRecorder(self.api)
        cards = json.loads(annotations(api.node(node))[REGISTER])  # the informer's first list
        self.cards = [
            CardState(c["id"], c["type"], c["devmem"], c["devcore"], c["count"]) for c in cards
        ]
        self.registry = NodeRegistry(api, node)
        self.allocations: dict[str, tuple[CardState, int, int]] = {}  # pod uid -> what it holds
        self.pods: dict[str, dict] = {}  # "ns/name" -> the pod as Filter saw it (the lister)
        self.records: dict[str, BindRecord] = {}
        self.mutex = threading.Lock()  # HAMi's podManager lock
        self.node_mutex = threading.Lock()  # nodeLocks.getLock(node): SetNodeLock, Release
        self.server: ThreadingHTTPServer | None = None

    # -- HTTP ----------------------------------------------------------------------------------

    def serve(self) -> str:
        def answer(path: str, args: dict) -> dict:
            verb = path.rstrip("/").rsplit("/", 1)[-1]
            return self.filter(args) if verb == "filter" else self.bind(args)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), json_handler(answer))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.events.close()
        self.api.close()
        self.registry.close()

    def snapshot(self) -> dict[str, BindRecord]:
        with self.mutex:
            return {k: dataclasses.replace(r) for k, r in self.records.items()}

    def forget_all(self) -> None:
        """The pods were deleted (HAMi's onDelPod): nothing is allocated any more."""
        with self.mutex:
            for card in self.cards:
                card.used = card.usedmem = card.usedcores = 0
            self.allocations.clear()
            self.pods.clear()
            self.records.clear()

    # -- Filter --------------------------------------------------------------------------------

    def filter(self, args: dict) -> dict:
        pod = args["Pod"]
        names = args.get("NodeNames") or []
        wanted = _request(pod)
        if wanted is None:
            return {"NodeNames": names}
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        asked, cores, pct = wanted
        with self.mutex:
            held = self.allocations.pop(meta["uid"], None)  # TakeAndDeletePod
            if held:
                _charge(*held, sign=-1)
            known = self.node in names and self.registry.registered()
            failed = {n: "node unregistered" for n in names if n != self.node or not known}
            fitting = (
                [c for c in self.cards if c.fits(_card_mem(c, asked, pct), cores)] if known else []
            )
            if known and not fitting:
                failed[self.node] = "CardInsufficientMemory"
            if fitting:
                card = min(fitting, key=CardState.score)  # the tenant's gpu policy: spread
                mem = _card_mem(card, asked, pct)
                _charge(card, mem, cores)
                self.allocations[meta["uid"]] = (card, mem, cores)
                self.pods[key] = pod
                self.records.setdefault(key, BindRecord())
        if not fitting:  # FilteringFailed (scheduler.go:1106-1111), through the same client
            message = f"no available node, {len(names)} nodes do not meet"
            self.events.record(pod, "FilteringFailed", message)
            return {"FailedNodes": failed}
        HamiScheduler(self.api, self.node).filter(
            meta["name"], card.id, mem, cores, meta["namespace"]
        )
        self.events.record(pod, "FilteringSucceed", f"Successfully filtered to {self.node}")
        return {"NodeNames": [self.node]}

    # -- Bind ----------------------------------------------------------------------------------

    def bind(self, args: dict) -> dict:
        ns, name, node = args["PodNamespace"], args["PodName"], args["Node"]
        key = f"{ns}/{name}"
        pod = self.pods.get(key)
        if pod is None:
            return {"Error": f"pod {key} not found in cache"}
        try:
            self.acquire_lock(pod)
        except (Contention, urllib.error.HTTPError) as exc:
            with self.mutex:
                self.records.setdefault(key, BindRecord()).contended += isinstance(exc, Contention)
            self.release_own(ns, name)
            self.events.record(pod, "BindingFailed", str(exc))
            return {"Error": f"node {node} is locked: {exc}"}
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        try:
            phase = {PHASE: "allocating", BIND_TIME: str(int(time.time()))}
            self.api.call("PATCH", path, {"metadata": {"annotations": phase}})
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "uid": args["PodUID"]},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            self.api.call("POST", f"{path}/binding", binding)
        except urllib.error.HTTPError as exc:
            self.release_own(ns, name)
            self.events.record(pod, "BindingFailed", str(exc))
            return {"Error": f"bind {key}: {exc}"}
        with self.mutex:
            self.records.setdefault(key, BindRecord()).placed_at = time.monotonic()
        self.events.record(pod, "BindingSucceed", f"Successfully binding node [{node}]")
        return {}

    def acquire_lock(self, pod: dict) -> None:
        member = bool((pod["metadata"].get("labels") or {}).get(POD_GROUP_LABEL))
        if not member or self.lock_retry_timeout <= 0:
            self.lock_node(pod)
            return
        deadline = time.monotonic() + self.lock_retry_timeout
        while True:
            try:
                self.lock_node(pod)
                return
            except Contention:
                if time.monotonic() > deadline:
                    raise
                with self.mutex:
                    self.records.setdefault(_key(pod), BindRecord()).contended += 1
            time.sleep(LOCK_RETRY_POLL)

    def lock_node(self, pod: dict) -> None:
        """nodelock.LockNode: a free node, an expired lock or one of a gone pod is taken."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        value = annotations(self.api.node(self.node)).get(LOCK)
        if value is not None:
            stamp, owner_ns, owner = [*value.split(","), "", ""][:3]
            age = time.time() - _parse_rfc3339(stamp)
            if (owner_ns, owner) == (ns, name):
                return
            if age <= self.lock_expire and _pod_exists(self.api, owner_ns, owner):
                raise Contention(value)
            self.release(lambda v: v == value)
        self.set_lock(ns, name)

    def set_lock(self, ns: str, name: str) -> None:
        """nodelock.SetNodeLock: refuse a held lock; a 409 is retried with DefaultStrategy."""
        with self.node_mutex:
            self._set_lock(ns, name)

    def _set_lock(self, ns: str, name: str) -> None:
        if LOCK in annotations(self.api.node(self.node)):  # nodelock.go:136-140
            raise Contention("locked")
        delay = SET_LOCK_FIRST
        for step in range(SET_LOCK_STEPS):
            node = self.api.node(self.node)
            value = annotations(node).get(LOCK)
            if value is not None:
                if value.endswith(f",{ns},{name}"):
                    return
                raise Contention(value)
            body = {
                "metadata": {
                    "annotations": {LOCK: f"{rfc3339_now()},{ns},{name}"},
                    "resourceVersion": node["metadata"]["resourceVersion"],
                }
            }
            try:
                self.api.call("PATCH", f"/api/v1/nodes/{self.node}", body)
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 409 or step == SET_LOCK_STEPS - 1:
                    raise
            time.sleep(delay * (1 + SET_LOCK_JITTER * random.random()))
            delay *= SET_LOCK_FACTOR

    def release_own(self, ns: str, name: str) -> None:
        """releaseAllDevices after a failed Bind: only a lock this pod holds."""
        with contextlib.suppress(urllib.error.HTTPError):  # HAMi logs it; the agent frees it
            self.release(lambda v: v.endswith(f",{ns},{name}"))

    def release(self, still: Any) -> None:
        with self.node_mutex:
            self._release(still)

    def _release(self, still: Any) -> None:
        value = annotations(self.api.node(self.node)).get(LOCK)  # nodelock.go:185-196
        if value is None or not still(value):
            return
        for _ in range(SET_LOCK_STEPS):
            node = self.api.node(self.node)
            value = annotations(node).get(LOCK)
            if value is None or not still(value):
                return
            body = {
                "metadata": {
                    "annotations": {LOCK: None},
                    "resourceVersion": node["metadata"]["resourceVersion"],
                }
            }
            try:
                self.api.call("PATCH", f"/api/v1/nodes/{self.node}", body)
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    raise


class NodeRegistry:
    """Whether HAMi has read the node's registration, as its register loop decides it: a pass
    on every node add or delete its informer reports and on a 15 s ticker (HAMi v2.10.0
    pkg/scheduler/scheduler.go:372 AddFunc/DeleteFunc -> doNodeNotify, :410-440 the ticker,
    :443-555 ``register``: a node whose annotation decodes is added). A delete forgets the node
    at once (``onDelNode``). ``restart_ticker`` starts the ticker anew, as a restarted HAMi's."""

    TICK_SECONDS = 15.0

    def __init__(self, api: Rest, node: str) -> None:
        self.api, self.node = api, node
        self.lock = threading.Condition()
        self.latest: dict | None = None  # the node as the informer last saw it
        self.known = False
        self.reads = 0  # register passes that found the node registered
        self.stopped = threading.Event()
        listed = api.call("GET", f"/api/v1/nodes?fieldSelector=metadata.name%3D{node}")
        self.latest = (listed.get("items") or [None])[0]
        self._register_pass()  # the informer's first list: an add
        self.tick_epoch = time.monotonic()
        version = listed["metadata"]["resourceVersion"]
        threading.Thread(target=self._watch, args=(version,), daemon=True).start()
        threading.Thread(target=self._tick, daemon=True).start()

    def registered(self) -> bool:
        with self.lock:
            return self.known

    def restart_ticker(self) -> None:
        with self.lock:
            self.tick_epoch = time.monotonic()
            self.lock.notify_all()

    def close(self) -> None:
        self.stopped.set()
        with self.lock:
            self.lock.notify_all()

    def _register_pass(self) -> None:
        with self.lock:
            value = annotations(self.latest).get(REGISTER) if self.latest else None
            if value and _decodes(value):
                self.known = True
                self.reads += 1

    def _tick(self) -> None:
        with self.lock:
            while not self.stopped.is_set():
                elapsed = time.monotonic() - self.tick_epoch
                wait = self.TICK_SECONDS - elapsed % self.TICK_SECONDS
                if not self.lock.wait(timeout=wait) and not self.stopped.is_set():
                    self._register_pass()  # the Condition's lock is reentrant

    def _watch(self, version: str) -> None:
        selector = f"fieldSelector=metadata.name%3D{self.node}"
        while not self.stopped.is_set():
            path = f"/api/v1/nodes?watch=1&{selector}&resourceVersion={version}&timeoutSeconds=60"
            request = urllib.request.Request(self.api.server + path)
            request.add_header("Authorization", f"Bearer {self.api.token}")
            try:
                with urllib.request.urlopen(request, context=self.api.context, timeout=90) as out:
                    for line in out:
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: the informer relists
                            raise ValueError(event["object"].get("message", "watch error"))
                        version = event["object"]["metadata"]["resourceVersion"]
                        self._on_event(event["type"], event["object"])
            except (OSError, ValueError):
                time.sleep(1)
                version = self._relist(version)

    def _relist(self, version: str) -> str:
        """The informer's relist: the node as it is now (an update: no register pass)."""
        try:
            path = f"/api/v1/nodes?fieldSelector=metadata.name%3D{self.node}"
            listed = self.api.call("GET", path)
        except (OSError, ValueError):
            return version
        with self.lock:
            self.latest = (listed.get("items") or [None])[0]
            if self.latest is None:
                self.known = False
        return listed["metadata"]["resourceVersion"]

    def _on_event(self, kind: str, node: dict) -> None:
        with self.lock:
            self.latest = None if kind == "DELETED" else node
            if kind == "DELETED":
                self.known = False  # onDelNode -> rmNode
        if kind in ("ADDED", "DELETED"):
            self._register_pass()


def _decodes(value: str) -> bool:
    try:
        return bool(json.loads(value))
    except ValueError:
        return False


def json_handler(answer: Callable[[str, dict], dict]) -> type[BaseHTTPRequestHandler]:
    """An HTTP handler that answers each JSON POST with ``answer(path, body)`` as JSON."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps(answer(self.path, args)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    return Handler


def flag_value(args: list[str], flag: str) -> str:
    """The last value given for ``flag`` (as Go's flag package takes it), else its default."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return values[-1] if values else FLAG_DEFAULTS[flag]


def flag_seconds(args: list[str], flag: str) -> float:
    """A Go duration flag's value (``28s``, ``5m``) as the extender would parse it."""
    value = flag_value(args, flag)
    return float(value[:-1]) * {"s": 1, "m": 60}[value[-1]]


def _kind(path: str) -> str:
    """``nodes``, ``pods``, ``pods/binding``, ``events``: what a request path names."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[parts.index("namespaces") + 2 :] if "namespaces" in parts else parts[2:]
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")


def _charge(card: CardState, mem: int, cores: int, sign: int = 1) -> None:
    card.used += sign
    card.usedmem += sign * mem
    card.usedcores += sign * cores


def _key(pod: dict) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _parse_rfc3339(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.timezone


def _pod_exists(api: Rest, ns: str, name: str) -> bool:
    if not ns or not name:
        return True  # a legacy timestamp-only lock: only its expiry frees it
    try:
        api.pod(name, ns)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def scheduler_config(extender_url: str, kubeconfig: str, backoff: tuple[int, int] | None) -> dict:
    """The KubeSchedulerConfiguration HAMi v2.10.0's chart renders (templates/scheduler/
    configmap.yaml, no admission webhook TLS here), with the test's kubeconfig; ``backoff``
    adds podInitialBackoffSeconds/podMaxBackoffSeconds, which the chart cannot render."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "hami-scheduler"}],
        "extenders": [
            {
                "urlPrefix": extender_url,
                "enableHTTPS": False,
                "filterVerb": "filter",
                "bindVerb": "bind",
                "nodeCacheCapable": True,
                "weight": 1,
                "httpTimeout": "30s",
                "managedResources": [{"name": n, "ignoredByScheduler": True} for n in MANAGED],
            }
        ],
    }
    if backoff:
        config["podInitialBackoffSeconds"], config["podMaxBackoffSeconds"] = backoff
    return config
