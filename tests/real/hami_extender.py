"""HAMi v2.10.0's scheduler extender played in Python, for the real kube-scheduler (issue 20).

The real kube-scheduler calls it over HTTP as it calls HAMi's (`filterVerb: filter`, `bindVerb:
bind`, `nodeCacheCapable: true`, the config HAMi's chart renders: ``scheduler_config``). What it
does, and in which order, follows HAMi v2.10.0's source:

- Filter (pkg/scheduler/scheduler.go:1067-1154): forget the pod's earlier allocation
  (``TakeAndDeletePod``), fit every app container in turn on the cards of a registered node
  (``fit_pod``: each container's ``nvidia.com/gpu`` cards, MB or percentage, cores, read as
  ``GenerateResourceRequests`` reads them; the cards ordered by the spread policy and checked
  as HAMi's NVIDIA ``Fit`` checks them, with its reason texts), count it at once
  (``podManager.AddPod``), then one merge patch of the pod with the allocation annotations,
  one ``;``-terminated slot per container that asked for cards
  (test_agent_real.HamiScheduler.patch_allocation);
  answer that node only. No node lock here. Events as HAMi words them.
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
  with ``node unregistered`` (:850-851); a deleted node is forgotten (``onDelNode``). Each pass
  writes HAMi's handshake annotations on a node that lacks them.

Where it differs from HAMi (compared with it on the same pods: docs/hami-stand-in.md): Python
answers each call in about a millisecond more than Go does; HAMi's informers (its pod and node
listers) are not modelled: Filter and Bind read the pod from what kube-scheduler sent, and the
node's registration once at start; one node, the spread policy; no GPU quota, init containers,
card type or UUID selection, NUMA, MIG or health verdicts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
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
GPU_RESOURCE = "nvidia.com/gpu"
MEM_RESOURCE = "nvidia.com/gpumem"
CORES_RESOURCE = "nvidia.com/gpucores"
MEM_PERCENT = "nvidia.com/gpumem-percentage"
PCT_UNSET = 101  # GenerateResourceRequests' "no percentage asked"
# The node handshake annotation of each device vendor HAMi v2.10.0 initializes with the chart's
# device config and whose ``CheckHealth`` writes one (``util.HandshakeAnnos``): NVIDIA
# (pkg/device/nvidia/device.go:41), Hygon DCU (hygon/device.go:39), Kunlun XPU
# (kunlun/vdevice.go:39), Vastai (vastai/device.go:39), Biren (biren/device.go:37). Ascend and
# Iluvatar, which would add theirs, are off (--enable-ascend, --enable-iluvatar: false).
HANDSHAKES = (
    "hami.io/node-handshake",
    "hami.io/node-handshake-dcu",
    "hami.io/node-handshake-xpu",
    "hami.io/node-handshake-va",
    "hami.io/node-handshake-biren",
)


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


@dataclasses.dataclass(frozen=True)
class CardRequest:
    """One container's NVIDIA request, HAMi's ``ContainerDeviceRequest`` (pkg/device/nvidia/
    device.go:520-600 ``GenerateResourceRequests``): cards, MB, percentage of a card (101:
    none), cores."""

    nums: int
    mem: int
    pct: int
    cores: int


@dataclasses.dataclass
class Grant:
    """One card given to one container: HAMi's ``ContainerDevice``."""

    card: CardState
    mem: int
    cores: int


def container_request(container: dict) -> CardRequest | None:
    """What HAMi asks of a card for ``container``, or None when it asks for no card. Each
    resource is read from limits, else requests; a percentage above 100 is 100, one not above
    0 is none; with neither MB nor a percentage the container gets 100 % of a card (the chart's
    device config: defaultMemory 0, defaultCores 0, charts/hami/templates/scheduler/
    device-configmap.yaml:23-24)."""
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}

    def value(name: str) -> int | None:
        raw = limits.get(name, requests.get(name))
        return None if raw is None else quantity(str(raw))

    nums = value(GPU_RESOURCE) or 0
    if nums <= 0:
        return None
    mem = value(MEM_RESOURCE) or 0
    pct = value(MEM_PERCENT)
    pct = PCT_UNSET if pct is None or pct <= 0 else min(pct, 100)
    if pct == PCT_UNSET and mem == 0:
        pct = 100
    return CardRequest(nums, mem, pct, value(CORES_RESOURCE) or 0)


def pod_requests(pod: dict) -> list[CardRequest | None]:
    """One entry per app container, in order (``device.Resourcereqs``, pkg/device/devices.go:
    639-690); init containers are not modelled."""
    return [container_request(c) for c in pod["spec"].get("containers") or []]


def fit(cards: list[CardState], order: list[CardState], k: CardRequest) -> list[Grant] | str:
    """HAMi's NVIDIA ``Fit`` for one container on one node (pkg/device/nvidia/device.go:714-
    875, after ``fitInDevices``, pkg/scheduler/score.go): the cards whose checks pass, taken
    from the end of ``order`` (sorted here in place, as HAMi sorts its copy of the node's cards)
    until ``k.nums`` are found; else the reason text, ``<count>/<cards> <Reason>`` per reason."""
    if k.nums > len(cards):
        return "NodeInsufficientDevice"  # pkg/scheduler/score.go:99-102
    # The tenant's gpu policy, spread: the highest score first, so the least used card is
    # taken first; Go's sort of up to 12 cards is an insertion sort, so ties keep the order
    # they had (at first the registration's: the last card registered is taken first).
    order.sort(key=CardState.score, reverse=True)
    cores = min(k.cores, 100)
    reasons: Counter[str] = Counter()
    grants: list[Grant] = []
    for card in reversed(order):
        mem = k.mem if k.mem > 0 else card.devmem * k.pct // 100 if k.pct != PCT_UNSET else 0
        if card.count <= card.used:
            reasons["CardTimeSlicingExhausted"] += 1
        elif card.devmem - card.usedmem < mem:
            reasons["CardInsufficientMemory"] += 1
        elif card.devcore - card.usedcores < cores:
            reasons["CardInsufficientCore"] += 1
        elif card.devcore == 100 and cores == 100 and card.used > 0:
            reasons["ExclusiveDeviceAllocateConflict"] += 1
        elif card.devcore and card.usedcores == card.devcore and cores == 0:
            reasons["CardComputeUnitsExhausted"] += 1
        else:
            grants.append(Grant(card, mem, cores))
            if len(grants) == k.nums:
                return grants
    if grants:
        reasons["AllocatedCardsInsufficientRequest"] = len(grants)
    return ", ".join(sorted(f"{n}/{len(cards)} {r}" for r, n in reasons.items()))


def fit_pod(cards: list[CardState], requests: list[CardRequest | None]) -> list[list[Grant]] | str:
    """Every container fitted in turn on the node's cards, each seeing the ones before it
    (``allocateAppContainers``, pkg/scheduler/score.go): the grants per container (none for a
    container that asks no card), or the first failing container's reason. The cards are
    charged only when the pod fits."""
    order = list(cards)  # buildNodeUsage: the registration's order, anew for every Filter
    taken: list[list[Grant]] = []
    for k in requests:
        grants = fit(cards, order, k) if k is not None else []
        if isinstance(grants, str):
            for grant in (g for container in taken for g in container):
                _charge(grant, sign=-1)
            return grants
        for grant in grants:
            _charge(grant)
        taken.append(grants)
    return taken


def devices_annotation(taken: list[list[Grant]]) -> str:
    """``EncodePodSingleDevice`` (pkg/device/devices.go:451-484): ``UUID,NVIDIA,MB,cores:`` per
    card, ``;`` after each container that asked for cards. A container that asks none gets no
    slot: ``allocateAppContainers`` files its empty entry under the cards' registered type
    (``NVIDIA L4``), not under ``NVIDIA`` which is encoded (pkg/scheduler/score.go:71-79,
    fact ``hami-v2.10-annotation-skips-containers-without-cards``)."""
    return "".join(
        "".join(f"{g.card.id},NVIDIA,{g.mem},{g.cores}:" for g in grants) + ";"
        for grants in taken
        if grants
    )


def node_score(cards: list[CardState]) -> float:
    """``NodeScore.ComputeDefaultScore`` (pkg/scheduler/policy/node_policy.go:105-130): the
    node's use before the pod, as in FilteringSucceed's message."""

    def total(field: str) -> int:
        return sum(getattr(c, field) for c in cards)

    used = total("used") / total("count") + total("usedcores") / total("devcore")
    return 10 * (used + total("usedmem") / total("devmem"))


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
        self.registry = NodeRegistry(api, node, self.api)
        self.allocations: dict[str, list[Grant]] = {}  # pod uid -> the cards it holds
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
        requests = pod_requests(pod)
        if not any(requests):
            return {"NodeNames": names}
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        with self.mutex:
            for grant in self.allocations.pop(meta["uid"], []):  # TakeAndDeletePod
                _charge(grant, sign=-1)
            known = self.node in names and self.registry.registered()
            failed = {n: "node unregistered" for n in names if n != self.node or not known}
            score = node_score(self.cards)
            taken = fit_pod(self.cards, requests) if known else "node unregistered"
            if isinstance(taken, str):
                if known:
                    failed[self.node] = taken
            else:
                self.allocations[meta["uid"]] = [g for grants in taken for g in grants]
                self.pods[key] = pod
                self.records.setdefault(key, BindRecord())
        if isinstance(taken, str):  # through the same client: scheduler.go:1106-1111, score.go
            if known:  # recordFilteringFailures: one event per reason the text parses to
                parsed = {part.split(" ", 1)[1] for part in taken.split(", ") if "/" in part}
                for reason in sorted(parsed):
                    self.events.record(pod, "FilteringFailed", f"1 nodes {reason}({self.node})")
            message = f"no available node, {len(names)} nodes do not meet"
            self.events.record(pod, "FilteringFailed", message)
            return {"FailedNodes": failed}
        HamiScheduler(self.api, self.node).patch_allocation(
            meta["name"], devices_annotation(taken), meta["namespace"]
        )
        fitted = f"find fit node({self.node}), {len(names) - 1} nodes not fit, 1 nodes fit"
        self.events.record(pod, "FilteringSucceed", f"{fitted}({self.node}:{score:.2f})")
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
        self.events.record(pod, "BindingSucceed", f"Successfully binding node [{node}] to {key}")
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
    at once (``onDelNode``). ``restart_ticker`` starts the ticker anew, as a restarted HAMi's.

    Each pass first checks the node's health per device vendor (``CheckHealth``, pkg/device/
    devices.go:576-612): a handshake annotation that does not hold ``Requesting`` is written,
    a GET of the node and a merge patch of ``Requesting_<time>`` through HAMi's one client
    (``client``), for each of the vendors the chart's device config enables that have one
    (``HANDSHAKES``). So the node's add writes all of them and later passes none, while the
    handshake stays (fact ``hami-v2.10-handshake-on-node-add``). HAMi's health verdict on a
    handshake older than 60 s (the node dropped when its allocatable ``nvidia.com/gpu`` is 0)
    is not modelled."""

    TICK_SECONDS = 15.0

    def __init__(self, api: Rest, node: str, client: HamiClient | None = None) -> None:
        self.api, self.node = api, node
        self.client = client  # HAMi's one client, for the handshake's writes
        self.handshakes = 0  # handshake annotations written
        self.lock = threading.Condition()
        self.latest: dict | None = None  # the node as the informer last saw it
        self.known = False
        self.reads = 0  # register passes that found the node registered
        self.stopped = threading.Event()
        listed = api.call("GET", f"/api/v1/nodes?fieldSelector=metadata.name%3D{node}")
        self.latest = (listed.get("items") or [None])[0]
        self.register_pass()  # the informer's first list: an add
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

    def register_pass(self) -> None:
        with self.lock:
            seen = annotations(self.latest) if self.latest else None
        if seen is not None and self.client is not None:
            self._handshake(seen)
        with self.lock:
            value = annotations(self.latest).get(REGISTER) if self.latest else None
            if value and _decodes(value):
                self.known = True
                self.reads += 1

    def _handshake(self, seen: dict[str, str]) -> None:
        """``CheckHealth``'s write for each vendor whose handshake the node as listed does not
        hold as ``Requesting``: ``util.GetNode``, then ``util.PatchNodeAnnotations`` (a merge
        patch without resourceVersion), ``time.DateTime`` in the extender's zone (UTC)."""
        assert self.client is not None
        for key in HANDSHAKES:
            if "Requesting" in seen.get(key, ""):
                continue
            stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")
            with contextlib.suppress(urllib.error.HTTPError):  # HAMi logs it and goes on
                self.client.node(self.node)
                patch = {"metadata": {"annotations": {key: f"Requesting_{stamp}"}}}
                self.client.call("PATCH", f"/api/v1/nodes/{self.node}", patch)
                self.handshakes += 1

    def _tick(self) -> None:
        while not self.stopped.is_set():
            with self.lock:
                elapsed = time.monotonic() - self.tick_epoch
                wait = self.TICK_SECONDS - elapsed % self.TICK_SECONDS
                restarted = self.lock.wait(timeout=wait)
            if not restarted and not self.stopped.is_set():
                self.register_pass()

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
            self.register_pass()


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


def _charge(grant: Grant, sign: int = 1) -> None:
    grant.card.used += sign
    grant.card.usedmem += sign * grant.mem
    grant.card.usedcores += sign * grant.cores


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
