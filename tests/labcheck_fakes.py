"""In-memory fakes for labcheck: a clock, API servers implementing the Cluster protocol,
and a miniature HAMi (webhook, scheduler, node lock) that can be broken on purpose.

The fake scheduler is written independently of labcheck.hami so placement tests do not
just compare the predictor with itself.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from labcheck.cluster import ClusterError, server_of

Obj = dict[str, Any]
HAMI_RES = ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps = 0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.t += seconds


def kubeconfig(server: str, token: str, ca: str = "Q0E=") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def _node(name: str, cards: list[Obj] | None = None, ready: bool = True) -> Obj:
    ann = {}
    alloc = {"cpu": "4"}
    if cards:
        reg = [
            {
                "id": f"GPU-{name}-{i}",
                "index": i,
                "numa": 0,
                "mode": "hami-core",
                "health": True,
                **c,
            }
            for i, c in enumerate(cards)
        ]
        ann["hami.io/node-nvidia-register"] = json.dumps(reg)
        alloc["nvidia.com/gpu"] = str(sum(c["count"] for c in cards))
    return {
        "metadata": {"name": name, "annotations": ann, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": alloc,
            "capacity": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@dataclass
class Knobs:
    reachable: bool = True
    readyz: str = "ok"
    konnectivity: bool = True
    webhook: bool = True  # HAMi webhook reached (else fails open: default-scheduler)
    scheduler: bool = True  # hami-scheduler running
    finish_alloc: bool = True  # agent/device plugin completes allocation and frees the lock
    lock_hold_seconds: float = 0.0  # how long each bind keeps the node lock
    ignore_policy: str = ""  # force this gpu policy regardless of the annotation
    ignore_memory: bool = False  # over-commit: place pods whatever their memory
    quota_admission: bool = True  # webhook enforces the GPU memory quota
    smi_reports_card: bool = False  # real mode: HAMi-core not injected
    accept_foreign: bool = False  # authenticate other clusters' tokens (isolation broken)
    dry_run_error: dict[str, str] = field(default_factory=dict)  # plural -> message


class FakeCluster:
    """One API server. Several FakeClusters views can share one FakeServer."""

    def __init__(self, server: FakeServer, label: str) -> None:
        self.server = server
        self.label = label

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.server, name)
        if not callable(attr) or name.startswith("_"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.server.calls.append((name, args))
            if not self.server.knobs.reachable:
                raise ClusterError(0, "ConnectTimeoutError: timed out")
            if self.server.hook:
                self.server.hook(name, args)
            return attr(*args, **kwargs)

        return call


class DeniedCluster:
    """An API server answering a token it does not know."""

    def __init__(self, server: FakeServer, label: str) -> None:
        self.label = label
        self.server = server

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.server.foreign_calls.append((name, args))
            raise ClusterError(401, "Unauthorized")

        return call


class FakeServer:
    def __init__(self, name: str, clock: FakeClock) -> None:
        self.name = name
        self.clock = clock
        self.knobs = Knobs()
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[tuple[str, str], Obj] = {}
        self.namespaces: dict[str, Obj] = {}
        self.quotas: dict[tuple[str, str], Obj] = {}
        self.custom: dict[tuple[str, str, str, str], Obj] = {}
        self.workloads: dict[str, list[Obj]] = {}
        self.calls: list[tuple[str, tuple]] = []
        self.foreign_calls: list[tuple[str, tuple]] = []
        self.deleted: list[tuple[str, str]] = []
        self.hook: Any = None
        self._seq = 0

    # --- protocol ---------------------------------------------------------------------
    def version(self) -> Obj:
        return {"gitVersion": "v1.35.0"}

    def get_raw(self, path: str) -> str:
        return self.knobs.readyz if path.startswith("/readyz") else '{"items": []}'

    def list_nodes(self) -> list[Obj]:
        return copy.deepcopy(list(self.nodes.values()))

    def get_node(self, name: str) -> Obj:
        self._tick()
        if name not in self.nodes:
            raise ClusterError(404, f'nodes "{name}" not found')
        return copy.deepcopy(self.nodes[name])

    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[Obj]:
        self._tick()
        return [copy.deepcopy(p) for (ns, _), p in self.pods.items() if namespace in (None, ns)]

    def get_pod(self, namespace: str, name: str) -> Obj:
        self._tick()
        if (namespace, name) not in self.pods:
            raise ClusterError(404, f'pods "{name}" not found')
        return copy.deepcopy(self.pods[(namespace, name)])

    def create_pod(self, namespace: str, body: Obj) -> Obj:
        if namespace not in self.namespaces:
            raise ClusterError(404, f'namespaces "{namespace}" not found')
        pod = copy.deepcopy(body)
        name = pod["metadata"]["name"]
        if (namespace, name) in self.pods:
            raise ClusterError(409, "already exists")
        pod["metadata"]["namespace"] = namespace
        pod["metadata"].setdefault("annotations", {})
        pod["spec"].setdefault("schedulerName", "default-scheduler")
        pod["status"] = {"phase": "Pending"}
        self._seq += 1
        pod["_seq"] = self._seq
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        if any(k in limits for k in HAMI_RES) and self.knobs.webhook:
            pod["spec"]["schedulerName"] = "hami-scheduler"
            self._admit_quota(namespace, limits)
        m = re.search(
            r"echo (\S+) > /www", " ".join(pod["spec"]["containers"][0].get("command", []))
        )
        pod["_token"] = m.group(1) if m else ""
        self.pods[(namespace, name)] = pod
        out = copy.deepcopy(pod)
        return out

    def delete_pod(self, namespace: str, name: str) -> None:
        self.deleted.append(("pod", f"{namespace}/{name}"))
        if self.pods.pop((namespace, name), None) is None:
            raise ClusterError(404, "not found")

    def pod_logs(self, namespace: str, name: str) -> str:
        pod = self._tunnel(namespace, name)
        return f"{pod['_token']}\n"

    def exec_pod(self, namespace: str, name: str, command: list[str]) -> str:
        pod = self._tunnel(namespace, name)
        if command[0] == "nvidia-smi":
            slice_ = pod["metadata"]["annotations"].get("hami.io/vgpu-devices-allocated", "")
            fields = slice_.split(",")
            mem = int(fields[2])
            if self.knobs.smi_reports_card:
                mem = self._card(fields[0])["devmem"]
            return f"{mem}\n"
        return f"{pod['_token']}\n"

    def port_forward(self, namespace: str, name: str, port: int, payload: bytes) -> bytes:
        pod = self._tunnel(namespace, name)
        body = f"{pod['_token']}\n".encode()
        return b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    def list_events(self, namespace: str, object_name: str) -> list[Obj]:
        return []

    def create_namespace(self, name: str, labels: dict[str, str]) -> Obj:
        if name in self.namespaces:
            raise ClusterError(409, "already exists")
        self.namespaces[name] = {"metadata": {"name": name, "labels": dict(labels)}}
        return copy.deepcopy(self.namespaces[name])

    def delete_namespace(self, name: str) -> None:
        self.deleted.append(("namespace", name))
        if self.namespaces.pop(name, None) is None:
            raise ClusterError(404, "not found")
        for key in [k for k in self.pods if k[0] == name]:
            del self.pods[key]

    def get_resource_quota(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.quotas:
            raise ClusterError(404, "not found")
        return copy.deepcopy(self.quotas[(namespace, name)])

    def list_workloads(self, namespace: str) -> list[Obj]:
        return copy.deepcopy(self.workloads.get(namespace, []))

    def get_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj:
        key = (plural, namespace or "", name, group)
        if key not in self.custom:
            raise ClusterError(404, f'{plural} "{name}" not found')
        return copy.deepcopy(self.custom[key])

    def list_custom(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[Obj]:
        return [
            copy.deepcopy(v)
            for (p, ns, _, g), v in self.custom.items()
            if p == plural and g == group and namespace in (None, ns)
        ]

    def create_custom(
        self,
        group: str,
        version: str,
        plural: str,
        body: Obj,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        if plural in self.knobs.dry_run_error:
            raise ClusterError(500, self.knobs.dry_run_error[plural])
        if not dry_run:
            self.custom[(plural, namespace or "", body["metadata"]["name"], group)] = body
        return copy.deepcopy(body)

    # --- simulation --------------------------------------------------------------------
    def _tunnel(self, namespace: str, name: str) -> Obj:
        if not self.knobs.konnectivity:
            raise ClusterError(500, "error dialing backend: No agent available")
        return self.pods[(namespace, name)]

    def _card(self, uuid: str) -> Obj:
        for n in self.nodes.values():
            for c in json.loads(
                n["metadata"]["annotations"].get("hami.io/node-nvidia-register", "[]")
            ):
                if c["id"] == uuid:
                    return c
        raise KeyError(uuid)

    def _admit_quota(self, namespace: str, limits: Obj) -> None:
        for (ns, _), q in self.quotas.items():
            hard = q["spec"]["hard"].get("limits.nvidia.com/gpumem")
            if ns != namespace or hard is None or not self.knobs.quota_admission:
                continue
            used = sum(
                int(p["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpumem", 0))
                for (pns, _), p in self.pods.items()
                if pns == ns
            )
            ask = int(limits.get("nvidia.com/gpumem", 0)) * int(limits.get("nvidia.com/gpu", 1))
            if used + ask > int(hard):
                raise ClusterError(
                    400,
                    'admission webhook "vgpu.hami.io" denied the request: exceeding resource quota',
                )

    def _usage(self, node: str) -> dict[str, list[int]]:
        use: dict[str, list[int]] = {}
        for p in self.pods.values():
            ann = p["metadata"]["annotations"]
            if ann.get("hami.io/vgpu-node") != node:
                continue
            uuid, _, mem, cores = ann["hami.io/vgpu-devices-allocated"].split(":")[0].split(",")
            u = use.setdefault(uuid, [0, 0, 0])
            u[0] += 1
            u[1] += int(mem)
            u[2] += int(cores)
        return use

    def _choose(self, node: str, mem: int, cores: int, policy: str) -> str | None:
        cards = json.loads(
            self.nodes[node]["metadata"]["annotations"].get("hami.io/node-nvidia-register", "[]")
        )
        use = self._usage(node)
        best, best_score = None, None
        for c in cards:
            u = use.get(c["id"], [0, 0, 0])
            free_mem = c["devmem"] - u[1]
            if u[0] >= c["count"] or (free_mem < mem and not self.knobs.ignore_memory):
                continue
            if c["devcore"] - u[2] < cores:
                continue
            score = u[0] / c["count"] + u[1] / c["devmem"] + u[2] / c["devcore"]
            better = best_score is None or (
                score >= best_score if policy == "binpack" else score <= best_score
            )
            if better:
                best, best_score = c["id"], score
        return best

    def _lock_free(self, node: str) -> bool:
        held = self.nodes[node]["metadata"]["annotations"].get("hami.io/mutex.lock")
        if not held:
            return True
        _, ns, pod = held.split(",")
        # HAMi >= 2.7 takes over a lock whose pod is gone.
        return (ns, pod) not in self.pods

    def _tick(self) -> None:
        now = self.clock.now()
        for node in self.nodes.values():  # timed lock release
            ann = node["metadata"]["annotations"]
            until = node.get("_lock_until")
            if ann.get("hami.io/mutex.lock") and until is not None and now >= until:
                del ann["hami.io/mutex.lock"]
                node.pop("_lock_until")
        for (ns, name), pod in sorted(self.pods.items(), key=lambda kv: kv[1]["_seq"]):
            spec, ann = pod["spec"], pod["metadata"]["annotations"]
            if spec.get("nodeName"):
                continue
            limits = spec["containers"][0].get("resources", {}).get("limits", {})
            if not any(k in limits for k in HAMI_RES):
                spec["nodeName"] = next(iter(self.nodes))
                pod["status"]["phase"] = "Running"
                continue
            if spec["schedulerName"] != "hami-scheduler" or not self.knobs.scheduler:
                continue
            self._schedule(
                ns,
                name,
                pod,
                int(limits.get("nvidia.com/gpumem", 0)),
                int(limits.get("nvidia.com/gpucores", 0)),
                now,
            )

    def _schedule(self, ns: str, name: str, pod: Obj, mem: int, cores: int, now: float) -> None:
        spec, ann = pod["spec"], pod["metadata"]["annotations"]
        want = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        policy = self.knobs.ignore_policy or ann.get("hami.io/gpu-scheduler-policy", "spread")
        reasons = []
        for node in self.nodes:
            if want and node != want:
                continue
            card = self._choose(node, mem, cores, policy)
            if card is None:
                reasons.append("CardInsufficientMemory")
                continue
            if not self._lock_free(node):
                reasons.append("node lock contention")
                continue
            ann["hami.io/vgpu-node"] = node
            ann["hami.io/vgpu-devices-allocated"] = f"{card},NVIDIA,{mem},{cores}:;"
            spec["nodeName"] = node
            lock = self.nodes[node]["metadata"]["annotations"]
            if self.knobs.finish_alloc and not self.knobs.lock_hold_seconds:
                ann["hami.io/bind-phase"] = "success"
                pod["status"]["phase"] = "Running"
            elif self.knobs.finish_alloc:
                ann["hami.io/bind-phase"] = "success"
                pod["status"]["phase"] = "Running"
                lock["hami.io/mutex.lock"] = f"2026-01-01T00:00:00Z,{ns},{name}"
                self.nodes[node]["_lock_until"] = now + self.knobs.lock_hold_seconds
            else:
                ann["hami.io/bind-phase"] = "allocating"
                lock["hami.io/mutex.lock"] = f"2026-01-01T00:00:00Z,{ns},{name}"
            return
        msg = f"0/{len(self.nodes)} nodes are available: " + ", ".join(f"1 {r}" for r in reasons)
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
        ]


class FakeLab:
    """A management cluster and tenants, wired like the `lab` stack."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock or FakeClock()
        self.servers: dict[str, FakeServer] = {}
        self.tokens: dict[str, str] = {}  # token -> server url it belongs to
        self.created_clusters: list[str] = []
        self.mgmt = self._server("management", "https://172.30.0.2:6443", "mgmt-token")
        self.spec: Obj = {
            "stack": "lab",
            "management": {
                "kubeconfig": kubeconfig("https://172.30.0.2:6443", "mgmt-token"),
                "kamajiNamespace": "kamaji-system",
                "datastore": "default",
            },
            "tenants": [],
            "timeouts": {
                "apiSeconds": 10,
                "podSeconds": 90,
                "lockBurstPods": 5,
                "lockBurstSeconds": 60,
            },
            "testImage": "registry.k8s.io/pause:3.10",
            "toolsImage": "busybox:1.37.0",
        }
        self.mgmt.nodes["lab-control-plane"] = _node("lab-control-plane")
        self.mgmt.workloads["kamaji-system"] = [
            {
                "kind": "Deployment",
                "metadata": {"name": "kamaji"},
                "spec": {"replicas": 1},
                "status": {"readyReplicas": 1},
            },
            {
                "kind": "StatefulSet",
                "metadata": {"name": "kamaji-etcd"},
                "spec": {"replicas": 1},
                "status": {"readyReplicas": 1},
            },
        ]
        self.mgmt.custom[("datastores", "", "default", "kamaji.clastix.io")] = {
            "metadata": {"name": "default"},
            "spec": {"driver": "etcd"},
        }
        self.mgmt.custom[("ipaddresspools", "metallb-system", "lab", "metallb.io")] = {
            "metadata": {"name": "lab", "namespace": "metallb-system"},
            "spec": {"addresses": ["172.30.255.200-172.30.255.250"]},
        }

    def _server(self, name: str, url: str, token: str) -> FakeServer:
        s = FakeServer(name, self.clock)
        self.servers[url] = s
        self.tokens[token] = url
        return s

    def add_tenant(
        self,
        name: str,
        address: str,
        cards: list[Obj],
        *,
        gpu_mode: str = "simulated",
        quota_mb: int | None = None,
        policy: tuple[str, str] = ("binpack", "spread"),
    ) -> FakeServer:
        url = f"https://{address}:6443"
        s = self._server(name, url, f"{name}-token")
        node = f"{name}-worker-1"
        full = [{**c, "count": c.get("count", 10)} for c in cards]
        s.nodes[node] = _node(node, full)
        s.namespaces.update({n: {"metadata": {"name": n}} for n in ("default", "kube-system")})
        self.mgmt.custom[("tenantcontrolplanes", name, name, "kamaji.clastix.io")] = {
            "metadata": {"name": name, "namespace": name},
            "spec": {"kubernetes": {"version": "v1.35.0"}},
            "status": {
                "kubernetesResources": {"version": {"status": "Ready"}},
                "controlPlaneEndpoint": f"{address}:6443",
            },
        }
        quota = None
        if quota_mb:
            quota = {"namespace": "gpu-workloads", "name": "gpu-quota", "gpumemMB": quota_mb}
            s.namespaces["gpu-workloads"] = {"metadata": {"name": "gpu-workloads"}}
            s.quotas[("gpu-workloads", "gpu-quota")] = {
                "spec": {"hard": {"limits.nvidia.com/gpumem": str(quota_mb)}}
            }
        self.spec["tenants"].append(
            {
                "name": name,
                "namespace": name,
                "kubeconfig": kubeconfig(url, f"{name}-token"),
                "address": address,
                "port": 6443,
                "nodes": [node],
                "gpuMode": gpu_mode,
                "gpus": {node: full} if cards else {},
                "schedulerPolicy": {"node": policy[0], "gpu": policy[1]},
                "quota": quota,
            }
        )
        return s

    def factory(self, kc: Obj, label: str) -> Any:
        self.created_clusters.append(label)
        url = server_of(kc)
        token = kc["users"][0]["user"]["token"]
        server = self.servers[url]
        if self.tokens.get(token) != url and not server.knobs.accept_foreign:
            return DeniedCluster(server, label)
        return FakeCluster(server, label)

    def tenant(self, name: str) -> FakeServer:
        return next(s for s in self.servers.values() if s.name == name)


A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}
L4 = {"type": "NVIDIA L4", "devmem": 23034, "devcore": 100}


def standard_lab(clock: FakeClock | None = None) -> FakeLab:
    """tenant-a: one A100 node; tenant-b: one node with two L4 cards (as in Pulumi.lab.yaml)."""
    lab = FakeLab(clock)
    lab.add_tenant("tenant-a", "172.30.255.200", [A100], quota_mb=81920)
    lab.add_tenant("tenant-b", "172.30.255.201", [L4, L4], quota_mb=46068)
    return lab
