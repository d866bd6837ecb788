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

from gpu_agent.kube import ApiError, Conflict, NotFound, ObjList

Obj = dict[str, Any]
LOCK = "hami.io/mutex.lock"
LOCK_EXPIRE_SECONDS = 300


@dataclass(frozen=True)
class Call:
    method: str
    verb: str
    resource: str
    target: str


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(obj: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 subset (add/replace/remove/test) on a copy; 422 like the server on failure."""
    doc = json.loads(json.dumps(obj))
    for op in ops:
        *parents, leaf = _pointer(op["path"])
        cur = doc
        for part in parents:
            if not isinstance(cur, dict) or part not in cur:
                raise ApiError(422, f"path {op['path']} does not exist")
            cur = cur[part]
        kind = op["op"]
        if kind == "add" or (kind == "replace" and leaf in cur):
            cur[leaf] = op["value"]
        elif kind == "remove" and leaf in cur:
            del cur[leaf]
        elif kind == "test" and cur.get(leaf) == op["value"]:
            pass
        else:
            raise ApiError(422, f"json patch op {op} failed")
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

    def add_node(self, name: str, **annotations: str) -> Obj:
        node = {
            "metadata": {"name": name, "labels": {}, "annotations": dict(annotations)},
            "status": {
                "capacity": {"cpu": "4", "pods": "110"},
                "allocatable": {"cpu": "4", "pods": "110"},
            },
        }
        self._bump(node)
        self.nodes[name] = node
        return node

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

    # ---------------------------------------------------------------- HAMi scheduler
    def schedule(self, ns: str, name: str, node_name: str) -> str:
        """Filter + Bind of HAMi v2.10 for one pod; returns 'bound' or why not."""
        pod = self.pods[(ns, name)]
        node = self.nodes[node_name]
        ann = node["metadata"]["annotations"]
        register = ann.get("hami.io/node-nvidia-register")
        if not register or int(node["status"]["capacity"].get("nvidia.com/gpu", "0")) == 0:
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

    def _merge(self, obj: Obj, patch: Obj) -> Obj:
        patch = json.loads(json.dumps(patch))
        meta = patch.get("metadata") or {}
        want_rv = meta.pop("resourceVersion", None)
        if want_rv is not None and want_rv != obj["metadata"]["resourceVersion"]:
            raise Conflict(
                409,
                "the object has been modified; please apply your changes "
                "to the latest version and try again",
            )
        if set(patch) - {"metadata"} or set(meta) - {"annotations", "labels"}:
            raise ApiError(422, f"fake only supports metadata annotation/label patches: {patch}")
        obj["metadata"] = merge_patch(obj["metadata"], meta)
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
            return self._merge(node, merge_patch)

        return self._call("patch_node_metadata", "patch", "nodes", name, (name, merge_patch), apply)

    def patch_node_status(self, name: str, json_patch_ops: list[Obj]) -> Obj:
        def apply() -> Obj:
            node = self._node(name)
            if any(not op["path"].startswith("/status") for op in json_patch_ops):
                raise ApiError(422, "status subresource: only /status may change")
            self.nodes[name] = json_patch(node, json_patch_ops)
            self._bump(self.nodes[name])
            return self.nodes[name]

        return self._call(
            "patch_node_status", "patch", "nodes/status", name, (name, json_patch_ops), apply
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

    def patch_pod(self, namespace: str, name: str, merge_patch: Obj) -> Obj:
        return self._call(
            "patch_pod",
            "patch",
            "pods",
            f"{namespace}/{name}",
            (namespace, name, merge_patch),
            lambda: self._merge(self._pod(namespace, name), merge_patch),
        )
