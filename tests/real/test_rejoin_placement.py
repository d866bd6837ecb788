"""A worker that re-joins: how soon its first GPU pod is allocated.

The real kube-apiserver, kube-scheduler (HAMi's profile) and kube-controller-manager v1.35.4, kwok
as the kubelet, the real gpu_agent, and the HAMi stand-in, which knows a node only once its
register loop has read the registration: on a node add or delete, and on a 15 s ticker
(hami_extender.NodeRegistry; fact ``hami-registration-read-on-tick``). The node is deleted and
created again as a kubelet does when its worker re-joins; HAMi's ticker is restarted right
before, so its next tick is a full 15 s away (the worst phase, fixed so that each run is the
same).

- With the program's registration policy (builders/simulated_gpus.py), the Node is registered in
  its own creation: HAMi reads it with the add, and the first pod is allocated at once.
- Without it, the agent registers the Node moments after the add; a pod meets `node
  unregistered` until HAMi's tick, and is retried on the agent's requeue touch 17 s after its
  registration (docs/gpu-agent.md).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from controlplane import ControlPlane, wait_until
from hami_placement import PlacementLab, placement_lab_on_new_plane, registered, report
from test_agent_real import GPU_NODE, LAB, PROCESS_TENANT, REGISTER, WORK_NS, allocated, gpu_pod

from builders.simulated_gpus import registration_policy_manifests, registrations

FIRST_POD_SECONDS = 5.0  # after a re-join, the first GPU pod is allocated within this


@pytest.fixture(scope="module")
def rejoin_lab(start_control_plane) -> Iterator[PlacementLab]:
    with placement_lab_on_new_plane(start_control_plane, "rejoin") as lab:
        yield lab


def apply_registration_policy(plane: ControlPlane) -> None:
    for manifest in registration_policy_manifests(PROCESS_TENANT, LAB.hami_split_count):
        plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    # A dry run of the create a kubelet makes shows the policy at work; it needs the name free.
    plane.kubectl("delete", "node", GPU_NODE, "--ignore-not-found", "--wait=true")

    def annotated(name: str) -> bool:
        node = plane.admitted({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        return REGISTER in (node["metadata"].get("annotations") or {})

    wait_until(lambda: annotated(GPU_NODE), "the registration policy in effect", 30)
    assert not annotated(f"{GPU_NODE}-other")  # the tenant's simulated nodes only


def rejoin(lab: PlacementLab, name: str) -> float:
    """Re-join the node, then create one GPU pod; seconds from its creation to its allocation."""
    lab.plane.kubectl("delete", "node", GPU_NODE, "--ignore-not-found", "--wait=true")
    wait_until(lambda: not lab.extender.registry.registered(), "HAMi forgot the node", 10)
    lab.extender.registry.restart_ticker()
    lab.plane.create_fake_node(GPU_NODE)  # a Node created as its kubelet creates it
    wait_until(lambda: registered(lab.admin), f"{GPU_NODE} Ready with its cards", 30)
    node = lab.admin.node(GPU_NODE)
    taints = {t["key"] for t in node.get("spec", {}).get("taints") or []}
    wait_until(
        lambda: not {t["key"] for t in lab.admin.node(GPU_NODE)["spec"].get("taints") or []},
        f"{GPU_NODE} untainted ({sorted(taints)})", 30,
    )  # fmt: skip
    started = time.monotonic()
    lab.admin.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", gpu_pod(name))
    wait_until(
        lambda: allocated(lab.admin.pod(name), GPU_NODE), f"{name} allocated", 60,
    )  # fmt: skip
    took = time.monotonic() - started
    lab.admin.call("DELETE", f"/api/v1/namespaces/{WORK_NS}/pods/{name}?gracePeriodSeconds=0")
    lab.extender.forget_all()
    return took


@pytest.mark.upstream("hami-registration-read-on-tick")
def test_without_the_policy_the_first_pod_waits_for_hamis_tick(rejoin_lab, capsys):
    took = rejoin(rejoin_lab, "after-plain-rejoin")
    report(capsys, f"re-join, no registration policy: first GPU pod allocated after {took:.1f} s")
    assert took > FIRST_POD_SECONDS


@pytest.mark.upstream("hami-registration-read-on-tick", "kube-mutating-admission-policy-stages")
def test_registered_in_its_creation_its_first_pod_is_allocated_in_seconds(rejoin_lab, capsys):
    apply_registration_policy(rejoin_lab.plane)
    try:
        took = rejoin(rejoin_lab, "after-rejoin")
    finally:
        for manifest in registration_policy_manifests(PROCESS_TENANT, LAB.hami_split_count):
            rejoin_lab.plane.kubectl("delete", manifest["kind"], manifest["metadata"]["name"])
    report(capsys, f"re-join, registration policy: first GPU pod allocated after {took:.1f} s")
    node = rejoin_lab.admin.node(GPU_NODE)
    assert (
        node["metadata"]["annotations"][REGISTER]
        == registrations(PROCESS_TENANT, LAB.hami_split_count)[GPU_NODE]
    )
    assert took <= FIRST_POD_SECONDS
