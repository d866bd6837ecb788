"""examples/ against a real kube-apiserver (v1.35.4) holding the GPU namespace and the
ResourceQuota the program declares for tenant-b (gpuQuotaMb of Pulumi.lab.yaml).

- Every example is a valid object there: `kubectl apply --dry-run=server` accepts each pod.
- The quota example is *admitted* by the API server itself: Kubernetes' quota counts extended
  resources only as `requests.<name>`, so the program's `limits.nvidia.com/gpumem` quota is not
  its to enforce. The refusal its header promises is HAMi's webhook's alone (upstream facts
  `kube-quota-extended-resources-requests-only`, `hami-quota-limits-keys`,
  `hami-quota-counts-memory-per-card`); no HAMi runs here.
- `make sharing`'s tool, with the real kubernetes client, on an API-only plane holding
  examples/1 as HAMi leaves it: its table, and only two LIST requests in the audit log.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane

from builders.hami import QUOTA_NAMESPACE, gpu_quota_manifest
from labcheck import sharing
from labcheck.hami import (
    ANN_ALLOCATED,
    ANN_BIND_PHASE,
    ANN_NODE,
    ANN_REGISTER,
    QUOTA_MEM_KEY,
    RES_CORES,
    RES_MEM,
    quantity_int,
)
from labconfig.parse import parse_config
from planning.gpu_inventory import node_inventory
from tests.support.pulumi_harness import PROJECT_DIR, stack_config

EXAMPLES = PROJECT_DIR / "examples"
OVER_QUOTA = EXAMPLES / "3-over-the-gpu-quota.yaml"


def tenant_b_quota() -> dict[str, Any]:
    (tenant,) = [t for t in parse_config(stack_config("lab")).tenants if t.name == "tenant-b"]
    assert tenant.gpu_quota_mb is not None
    return {"apiVersion": "v1", "kind": "ResourceQuota", **gpu_quota_manifest(tenant.gpu_quota_mb)}


@pytest.fixture(scope="module")
def gpu_namespace(control_plane: ControlPlane) -> Iterator[dict[str, Any]]:
    """The namespace and the program's GPU quota, applied as pulumi-kubernetes applies them,
    synced by the quota controller; the namespace deleted at the end."""
    quota = tenant_b_quota()
    control_plane.create_namespace(QUOTA_NAMESPACE)
    try:
        control_plane.kubectl(
            "apply", "--server-side", "--field-manager=pulumi-kubernetes", "-f", "-",
            input=json.dumps(quota),
        )  # fmt: skip
        yield control_plane.wait_for_object(
            "resourcequota", quota["metadata"]["name"], "-n", QUOTA_NAMESPACE,
            condition=lambda q: q.get("status", {}).get("hard") == q["spec"]["hard"],
            what="the GPU quota synced by the quota controller",
        )  # fmt: skip
    finally:
        control_plane.kubectl("delete", "namespace", QUOTA_NAMESPACE, "--wait=false", check=False)


def pod_names(path) -> list[str]:
    return [d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_the_api_server_accepts_every_example(control_plane, gpu_namespace, name):
    done = control_plane.kubectl("apply", "--dry-run=server", "-f", str(EXAMPLES / name))
    assert done.stdout.splitlines() == [
        f"pod/{pod} created (server dry run)" for pod in pod_names(EXAMPLES / name)
    ]


@pytest.mark.upstream("kube-quota-extended-resources-requests-only", "hami-quota-limits-keys")
def test_only_hamis_webhook_can_refuse_the_quota_example(control_plane, gpu_namespace):
    """48000 MB asked against the 46068 MB quota, and the API server creates the pod: the
    native quota neither counts nor refuses HAMi's key (`status.used` never appears)."""
    limit = int(gpu_namespace["spec"]["hard"][QUOTA_MEM_KEY])
    (name,) = pod_names(OVER_QUOTA)
    created = control_plane.kubectl("apply", "-f", str(OVER_QUOTA))
    try:
        assert created.stdout.strip() == f"pod/{name} created"
        pod = control_plane.get_json("pod", name, "-n", QUOTA_NAMESPACE)
        (container,) = pod["spec"]["containers"]
        requests = container["resources"]["requests"]  # defaulted from the limits
        asked = quantity_int(requests["nvidia.com/gpumem"])  # stored canonically: "24k"
        assert asked * quantity_int(requests["nvidia.com/gpu"]) > limit  # as HAMi counts it
        # The example names no scheduler; only HAMi's webhook (not run here) would set its own.
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        quota = control_plane.get_json("resourcequota", "gpu-quota", "-n", QUOTA_NAMESPACE)
        assert quota["status"] == {"hard": {QUOTA_MEM_KEY: str(limit)}}
    finally:
        control_plane.kubectl("delete", "-f", str(OVER_QUOTA), "--wait=false", check=False)


# --- make sharing over examples/1, with the real client -----------------------------------------
READER = "sharing-reader"
A_NODE = "tenant-a-worker-1"
SHARE = EXAMPLES / "1-four-pods-share-one-a100.yaml"


def audit_of(plane: ControlPlane, user: str) -> list[dict[str, Any]]:
    """The user's requests (one entry per request: the audit log writes a stage per line)."""
    seen: dict[str, dict[str, Any]] = {}
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] == user:
            seen.setdefault(event["auditID"], event)
    return list(seen.values())


def place_like_hami(plane: ControlPlane) -> str:
    """tenant-a's worker registering its A100 as the lab registers it, and examples/1's four
    pods carrying the allocation HAMi writes (one slice each of the card); returns its id."""
    cfg = parse_config(stack_config("lab"))
    (tenant,) = [t for t in cfg.tenants if t.name == "tenant-a"]
    (card,) = node_inventory(tenant.cards, [A_NODE])[A_NODE]
    card_id = f"GPU-{A_NODE}-0"
    register = [{"id": card_id, "index": 0, "count": cfg.hami_split_count, **card}]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": A_NODE, "annotations": {ANN_REGISTER: json.dumps(register)}},
    }
    plane.kubectl("apply", "-f", "-", input=json.dumps(node))
    plane.kubectl("create", "namespace", QUOTA_NAMESPACE)
    # API only: no controller manager makes the ServiceAccount pod admission looks up.
    plane.kubectl("create", "serviceaccount", "default", "-n", QUOTA_NAMESPACE)
    plane.kubectl("apply", "-f", str(SHARE))
    for pod in yaml.safe_load_all(SHARE.read_text()):
        (container,) = pod["spec"]["containers"]
        limits = container["resources"]["limits"]
        slices = f"{card_id},NVIDIA,{limits[RES_MEM]},{limits[RES_CORES]}:;"
        plane.kubectl(
            "annotate", "pod", pod["metadata"]["name"], "-n", QUOTA_NAMESPACE,
            f"{ANN_NODE}={A_NODE}", f"{ANN_ALLOCATED}={slices}", f"{ANN_BIND_PHASE}=success",
        )  # fmt: skip
    return card_id


def test_sharing_lists_the_examples_slices_with_reads_only(start_control_plane, tmp_path):
    """`make sharing`'s tool with the kubernetes client against a real API server holding
    examples/1 as HAMi leaves it: the table names each pod's slice, and the audit log holds
    only the reader's two LIST requests."""
    plane = start_control_plane("sharing", users={READER: ("system:masters",)}, full=False)
    place_like_hami(plane)
    kubeconfig = yaml.safe_load(plane.kubeconfig(READER).read_text())
    spec = {
        "stack": "lab",
        "management": {"kubeconfig": kubeconfig},
        "tenants": [
            {
                "name": "tenant-a",
                "namespace": "tenant-a",
                "kubeconfig": kubeconfig,
                "address": "127.0.0.1",
                "port": 6443,
                "nodes": [A_NODE],
                "gpuMode": "simulated",
                "gpus": {A_NODE: [{"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920,
                                   "devcore": 100, "count": 10}]},
            }
        ],
    }  # fmt: skip
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = io.StringIO()
    code = sharing.main(["--spec", str(path), "--report-dir", str(tmp_path / "r")], out=out)
    assert code == 0, out.getvalue()
    rows = out.getvalue().splitlines()
    assert rows[1] == (
        "tenant-a: 1 card(s) on 1 node(s), 4 pod(s), 80000/81920 MB allocated, "
        "largest free slice 0 MB"
    )
    assert rows[3:8] == [
        "    # gpu-workloads/a100-share-1  20000 MB      25%",
        "    = gpu-workloads/a100-share-2  20000 MB      25%",
        "    % gpu-workloads/a100-share-3  20000 MB      25%",
        "    @ gpu-workloads/a100-share-4  20000 MB      25%",
        "    . free                         1920 MB       0%  4/10 slots taken, cores all taken",
    ]
    assert (tmp_path / "r" / sharing.PNG_NAME).exists()
    requests = audit_of(plane, READER)
    assert sorted((e["verb"], e["requestURI"].split("?")[0]) for e in requests) == [
        ("list", "/api/v1/nodes"),
        ("list", "/api/v1/pods"),
    ]
