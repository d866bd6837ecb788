"""A worker's lifecycle on a real tenant (issue 19, item 5), with the program's scripts.

It takes a worker out and brings it back. The leave script is the join Command's `delete`, as
`pulumi destroy` (or a replacement) runs it before the provider removes the container: it
drains the node (listing what goes, with each pod's GPU share) and deletes the Node. The
re-join is the Command's `create` on a container created anew under the same name, as a
replacement does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from drain_workload import Placed, daemonset_pods, listed, place, remove, wait_running
from tenant_lab import TenantLab
from test_workers import remove_as_the_provider

REGISTER = "hami.io/node-nvidia-register"
TENANT, WORKER, STAYS = "tenant-b", "tenant-b-worker-2", "tenant-b-worker-1"


def pods_by_uid(tenants: TenantLab, node: str) -> dict[str, str]:
    pods = tenants.get(TENANT, "pods", "-A", "--field-selector", f"spec.nodeName={node}")
    return {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods["items"]}


def test_a_second_join_on_a_joined_worker_does_nothing(tenants: TenantLab):
    worker = tenants.workers[WORKER]
    node = tenants.get(TENANT, "node", WORKER)["metadata"]["uid"]
    stat = ["stat", "-c", "%Y", "/etc/kubernetes/kubelet.conf"]
    before = tenants.docker.run("exec", WORKER, *stat).stdout
    again = tenants.run_join(worker)
    assert again.returncode == 0, again.stderr
    assert again.stderr.strip().endswith(f"{WORKER} already joined"), again.stderr
    assert "kubeadm" not in again.stderr
    assert tenants.docker.run("exec", WORKER, *stat).stdout == before
    assert tenants.get(TENANT, "node", WORKER)["metadata"]["uid"] == node


@dataclass
class Left:
    """What the leave of WORKER showed."""

    placed: Placed  # the two GPU-annotated pods on WORKER before it
    daemonsets: list[str]  # the DaemonSet pods on WORKER before it
    stays_before: dict[str, str]  # uid -> name of the pods on STAYS before it
    stderr: str


@pytest.fixture(scope="module")
def left(tenants: TenantLab) -> Iterator[Left]:
    """The leave script run for WORKER, with the two GPU-annotated pods on it
    (drain_workload.py: a Deployment's and a bare one; the tier has no HAMi scheduler, so they
    request no nvidia.com/gpu and carry HAMi's annotation as written by the test); timed."""
    placed = place(tenants, TENANT, WORKER, [STAYS], "leave")
    try:
        daemonsets = daemonset_pods(tenants, TENANT, WORKER)
        before = pods_by_uid(tenants, STAYS)
        started = time.monotonic()
        leave = tenants.run_leave(tenants.workers[WORKER])
        tenants.timings[f"{WORKER}: leave (drain and Node delete)"] = time.monotonic() - started
        print(leave.stderr)
        assert leave.returncode == 0, leave.stderr
        assert "warning" not in leave.stderr, leave.stderr
        yield Left(placed, daemonsets, before, leave.stderr)
    finally:
        remove(tenants, placed)


def test_the_leave_script_lists_what_goes_drains_and_removes_the_node(
    tenants: TenantLab, left: Left
):
    """The listing names both pods with their GPU share and what becomes of each, and no
    DaemonSet pod (the drain leaves those); the Deployment's pod comes back Running on the
    worker that stays, the bare pod is gone; the Node is deleted; nothing on the worker that
    stays was evicted, and it is still schedulable."""
    listing = listed(left.stderr)
    assert set(left.placed.listing_lines()) <= set(listing), left.stderr
    assert left.daemonsets, "no DaemonSet pod on the worker: nothing to show the drain leaves"
    assert not [pod for pod in left.daemonsets if pod in "\n".join(listing)], listing
    assert f"node/{WORKER} drained" in left.stderr, left.stderr
    app = left.placed.deployment
    wait_running(tenants, TENANT, app, STAYS, not_uid=left.placed.deployment_pod["metadata"]["uid"])
    bare = tenants.kubectl(TENANT, "get", "pod", left.placed.bare, "-n", "default",
                           "--ignore-not-found")  # fmt: skip
    assert bare == ""
    found = tenants.kubectl(TENANT, "get", "node", WORKER, "--ignore-not-found")
    assert found == ""
    assert [n["metadata"]["name"] for n in tenants.get(TENANT, "nodes")["items"]] == [STAYS]
    after = pods_by_uid(tenants, STAYS)
    assert left.stays_before.items() <= after.items()  # the drain evicts from WORKER only
    unschedulable = tenants.get(TENANT, "node", STAYS)["spec"].get("unschedulable")
    assert not unschedulable


def test_a_recreated_worker_rejoins_with_the_programs_script(tenants: TenantLab, left: Left):
    """The container removed as the provider removes it (its /var volume too) and created
    again under the same name: the join script joins it afresh, the Node goes Ready with
    flannel, and the agent registers its cards again."""
    tenants.ensure_agent(TENANT)
    worker = tenants.workers[WORKER]
    remove_as_the_provider(tenants.docker, WORKER)
    worker.ready_seconds = None
    tenants.create_worker(worker)
    joined = tenants.run_join(worker)
    assert joined.returncode == 0, joined.stderr[-3000:]
    assert joined.stderr.strip().endswith(f"{WORKER} joined"), joined.stderr[-500:]
    tenants.wait_ready([worker])
    tenants.timings[f"{WORKER}: re-created, container start to Node Ready"] = worker.ready_seconds
    deadline = time.monotonic() + 120
    while REGISTER not in tenants.get(TENANT, "node", WORKER)["metadata"].get("annotations", {}):
        assert time.monotonic() < deadline, "the agent did not register the re-joined node"
        time.sleep(1)
