"""The worker's leave (`node_delete_script`, builders/scripts.py) against a real tenant.

A full control plane v1.35.4 (API server, controller manager, scheduler) with two kwok nodes:
kwok plays their kubelets, so an evicted or deleted pod really goes away, and the scheduler
really binds a Deployment's replacement on the node that stays. The script runs with the real
kubectl: its listing (`LEAVING_PODS_TEMPLATE`, real go-template) and its drain (real eviction,
PodDisruptionBudgets respected) meet the real API server.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest
from binaries import bin_path
from controlplane import ControlPlane, wait_until

from builders.scripts import node_delete_script

LEAVING, STAYING = "worker-leaving", "worker-staying"
NS = "work"
ALLOCATED = "hami.io/vgpu-devices-allocated"  # what HAMi writes on a pod at bind
SLICES = "GPU-3b1c0e7a-0001,NVIDIA,20000,25:;"
IMAGE = "registry.invalid/app:1"


def ready(node: dict) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return is_ready and not node["spec"].get("taints")


def running_on(pod: dict, node: str) -> bool:
    return pod["spec"].get("nodeName") == node and pod.get("status", {}).get("phase") == "Running"


@pytest.fixture
def tenant(start_control_plane, request) -> Iterator[ControlPlane]:
    """A tenant of its own per test (nodes are cluster-wide): two Ready kwok nodes, the
    staying one cordoned until the workloads run on the leaving one."""
    plane = start_control_plane(f"leave-{request.node.name[-20:]}")
    for node in (LEAVING, STAYING):
        plane.create_fake_node(node)
    for node in (LEAVING, STAYING):
        plane.wait_for_object("node", node, condition=ready, what=f"{node} Ready, untainted")
    plane.kubectl("cordon", STAYING)
    plane.create_namespace(NS)
    yield plane


def apply(plane: ControlPlane, *items: dict) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                         "items": list(items)}))  # fmt: skip


def pod_spec(**extra) -> dict:
    return {"containers": [{"name": "app", "image": IMAGE}], **extra}


def deployment(name: str, replicas: int = 1) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec()},
        },
    }


def pods(plane: ControlPlane, *selector: str) -> list[dict]:
    return plane.get_json("pods", "-n", NS, *selector)["items"]


def running_pod(plane: ControlPlane, selector: str, node: str) -> dict:
    """The one pod of `selector`, once it runs on `node`."""
    wait_until(
        lambda: [running_on(p, node) for p in pods(plane, "-l", selector)] == [True],
        f"one pod of {selector} Running on {node}", 60,
    )  # fmt: skip
    return pods(plane, "-l", selector)[0]


def allocate(plane: ControlPlane, pod: str) -> None:
    """HAMi's bind writes the pod's slices on the pod itself (not on its template)."""
    plane.kubectl("annotate", "pod", pod, "-n", NS, f"{ALLOCATED}={SLICES}")


def leave(
    plane: ControlPlane, script: str | None = None, drain_timeout: int = 60
) -> subprocess.CompletedProcess[str]:
    """The leave script as the program runs it on the host, with the real kubectl."""
    started = time.monotonic()
    result = subprocess.run(
        ["bash", "-c", script or node_delete_script(drain_timeout)],
        env={
            "PATH": f"{bin_path('kubectl').parent}:/usr/bin:/bin",
            "HOME": str(plane.kubeconfig().parent),  # kubectl's discovery cache
            "LAB_KUBECONFIG": plane.kubeconfig().read_text(),
            "NODE_NAME": LEAVING,
        },
        capture_output=True,
        text=True,
        timeout=drain_timeout + 60,
    )
    print(f"leave script: exit {result.returncode} in {time.monotonic() - started:.1f} s")
    print(result.stderr)
    return result


def listed(stderr: str) -> list[str]:
    """The lines the listing printed: after `draining ...`, each starting with two spaces."""
    lines = stderr.splitlines()
    start = lines.index(f"draining {LEAVING}; the pods it runs:") + 1
    block = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def evicted_or_deleted(plane: ControlPlane, pod: str) -> list[str]:
    """The evictions and deletes of `pod` the script's kubectl (the admin user) asked for, from
    the audit log: `create eviction 201`, `delete 200`, ..."""
    asked = []
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event["user"]["username"] == "admin"
            and ref.get("resource") == "pods"
            and ref.get("name") == pod
            and (ref.get("subresource") == "eviction" or event["verb"] == "delete")
            and event["stage"] == "ResponseComplete"
        ):
            what = f"{event['verb']} {ref.get('subresource', '')}".replace("  ", " ")
            asked.append(f"{what.strip()} {event['responseStatus']['code']}")
    return asked


@pytest.mark.upstream(
    "kubectl-drain-force-deletes-unowned-pods",
    "kubectl-drain-ignore-daemonsets-leaves-them",
    "go-template-index-missing-key-is-empty",
)
def test_the_leave_lists_each_pod_drains_the_node_and_deletes_it(tenant):
    plane = tenant
    daemon_labels = {"app": "agent"}
    apply(
        plane,
        deployment("web"),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": daemon_labels},
                "template": {"metadata": {"labels": daemon_labels}, "spec": pod_spec()},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "bare", "namespace": NS},
            "spec": pod_spec(nodeName=LEAVING),
        },
        {
            # DRA is GA (on by default) in v1.34+: the API server takes a pod claim with no
            # DRA driver; the pod is bound by hand, the scheduler would wait for the claim.
            "apiVersion": "v1",
            "kind": "Pod",
            # An annotation, but not HAMi's: the template's `index` of a key it lacks.
            "metadata": {"name": "dra", "namespace": NS, "annotations": {"team": "a"}},
            "spec": {
                "nodeName": LEAVING,
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "dra-gpu"}],
                "containers": [
                    {"name": "app", "image": IMAGE, "resources": {"claims": [{"name": "gpu"}]}}
                ],
            },
        },
    )
    # Owned, but by no controller (no `controller: true`): the drain takes it as it takes a bare
    # pod, and nothing re-creates it.
    settings = plane.kubectl("create", "configmap", "settings", "-n", NS, "-o", "json").stdout
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings",
             "uid": json.loads(settings)["metadata"]["uid"]}  # fmt: skip
    apply(plane, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "config-owned", "namespace": NS, "ownerReferences": [owner]},
        "spec": pod_spec(nodeName=LEAVING),
    })  # fmt: skip
    # A Job's pod on the node, finished (kwok completes a Job's pods): nothing runs it again.
    apply(plane, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "done", "namespace": NS},
        "spec": {"template": {"spec": pod_spec(nodeName=LEAVING, restartPolicy="Never")}},
    })  # fmt: skip
    wait_until(
        lambda: [p["status"].get("phase") for p in pods(plane, "-l", "job-name=done")]
        == ["Succeeded"],
        "the Job's pod Succeeded", 60,
    )  # fmt: skip
    (done,) = [p["metadata"]["name"] for p in pods(plane, "-l", "job-name=done")]
    web = running_pod(plane, "app=web", LEAVING)["metadata"]["name"]
    wait_until(
        lambda: len([p for p in pods(plane, "-l", "app=agent") if running_on(p, LEAVING)]) == 1,
        f"the DaemonSet's pod Running on {LEAVING}", 60,
    )  # fmt: skip
    (agent,) = [p for p in pods(plane, "-l", "app=agent") if p["spec"]["nodeName"] == LEAVING]
    agent = agent["metadata"]["name"]
    for pod in ("bare", "config-owned", "dra"):
        plane.wait_for_object(
            "pod", pod, "-n", NS, condition=lambda p: running_on(p, LEAVING), what=f"{pod} runs"
        )
    for pod in (web, "bare", agent):  # the DaemonSet's pod too: it is left out all the same
        allocate(plane, pod)
    plane.kubectl("uncordon", STAYING)

    result = leave(plane)

    assert result.returncode == 0, result.stderr
    assert listed(result.stderr) == [  # one line each, in the API server's order (name)
        f"  {NS}/bare: no controller owns it, it is not re-created; GPU slices {SLICES}",
        f"  {NS}/config-owned: no controller owns it, it is not re-created",
        f"  {NS}/{done}: finished (Succeeded), nothing to keep",
        f"  {NS}/dra: no controller owns it, it is not re-created; DRA claims",
        f"  {NS}/{web}: its ReplicaSet re-creates it; GPU slices {SLICES}",
    ]
    assert f"node/{LEAVING} drained" in result.stderr
    assert "was not drained" not in result.stderr and "could not delete" not in result.stderr
    # The DaemonSet's pod was neither evicted nor deleted; it goes with the Node later.
    assert f"ignoring DaemonSet-managed Pods: {NS}/{agent}" in result.stderr
    assert evicted_or_deleted(plane, agent) == []
    assert plane.get_json("pod", agent, "-n", NS)["metadata"].get("deletionTimestamp") is None
    # The others were evicted (--force lets the drain take the pods no controller owns: the
    # ones the listing says are not re-created), and kwok, as their kubelet, ended them.
    unowned = f"{NS}/bare, {NS}/config-owned, {NS}/dra"
    assert f"deleting Pods that declare no controller: {unowned}" in result.stderr
    for pod in (web, "bare", "config-owned", "dra"):
        assert evicted_or_deleted(plane, pod) == ["create eviction 201"], pod
    remaining = {p["metadata"]["name"] for p in pods(plane)}
    assert {"bare", "config-owned", "dra", web} & remaining == set()
    assert plane.kubectl("get", "node", LEAVING, check=False).returncode != 0  # NotFound
    replacement = running_pod(plane, "app=web", STAYING)
    assert replacement["metadata"]["name"] != web
    assert ALLOCATED not in (replacement["metadata"].get("annotations") or {})


@pytest.mark.upstream("kubectl-drain-respects-pdb-until-timeout")
def test_a_disruption_budget_that_blocks_the_drain_only_delays_the_leave(tenant):
    plane = tenant
    apply(
        plane,
        deployment("db", replicas=1),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
        },
    )
    db = running_pod(plane, "app=db", LEAVING)["metadata"]["name"]
    plane.wait_for_object(
        "pdb", "db", "-n", NS,
        condition=lambda b: b.get("status", {}).get("currentHealthy") == 1
        and b["status"].get("disruptionsAllowed") == 0
        and b["status"].get("observedGeneration") == b["metadata"]["generation"],
        what="the disruption budget computed: no disruption allowed",
    )  # fmt: skip
    plane.kubectl("uncordon", STAYING)

    started = time.monotonic()
    result = leave(plane, drain_timeout=5)
    took = time.monotonic() - started

    assert result.returncode == 0, result.stderr
    assert listed(result.stderr) == [f"  {NS}/{db}: its ReplicaSet re-creates it"]
    assert "violate the pod's disruption budget" in result.stderr
    assert f"warning: {LEAVING} was not drained within 5s; the pods left on it go with it" in (
        result.stderr
    )
    assert 5 <= took < 30
    assert plane.kubectl("get", "node", LEAVING, check=False).returncode != 0  # NotFound
    # The eviction was refused: the pod was never deleted, only its Node went.
    assert set(evicted_or_deleted(plane, db)) == {"create eviction 429"}
    assert plane.get_json("pod", db, "-n", NS)["metadata"].get("deletionTimestamp") is None
