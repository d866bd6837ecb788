"""The upgrade of one tenant (tenant-b, v1.35.4 to v1.36.3) in kubeadm's order, with the
program's own scripts and objects (docs/upgrades.md), while tenant-a stays as it is.

Last of the tenant modules: it replaces tenant-b's workers. What runs:
- the program run again with tenant-b's kubernetesVersion v1.36.3 and its workerImage the
  v1.36.3 worker image (upgrade_images.py: kubelet, kubeadm and kube-proxy v1.36.3 built here,
  pushed to the loopback mirror and named by digest as a user names a mirrored image);
- the control plane: Kamaji's part, modelled (tenant_stand_in.upgrade: the stand-in's three
  processes restarted from the real tier's v1.36.3 builds). The program's version gate runs
  meanwhile, its /version half only (its Kamaji-status half reads the management cluster,
  which this tier does not have): the gate's own shell from the declared Command, from where
  it reads the tenant; it must wait while v1.35.4 serves and pass once v1.36.3 does;
- the program's kube-proxy objects at v1.36.3 applied and rolled out (the old workers get
  kube-proxy v1.36.3's image as their containerd would pull it);
- each worker in turn, as a replacement runs: the old join Command's leave script (drain, Node
  deleted), the container removed as the provider removes it, created from the v1.36.3 image
  with the new declaration, the new join Command's script, the Node Ready at v1.36.3. A
  Deployment's pod and a bare pod, both with HAMi's allocation annotation (drain_workload.py:
  the tier has no HAMi scheduler, so they request no nvidia.com/gpu), are on the worker that
  leaves: the Deployment's comes back on the other worker, the bare one is gone;
- after it: labcheck's tenant checks (as test_tenant_labcheck.py runs them) for both tenants.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tenant_stand_in
import workload_images
from docker_host import Docker
from drain_workload import (
    Placed,
    bare_pod,
    daemonset_pods,
    listed,
    place,
    remove,
    wait_running,
)
from kube_proxy_run import NEXT_VERSION
from management_cluster import run_script
from program import TierHost
from tenant_lab import TENANTS, VERSION, TenantLab, tier_config, wait_pod
from test_tenant_agent import wait_registered
from test_tenant_labcheck import ROOT, SELECTED, command
from test_workers import remove_as_the_provider
from upgrade_images import kube_proxy_next_archive, next_worker_image, node_next_programs
from upgrade_images import publish_next as publish

from builders.scripts import KUBECONFIG_PRELUDE, STRICT
from labcheck.report import JSON_NAME
from tests.support.docker_readback import container_attributes
from tests.support.pulumi_harness import ProgramRun, integral_numbers, run_program

TENANT, OTHER = "tenant-b", "tenant-a"
ROLLOUT_SECONDS = 180
GATE_WAITS_SECONDS = 8  # over the gate's 3 readings 2 s apart: it would have passed by then


def uids(tenants: TenantLab, tenant: str) -> dict[str, str]:
    """uid -> kind/namespace/name of the tenant's nodes and pods."""
    found = tenants.get(tenant, "nodes,pods", "-A")["items"]
    return {
        o["metadata"]["uid"]: f"{o['kind']}/{o['metadata'].get('namespace', '')}/"
        f"{o['metadata']['name']}"
        for o in found
    }


def server_version(tenants: TenantLab, tenant: str) -> str:
    return json.loads(tenants.kubectl(tenant, "get", "--raw", "/version"))["gitVersion"]


def kubelet_version(tenants: TenantLab, tenant: str, node: str) -> str:
    return tenants.get(tenant, "node", node)["status"]["nodeInfo"]["kubeletVersion"]


@dataclass
class Replaced:
    """One worker's replacement."""

    leave: subprocess.CompletedProcess[str]
    listing: list[str]
    expected: list[str]  # the listing's lines for the two GPU-annotated pods
    daemonsets: list[str]
    other: str  # the tenant's other worker
    moved_to: str  # the node the Deployment's pod came back on
    bare_left: str  # `kubectl get pod <bare> --ignore-not-found` after the leave
    joined: subprocess.CompletedProcess[str]
    kubelet: str


@dataclass
class Upgrade:
    run: ProgramRun
    image: str
    reference: str
    other_before: dict[str, str]
    gate: subprocess.CompletedProcess[str] | None = None
    gate_waiting: bool = False  # still waiting while v1.35.4 served
    gate_after_restart: float = 0.0  # seconds from the control plane's /readyz to the gate's end
    kube_proxy_images: list[str] = field(default_factory=list)
    replaced: dict[str, Replaced] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def _timed(upgrade: Upgrade, tenants: TenantLab, what: str, seconds: float) -> None:
    upgrade.timings[what] = seconds
    tenants.timings[f"upgrade {TENANT}: {what}"] = seconds


@pytest.fixture(scope="module")
def upgrade(
    docker: Docker,
    tier_cache_dir: Path,
    node_image: str,
    mirrored_node_image: str,
    tenants: TenantLab,
) -> Upgrade:
    started = time.monotonic()
    image = next_worker_image(docker, tier_cache_dir, node_image)
    reference = publish(docker, tier_cache_dir, image)
    config = tier_config(
        mirrored_node_image, tenants.agent_image, {TENANT: (NEXT_VERSION, reference)}
    )
    run = run_program(config, host=TierHost())
    found = Upgrade(run, image, reference, uids(tenants, OTHER))
    _timed(found, tenants, "v1.36.3 programs, worker image, mirror push, program run",
           time.monotonic() - started)  # fmt: skip
    assert server_version(tenants, TENANT) == VERSION
    control_plane(found, tenants)
    kube_proxy(found, tenants, tier_cache_dir)
    # the program's other objects in the tenant at v1.36.3: its admission policies move from
    # v1beta1 to v1 (builders/admission_policy.py), which v1.36.3 serves and v1.35.4 did not
    tenants.apply_agent(TENANT, run)
    tenants.agents.add(TENANT)
    tenants.ensure_lock_wait_policy(TENANT, run)
    workers = [w.name for w in tenants.tenant_workers(TENANT)]
    placed = place(tenants, TENANT, workers[0], workers[1:], "upgrade")
    try:
        for name in workers:
            replace(found, tenants, name, next(w for w in workers if w != name), placed)
    finally:
        remove(tenants, placed)
    return found


def control_plane(upgrade: Upgrade, tenants: TenantLab) -> None:
    """The gate's /version half started, the control plane restarted at v1.36.3, the gate's end."""
    gate = upgrade.run.named(f"{TENANT}-version-ready").inputs
    assert gate["create"].count(KUBECONFIG_PRELUDE) == 1, gate["create"]
    script = STRICT + gate["create"][gate["create"].index(KUBECONFIG_PRELUDE) :]
    environment = {**gate["environment"], "LAB_KUBECONFIG": tenants.kubeconfig(TENANT)}
    assert environment["VERSION"] == NEXT_VERSION
    tcp = integral_numbers(upgrade.run.named(f"{TENANT}-control-plane").inputs)
    assert tcp["spec"]["kubernetes"]["version"] == NEXT_VERSION
    bin_dir = tenants.bin_dir / NEXT_VERSION  # the real tier's builds
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(run_script, tenants.docker, tenants.cache, script, environment)
        time.sleep(GATE_WAITS_SECONDS)
        upgrade.gate_waiting = not waiting.done()
        seconds = tenant_stand_in.upgrade(tenants.docker, tenants.stand_ins[TENANT], tcp, bin_dir)
        ready = time.monotonic()
        _timed(upgrade, tenants, "control plane restarted at v1.36.3 to /readyz", seconds)
        upgrade.gate = waiting.result()
        upgrade.gate_after_restart = time.monotonic() - ready
    _timed(upgrade, tenants, "version gate (/version) after /readyz", upgrade.gate_after_restart)


def kube_proxy(upgrade: Upgrade, tenants: TenantLab, cache: Path) -> None:
    """The program's kube-proxy objects of the v1.36.3 run, applied and rolled out."""
    started = time.monotonic()
    archive = kube_proxy_next_archive(cache, node_next_programs(cache))
    for worker in tenants.tenant_workers(TENANT):  # what their containerd would pull
        workload_images.load_images(tenants.docker, worker.name, [archive])
    tenants.apply_kube_proxy(TENANT, upgrade.run)
    rollout = tenant_stand_in.kubectl(
        tenants.bin_dir, tenants.stand_ins[TENANT].admin_path,
        "rollout", "status", "daemonset/kube-proxy", "-n", "kube-system",
        f"--timeout={ROLLOUT_SECONDS}s",
    )  # fmt: skip
    assert rollout.returncode == 0, rollout.stderr
    pods = tenants.get(TENANT, "pods", "-n", "kube-system", "-l", "k8s-app=kube-proxy")["items"]
    upgrade.kube_proxy_images = sorted(
        f"{p['spec']['nodeName']} {p['spec']['containers'][0]['image']} {p['status']['phase']}"
        for p in pods
    )
    _timed(upgrade, tenants, "kube-proxy v1.36.3 applied and rolled out",
           time.monotonic() - started)  # fmt: skip


def replace(upgrade: Upgrade, tenants: TenantLab, name: str, other: str, placed: Placed) -> None:
    """The worker's replacement, as `pulumi up` runs it for a new workerImage."""
    worker = tenants.workers[name]
    app_pod = wait_running(tenants, TENANT, placed.deployment, name)
    bare = placed.bare if name == placed.node else f"upgrade-{name}-bare"
    if name != placed.node:  # a bare pod of its own on each later worker
        tenants.kubectl_apply(TENANT, json.dumps(bare_pod(bare, name, tenants.agent_image)))
        running = wait_pod(tenants, TENANT, bare, ("Running",))
        assert running["status"].get("phase") == "Running", running["status"]
    placed_here = Placed(TENANT, name, placed.deployment, app_pod, bare)
    daemonsets = daemonset_pods(tenants, TENANT, name)
    started = time.monotonic()
    leave = tenants.run_leave(worker)  # the old Command's delete, with its old inputs
    _timed(upgrade, tenants, f"{name}: leave (drain and Node delete)", time.monotonic() - started)
    print(leave.stderr)
    moved = wait_running(
        tenants, TENANT, placed.deployment, None, not_uid=app_pod["metadata"]["uid"]
    )
    bare_left = tenants.kubectl(TENANT, "get", "pod", bare, "-n", "default", "--ignore-not-found")
    remove_as_the_provider(tenants.docker, name)
    image_id = json.loads(tenants.docker.run("image", "inspect", upgrade.image).stdout)[0]["Id"]
    worker.attributes = {**container_attributes(upgrade.run.named(name).inputs), "image": image_id}
    worker.join = upgrade.run.named(f"{name}-join").inputs
    worker.ready_seconds, worker.steps = None, {}
    tenants.create_worker(worker)
    joined = tenants.run_join(worker)
    assert joined.returncode == 0, joined.stderr[-3000:]
    tenants.wait_ready([worker])
    steps = ", ".join(f"{what} {at:.0f} s" for what, at in worker.steps.items())
    _timed(upgrade, tenants, f"{name}: v1.36.3 container start to Node Ready ({steps})",
           worker.ready_seconds or 0.0)  # fmt: skip
    upgrade.replaced[name] = Replaced(
        leave, listed(leave.stderr), placed_here.listing_lines(), daemonsets, other,
        moved["spec"]["nodeName"], bare_left, joined, kubelet_version(tenants, TENANT, name),
    )  # fmt: skip


def test_the_gate_waits_for_the_new_version_and_passes_once_it_serves(upgrade: Upgrade):
    assert upgrade.gate_waiting, "the gate passed while the control plane ran v1.35.4"
    assert upgrade.gate is not None
    assert upgrade.gate.returncode == 0, upgrade.gate.stderr
    assert upgrade.gate.stderr.strip().endswith(f"the control plane runs {NEXT_VERSION}")


def test_kube_proxy_runs_the_new_version_on_the_old_workers_first(
    tenants: TenantLab, upgrade: Upgrade
):
    assert upgrade.kube_proxy_images == sorted(
        f"{w.name} registry.k8s.io/kube-proxy:{NEXT_VERSION} Running"
        for w in tenants.tenant_workers(TENANT)
    )


@pytest.mark.parametrize("worker", ["tenant-b-worker-1", "tenant-b-worker-2"])
def test_each_worker_leaves_drained_and_rejoins_at_the_new_version(upgrade: Upgrade, worker: str):
    """The leave lists both GPU-annotated pods (and no DaemonSet pod), the Deployment's pod
    comes back Running on the other worker, the bare pod is gone; the new container joins with
    the program's script and its kubelet is v1.36.3."""
    found = upgrade.replaced[worker]
    assert found.leave.returncode == 0, found.leave.stderr
    assert "warning" not in found.leave.stderr, found.leave.stderr
    assert set(found.expected) <= set(found.listing), found.leave.stderr
    assert found.daemonsets
    assert not [p for p in found.daemonsets if p in "\n".join(found.listing)], found.listing
    assert f"node/{worker} drained" in found.leave.stderr
    assert found.moved_to == found.other
    assert found.bare_left == ""
    assert found.joined.stderr.strip().endswith(f"{worker} joined"), found.joined.stderr[-500:]
    assert found.kubelet == NEXT_VERSION


def test_after_it_the_tenant_runs_the_new_version_and_the_other_is_untouched(
    tenants: TenantLab, upgrade: Upgrade
):
    nodes = tenants.get(TENANT, "nodes")["items"]
    found = sorted(
        (
            n["metadata"]["name"],
            n["status"]["nodeInfo"]["kubeletVersion"],
            next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"),
        )
        for n in nodes
    )
    workers = sorted(w.name for w in tenants.tenant_workers(TENANT))
    assert found == [(name, NEXT_VERSION, "True") for name in workers]
    assert server_version(tenants, TENANT) == NEXT_VERSION
    assert server_version(tenants, OTHER) == VERSION
    assert uids(tenants, OTHER) == upgrade.other_before


def test_labchecks_tenant_checks_pass_after_the_upgrade(
    tenants: TenantLab, upgrade: Upgrade, tmp_path: Path
):
    """labcheck as test_tenant_labcheck.py runs it (the management checks left out), with the
    v1.36.3 run's spec: tenant-b's API, nodes, tunnels, cards and lock-wait checks pass, and
    what needs HAMi fails or is blocked as before the upgrade."""
    spec = json.loads(
        upgrade.run.named("validation-labcheck").inputs["environment"]["LABCHECK_SPEC"]
    )
    for tenant in spec["tenants"]:
        tenant["kubeconfig"] = tenants.kubeconfig(tenant["name"])
    tenants.ensure_agent(OTHER)
    tenants.ensure_lock_wait_policy(OTHER)
    for tenant in TENANTS:
        for worker in tenants.tenant_workers(tenant):
            wait_registered(tenants, tenant, worker.name)
    started = time.monotonic()
    done = subprocess.run(
        command(tenants, tmp_path), cwd=ROOT, env={**os.environ, "LABCHECK_SPEC": json.dumps(spec)},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    tenants.timings[f"upgrade {TENANT}: labcheck after it"] = time.monotonic() - started
    print(done.stdout)
    report = json.loads((tmp_path / JSON_NAME).read_text())
    found = {(r["check"], r["tenant"]): r for r in report["results"]}
    bad = sorted(key for key, r in found.items() if r["status"] in ("fail", "error"))
    without_hami = ("hami.extender-timeout", "hami.webhook")
    assert bad == sorted((c, t) for c in without_hami for t in TENANTS), done.stdout
    address = tenants.stand_ins[TENANT].address
    assert found[("tenant.api", TENANT)]["evidence"] == (
        f"{NEXT_VERSION} at https://{address}:6443, /readyz ok"
    )
    for check in SELECTED:
        if check.startswith(("tenant.", "nodes.", "konnectivity.", "gpu.inventory", "hami.lock")):
            assert found[(check, TENANT)]["status"] == "pass", found[(check, TENANT)]
