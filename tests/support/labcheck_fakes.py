"""In-memory fakes for labcheck: a clock, API servers implementing the Cluster protocol,
and a miniature HAMi (webhook, scheduler, node lock) that can be broken on purpose.

The fake scheduler is written independently of labcheck.hami so placement tests do not
just compare the predictor with itself.
"""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from builders.lock_wait_policy import POD_GROUP_LABEL, POD_GROUP_VALUE
from labcheck.cluster import ClusterError, server_of
from labcheck.context import RunContext
from labcheck.result import Result
from labcheck.runner import RunOutcome, run_checks
from labcheck.spec import parse_spec

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
            "nodeInfo": {"kubeletVersion": "v1.35.0"},
        },
    }


PODMAX_IN_UNSCHEDULABLE_SECONDS = 300  # kube-scheduler podMaxInUnschedulablePodsDuration
HAMI_NAMESPACE, HAMI_SERVICE = "kube-system", "hami-scheduler"
# The extender flags the lab passes HAMi that bear on the timeouts (builders/hami.py).
LAB_EXTENDER_ARGS = ("--node-lock-timeout=5m", "--node-lock-retry-timeout=28s")


def scheduler_config(http_timeout: str | int | None = "30s", *, legacy: bool = False) -> str:
    """kube-scheduler's config with one binding extender, as HAMi's chart wires it: a
    KubeSchedulerConfiguration (httpTimeout a Go duration), or the legacy Policy JSON (an
    integer of nanoseconds). None leaves httpTimeout out."""
    extender: Obj = {"urlPrefix": "https://127.0.0.1:443", "filterVerb": "filter"}
    extender["bindVerb"] = "bind"
    if http_timeout is not None:
        extender["httpTimeout"] = http_timeout
    if legacy:
        return json.dumps({"kind": "Policy", "apiVersion": "v1", "extenders": [extender]})
    doc = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "hami-scheduler"}],
        "extenders": [extender],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def scheduler_deployment(
    extender_args: tuple[str, ...] | list[str] = LAB_EXTENDER_ARGS, *, legacy: bool = False
) -> Obj:
    """HAMi's scheduler Deployment: kube-scheduler reading its config from the ConfigMap
    mounted at /config, and the extender with the flags the lab passes."""
    config = (
        "--policy-config-file=/config/config.json" if legacy else "--config=/config/config.yaml"
    )
    return {
        "metadata": {"name": HAMI_SERVICE, "namespace": HAMI_NAMESPACE},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "kube-scheduler",
                            "command": ["kube-scheduler", config, "-v=4"],
                            "volumeMounts": [{"name": "scheduler-config", "mountPath": "/config"}],
                        },
                        {
                            "name": "vgpu-scheduler-extender",
                            "command": ["scheduler", "--http_bind=0.0.0.0:443", *extender_args],
                        },
                    ],
                    "volumes": [
                        {"name": "scheduler-config", "configMap": {"name": HAMI_SERVICE}},
                        {"name": "device-config", "configMap": {"name": f"{HAMI_SERVICE}-device"}},
                    ],
                }
            }
        },
    }


def install_scheduler(
    server: FakeServer,
    http_timeout: str | int | None = "30s",
    extender_args: tuple[str, ...] | list[str] = LAB_EXTENDER_ARGS,
    *,
    legacy: bool = False,
) -> None:
    """Replace a tenant's HAMi scheduler Deployment and its kube-scheduler ConfigMap."""
    key = "config.json" if legacy else "config.yaml"
    server.deployments[(HAMI_NAMESPACE, HAMI_SERVICE)] = scheduler_deployment(
        extender_args, legacy=legacy
    )
    server.config_maps[(HAMI_NAMESPACE, HAMI_SERVICE)] = {
        "metadata": {"name": HAMI_SERVICE, "namespace": HAMI_NAMESPACE},
        "data": {key: scheduler_config(http_timeout, legacy=legacy)},
    }


@dataclass
class Knobs:
    reachable: bool = True
    foreign_answer: int = 401  # what the server answers credentials it does not accept
    readyz: str = "ok"
    konnectivity: bool = True
    webhook: bool = True  # HAMi webhook reached (else fails open: default-scheduler)
    # When the hami-scheduler Service gets a Ready endpoint (leader label on the extender's
    # register tick); None: never. Without one the webhook fails open (failurePolicy Ignore).
    endpoints_at: float | None = 0.0
    scheduler: bool = True  # hami-scheduler's kube-scheduler schedules (extender reachable)
    # When HAMi's scheduler cache has read the nodes' registrations (node add, or its 15 s tick
    # after a re-join). Before, its filter fails every node with "node unregistered".
    registration_read_at: float = 0.0
    # The lab agent's requeue: once HAMi has read the registration, pods rejected as
    # unregistered are touched, which makes kube-scheduler try them again.
    requeue_unregistered: bool = False
    finish_alloc: bool = True  # agent/device plugin completes allocation and frees the lock
    lock_hold_seconds: float = 0.0  # how long each bind keeps the node lock
    ignore_policy: str = ""  # force this gpu policy regardless of the annotation
    ignore_memory: bool = False  # over-commit: place pods whatever their memory
    quota_admission: bool = True  # webhook enforces the GPU memory quota
    pods_quota_full: bool = False  # a Kubernetes ResourceQuota (pod count) is exhausted
    quota_in_filter: bool = False  # the scheduler's Filter holds an over-quota pod Pending
    smi_reports_card: bool = False  # real mode: HAMi-core not injected
    image_pull_fails: bool = False  # bound and allocated, but the container never starts
    allocation_skew: str = ""  # "node" | "slice" | "uuid": allocation annotations disagree
    container_exits: bool = False  # bound and allocated, then the container fails
    accept_foreign: bool = False  # authenticate other clusters' tokens (isolation broken)
    dry_run_error: dict[str, str] = field(default_factory=dict)  # plural -> message
    # The program's admission policy labels GPU pods HAMi places as pod-group members.
    lock_wait_policy: bool = True


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


FOREIGN_ANSWERS = {
    401: "Unauthorized",
    # An unknown client certificate falls back to system:anonymous, which RBAC refuses.
    403: 'nodes is forbidden: User "system:anonymous" cannot list resource "nodes"',
}


class DeniedCluster:
    """An API server answering a token it does not know."""

    def __init__(self, server: FakeServer, label: str) -> None:
        self.label = label
        self.server = server

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.server.foreign_calls.append((name, args))
            if not self.server.knobs.reachable:  # no TLS handshake, no answer at all
                raise ClusterError(0, "ConnectTimeoutError: timed out")
            answer = self.server.knobs.foreign_answer
            raise ClusterError(answer, FOREIGN_ANSWERS.get(answer, "Internal error"))

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
        self.deployments: dict[tuple[str, str], Obj] = {}
        self.config_maps: dict[tuple[str, str], Obj] = {}
        self.calls: list[tuple[str, tuple]] = []
        self.foreign_calls: list[tuple[str, tuple]] = []
        self.deleted: list[tuple[str, str]] = []
        self.events: dict[tuple[str, str], list[Obj]] = {}
        self.hook: Any = None
        self._seq = 0
        # node -> the directory that stands for its root file system: a pod bound there with a
        # hostPath volume runs its command here (run_on_node); a bound pod elsewhere waits.
        self.node_roots: dict[str, Path] = {}
        self.git_version = "v1.35.0"  # what /version serves
        # The management cluster's Prometheus behind its service proxy: PromQL -> the vector
        # it answers (a list of {"metric": {...}, "value": [t, "v"]}), or an error text.
        self.prometheus: dict[str, list[Obj] | str] = {}
        self.prometheus_queries: list[tuple[str, dict[str, str]]] = []

    # --- protocol ---------------------------------------------------------------------
    def version(self) -> Obj:
        return {"gitVersion": self.git_version}

    def get_raw(self, path: str, query: list[tuple[str, str]] | None = None) -> str:
        if path.endswith("/proxy/api/v1/query"):
            return self._prometheus_answer(path, dict(query or []))
        return self.knobs.readyz if path.startswith("/readyz") else '{"items": []}'

    def _prometheus_answer(self, path: str, query: dict[str, str]) -> str:
        self.prometheus_queries.append((path, query))
        answer = self.prometheus.get(query["query"], [])
        if isinstance(answer, str):
            return json.dumps({"status": "error", "errorType": "bad_data", "error": answer})
        data = {"resultType": "vector", "result": answer}
        return json.dumps({"status": "success", "data": data})

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

    def create_pod(self, namespace: str, body: Obj, dry_run: bool = False) -> Obj:
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
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        labels = pod["metadata"].setdefault("labels", {})
        if self.knobs.lock_wait_policy and "nvidia.com/gpu" in limits:
            labels.setdefault(POD_GROUP_LABEL, POD_GROUP_VALUE)
        if dry_run:
            return pod
        self._seq += 1
        pod["_seq"] = self._seq
        if any(k in limits for k in HAMI_RES) and self.knobs.webhook and self._endpoint_ready():
            pod["spec"]["schedulerName"] = "hami-scheduler"
            self._admit_quota(namespace, name, limits)
        if self.knobs.pods_quota_full:  # validating admission runs after mutating webhooks
            raise ClusterError(
                403,
                f'pods "{name}" is forbidden: exceeded quota: pod-count, requested: pods=1, '
                "used: pods=4, limited: pods=4",
            )
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
        self.events.pop((namespace, name), None)

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
        return copy.deepcopy(self.events.get((namespace, object_name), []))

    def list_endpoint_slices(self, namespace: str, service: str) -> list[Obj]:
        self._tick()
        if (namespace, service) != (HAMI_NAMESPACE, HAMI_SERVICE):
            return []
        # The EndpointSlice controller keeps one slice, with no endpoints while no pod matches.
        endpoints = (
            [{"addresses": ["10.244.1.7"], "conditions": {"ready": True}}]
            if self._endpoint_ready()
            else None
        )
        return [
            {
                "metadata": {
                    "name": f"{service}-x7k2p",
                    "namespace": namespace,
                    "labels": {"kubernetes.io/service-name": service},
                },
                "addressType": "IPv4",
                "endpoints": endpoints,
            }
        ]

    def add_placed_pod(self, pod: Obj) -> None:
        """A pod HAMi placed before the run (a tenant's workload), annotations and all."""
        ns = pod["metadata"]["namespace"]
        self.namespaces.setdefault(ns, {"metadata": {"name": ns}})
        self._seq += 1
        self.pods[(ns, pod["metadata"]["name"])] = {**copy.deepcopy(pod), "_seq": self._seq}

    def touch_pod(self, namespace: str, name: str) -> None:
        """A metadata update (what the lab agent does): kube-scheduler retries a parked pod."""
        self.pods[(namespace, name)].pop("_parked_until", None)

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

    def get_deployment(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.deployments:
            raise ClusterError(404, f'deployments.apps "{name}" not found')
        return copy.deepcopy(self.deployments[(namespace, name)])

    def get_config_map(self, namespace: str, name: str) -> Obj:
        if (namespace, name) not in self.config_maps:
            raise ClusterError(404, f'configmaps "{name}" not found')
        return copy.deepcopy(self.config_maps[(namespace, name)])

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

    def delete_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> None:
        self.deleted.append((plural, f"{namespace}/{name}" if namespace else name))
        if self.custom.pop((plural, namespace or "", name, group), None) is None:
            raise ClusterError(404, f'{plural} "{name}" not found')

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

    def _endpoint_ready(self) -> bool:
        at = self.knobs.endpoints_at
        return at is not None and self.clock.now() >= at

    def _admit_quota(self, namespace: str, name: str, limits: Obj) -> None:
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
                # admission.Denied is HTTP 403; the API server prefixes the webhook's name.
                raise ClusterError(
                    403,
                    f'pods "{name}" is forbidden: admission webhook "vgpu.hami.io" denied the '
                    "request: exceeding resource quota",
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

    def _registered(self, node: str) -> list[Obj]:
        return json.loads(
            self.nodes[node]["metadata"]["annotations"].get("hami.io/node-nvidia-register", "[]")
        )

    def _over_quota(self, namespace: str, mem: int) -> bool:
        """The extender's own quota check in Filter (fitQuota), seen when admission let it by."""
        hard = (self.quotas.get((namespace, "gpu-quota"), {}).get("spec", {}).get("hard", {})).get(
            "limits.nvidia.com/gpumem"
        )
        return self.knobs.quota_in_filter and hard is not None and mem > int(hard)

    def _choose(self, node: str, mem: int, cores: int, policy: str) -> str | None:
        cards = self._registered(node)
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
            if spec.get("nodeName") in self.node_roots and pod["status"]["phase"] == "Pending":
                run_on_node(pod, self.node_roots[spec["nodeName"]])
            if spec.get("nodeName") or spec.get("resourceClaims"):  # claims: a DraServer's
                continue
            limits = spec["containers"][0].get("resources", {}).get("limits", {})
            if not any(k in limits for k in HAMI_RES):
                spec["nodeName"] = next(iter(self.nodes))
                pod["status"]["phase"] = "Running"
                continue
            if spec["schedulerName"] != "hami-scheduler" or not self.knobs.scheduler:
                continue
            if not self._retried_now(pod, now):
                continue
            self._schedule(
                ns,
                name,
                pod,
                int(limits.get("nvidia.com/gpumem", 0)),
                int(limits.get("nvidia.com/gpucores", 0)),
                now,
            )

    def _retried_now(self, pod: Obj, now: float) -> bool:
        """kube-scheduler parks a pod the extender rejected; only the agent's touch (a pod
        update) or podMaxInUnschedulablePodsDuration moves it on. Other cluster events that
        would requeue it are not modelled; other rejections are retried at every tick."""
        parked = pod.get("_parked_until")
        if parked is None:
            return True
        registered = now >= self.knobs.registration_read_at
        if now >= parked or (registered and self.knobs.requeue_unregistered):
            del pod["_parked_until"]
            return True
        return False

    def _schedule(self, ns: str, name: str, pod: Obj, mem: int, cores: int, now: float) -> None:
        spec, ann = pod["spec"], pod["metadata"]["annotations"]
        want = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
        policy = self.knobs.ignore_policy or ann.get("hami.io/gpu-scheduler-policy", "spread")
        reasons = []
        candidates = [n for n in self.nodes if not want or n == want]
        # HAMi knows a node once it read a register annotation there (node add or its tick).
        if now < self.knobs.registration_read_at or not any(map(self._registered, candidates)):
            self._reject_unregistered(ns, name, pod, candidates, now)
            return
        for node in candidates:
            n_cards = len(self._registered(node))
            if self._over_quota(ns, mem):
                reasons.append(f"{n_cards}/{n_cards} ResourceQuotaNotFit")  # common.GenReason
                continue
            card = self._choose(node, mem, cores, policy)
            if card is None:
                reasons.append(f"{n_cards}/{n_cards} CardInsufficientMemory")
                continue
            if not self._lock_free(node):
                reasons.append("node lock contention")
                continue
            ann["hami.io/vgpu-node"] = node
            ann["hami.io/vgpu-devices-allocated"] = f"{card},NVIDIA,{mem},{cores}:;"
            spec["nodeName"] = node
            self._skew(ann)
            lock = self.nodes[node]["metadata"]["annotations"]
            if self.knobs.image_pull_fails:
                ann["hami.io/bind-phase"] = "success"
                pod["status"]["containerStatuses"] = [
                    {"name": "main", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
                ]
            elif self.knobs.container_exits:
                ann["hami.io/bind-phase"] = "success"
                pod["status"]["phase"] = "Failed"
            elif self.knobs.finish_alloc and not self.knobs.lock_hold_seconds:
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
        self._unschedulable(pod, reasons)

    def _skew(self, ann: Obj) -> None:
        """Broken accounting on purpose: the annotations HAMi writes disagree with the bind."""
        skew = self.knobs.allocation_skew
        if skew == "node":
            ann["hami.io/vgpu-node"] = "some-other-node"
        elif skew == "slice":  # gpumem limit not honoured: half the memory asked
            uuid, vendor, mem, cores = ann["hami.io/vgpu-devices-allocated"][:-2].split(",")
            ann["hami.io/vgpu-devices-allocated"] = f"{uuid},{vendor},{int(mem) // 2},{cores}:;"
        elif skew == "uuid":
            rest = ann["hami.io/vgpu-devices-allocated"].split(",", 1)[1]
            ann["hami.io/vgpu-devices-allocated"] = f"GPU-unknown,{rest}"

    def _reject_unregistered(
        self, ns: str, name: str, pod: Obj, candidates: list[str], now: float
    ) -> None:
        # HAMi Filter: failedNodes[node] = "node unregistered", plus its FilteringFailed event.
        self._unschedulable(pod, ["node unregistered"] * len(candidates))
        self.events.setdefault((ns, name), []).append(
            {
                "type": "Warning",
                "reason": "FilteringFailed",
                "message": f"no available node, {len(candidates)} nodes do not meet",
            }
        )
        pod["_parked_until"] = now + PODMAX_IN_UNSCHEDULABLE_SECONDS

    def _unschedulable(self, pod: Obj, reasons: list[str]) -> None:
        """The PodScheduled condition kube-scheduler writes (framework.FitError.Error())."""
        n = len(self.nodes)
        counts = sorted(f"{reasons.count(r)} {r}" for r in dict.fromkeys(reasons))
        msg = (
            f"0/{n} nodes are available: {', '.join(counts)}. preemption: 0/{n} nodes are "
            f"available: {n} No preemption victims found for incoming pod."
        )
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
        ]


def run_on_node(pod: Obj, root: Path) -> None:
    """Runs a bound pod's one container as the kubelet would, on a node whose root file system
    is `root`: its command with `sh` here, every hostPath volume at its mountPath (the command
    names its mount root and message file as its arguments 4 and 5, as labcheck's files pod
    does), then phase Succeeded or Failed and the termination message (cut to 4 KiB)."""
    (container,) = pod["spec"]["containers"]
    mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
    argv = list(container["command"])
    message_file, mount_root = argv[4], argv[5]
    for volume in pod["spec"].get("volumes", []):
        mount = mounts[volume["name"]]
        # The command sees the node's path under its mount root, read-only as asked.
        assert mount["mountPath"] == mount_root + volume["hostPath"]["path"], mount
        assert mount.get("readOnly") is True, mount
    assert message_file == container.get("terminationMessagePath", "/dev/termination-log")
    with tempfile.TemporaryDirectory() as scratch:
        argv[4], argv[5] = f"{scratch}/message", str(root)
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
        message = Path(argv[4]).read_text() if Path(argv[4]).exists() else ""
    pod["status"]["phase"] = "Succeeded" if done.returncode == 0 else "Failed"
    terminated = {"exitCode": done.returncode, "message": message.encode()[:4096].decode()}
    pod["status"]["containerStatuses"] = [
        {"name": container["name"], "state": {"terminated": terminated}}
    ]
    pod["_stderr"] = done.stderr


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

    def _server(self, name: str, url: str, token: str, kind: type[FakeServer] | None = None):
        s = (kind or FakeServer)(name, self.clock)
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
        kind: type[FakeServer] | None = None,
    ) -> FakeServer:
        url = f"https://{address}:6443"
        s = self._server(name, url, f"{name}-token", kind)
        node = f"{name}-worker-1"
        full = [{**c, "count": c.get("count", 10)} for c in cards]
        s.nodes[node] = _node(node, full)
        s.namespaces.update({n: {"metadata": {"name": n}} for n in ("default", "kube-system")})
        install_scheduler(s)
        self.mgmt.custom[("tenantcontrolplanes", name, name, "kamaji.clastix.io")] = {
            "metadata": {"name": name, "namespace": name},
            "spec": {"kubernetes": {"version": "v1.35.0"}},
            "status": {
                "kubernetesResources": {"version": {"status": "Ready", "version": "v1.35.0"}},
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
                "kubernetesVersion": "v1.35.0",
                "gpus": {node: full} if cards else {},
                "schedulerPolicy": {"node": policy[0], "gpu": policy[1]},
                "quota": quota,
                "lockWait": {"label": POD_GROUP_LABEL, "value": POD_GROUP_VALUE},
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


class Quiet:
    def start(self, check: Any, tenant: str) -> None:
        pass

    def finish(self, result: Result) -> None:
        pass


def run_lab(
    lab: FakeLab, only: tuple[str, ...] | list[str] = ()
) -> tuple[RunOutcome, dict[tuple[str, str], Result]]:
    """Run labcheck (run id t1) against the fake lab; results keyed by (check, tenant)."""
    from labcheck.checks import ALL_CHECKS

    ctx = RunContext(spec=parse_spec(lab.spec), factory=lab.factory, clock=lab.clock, run_id="t1")
    out = run_checks(ctx, ALL_CHECKS, Quiet(), only=only)
    return out, {(r.check, r.tenant): r for r in out.results}


def check_result(lab: FakeLab, check: str, tenant: str = "tenant-a") -> Result:
    """One check run alone against the fake lab: its result for `tenant` ("" if lab-wide)."""
    _, results = run_lab(lab, only=[check])
    return results[(check, tenant)]


def fail_call(server: FakeServer, call: str, status: int, message: str, when=lambda args: True):
    """Make one fake API call fail (after the fake's reachability check)."""

    def hook(name: str, args: tuple) -> None:
        if name == call and when(args):
            raise ClusterError(status, message)

    server.hook = hook


def hami_pod(namespace: str, name: str, node: str, slices: str, phase: str = "Running") -> Obj:
    """A pod as HAMi left it after placing it: `slices` is its vgpu-devices-allocated value."""
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "annotations": {
                "hami.io/vgpu-node": node,
                "hami.io/vgpu-devices-allocated": slices,
                "hami.io/bind-phase": "success",
            },
        },
        "spec": {"nodeName": node, "schedulerName": "hami-scheduler", "containers": []},
        "status": {"phase": phase},
    }


def placement_lab(clock: FakeClock | None = None) -> FakeLab:
    """Recorded placements of two tenants' workloads (what HAMi wrote), for the picture:

    tenant-a-worker-1: A100 #0 full (one 81920 MB / 100 % pod), A100 #1 empty (a Succeeded
    pod's slice no longer counts). tenant-b-worker-1: L4 #0 shared by three pods of two
    namespaces (8192 + 8192 + 4096 MB), L4 #1 holds one 100 %-cores pod, so its free memory is
    out of reach. tenant-b-worker-2 has no GPU."""
    lab = FakeLab(clock)
    a = lab.add_tenant("tenant-a", "172.30.255.200", [A100, A100])
    b = lab.add_tenant("tenant-b", "172.30.255.201", [L4, L4])
    b.nodes["tenant-b-worker-2"] = _node("tenant-b-worker-2")
    lab.spec["tenants"][1]["nodes"].append("tenant-b-worker-2")
    a_node, b_node = "tenant-a-worker-1", "tenant-b-worker-1"
    pods = {
        a: [
            hami_pod("ml-train", "trainer", a_node, f"GPU-{a_node}-0,NVIDIA,81920,100:;"),
            hami_pod(
                "ml-train", "old-job", a_node, f"GPU-{a_node}-1,NVIDIA,40960,50:;", "Succeeded"
            ),
        ],
        b: [
            hami_pod("gpu-workloads", "infer-0", b_node, f"GPU-{b_node}-0,NVIDIA,8192,30:;"),
            hami_pod("gpu-workloads", "infer-1", b_node, f"GPU-{b_node}-0,NVIDIA,8192,30:;"),
            hami_pod("notebooks", "lab-anna", b_node, f"GPU-{b_node}-0,NVIDIA,4096,0:;"),
            hami_pod("notebooks", "render", b_node, f"GPU-{b_node}-1,NVIDIA,6144,100:;"),
        ],
    }
    for server, recorded in pods.items():
        for pod in recorded:
            server.add_placed_pod(pod)
    return lab


def example_lab(clock: FakeClock | None = None) -> FakeLab:
    """The lab spec (standard_lab) with one tenant workload, notebooks/lab-anna (4096 MB, no
    cores) on tenant-b's first L4: what docs/labcheck-placement.png is drawn from."""
    lab = standard_lab(clock)
    node = "tenant-b-worker-1"
    lab.tenant("tenant-b").add_placed_pod(
        hami_pod("notebooks", "lab-anna", node, f"GPU-{node}-0,NVIDIA,4096,0:;")
    )
    return lab


def run_cli(lab: FakeLab, directory: Path, *argv: str, run_id: str = "t1") -> tuple[int, str]:
    """`python -m labcheck` against the fake lab: its spec in `directory`, the reports in
    `directory`/reports. Returns the exit code and the terminal output.

    The docs' example: run_cli(example_lab(), Path("/tmp/x"), run_id="1a2b3c4d")."""
    from labcheck.cli import main

    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out = io.StringIO()
    args = ["--spec", str(spec), "--report-dir", str(directory / "reports"), *argv]
    code = main(args, out=out, factory=lab.factory, clock=lab.clock, run_id=run_id)
    return code, out.getvalue()


def recorded_placements() -> dict[str, tuple[list[Obj], list[Obj]]]:
    """tenant -> (nodes, pods) exactly as placement_lab's API servers list them."""
    lab = placement_lab()
    return {
        t: (lab.tenant(t).list_nodes(), lab.tenant(t).list_pods()) for t in ("tenant-a", "tenant-b")
    }
