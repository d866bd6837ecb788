"""labcheck `monitoring.targets` and `monitoring.truth`: the lab's Prometheus scrapes every
tenant, and its slices are what the tenant's pods hold (labcheck/checks/monitoring.py). The fake
management API server answers each PromQL query as the lab's Prometheus would."""

from __future__ import annotations

import json
import re

import pytest

from builders.labcheck_spec import monitoring_spec
from labcheck.context import RunContext
from labcheck.result import Status
from labcheck.spec import parse_spec
from labconfig.parse import parse_config
from tests.support.labcheck_fakes import run_lab, standard_lab
from tests.support.pulumi_harness import lab_stack_config

BASE = ["tenant.api", "tcp.ready", "mgmt.kamaji"]
CARD = "GPU-a100"


def lab_with_prometheus():
    lab = standard_lab()
    lab.spec["monitoring"] = monitoring_spec(parse_config(lab_stack_config()))
    return lab


def sample(value: float, **labels: str) -> dict:
    return {"metric": labels, "value": [0, repr(value)]}


def up(lab, tenant: str, value: int, took: float = 0.012) -> None:
    job = f"tenant-{tenant}"
    lab.mgmt.prometheus[f'up{{job="{job}"}}'] = [sample(value, job=job, tenant=tenant)]
    lab.mgmt.prometheus[f'scrape_duration_seconds{{job="{job}"}}'] = [sample(took, job=job)]


def hami_pod(name: str, mb: int, cores: int, phase: str = "Running") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {
                "hami.io/vgpu-node": "tenant-a-worker-1",
                "hami.io/vgpu-devices-allocated": f"{CARD},NVIDIA,{mb},{cores}:;",
            },
        },
        "spec": {"nodeName": "tenant-a-worker-1", "containers": [{"name": "c"}]},
        "status": {"phase": phase},
    }


def recorded(lab, tenant: str, held: dict[str, tuple[int, int]]) -> None:
    """What the recording rules hold for `tenant`: pod -> (MB, cores %) on CARD."""
    by = "namespace, pod, card"
    for index, series in enumerate(("lab:slice_memory_mb", "lab:slice_cores_percent")):
        lab.mgmt.prometheus[f'sum by ({by}) ({series}{{tenant="{tenant}"}})'] = [
            sample(values[index], namespace="ml", pod=pod, card=CARD)
            for pod, values in held.items()
        ]


def result(lab, check: str, tenant: str = "tenant-a"):
    _, results = run_lab(lab, [check, "monitoring.targets", *BASE])
    return results[(check, tenant)]


def test_each_tenants_target_up_passes_with_its_scrape_time():
    lab = lab_with_prometheus()
    up(lab, "tenant-a", 1)
    up(lab, "tenant-b", 1, took=0.034)
    assert (
        result(lab, "monitoring.targets").evidence
        == "job tenant-tenant-a up, last scrape took 12 ms"
    )
    assert "34 ms" in result(lab, "monitoring.targets", "tenant-b").evidence
    path = lab.mgmt.prometheus_queries[0][0]
    assert path.startswith("/api/v1/namespaces/lab-monitoring/services/http:prometheus-server:80/")


def test_a_target_down_fails_with_prometheus_own_last_error():
    lab = lab_with_prometheus()
    up(lab, "tenant-a", 0)
    targets = {
        "status": "success",
        "data": {
            "activeTargets": [
                {
                    "scrapePool": "tenant-tenant-a",
                    "health": "down",
                    "lastError": "server returned HTTP status 403 Forbidden",
                }
            ]
        },
    }
    original = lab.mgmt.get_raw

    def get_raw(path, query=None):
        if path.endswith("/api/v1/targets"):
            return json.dumps(targets)
        return original(path, query)

    lab.mgmt.get_raw = get_raw
    res = result(lab, "monitoring.targets")
    assert res.status is Status.FAIL
    assert res.seen == "health down: server returned HTTP status 403 Forbidden"
    assert "lab-metrics-reader token or Role" in res.cause
    # It read again over two scrape intervals (30 s each) before failing.
    ups = [q for _, q in lab.mgmt.prometheus_queries if q["query"] == 'up{job="tenant-tenant-a"}']
    assert len(ups) == 3


def test_a_target_scraped_late_passes_once_up():
    lab = lab_with_prometheus()
    lab.mgmt.prometheus['scrape_duration_seconds{job="tenant-tenant-a"}'] = [sample(0.01)]
    calls = []
    original = lab.mgmt._prometheus_answer

    def answer(path, query):
        calls.append(query["query"])
        if query["query"].startswith("up{") and len(calls) > 1:
            lab.mgmt.prometheus[query["query"]] = [sample(1, job="tenant-tenant-a")]
        return original(path, query)

    lab.mgmt._prometheus_answer = answer
    assert result(lab, "monitoring.targets").status is Status.PASS


def test_no_prometheus_in_the_stack_skips_saying_so():
    lab = standard_lab()
    res = result(lab, "monitoring.targets")
    assert res.status is Status.SKIP
    assert "monitoring.enabled is false" in res.seen + res.evidence + str(res)


@pytest.mark.upstream("hami-sched-metrics-per-container")
def test_prometheus_slices_equal_the_pods_annotations():
    """HAMi counts pods with a node chosen and not ended: an ended pod's slices are no more."""
    lab = lab_with_prometheus()
    up(lab, "tenant-a", 1)
    server = lab.tenant("tenant-a")
    server.add_placed_pod(hami_pod("p1", 20000, 25))
    server.add_placed_pod(hami_pod("p2", 20000, 25))
    server.add_placed_pod(hami_pod("done", 10000, 10, phase="Succeeded"))
    recorded(lab, "tenant-a", {"p1": (20000, 25), "p2": (20000, 25)})
    res = result(lab, "monitoring.truth")
    assert res.status is Status.PASS, res
    assert res.evidence.startswith("2 slice(s), 40000 MB: the same in Prometheus")


def test_a_slice_prometheus_does_not_know_fails_naming_the_pod():
    lab = lab_with_prometheus()
    up(lab, "tenant-a", 1)
    server = lab.tenant("tenant-a")
    server.add_placed_pod(hami_pod("p1", 20000, 25))
    server.add_placed_pod(hami_pod("p2", 8000, 10))
    recorded(lab, "tenant-a", {"p1": (20000, 25)})
    res = result(lab, "monitoring.truth")
    assert res.status is Status.FAIL
    assert res.seen == "1 difference(s) over two scrape intervals"
    assert res.cause == f"ml/p2 on {CARD}: the objects say 8000 MB 10 %, Prometheus nothing"


def test_other_numbers_in_prometheus_fail_too():
    lab = lab_with_prometheus()
    up(lab, "tenant-a", 1)
    lab.tenant("tenant-a").add_placed_pod(hami_pod("p1", 20000, 25))
    recorded(lab, "tenant-a", {"p1": (40000, 25)})
    res = result(lab, "monitoring.truth")
    assert res.status is Status.FAIL
    assert "the objects say 20000 MB 25 %, Prometheus 40000 MB 25 %" in res.cause


def test_labchecks_own_namespaces_are_the_ones_the_ledger_leaves_out():
    """Its GPU pods hold slices while the validation runs: recorded, but no tenant's bill."""
    lab = lab_with_prometheus()
    ctx = RunContext(spec=parse_spec(lab.spec), factory=lab.factory, clock=lab.clock, run_id="7f3a")
    made = [ctx.namespace(t) for t in ctx.spec.tenants]
    (excluded,) = re.findall(r'namespace!~"([^"]+)"', lab.spec["monitoring"]["ledger"]["gpu_hours"])
    assert made and all(re.fullmatch(excluded, name) for name in made)
    assert not re.fullmatch(excluded, "gpu-workloads")
