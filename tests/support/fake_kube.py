"""In-memory Kubernetes API for the GPU agent, plus a HAMi v2.10 scheduler stand-in.

Behaves like the API server where the agent depends on it: every write bumps a global
resourceVersion, a stale metadata.resourceVersion in a merge patch is a 409, objects come
back as fresh JSON copies. Records every call with its RBAC (verb, resource) and can inject
failures, conflicting writers and deletions. `schedule()` mimics HAMi's Filter + Bind,
node lock included ("node lock contention").

Watches: every mutation made through the fake (its helpers, the scheduler, the agent's
writes) is logged as an event with its resourceVersion. A watch streams the events after
the version it is given, filtered by the field selector the way the API server does
(an object entering the selector is ADDED, one leaving it DELETED), then a BOOKMARK.
With timeout 0 it ends when caught up; otherwise it waits for new events until the
timeout. `compact()` makes older versions answer with an ERROR 410 event,
`drop_next_watch()` cuts a stream short, `silent()` loses events (a missed event), and
mutating the dicts directly does not produce an event at all.

Thread-safe enough for run(): every call holds `mutex`; a test thread that mutates while
the agent runs does it under `with kube.mutex:`.
"""

from __future__ import annotations

import bisect
import contextlib
import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpu_agent.agent import Agent, PassSummary
from gpu_agent.config import Config
from gpu_agent.kube import ApiError, Conflict, NotFound, ObjList, error_for

Obj = dict[str, Any]
LOCK = "hami.io/mutex.lock"
LOCK_EXPIRE_SECONDS = 300
GPU = "nvidia.com/gpu"
KUBELET_CAPACITY = {"cpu": "4", "memory": "16310856Ki", "pods": "110"}


@dataclass(frozen=True)
class Call:
    method: str
    verb: str
    resource: str
    target: str


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge, null deletes a member, anything else
    (lists included) replaces the target's value."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class _PatchFailed(Exception):
    """One RFC 6902 operation cannot be applied; the server answers 422 for the patch."""


def _pointer(path: str) -> list[str]:
    """RFC 6901: '' is the whole document, else '/'-separated tokens with ~1 and ~0 escaped."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchFailed(f"bad JSON pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, append_ok: bool) -> int:
    if token == "-" and append_ok:
        return len(container)
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise _PatchFailed(f"bad array index {token!r}")
    i, limit = int(token), len(container) + (1 if append_ok else 0)
    if i >= limit:
        raise _PatchFailed(f"array index {i} out of range")
    return i


def _parent(doc: Any, tokens: list[str]) -> Any:
    cur = doc
    for token in tokens:
        if isinstance(cur, dict) and token in cur:
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, append_ok=False)]
        else:
            raise _PatchFailed(f"path /{'/'.join(tokens)} does not exist")
    return cur


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent, leaf = _parent(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict) and leaf in parent:
        return parent[leaf]
    if isinstance(parent, list):
        return parent[_index(parent, leaf, append_ok=False)]
    raise _PatchFailed(f"member {leaf!r} does not exist")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    """RFC 6902 4.1: an object member is added or, if it exists, replaced."""
    if not tokens:
        return value
    parent, leaf = _parent(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        parent[leaf] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, leaf, append_ok=True), value)
    else:
        raise _PatchFailed(f"cannot add {leaf!r} to a {type(parent).__name__}")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise _PatchFailed("cannot remove the whole document")
    _get(doc, tokens)  # must exist
    parent, leaf = _parent(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        del parent[leaf]
    else:
        del parent[_index(parent, leaf, append_ok=False)]
    return doc


def _json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 4.6: same JSON type and value (so true is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def json_patch(obj: Any, ops: list[Obj]) -> Any:
    """RFC 6902 on a copy: every op or none. Like kube-apiserver, a failed op (a `test`
    that does not match, a missing path) makes the whole patch fail with 422."""
    doc = json.loads(json.dumps(obj))
    try:
        for op in ops:
            kind, tokens = op.get("op"), _pointer(op.get("path", ""))
            if kind == "add":
                doc = _add(doc, tokens, op["value"])
            elif kind == "remove":
                doc = _remove(doc, tokens)
            elif kind == "replace":
                doc = _add(_remove(doc, tokens), tokens, op["value"])
            elif kind in ("move", "copy"):
                source = _pointer(op["from"])
                value = json.loads(json.dumps(_get(doc, source)))
                if kind == "move":
                    doc = _remove(doc, source)
                doc = _add(doc, tokens, value)
            elif kind == "test":
                if not _json_equal(_get(doc, tokens), op["value"]):
                    raise _PatchFailed(f"testing value {op['path']} failed")
            else:
                raise _PatchFailed(f"unknown op {kind!r}")
    except _PatchFailed as exc:
        raise error_for(422, str(exc)) from None
    return doc


def _selector_matches(pod: Obj, selector: str | None) -> bool:
    fields = {
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "status.phase": pod["status"].get("phase", ""),
        "metadata.namespace": pod["metadata"]["namespace"],
        "metadata.name": pod["metadata"]["name"],
    }
    for term in filter(None, (selector or "").split(",")):
        neg = "!=" in term
        key, value = term.split("!=" if neg else "=", 1)
        if key not in fields:
            raise ApiError(400, f"field label not supported: {key}")
        if (fields[key] == value) == neg:
            return False
    return True


def _visible(kind: str, prev: Obj | None, cur: Obj, selector: str | None) -> str | None:
    """The event a selector-filtered watch shows for one change, as the API server does."""
    was = prev is not None and (selector is None or _selector_matches(prev, selector))
    if kind == "DELETED":
        return "DELETED" if was else None
    if selector is None or _selector_matches(cur, selector):
        return "MODIFIED" if was else "ADDED"
    return "DELETED" if was else None  # left the selector (finished, say)


class FakeKube:
    def __init__(self) -> None:
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.calls: list[Call] = []
        self.now = 1_800_000_000.0  # fake wall clock for lock times
        self.server_cpu = 0.0  # CPU spent in "server" work, for the benchmark to subtract
        self.decode_cpu: dict[str, float] = {}  # client-side JSON decoding, per method
        self.contention = 0
        self.events_sent: dict[str, int] = {}  # watch events delivered, per method
        self.mutex = threading.Condition()  # RLock inside: helpers may nest
        self._rv = 1000
        self._faults: dict[str, list[Exception]] = {}
        self._racers: dict[str, int] = {}
        self.before_call: Callable[[str, tuple[Any, ...]], None] | None = None
        # Event log: (rv, resource, type, previous state, new state), rv ascending.
        self._events: list[tuple[int, str, str, Obj | None, Obj]] = []
        self._event_rvs: list[int] = []
        self._last: dict[tuple[str, ...], Obj] = {}  # last logged state per object
        self._oldest = self._rv  # watching from before this answers 410
        self._silent = False
        self._drops: dict[str, list[int]] = {}
        self._closed = False

    # ---------------------------------------------------------------- test setup
    def _bump(self, obj: Obj) -> None:
        with self.mutex:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._log(obj)

    def _log(self, obj: Obj, deleted: bool = False) -> None:
        meta = obj["metadata"]
        if "namespace" in meta:
            key: tuple[str, ...] = ("pods", meta["namespace"], meta["name"])
        else:
            key = ("nodes", meta["name"])
        snapshot = json.loads(json.dumps(obj))
        prev = self._last.pop(key, None) if deleted else self._last.get(key)
        if not deleted:
            self._last[key] = snapshot
        kind = "DELETED" if deleted else "MODIFIED" if prev is not None else "ADDED"
        if not self._silent:
            self._events.append((self._rv, key[0], kind, prev, snapshot))
            self._event_rvs.append(self._rv)
            self.mutex.notify_all()

    def _delete(self, obj: Obj) -> None:
        with self.mutex:
            self._rv += 1
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._log(obj, deleted=True)

    def add_node(self, name: str, *, status: bool = True, **annotations: str) -> Obj:
        """A node as its kubelet registers it; status=False: a pre-created object, whose
        kubelet has not written its status yet (see kubelet_status_write)."""
        node: Obj = {"metadata": {"name": name, "labels": {}, "annotations": dict(annotations)}}
        if status:
            node["status"] = {
                "capacity": dict(KUBELET_CAPACITY),
                "allocatable": dict(KUBELET_CAPACITY),
            }
        self._bump(node)
        self.nodes[name] = node
        return node

    def kubelet_status_write(self, name: str) -> None:
        """The kubelet's status update: it sets the resources it owns, keeps the others."""
        node = self.nodes[name]
        node["status"] = merge_patch(
            node.get("status"),
            {"capacity": KUBELET_CAPACITY, "allocatable": KUBELET_CAPACITY},
        )
        self._bump(node)

    def add_pod(
        self, ns: str, name: str, *, mem: int = 1024, cores: int = 10, containers: int = 1
    ) -> Obj:
        pod = {
            "metadata": {
                "namespace": ns,
                "name": name,
                "annotations": {},
                "labels": {},
                "uid": f"uid-{ns}-{name}-{self._rv}",
            },
            "spec": {
                "schedulerName": "hami-scheduler",
                "containers": [
                    {
                        "name": f"c{i}",
                        "resources": {
                            "limits": {
                                "nvidia.com/gpu": "1",
                                "nvidia.com/gpumem": str(mem),
                                "nvidia.com/gpucores": str(cores),
                            }
                        },
                    }
                    for i in range(containers)
                ],
            },
            "status": {"phase": "Pending"},
        }
        self._bump(pod)
        self.pods[(ns, name)] = pod
        return pod

    def delete_pod(self, ns: str, name: str) -> None:
        self._delete(self.pods.pop((ns, name)))

    def set_pod_phase(self, ns: str, name: str, phase: str) -> None:
        self.pods[(ns, name)]["status"]["phase"] = phase
        self._bump(self.pods[(ns, name)])

    def foreign_node_write(self, name: str, **annotations: str | None) -> None:
        """Another writer (kubelet heartbeat, an admin) touches the node."""
        node = self.nodes[name]
        node["metadata"] = merge_patch(node["metadata"], {"annotations": annotations})
        self._bump(node)

    def remove_registration(self, name: str) -> None:
        node = self.nodes[name]
        node["metadata"]["annotations"].pop("hami.io/node-nvidia-register", None)
        node["metadata"]["labels"].pop("gpu", None)
        for part in ("capacity", "allocatable"):
            node["status"][part].pop("nvidia.com/gpu", None)
        self._bump(node)

    def recreate_node(self, name: str) -> None:
        """Node object deleted and re-registered by kubelet: all our writes are lost."""
        annotations = {
            k: v
            for k, v in self.nodes[name]["metadata"]["annotations"].items()
            if not k.startswith("hami.io/")
        }
        self._delete(self.nodes.pop(name))
        self.add_node(name, **annotations)

    # ---------------------------------------------------------------- injection
    def fail_next(self, method: str, exc: Exception, times: int = 1) -> None:
        self._faults.setdefault(method, []).extend([exc] * times)

    def compact(self) -> None:
        """etcd compaction: watching from any version older than now answers 410 Gone."""
        with self.mutex:
            self._oldest = self._rv
            self._events.clear()
            self._event_rvs.clear()

    def drop_next_watch(self, method: str, after: int) -> None:
        """The next `method` stream ends after `after` events, without a bookmark."""
        self._drops.setdefault(method, []).append(after)

    @contextlib.contextmanager
    def silent(self) -> Iterator[None]:
        """Changes made inside are never sent to watchers (a missed event)."""
        with self.mutex:
            self._silent = True
            try:
                yield
            finally:
                self._silent = False

    def close_watches(self) -> None:
        """End every open stream now and make new ones end when caught up."""
        with self.mutex:
            self._closed = True
            self.mutex.notify_all()

    def race_next_node_patch(self, name: str, times: int = 1) -> None:
        """Before the next `times` node metadata patches, another writer bumps the node."""
        self._racers[name] = self._racers.get(name, 0) + times

    # ---------------------------------------------------------------- queries for asserts
    def pod_annotations(self, ns: str, name: str) -> dict[str, str]:
        return dict(self.pods[(ns, name)]["metadata"]["annotations"])

    def lock(self, node: str) -> str | None:
        return self.nodes[node]["metadata"]["annotations"].get(LOCK)

    def lock_value(self, ns: str, name: str) -> str:
        """A lock value as HAMi's Bind writes it, stamped with the fake clock."""
        stamp = dt.datetime.fromtimestamp(self.now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"{stamp},{ns},{name}"

    def writes(self) -> list[Call]:
        return [c for c in self.calls if c.verb == "patch"]

    def count(self, verb: str) -> int:
        return sum(c.verb == verb for c in self.calls)

    def agent_calls(self) -> int:
        return len(self.calls)

    def events_since(self, rv: int) -> list[tuple[int, str, str, Obj | None, Obj]]:
        """Every logged change after `rv`: (rv, resource, type, previous, current)."""
        return self._events[bisect.bisect_right(self._event_rvs, rv) :]

    # ---------------------------------------------------------------- HAMi scheduler
    def schedule(self, ns: str, name: str, node_name: str) -> str:
        """Filter + Bind of HAMi v2.10 for one pod; returns 'bound' or why not."""
        pod = self.pods[(ns, name)]
        node = self.nodes[node_name]
        ann = node["metadata"]["annotations"]
        register = ann.get("hami.io/node-nvidia-register")
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        # NvidiaGPUDevices.CheckHealth reads allocatable; HAMi Filter needs the annotation.
        if not register or int(allocatable.get("nvidia.com/gpu", "0")) == 0:
            return "no registered GPUs"
        cards = json.loads(register)
        # Filter: record the choice on the pod (kept even when Bind then fails).
        slot = sum(
            1
            for p in self.pods.values()
            if p["metadata"]["annotations"].get("hami.io/vgpu-node") == node_name
        )
        card = cards[slot % len(cards)]
        per_ctr = "".join(
            f"{card['id']},NVIDIA,{c['resources']['limits']['nvidia.com/gpumem']},"
            f"{c['resources']['limits']['nvidia.com/gpucores']}:;"
            for c in pod["spec"]["containers"]
        )
        pa = pod["metadata"]["annotations"]
        pa.update(
            {
                "hami.io/vgpu-node": node_name,
                "hami.io/vgpu-time": str(int(self.now)),
                "hami.io/vgpu-devices-to-allocate": per_ctr,
                "hami.io/vgpu-devices-allocated": per_ctr,
            }
        )
        pod["metadata"]["labels"]["hami.io/vgpu-node"] = node_name
        self._bump(pod)
        # Bind: take the node lock as nodelock.LockNode does.
        held = ann.get(LOCK)
        if held is not None:
            stamp, owner_ns, owner = held.split(",")
            t = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            mine = (owner_ns, owner) == (ns, name)
            expired = self.now - t > LOCK_EXPIRE_SECONDS
            if not (mine or expired or (owner_ns, owner) not in self.pods):
                self.contention += 1
                return "node lock contention"
        ann[LOCK] = self.lock_value(ns, name)
        self._bump(node)
        pa.update({"hami.io/bind-phase": "allocating", "hami.io/bind-time": str(int(self.now))})
        pod["spec"]["nodeName"] = node_name
        self._bump(pod)
        return "bound"

    def schedule_pending(self, node_name: str) -> int:
        """One scheduler round: try every unbound pod in creation order; count binds."""
        bound = 0
        for (ns, name), pod in list(self.pods.items()):
            if not pod["spec"].get("nodeName"):
                bound += self.schedule(ns, name, node_name) == "bound"
        return bound

    # ---------------------------------------------------------------- KubeApi
    def _call(
        self,
        method: str,
        verb: str,
        resource: str,
        target: str,
        args: tuple[Any, ...],
        fn: Callable[[], Any],
    ) -> Any:
        with self.mutex:
            self.calls.append(Call(method, verb, resource, target))
            if self.before_call:
                self.before_call(method, args)
            faults = self._faults.get(method)
            if faults:
                raise faults.pop(0)
            if verb == "watch":
                return fn()  # a stream: encoding and decoding are timed per event
            t0 = time.process_time()
            payload = json.dumps(fn())  # server side: build and encode the response
            t1 = time.process_time()
            self.server_cpu += t1 - t0
            result = json.loads(payload)  # client side: decoding is the agent's cost
            self.decode_cpu[method] = self.decode_cpu.get(method, 0.0) + time.process_time() - t1
            return result

    def _list_body(self, items: list[Obj]) -> Obj:
        return {"items": items, "metadata": {"resourceVersion": str(self._rv)}}

    def _stream(
        self, method: str, resource: str, selector: str | None, version: str, timeout: float
    ) -> Iterator[Obj]:
        drops = self._drops.get(method)
        drop_after = drops.pop(0) if drops else None
        deadline = time.monotonic() + timeout
        return self._events_after(method, resource, selector, int(version), deadline, drop_after)

    def _events_after(
        self,
        method: str,
        resource: str,
        selector: str | None,
        last: int,
        deadline: float,
        drop_after: int | None,
    ) -> Iterator[Obj]:
        sent = 0
        while True:
            if drop_after is not None and sent >= drop_after:
                return  # connection dropped: no bookmark, the client resumes from its version
            with self.mutex:
                t0 = time.process_time()
                payload, end = None, False
                if last < self._oldest:
                    status = {"kind": "Status", "code": 410, "reason": "Expired"}
                    status["message"] = f"too old resource version: {last} ({self._oldest})"
                    payload, end = json.dumps({"type": "ERROR", "object": status}), True
                while payload is None:
                    i = bisect.bisect_right(self._event_rvs, last)
                    if i == len(self._events):
                        break
                    rv, res, kind, prev, cur = self._events[i]
                    last = rv
                    shown = _visible(kind, prev, cur, selector) if res == resource else None
                    if shown:
                        payload = json.dumps({"type": shown, "object": cur})
                if payload is None:
                    if not self._closed and time.monotonic() < deadline:
                        self.server_cpu += time.process_time() - t0
                        self.mutex.wait(deadline - time.monotonic())
                        continue
                    # caught up: a bookmark tells the client everything up to now was seen
                    last = self._rv
                    bookmark = {"metadata": {"resourceVersion": str(last)}}
                    payload, end = json.dumps({"type": "BOOKMARK", "object": bookmark}), True
                t1 = time.process_time()
                self.server_cpu += t1 - t0
            event = json.loads(payload)  # client side: decoding is the agent's cost
            self.decode_cpu[method] = self.decode_cpu.get(method, 0.0) + time.process_time() - t1
            self.events_sent[method] = self.events_sent.get(method, 0) + 1
            sent += 1
            yield event
            if end:
                return

    def _node(self, name: str) -> Obj:
        if name not in self.nodes:
            raise NotFound(404, f'nodes "{name}" not found')
        return self.nodes[name]

    def _pod(self, ns: str, name: str) -> Obj:
        if (ns, name) not in self.pods:
            raise NotFound(404, f'pods "{name}" not found')
        return self.pods[(ns, name)]

    def _patch(self, obj: Obj, body: Obj | list[Obj], writable: str) -> Obj:
        """PATCH as kube-apiserver applies it to the latest object: a list is a JSON Patch
        (RFC 6902, application/json-patch+json), a dict a merge patch (RFC 7386,
        application/merge-patch+json) whose metadata.resourceVersion is a precondition.
        Only the `writable` part may change (metadata here; status on nodes/status)."""
        if isinstance(body, list):
            patched = json_patch(obj, body)
        else:
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
            if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
                raise Conflict(
                    409,
                    "the object has been modified; please apply your changes "
                    "to the latest version and try again",
                )
            patched = merge_patch(obj, json.loads(json.dumps(body)))
        if writable == "metadata":
            patched["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
        changed = {k for k in set(obj) | set(patched) if obj.get(k) != patched.get(k)}
        if changed - {writable}:
            raise ApiError(422, f"fake: only {writable} may change, not {sorted(changed)}")
        if writable in patched:
            obj[writable] = patched[writable]
        else:
            obj.pop(writable, None)
        self._bump(obj)
        return obj

    def list_nodes(self) -> ObjList:
        nodes = lambda: self._list_body(list(self.nodes.values()))  # noqa: E731
        body = self._call("list_nodes", "list", "nodes", "*", (), nodes)
        return ObjList(body["items"], body["metadata"]["resourceVersion"])

    def watch_nodes(self, resource_version: str, timeout_seconds: float) -> Iterator[Obj]:
        return self._call(
            "watch_nodes",
            "watch",
            "nodes",
            "*",
            (resource_version, timeout_seconds),
            lambda: self._stream("watch_nodes", "nodes", None, resource_version, timeout_seconds),
        )

    def get_node(self, name: str) -> Obj:
        return self._call("get_node", "get", "nodes", name, (name,), lambda: self._node(name))

    def patch_node_metadata(self, name: str, merge_patch: Obj) -> Obj:
        def apply() -> Obj:
            node = self._node(name)
            if self._racers.get(name):
                self._racers[name] -= 1
                self.foreign_node_write(name, **{"fake/heartbeat": str(self._rv)})
            return self._patch(node, merge_patch, "metadata")

        return self._call("patch_node_metadata", "patch", "nodes", name, (name, merge_patch), apply)

    def patch_node_status(self, name: str, patch: Obj | list[Obj]) -> Obj:
        return self._call(
            "patch_node_status",
            "patch",
            "nodes/status",
            name,
            (name, patch),
            lambda: self._patch(self._node(name), patch, "status"),
        )

    def list_pods(self, field_selector: str | None = None) -> ObjList:
        body = self._call(
            "list_pods",
            "list",
            "pods",
            "*",
            (field_selector,),
            lambda: self._list_body(
                [p for p in self.pods.values() if _selector_matches(p, field_selector)]
            ),
        )
        return ObjList(body["items"], body["metadata"]["resourceVersion"])

    def watch_pods(
        self, resource_version: str, timeout_seconds: float, field_selector: str | None = None
    ) -> Iterator[Obj]:
        return self._call(
            "watch_pods",
            "watch",
            "pods",
            "*",
            (resource_version, timeout_seconds, field_selector),
            lambda: self._stream(
                "watch_pods", "pods", field_selector, resource_version, timeout_seconds
            ),
        )

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._call(
            "get_pod",
            "get",
            "pods",
            f"{namespace}/{name}",
            (namespace, name),
            lambda: self._pod(namespace, name),
        )

    def patch_pod(self, namespace: str, name: str, patch: Obj | list[Obj]) -> Obj:
        return self._call(
            "patch_pod",
            "patch",
            "pods",
            f"{namespace}/{name}",
            (namespace, name, patch),
            lambda: self._patch(self._pod(namespace, name), patch, "metadata"),
        )


# ------------------------------------------------------------------ kube-scheduler + HAMi
NODE_SCHEDULING_FIELDS = (  # what makes a Node update a scheduling event (besides conditions)
    ("spec", "unschedulable"),
    ("spec", "taints"),
    ("status", "allocatable"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
)


def _conditions(node: Obj) -> list[Obj]:
    return [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"}
        for c in (node.get("status") or {}).get("conditions") or []
    ]


def node_scheduling_change(prev: Obj, cur: Obj) -> bool:
    """framework.NodeSchedulingPropertiesChange (kube-scheduler v1.35) is not empty."""
    fields = any(
        (prev.get(a) or {}).get(b) != (cur.get(a) or {}).get(b) for a, b in NODE_SCHEDULING_FIELDS
    )
    return fields or _conditions(prev) != _conditions(cur)


@dataclass
class Queued:
    """A pod in kube-scheduler's queue: activeQ, backoffQ or the unschedulable pool."""

    where: str = "active"
    attempts: int = 0
    last_attempt: float = 0.0
    since: float = 0.0  # when it entered the unschedulable pool


class SchedulerSim:
    """kube-scheduler v1.35 with HAMi v2.10's extender, in virtual seconds from 0.

    HAMi reads node registrations into its cache only on a node ADDED event and on a 15 s
    tick, writing nothing when it does; its Filter rejects a node it has not read with
    "node unregistered". kube-scheduler then puts the pod in the unschedulable pool with
    the Extender as its rejector: any Node add/delete, any Node update that changes a
    scheduling property (labels, annotations, allocatable, taints, conditions,
    unschedulable), any event of a bound pod, or an update of the pod itself moves it to
    backoff (1 s doubling to 10 s after its last attempt); otherwise it waits 5 min,
    checked every 30 s. A rejection writes the PodScheduled=False condition if it changed.
    """

    HAMI_TICK, FLUSH_PERIOD, MAX_UNSCHEDULABLE = 15.0, 30.0, 300.0
    INITIAL_BACKOFF, MAX_BACKOFF = 1.0, 10.0

    def __init__(self, kube: FakeKube, *, first_tick: float) -> None:
        self.kube, self.now = kube, 0.0
        self.next_tick, self.next_flush = first_tick, self.FLUSH_PERIOD
        self.cursor = kube._rv  # events after this one are still to be handled
        self.queue: dict[tuple[str, str], Queued] = {}
        self.bound_at: dict[tuple[str, str], float] = {}
        self.read: set[str] = set()
        self._hami_register()

    def run_until(self, now: float) -> None:
        self.now = now
        self._take_events()
        while self.next_tick <= now:  # RegisterFromNodeAnnotations' ticker
            self._hami_register()
            self.next_tick += self.HAMI_TICK
        if now >= self.next_flush:  # flushUnschedulablePodsLeftover
            self.next_flush += self.FLUSH_PERIOD
            for q in self.queue.values():
                if q.where == "unschedulable" and now - q.since > self.MAX_UNSCHEDULABLE:
                    q.where = "backoff"
        for key in [k for k, q in self.queue.items() if self._ready(q)]:
            self._attempt(key)

    def _hami_register(self) -> None:
        """HAMi's register(): a node counts once it has the annotation and allocatable GPUs."""
        self.read = {
            name
            for name, node in self.kube.nodes.items()
            if node["metadata"]["annotations"].get("hami.io/node-nvidia-register")
            and int(((node.get("status") or {}).get("allocatable") or {}).get(GPU, "0")) > 0
        }

    def _take_events(self) -> None:
        with self.kube.mutex:
            events = self.kube.events_since(self.cursor)
        for rv, resource, kind, prev, cur in events:
            self.cursor = rv
            if resource == "nodes":
                if kind == "ADDED":
                    self._hami_register()  # HAMi's only node handler besides delete
                if kind != "MODIFIED" or node_scheduling_change(prev or {}, cur):
                    self._requeue(self.queue)
                continue
            key = (cur["metadata"]["namespace"], cur["metadata"]["name"])
            if cur["spec"].get("nodeName"):  # an assigned pod's event: every pod may move
                self.queue.pop(key, None)
                self._requeue(self.queue)
            elif kind == "DELETED":
                self.queue.pop(key, None)
            elif kind == "ADDED":
                self.queue[key] = Queued()
            else:  # the unscheduled pod itself was updated (UpdatePodOther)
                self._requeue([key])

    def _requeue(self, keys: Any) -> None:
        for key in list(keys):
            q = self.queue.get(key)
            if q is not None and q.where == "unschedulable":
                q.where = "backoff"

    def _ready(self, q: Queued) -> bool:
        if q.where == "active":
            return True
        backoff = min(self.INITIAL_BACKOFF * 2 ** max(q.attempts - 1, 0), self.MAX_BACKOFF)
        return q.where == "backoff" and self.now >= q.last_attempt + backoff

    def _attempt(self, key: tuple[str, str]) -> None:
        q = self.queue[key]
        q.attempts, q.last_attempt = q.attempts + 1, self.now
        feasible = sorted(n for n in self.kube.nodes if n in self.read)
        if not feasible:
            self._reject(key)
            q.where, q.since = "unschedulable", self.now
            return
        with self.kube.mutex:
            result = self.kube.schedule(*key, feasible[0])
        if result == "bound":
            self.bound_at[key] = self.now
            del self.queue[key]
        else:  # a Bind failure (node lock): backoffQ, not unschedulable
            q.where = "backoff"

    def _reject(self, key: tuple[str, str]) -> None:
        n = len(self.kube.nodes)
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/{n} nodes are available: {n} node unregistered.",
        }
        with self.kube.mutex:
            pod = self.kube.pods[key]
            others = [c for c in pod["status"].get("conditions", []) if c["type"] != "PodScheduled"]
            if [c for c in pod["status"].get("conditions", []) if c not in others] != [condition]:
                pod["status"]["conditions"] = [*others, condition]
                self.kube._bump(pod)  # the scheduler's status update: a pod event


def rejoin_latency(
    config: Config, *, first_tick: float, create_at: float, until: float = 400.0
) -> float | None:
    """Seconds from creating a GPU pod to its allocation (bind-phase `success`) when the pod
    is created `create_at` s after its node re-joined, with HAMi's first tick `first_tick` s
    after the re-join; None if it is still waiting at `until`. Virtual time, 0.25 s steps:
    the scheduler, then the agent reading both watches and judging."""
    node = next(iter(config.nodes))
    kube = FakeKube()
    kube.add_node(node)
    now = [0.0]
    agent = Agent(kube, config, lambda: now[0])
    for _ in range(2):  # registered long ago: its own requeue look is over too
        agent.step()
        agent.follow("nodes", 0)
        agent.follow("pods", 0)
        now[0] += max(config.requeue_after_register_seconds, config.resync_seconds) + 1
    sim = SchedulerSim(kube, first_tick=first_tick)
    kube.recreate_node(node)  # t = 0: the worker re-joined, a new Node object
    base, key, t = now[0], ("team-a", "job"), 0.0
    while t <= until:
        now[0] = base + t
        sim.run_until(t)
        if t >= create_at and key not in kube.pods:
            kube.add_pod(*key)
        agent.follow("nodes", 0)
        agent.follow("pods", 0)
        agent.step()
        pod = kube.pods.get(key)
        if pod and pod["metadata"]["annotations"].get("hami.io/bind-phase") == "success":
            return t - create_at
        t += 0.25
    return None


class Clock:
    """The agent's monotonic clock (a callable), moved by the test: starts at 100 s."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


# Driving the agent in one thread, as the tests of gpu_agent do.
WORKER = "tenant-a-worker-1"
REJECTED_UNREGISTERED = "0/1 nodes are available: 1 node unregistered."


def drain(agent: Agent) -> PassSummary:
    """What the watch threads and the main loop do, in one thread: read, then judge."""
    agent.follow("nodes", 0)
    agent.follow("pods", 0)
    return agent.step()


def bind(kube: FakeKube, name: str, node: str = WORKER, ns: str = "team-a") -> None:
    """A new GPU pod, through HAMi's Filter and Bind onto `node`."""
    kube.add_pod(ns, name)
    assert kube.schedule(ns, name, node) == "bound"


def rejected(kube: FakeKube, name: str, message: str = REJECTED_UNREGISTERED) -> None:
    """A pending pod with the condition kube-scheduler writes after an extender rejection."""
    pod = kube.add_pod("team-a", name)
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    pod["status"]["conditions"] = [{**condition, "message": message}]
    kube._bump(pod)
