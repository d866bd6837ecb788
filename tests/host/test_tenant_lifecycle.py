"""A worker's lifecycle on a real tenant (issue 19, item 5), with the program's scripts.

Last of the tenant modules: it takes a worker out and brings it back. The leave script is the
join Command's `delete`, as `pulumi destroy` (or a replacement) runs it before the provider
removes the container; the re-join is the Command's `create` on a container created anew under
the same name, as a replacement does.
"""

from __future__ import annotations

import time

import pytest
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


@pytest.fixture(scope="module")
def left(tenants: TenantLab) -> dict[str, dict[str, str]]:
    """The leave script run for WORKER; the pods of the worker that stays, before and after."""
    before = pods_by_uid(tenants, STAYS)
    leave = tenants.run_leave(tenants.workers[WORKER])
    assert leave.returncode == 0, leave.stderr
    assert "warning" not in leave.stderr, leave.stderr
    return {"before": before, "after": pods_by_uid(tenants, STAYS)}


def test_the_leave_script_removes_the_node_and_touches_nothing_else(
    tenants: TenantLab, left: dict[str, dict[str, str]]
):
    found = tenants.kubectl(TENANT, "get", "node", WORKER, "--ignore-not-found")
    assert found == ""
    assert [n["metadata"]["name"] for n in tenants.get(TENANT, "nodes")["items"]] == [STAYS]
    assert left["after"] == left["before"]  # no drain, no eviction elsewhere
    unschedulable = tenants.get(TENANT, "node", STAYS)["spec"].get("unschedulable")
    assert not unschedulable


def test_a_recreated_worker_rejoins_with_the_programs_script(
    tenants: TenantLab, left: dict[str, dict[str, str]]
):
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
