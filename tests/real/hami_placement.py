"""HAMi's placement on a real control plane (issue 20), shared by the real tier's placement tests.

``placement_lab(plane)`` sets up tenant-b's GPU node as the lab runs it, and the HAMi pieces
that place pods on it:

- kwok as the node's kubelet, the real gpu_agent process (test_agent_real.start_agent) that
  registers the node's two L4 cards, completes each allocation and frees HAMi's node lock;
- the real kube-scheduler v1.35.4 with the profile and extender config HAMi v2.10.0's chart
  renders, calling a Python extender that plays HAMi's Filter, node lock and Bind
  (hami_extender.py), with the program's extender flags (builders/hami.py);
- with ``webhook=True``, HAMi's admission webhook (``HamiWebhook``), which gives a pod asking
  for ``nvidia.com/gpu`` HAMi's schedulerName, as in the lab: the capacity run's pods do not
  name a scheduler.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import ssl
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from admission_webhook import TlsWebhook
from binaries import bin_path
from controlplane import ControlPlane, Process, free_port, wait_until
from hami_extender import HamiExtender, scheduler_config
from test_agent_real import (
    GPU_NODE,
    LAB,
    LOCK,
    PROCESS_TENANT,
    WORK_NS,
    AgentProcess,
    Rest,
    annotations,
    apply_agent_rbac,
    rest,
    start_agent,
)

from builders.hami import SCHEDULER_NAME, hami_values

GPU_RESOURCE = "nvidia.com/gpu"


@dataclasses.dataclass
class PlacementLab:
    plane: ControlPlane
    admin: Rest
    agent: AgentProcess
    extender: HamiExtender
    scheduler: Process


def delete_all_pods(lab: PlacementLab) -> None:
    """Every pod of the work namespace gone, the node lock free, and the extender told (HAMi's
    onDelPod), so the next test starts from an empty node."""
    lab.admin.call("DELETE", f"/api/v1/namespaces/{WORK_NS}/pods?gracePeriodSeconds=0")
    wait_until(
        lambda: not lab.admin.call("GET", f"/api/v1/namespaces/{WORK_NS}/pods")["items"],
        "the pods gone", 30,
    )  # fmt: skip
    wait_until(lambda: LOCK not in annotations(lab.admin.node(GPU_NODE)), "lock free", 30)
    lab.extender.forget_all()


def start_hami_kube_scheduler(plane: ControlPlane, config: dict) -> Process:
    """The real kube-scheduler with HAMi's profile, beside the plane's default one."""
    path = plane.workdir / "hami-scheduler.yaml"
    path.write_text(yaml.safe_dump(config))
    kubeconfig = plane.kubeconfig("system:kube-scheduler")
    port = free_port()
    process = Process(
        "hami-kube-scheduler",
        [
            str(bin_path("kube-scheduler")),
            f"--config={path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={plane.workdir / 'hami-scheduler-certs'}",
        ],
        plane.workdir / "hami-kube-scheduler.log",
    )
    process.start()
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", timeout=2, context=context
            ) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_until(healthy, "HAMi's kube-scheduler /healthz", 60, [process])
    except BaseException:
        process.stop()
        raise
    return process


def registered(admin: Rest) -> bool:
    """kwok's capacity and Ready condition, the agent's nvidia.com/gpu beside them."""
    status = admin.node(GPU_NODE).get("status", {})
    ready = any(
        c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])
    )
    return ready and {"cpu", GPU_RESOURCE} <= set(status.get("allocatable", {}))


class HamiWebhook(TlsWebhook):
    """HAMi v2.10.0's mutating webhook, the part the lab relies on (pkg/scheduler/webhook.go:
    53-125): a pod with a container asking ``nvidia.com/gpu`` whose schedulerName is unset or
    ``default-scheduler`` (``--force-overwrite-default-scheduler``, default true) gets
    ``hami-scheduler``. Registered as the chart renders it (templates/scheduler/webhook.yaml:
    pods CREATE, admissionReviewVersions v1beta1, ``hami.io/webhook NotIn ignore`` selectors),
    but with failurePolicy Fail (the chart's is Ignore): a broken stand-in must not let pods
    through to the default scheduler unnoticed."""

    name, path = "hami-webhook", "/webhook"

    def review(self, request: dict) -> dict:
        pod = request["object"]
        asks = any(
            GPU_RESOURCE in (c.get("resources", {}).get("limits") or {})
            for c in pod["spec"].get("containers", [])
        )
        if asks and pod["spec"].get("schedulerName", "default-scheduler") == "default-scheduler":
            patch = [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME}]
            return self.json_patch(request, patch)
        return {"uid": request["uid"], "allowed": True}

    def webhooks(self, client_config: dict) -> list[dict]:
        selector = {"matchExpressions": [selector_ignore()]}
        return [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1beta1"],
                "clientConfig": client_config,
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "namespaceSelector": selector,
                "objectSelector": selector,
                "reinvocationPolicy": "Never",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "sideEffects": "None",
                "timeoutSeconds": 10,
            }
        ]


def selector_ignore() -> dict:
    return {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}


@contextlib.contextmanager
def placement_lab(
    plane: ControlPlane, *, webhook: bool = False, split_count: int = LAB.hami_split_count
) -> Iterator[PlacementLab]:
    """tenant-b's GPU node on ``plane`` with HAMi's placement; everything started is stopped.
    ``split_count``: slots per card (the stack's hamiSplitCount), for bursts larger than 20."""
    apply_agent_rbac(plane)
    plane.create_fake_node(GPU_NODE)
    admin = rest(plane)
    root = Path(tempfile.mkdtemp(prefix="gpu-agent-placement-"))
    root.chmod(0o755)
    agent = start_agent(plane, root, split_count)
    extender = scheduler = hook = None
    try:
        wait_until(lambda: registered(admin), f"kwok and the agent ready {GPU_NODE}", 30)
        values = hami_values(PROCESS_TENANT, LAB.hami_split_count, LAB.hami_node_lock_timeout)
        extender = HamiExtender(admin, GPU_NODE, values["scheduler"]["extender"]["extraArgs"])
        url = extender.serve()
        config = scheduler_config(url, str(plane.kubeconfig("system:kube-scheduler")), None)
        scheduler = start_hami_kube_scheduler(plane, config)
        if webhook:
            hook = HamiWebhook(plane)
            hook.serve()
        yield PlacementLab(plane, admin, agent, extender, scheduler)
    finally:
        if hook is not None:
            hook.close()
        if scheduler is not None:
            scheduler.stop()
        if extender is not None:
            extender.close()
        agent.stop()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def placement_lab_on_new_plane(
    start_control_plane: Any, name: str, **options: Any
) -> Iterator[PlacementLab]:
    """A plane of its own (the ``start_control_plane`` fixture) with the GPU workloads'
    namespace, and ``placement_lab`` on it."""
    plane = start_control_plane(name)
    plane.create_namespace(WORK_NS)
    with placement_lab(plane, **options) as lab:
        yield lab


def report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print a measurement even under pytest's capture."""
    with capsys.disabled():
        print(f"\n  {line}")
