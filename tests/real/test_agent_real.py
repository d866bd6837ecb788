"""gpu_agent against a real kube-apiserver, deployed as the lab deploys it (issue 10).

The agent runs from the files of the ConfigMaps the program renders
(components/tenant/simulated_gpus.py: its code, its config.json built by ``agent_config``
from Pulumi.lab.yaml's tenant-b), with the
ServiceAccount, ClusterRole and ClusterRoleBinding of ``agent_manifests``. It runs the way its
pod does: ``python -m gpu_agent`` in the code's parent directory, the Deployment's environment,
as uid/gid 65534 (the container's ``runAsUser``), in-cluster mode: a private mount namespace
puts a real TokenRequest token and the CA at /var/run/secrets/kubernetes.io/serviceaccount, and
KUBERNETES_SERVICE_HOST/PORT point at the API server. The interpreter is the host's
/usr/bin/python3 (stdlib only, like the python image): the venv's lives under /root, which
uid 65534 cannot enter.

HAMi is not available here, so the tests play HAMi v2.10's scheduler writes exactly (see
``HamiScheduler``); kwok plays the kubelet and writes pod status at the same time as the agent.
Findings: D1 (capacity map), D2 (stale events), D3 (pod patch vs status writes), D4 (re-join).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, ControlPlaneError, on_the_planes_version

from builders.simulated_gpus import CONFIG_MOUNT, NAME, NAMESPACE, agent_config, agent_manifests
from gpu_agent import Agent, HttpKubeApi
from gpu_agent import parse_config as parse_agent_config
from gpu_agent.agent import POD_SELECTOR
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

NOBODY = 65534  # the Deployment's runAsUser
PYTHON = "/usr/bin/python3"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
AGENT_USER = f"system:serviceaccount:{NAMESPACE}:{NAME}"
WORK_NS = "gpu-work"
LOCK = "hami.io/mutex.lock"
PHASE = "hami.io/bind-phase"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
BIND_TIME = "hami.io/bind-time"
REGISTER = "hami.io/node-nvidia-register"
REQUEUE = "gpu-agent.lab/requeue-after-register"
MERGE = "application/merge-patch+json"

LAB = parse_config(on_the_planes_version(lab_stack_config()))
# tenant-b (two L4 cards) is the agent process's tenant; tenant-a's node is judged by
# in-process agents only, so the two never act on the same objects.
PROCESS_TENANT = next(t for t in LAB.tenants if t.name == "tenant-b")
IN_PROCESS_TENANT = next(t for t in LAB.tenants if t.name == "tenant-a")
GPU_NODE = PROCESS_TENANT.worker_names[0]
STALE_NODE = IN_PROCESS_TENANT.worker_names[0]
OTHER_NODE = "not-a-gpu-node"  # a kwok node the agent's config does not list


# --- a plain REST client (admin, or HAMi's writes) -----------------------------------------------


@dataclasses.dataclass
class Rest:
    server: str
    token: str
    context: ssl.SSLContext

    def call(self, method: str, path: str, body: Any = None, content_type: str = MERGE) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header(
            "Content-Type", content_type if method == "PATCH" else "application/json"
        )
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:
            return json.loads(response.read() or b"{}")

    def node(self, name: str) -> dict:
        return self.call("GET", f"/api/v1/nodes/{name}")

    def pod(self, name: str, namespace: str = WORK_NS) -> dict:
        return self.call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")


def rest(plane: ControlPlane, token: str | None = None) -> Rest:
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    return Rest(plane.server, token or plane.admin_token, context)


def annotations(obj: dict) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


# --- HAMi v2.10's scheduler, as it writes ------------------------------------------------------


def rfc3339_now() -> str:
    # Go's time.Now().Format(time.RFC3339) on a UTC host: seconds, "Z".
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_annotation(card_ids: list[str], mem: int, cores: int) -> str:
    """`UUID,NVIDIA,<MB>,<cores>:` per device, `;` after each container (one container here)."""
    return "".join(f"{uuid},NVIDIA,{mem},{cores}:" for uuid in card_ids) + ";"


@dataclasses.dataclass
class HamiScheduler:
    """Filter's and Bind's API writes of HAMi v2.10.0, in their order and patch types:

    - Filter, ``util.PatchPodAnnotations`` (pkg/util/util.go): one merge patch of the pod with
      ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` and, from ``NvidiaGPUDevices.PatchAnnotations``
      (pkg/device/nvidia/device.go:505), to-allocate = allocated = ``EncodePodSingleDevice``
      (pkg/device/devices.go:451-484), plus the label ``hami.io/vgpu-node``;
    - Bind (pkg/scheduler/scheduler.go:998-1065): ``acquireNodeLocks`` → ``SetNodeLock``
      (pkg/util/nodelock/nodelock.go:129-170): GET the node, refuse if the lock key exists,
      then a merge patch of ``hami.io/mutex.lock`` = ``GenerateNodeLockKeyByPod``
      (``<RFC3339>,<ns>,<pod>``, :306-318) with the node's resourceVersion; then a merge patch
      of the pod with ``bind-phase: allocating`` and ``bind-time`` (unix seconds); then the
      Binding. (Fact ``hami-v2.10-bind-writes``.)
    """

    api: Rest
    node: str

    def card_ids(self) -> list[str]:
        return [card["id"] for card in json.loads(annotations(self.api.node(self.node))[REGISTER])]

    def filter(
        self, pod: str, card: str, mem: int = 1024, cores: int = 10, namespace: str = WORK_NS
    ) -> str:
        return self.patch_allocation(pod, device_annotation([card], mem, cores), namespace)

    def patch_allocation(self, pod: str, devices: str, namespace: str = WORK_NS) -> str:
        """Filter's one pod patch with ``devices`` as both device annotations."""
        body = {
            "metadata": {
                "annotations": {
                    VGPU_NODE: self.node,
                    VGPU_TIME: str(int(time.time())),
                    TO_ALLOCATE: devices,
                    ALLOCATED: devices,
                },
                "labels": {VGPU_NODE: self.node},
            }
        }
        self.api.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}", body)
        return devices

    def try_lock(self, pod: str) -> bool:
        node = self.api.node(self.node)
        if LOCK in annotations(node):
            return False  # ErrNodeLockContention: the pod goes back to the queue
        value = f"{rfc3339_now()},{WORK_NS},{pod}"
        body = {
            "metadata": {
                "annotations": {LOCK: value},
                "resourceVersion": node["metadata"]["resourceVersion"],
            }
        }
        try:
            self.api.call("PATCH", f"/api/v1/nodes/{self.node}", body)
        except urllib.error.HTTPError as exc:
            if exc.code == 409:  # retried by SetNodeLock's backoff; here by the caller
                return False
            raise
        return True

    def bind(self, pod: str) -> None:
        phase = {PHASE: "allocating", BIND_TIME: str(int(time.time()))}
        path = f"/api/v1/namespaces/{WORK_NS}/pods/{pod}"
        self.api.call("PATCH", path, {"metadata": {"annotations": phase}})
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": WORK_NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }
        self.api.call("POST", f"{path}/binding", binding)

    def schedule(self, pod: str, card: str, timeout: float = 30) -> str:
        """Filter, then Bind once the node lock is free (HAMi's retry); the devices value."""
        devices = self.filter(pod, card)
        poll(lambda: self.try_lock(pod), f"node lock for {pod}", timeout)
        self.bind(pod)
        return devices


def poll(condition: Callable[[], Any], what: str, timeout: float, interval: float = 0.02) -> Any:
    """Like controlplane.wait_until, but often enough not to dominate an allocation's time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(interval)
    raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}")


def gpu_pod(name: str) -> dict:
    """A pod HAMi would schedule: nvidia.com/gpu limits, HAMi's schedulerName (so the real
    kube-scheduler leaves it to the test), an image kwok never pulls."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": WORK_NS},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {"name": "c0", "image": "registry.invalid/gpu:1", "resources": {"limits": limits}}
            ],
        },
    }


def create_pods(api: Rest, names: list[str]) -> None:
    for name in names:
        api.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", gpu_pod(name))


def allocated(pod: dict, node: str) -> bool:
    ann = annotations(pod)
    return ann.get(PHASE) == "success" and pod["spec"].get("nodeName") == node


# --- the agent process -------------------------------------------------------------------------


@dataclasses.dataclass
class AgentProcess:
    popen: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def lines_after(self, offset: int) -> list[str]:
        return self.text()[offset:].splitlines()

    def offset(self) -> int:
        return len(self.text())

    def stop(self) -> int:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(15)
        return self.popen.returncode


def readable_dir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(parents=True)
    path.chmod(0o755)
    return path


def write_readable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o644)


def agent_command(container: dict, sa_dir: Path) -> list[str]:
    """In a private mount namespace (gone with the process): the token and CA where a pod has
    them, then uid/gid 65534 with no groups and no capabilities, then the container's command
    (its `python` is the host's: see the module docstring)."""
    assert container["command"][0] == "python"
    setup = (
        "mount -t tmpfs -o mode=0755 tmpfs /run"
        f" && mkdir -p {SA_MOUNT} && mount --bind -o ro {sa_dir} {SA_MOUNT}"
        f" && exec setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups --pdeathsig=TERM"
        ' -- "$@"'
    )
    return [
        "unshare",
        "--mount",
        "--",
        "sh",
        "-c",
        setup,
        "agent",
        PYTHON,
        *container["command"][1:],
    ]


def lab_manifests(split_count: int = LAB.hami_split_count) -> dict[str, dict[str, Any]]:
    """What the program deploys for tenant-b (components/lab.py passes these arguments);
    another ``split_count`` (the stack's hamiSplitCount) gives each card that many slots."""
    return agent_manifests(agent_config(PROCESS_TENANT, split_count), LAB.gpu_agent_image)


def start_agent(
    plane: ControlPlane, root: Path, split_count: int = LAB.hami_split_count
) -> AgentProcess:
    manifests = lab_manifests(split_count)
    code = readable_dir(root, "opt/agent/gpu_agent")  # CODE_MOUNT, under a private root
    for name, text in manifests["code"]["data"].items():
        write_readable(code / name, text)
    config_dir = readable_dir(root, "config")
    for name, text in manifests["config"]["data"].items():
        write_readable(config_dir / name, text)
    sa_dir = readable_dir(root, "serviceaccount")
    write_readable(sa_dir / "token", plane.service_account_token(NAMESPACE, NAME))
    write_readable(sa_dir / "ca.crt", plane.ca_path.read_text())
    template = manifests["deployment"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"].replace(CONFIG_MOUNT, str(config_dir)) for e in template["env"]}
    host, port = plane.server.removeprefix("https://").rsplit(":", 1)
    env |= {
        "KUBERNETES_SERVICE_HOST": host,
        "KUBERNETES_SERVICE_PORT": port,
        "PATH": "/usr/bin:/bin",
    }
    log = root / "agent.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            agent_command(template, sa_dir),
            cwd=code.parent,  # the Deployment's workingDir: the code's parent
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return AgentProcess(popen, log)


def apply_agent_rbac(plane: ControlPlane) -> None:
    """The ServiceAccount, ClusterRole and binding exactly as the program renders them."""
    m = lab_manifests()
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", **m["service_account"]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", **m["cluster_role"]},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            **m["cluster_role_binding"],
        },
    ]
    plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )


# --- the audit log -----------------------------------------------------------------------------


def audit_requests(plane: ControlPlane, user: str, since: float, until: float) -> list[dict]:
    """One entry per request of `user` received in [since, until] (wall clock, seconds)."""
    seen: dict[str, dict] = {}
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] != user or event["auditID"] in seen:
            continue
        received = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
        if since <= received <= until:
            seen[event["auditID"]] = event
    return list(seen.values())


def agent_audit(plane: ControlPlane, since: float, until: float) -> list[dict]:
    """The agent's own requests: its ServiceAccount and its User-Agent (a test's probe with the
    same token is not the agent)."""
    requests = audit_requests(plane, AGENT_USER, since, until)
    return [e for e in requests if e.get("userAgent") == "hami-gpu-agent"]


def received(event: dict) -> str:
    return event["requestReceivedTimestamp"]


def request_kind(event: dict) -> str:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "?") + (
        f"/{ref['subresource']}" if ref.get("subresource") else ""
    )
    return f"{event['verb']} {resource}"


# --- fixtures ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Lab:
    plane: ControlPlane
    admin: Rest
    hami: HamiScheduler
    agent: AgentProcess
    started_at: float


@pytest.fixture(scope="module")
def lab(start_control_plane) -> Iterator[Lab]:
    plane = start_control_plane("agent")
    apply_agent_rbac(plane)
    plane.create_namespace(WORK_NS)
    plane.create_fake_node(GPU_NODE)
    plane.create_fake_node(OTHER_NODE)
    for node in (GPU_NODE, OTHER_NODE):  # kwok's node-initialize writes the kubelet's capacity
        plane.wait_for_object(
            "node", node, condition=lambda n: "cpu" in n.get("status", {}).get("capacity", {}),
            what=f"kwok's capacity on {node}",
        )  # fmt: skip
    admin = rest(plane)
    create_pods(admin, ["waiting"])  # rejected as "node unregistered" before the agent starts
    reject_as_unregistered(admin, "waiting")
    root = Path(tempfile.mkdtemp(prefix="gpu-agent-"))
    root.chmod(0o755)
    agent = start_agent(plane, root)
    try:
        yield Lab(plane, admin, HamiScheduler(admin, GPU_NODE), agent, time.time())
    finally:
        code = agent.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert code == 0, (
        f"the agent did not stop cleanly on SIGTERM (exit {code}):\n{agent.text()[-3000:]}"
    )


def reject_as_unregistered(api: Rest, pod: str) -> None:
    """The status kube-scheduler writes when HAMi's Filter answers "node unregistered"."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 1 node unregistered, 1 node(s) didn't match. ",
        "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    path = f"/api/v1/namespaces/{WORK_NS}/pods/{pod}/status"
    api.call(
        "PATCH",
        path,
        {"status": {"conditions": [condition]}},
        "application/strategic-merge-patch+json",
    )


def wait_for(condition: Callable[[], Any], what: str, lab: Lab, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.agent.popen.poll() is not None:
            raise ControlPlaneError(
                f"the agent exited ({lab.agent.popen.returncode}):\n{lab.agent.text()[-3000:]}"
            )
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    log = lab.agent.text()[-3000:]
    raise ControlPlaneError(
        f"timed out after {timeout:.0f} s waiting for {what}\nagent log:\n{log}"
    )


def registered(lab: Lab) -> dict | None:
    node = lab.admin.node(GPU_NODE)
    status = node.get("status", {})
    gpus = [status.get(part, {}).get("nvidia.com/gpu") for part in ("capacity", "allocatable")]
    return node if REGISTER in annotations(node) and all(gpus) else None


def allocate(lab: Lab, pods: list[str]) -> dict[str, str]:
    """HAMi schedules each pod in turn (one at a time per node: its lock); pod -> devices."""
    cards = lab.hami.card_ids()
    return {pod: lab.hami.schedule(pod, cards[i % len(cards)]) for i, pod in enumerate(pods)}


def wait_allocated(lab: Lab, pods: list[str], timeout: float = 30) -> dict[str, dict]:
    def done() -> dict[str, dict] | None:
        seen = {name: lab.admin.pod(name) for name in pods}
        free = LOCK not in annotations(lab.admin.node(GPU_NODE))
        return seen if free and all(allocated(p, GPU_NODE) for p in seen.values()) else None

    return wait_for(done, f"{pods} allocated and the lock free", lab, timeout)


# --- tests -------------------------------------------------------------------------------------


def test_registers_the_configured_node_only_and_keeps_the_kubelets_capacity(lab):
    """Registration as HAMi v2.10 reads it (JSON array of DeviceInfo), `nvidia.com/gpu` in
    capacity and allocatable, the `gpu=on` label; kwok's cpu/memory/pods kept (D1); a node
    outside the config untouched."""
    node = wait_for(lambda: registered(lab), f"{GPU_NODE} registered", lab)
    cards = json.loads(annotations(node)[REGISTER])
    assert [(c["index"], c["type"], c["devmem"], c["devcore"], c["count"]) for c in cards] == [
        (0, "NVIDIA L4", 23034, 100, 10),
        (1, "NVIDIA L4", 23034, 100, 10),
    ]
    assert all(
        c["id"].startswith("GPU-") and c["mode"] == "hami-core" and c["health"] for c in cards
    )
    assert node["metadata"]["labels"]["gpu"] == "on"
    for part in ("capacity", "allocatable"):
        assert node["status"][part] == {
            "cpu": "1k",
            "memory": "1Ti",
            "pods": "1M",
            "nvidia.com/gpu": "20",
        }, part
    other = lab.admin.node(OTHER_NODE)
    assert "gpu" not in other["metadata"].get("labels", {})
    assert REGISTER not in annotations(other)
    assert "nvidia.com/gpu" not in other["status"]["capacity"]
    assert lab.agent.popen.poll() is None
    status = process_status(lab.agent.popen.pid)
    assert status["Uid"].split() == status["Gid"].split() == [str(NOBODY)] * 4
    assert (status["Groups"], status["CapEff"]) == ("", "0000000000000000")
    cmdline = Path(f"/proc/{lab.agent.popen.pid}/cmdline").read_bytes().split(b"\0")
    assert cmdline[:3] == [PYTHON.encode(), b"-m", b"gpu_agent"]  # in-cluster: no --api-url


def process_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict((key, value.strip()) for key, _, value in (line.partition(":") for line in lines))


@pytest.mark.upstream("k8s-status-merge-patch-keeps-siblings")
def test_capacity_written_after_the_agent_read_a_node_without_status_is_kept(lab):
    """D1 against the real server: the agent's cache holds the node as created, without status
    (its ADDED event); the kubelet then writes cpu/memory/pods; the agent's capacity write,
    decided on the stale copy, must not erase them. In-process agent, the SA's real token."""
    admin = lab.admin
    admin.call(
        "POST",
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": STALE_NODE}},
    )
    as_created = admin.node(STALE_NODE)
    assert "capacity" not in as_created.get("status", {})
    kubelet = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    admin.call(
        "PATCH",
        f"/api/v1/nodes/{STALE_NODE}/status",
        {"status": {"capacity": kubelet, "allocatable": kubelet}},
    )

    agent = in_process_agent(lab.plane)
    agent.apply("nodes", {"type": "ADDED", "object": as_created})
    summary = agent.flush()

    assert (summary.registered, summary.capacity, summary.errors) == (
        [STALE_NODE],
        [STALE_NODE],
        [],
    )
    status = admin.node(STALE_NODE)["status"]
    for part in ("capacity", "allocatable"):
        assert status[part] == {**kubelet, "nvidia.com/gpu": "10"}, part


def in_process_agent(plane: ControlPlane) -> Agent:
    """The agent's own code with tenant-a's config (built by the program), as the agent's SA."""
    token = plane.service_account_token(NAMESPACE, NAME)
    context = ssl.create_default_context(cafile=str(plane.ca_path))
    api = HttpKubeApi(plane.server, token, ssl_context=context)
    return Agent(api, parse_agent_config(agent_config(IN_PROCESS_TENANT, LAB.hami_split_count)))


@pytest.mark.upstream("hami-v2.10-bind-writes", "k8s-json-patch-test-op-422")
def test_completes_an_allocation_and_releases_the_lock_while_kwok_writes_the_pod(lab):
    """D3 end to end: HAMi's Filter and Bind as v2.10 writes them, kwok's status write of the
    bound pod racing the agent. bind-phase success, to-allocate emptied, lock released, HAMi's
    accounting annotations untouched; the agent's pod patch never failed."""
    wait_for(lambda: registered(lab), f"{GPU_NODE} registered", lab)
    since = time.time()
    create_pods(lab.admin, ["single"])
    devices = allocate(lab, ["single"])["single"]
    before = annotations(lab.admin.pod("single"))
    pod = wait_allocated(lab, ["single"])["single"]
    ann = annotations(pod)
    assert ann[TO_ALLOCATE] == ";;"  # one container slot, erased as the device plugin does
    assert ann[ALLOCATED] == devices
    for key in (VGPU_NODE, VGPU_TIME, BIND_TIME):
        assert ann[key] == before[key], key
    wait_for(
        lambda: lab.admin.pod("single")["status"].get("phase") == "Running",
        "kwok runs the pod",
        lab,
    )
    time.sleep(1)  # the audit log is written as requests complete
    requests = agent_audit(lab.plane, since, time.time())
    pod_patches = [e for e in requests if request_kind(e) == "patch pods"]
    assert [(e["objectRef"]["name"], e["responseStatus"]["code"]) for e in pod_patches] == [
        ("single", 200)
    ]
    kwok_writes = [
        e
        for e in audit_requests(lab.plane, "kwok-controller", since, time.time())
        if request_kind(e) == "patch pods/status" and e["objectRef"]["name"] == "single"
    ]
    assert kwok_writes, (
        "kwok did not write the pod's status: the race this test needs did not happen"
    )


@pytest.mark.upstream("k8s-json-patch-test-op-422")
def test_a_stale_read_still_completes_and_a_changed_allocation_is_refused(lab):
    """D3, deterministic: the agent decides on the pod as bound, kwok then writes its status
    (a resourceVersion precondition would now get 409); the real server applies the agent's
    JSON Patch to the newer pod. A pod whose to-allocate changed since the read gets 422 and the
    agent re-reads it instead of overwriting (pinned by the to-allocate value it then finishes)."""
    admin = lab.admin
    stale = register_stale_node(lab)
    hami = HamiScheduler(admin, STALE_NODE)
    card = json.loads(annotations(admin.node(STALE_NODE))[REGISTER])[0]["id"]
    create_pods(admin, ["stale-read", "rewritten"])
    for pod in ("stale-read", "rewritten"):
        hami.filter(pod, card)
        hami.bind(pod)  # no lock: this test is about the pod patch
    as_bound = {pod: admin.pod(pod) for pod in ("stale-read", "rewritten")}
    # The kubelet's write (a status patch) and, on the second pod, HAMi rewriting its choice.
    for pod in as_bound:
        admin.call(
            "PATCH",
            f"/api/v1/namespaces/{WORK_NS}/pods/{pod}/status",
            {"status": {"message": "kubelet was here"}},
        )
    new_devices = device_annotation([card], 2048, 20)
    admin.call(
        "PATCH",
        f"/api/v1/namespaces/{WORK_NS}/pods/rewritten",
        {"metadata": {"annotations": {TO_ALLOCATE: new_devices}}},
    )
    with pytest.raises(urllib.error.HTTPError, match="409"):  # what the old precondition met
        rv = as_bound["stale-read"]["metadata"]["resourceVersion"]
        admin.call(
            "PATCH",
            f"/api/v1/namespaces/{WORK_NS}/pods/stale-read",
            {"metadata": {"resourceVersion": rv, "labels": {"x": "y"}}},
        )

    agent = in_process_agent(lab.plane)
    agent.apply("nodes", {"type": "ADDED", "object": stale})
    for pod in as_bound.values():
        agent.apply("pods", {"type": "ADDED", "object": pod})
    since = time.time()
    summary = agent.flush()
    time.sleep(1)  # the audit log is written as requests complete

    assert (sorted(summary.completed), summary.errors) == (
        [f"{WORK_NS}/rewritten", f"{WORK_NS}/stale-read"],
        [],
    )
    calls = [
        (e["objectRef"]["name"], e["verb"], e["responseStatus"]["code"])
        for e in sorted(agent_audit(lab.plane, since, time.time()), key=received)
        if request_kind(e) in ("patch pods", "get pods")
    ]
    assert calls == [
        ("stale-read", "patch", 200),  # the stale read is enough: no 409, no re-read
        ("rewritten", "patch", 422),  # a `test` op failed: nothing applied
        ("rewritten", "get", 200),
        ("rewritten", "patch", 200),
    ]
    for pod in as_bound:
        assert annotations(admin.pod(pod))[PHASE] == "success"
        assert annotations(admin.pod(pod))[TO_ALLOCATE] == ";;"
    assert annotations(admin.pod("rewritten"))[ALLOCATED] == device_annotation([card], 1024, 10)


def register_stale_node(lab: Lab) -> dict:
    """tenant-a's node registered by an in-process agent; returns the node as it is now."""
    node = lab.admin.node(STALE_NODE) if node_exists(lab.admin, STALE_NODE) else None
    if node is None:
        lab.admin.call(
            "POST",
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": STALE_NODE}},
        )
    agent = in_process_agent(lab.plane)
    agent.relist()
    return lab.admin.node(STALE_NODE)


def node_exists(api: Rest, name: str) -> bool:
    try:
        api.node(name)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def test_lock_release_retries_after_a_real_409(lab):
    """The lock release carries the node's resourceVersion; a node write in between (here a
    label, as a kubelet's status write would) makes the real server answer 409, and the agent
    re-reads and releases the same lock (it is still its pod's)."""
    admin = lab.admin
    stale_node = register_stale_node(lab)
    hami = HamiScheduler(admin, STALE_NODE)
    card = json.loads(annotations(stale_node)[REGISTER])[0]["id"]
    create_pods(admin, ["conflict"])
    hami.filter("conflict", card)
    assert hami.try_lock("conflict")
    hami.bind("conflict")
    locked = admin.node(STALE_NODE)
    admin.call(
        "PATCH", f"/api/v1/nodes/{STALE_NODE}", {"metadata": {"labels": {"kubelet-was": "here"}}}
    )

    agent = in_process_agent(lab.plane)
    agent.apply("nodes", {"type": "ADDED", "object": locked})
    agent.apply("pods", {"type": "ADDED", "object": admin.pod("conflict")})
    since = time.time()
    summary = agent.flush()
    time.sleep(1)  # the audit log is written as requests complete

    assert (summary.completed, summary.errors) == ([f"{WORK_NS}/conflict"], [])
    assert summary.released == [f"{STALE_NODE} {WORK_NS}/conflict allocated"]
    assert LOCK not in annotations(admin.node(STALE_NODE))
    calls = [
        (request_kind(e), e["responseStatus"]["code"])
        for e in sorted(agent_audit(lab.plane, since, time.time()), key=received)
        if (e.get("objectRef") or {}).get("name") in (STALE_NODE, "conflict")  # not the process
    ]
    assert calls == [
        ("patch pods", 200),
        ("patch nodes", 409),  # the precondition met the label write
        ("get nodes", 200),
        ("patch nodes", 200),
    ]


def assert_resume_from_compacted_version_relists(plane: ControlPlane, version: str) -> None:
    """The agent's own client and loop, resuming its pod watch from a version the restarted
    and compacted server no longer has: an ERROR event 410 Expired, and the next step relists."""
    agent = in_process_agent(plane)
    agent.relist()
    stream = agent.api.watch_pods(version, 5, POD_SELECTOR)
    try:
        event = next(stream)
    finally:
        stream.close()
    assert (event["type"], event["object"]["code"], event["object"]["reason"]) == (
        "ERROR",
        410,
        "Expired",
    )
    assert event["object"]["message"].startswith(f"too old resource version: {version} (")
    agent.version["pods"] = version
    assert agent.follow("pods", 5) == 1
    assert agent.synced == {"nodes": True, "pods": False}  # step() relists once resync passed


def etcd_call(plane: ControlPlane, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        plane.etcd_url + path, data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def compact_etcd(plane: ControlPlane) -> int:
    """A write straight to etcd (so its revision passes every version the agent saw), then a
    physical compaction at that revision: a watch from any earlier version is history gone."""
    key = base64.b64encode(b"/gpu-agent-test/bump").decode()
    put = etcd_call(plane, "/v3/kv/put", {"key": key, "value": key})
    revision = int(put["header"]["revision"])
    etcd_call(plane, "/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


@contextlib.contextmanager
def refusal_probe(plane: ControlPlane, token: str) -> Iterator[list[int]]:
    """Status codes of a GET every 5 ms as the agent's ServiceAccount, while the block runs."""
    api, codes, stop = rest(plane, token), [], threading.Event()

    def probe() -> None:
        while not stop.is_set():
            try:
                api.call("GET", "/api/v1/nodes?limit=1")
                codes.append(200)
            except urllib.error.HTTPError as exc:
                codes.append(exc.code)
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass  # not listening yet
            time.sleep(0.005)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        yield codes
    finally:
        time.sleep(0.5)
        stop.set()
        thread.join(10)


@pytest.mark.upstream("k8s-watch-too-old-resource-version", "k8s-apiserver-403-until-rbac-synced")
def test_watches_resume_after_an_api_server_restart_and_relist_after_410(lab):
    """A restart drops both streams; the agent resumes them and keeps finishing allocations
    within a second or two, not at its 60 s relist. A restarted server's watch cache starts
    at a fresh list, so a resume from an older version is answered 410 Expired ("too old
    resource version", an ERROR event); after a write and an etcd compaction that is certain
    for the versions the agent saw, and the agent relists. While the restarted server's RBAC
    caches sync it refuses the agent's token (403): the agent now retries (it used to exit 3)
    and a refused pass is also followed by a relist. Which of the two made the process relist
    depends on timing, so the 410 itself is then checked on the agent's own client and loop."""
    wait_for(lambda: registered(lab), f"{GPU_NODE} registered", lab)
    token = lab.plane.service_account_token(NAMESPACE, NAME)
    probed: list[int] = []
    for round_, compact in (("restart", False), ("compacted", True)):
        offset = lab.agent.offset()
        restarted = time.time()
        seen_rv = lab.admin.call("GET", "/api/v1/pods?limit=1")["metadata"]["resourceVersion"]
        if compact:
            compact_etcd(lab.plane)
        with refusal_probe(lab.plane, token) as codes:
            lab.plane.restart_apiserver(stop_timeout=2)
        probed += codes
        assert codes and codes[-1] == 200, codes
        pod = f"after-{round_}"
        create_pods(lab.admin, [pod])
        started = time.monotonic()
        allocate(lab, [pod])
        wait_allocated(lab, [pod], timeout=20)
        took = time.monotonic() - started
        log = lab.agent.lines_after(offset)
        assert any("watch pods failed, resuming" in line for line in log), "\n".join(log)
        assert took < 15, f"{pod} took {took:.1f} s: a relist every 60 s, not the watch, found it"
        time.sleep(1)
        agent_requests = Counter(map(request_kind, agent_audit(lab.plane, restarted, time.time())))
        assert agent_requests["watch pods"] >= 1 and agent_requests["watch nodes"] >= 1, (
            agent_requests
        )
        relisted = [line for line in log if "relisting" in line]
        if compact:
            assert relisted, "\n".join(log)
            assert agent_requests["list pods"] >= 1 and agent_requests["list nodes"] >= 1, (
                agent_requests
            )
            assert_resume_from_compacted_version_relists(lab.plane, seen_rv)
        refused = [line for line in log if "refused, " in line]
        print(f"{round_}: allocated in {took:.2f} s; agent {dict(agent_requests)}")
        print("  " + "\n  ".join(relisted + refused))
    assert lab.agent.popen.poll() is None
    # What the agent met by chance in earlier runs (and exited 3 on): while the restarted
    # server's RBAC caches sync, the same token is refused for a moment.
    assert 403 in probed, f"no refusal seen while the server started: {Counter(probed)}"
    print(f"probe during both restarts: {Counter(probed)}")


def test_requeues_a_pod_rejected_as_node_unregistered(lab):
    """D4: `requeueAfterRegisterSeconds` (17 s) after registering, the agent finds the pod
    kube-scheduler recorded as rejected with HAMi's "node unregistered" and touches its node's
    own annotation (a Node update event for kube-scheduler), with only its granted RBAC."""
    wait_for(lambda: registered(lab), f"{GPU_NODE} registered", lab)
    node = wait_for(
        lambda: (n := lab.admin.node(GPU_NODE)) and REQUEUE in annotations(n) and n,
        "the requeue touch", lab, timeout=max(5, lab.started_at + 25 - time.time()),
    )  # fmt: skip
    assert int(annotations(node)[REQUEUE]) > 0  # the node's resourceVersion at the touch
    assert any(
        "requeued pods rejected as unregistered" in line and f"{WORK_NS}/waiting" in line
        for line in lab.agent.text().splitlines()
    )


def test_a_burst_of_20_pods_costs_the_documented_requests(lab):
    """20 GPU pods through HAMi's node lock on one node: all reach success, the lock ends
    free, and the audit log shows what docs/gpu-agent.md states per allocation: 1 pod patch
    and 1 node patch, no list, no get."""
    wait_for(lambda: registered(lab), f"{GPU_NODE} registered", lab)
    pods = [f"burst-{i:02d}" for i in range(20)]
    create_pods(lab.admin, pods)
    since = time.time()
    started = time.monotonic()
    devices = allocate(lab, pods)
    seen = wait_allocated(lab, pods, timeout=60)
    took = time.monotonic() - started
    until = time.time()
    for name, pod in seen.items():
        assert annotations(pod)[TO_ALLOCATE] == ";;", name
        assert annotations(pod)[ALLOCATED] == devices[name], name
    time.sleep(1)
    requests = agent_audit(lab.plane, since, until)
    kinds = Counter(request_kind(e) for e in requests)
    codes = Counter(e["responseStatus"]["code"] for e in requests if e["verb"] != "watch")
    print(f"burst of 20: {took:.2f} s ({took / 20 * 1000:.0f} ms per allocation)")
    print(f"  agent requests {dict(kinds)}; codes {dict(codes)}")
    periodic_relist = {"list nodes": 1, "list pods": 1} if kinds["list pods"] else {}  # every 60 s
    assert {k: v for k, v in kinds.items() if not k.startswith("watch")} == {
        "patch pods": 20,
        "patch nodes": 20,
        **periodic_relist,
    }
    assert codes == Counter({200: 40 + len(periodic_relist)})
