"""`capacity --ledger` (make ledger): slice-hours from the lab's Prometheus, through the
management cluster's service proxy, as a table, CSV and JSON (capacity/ledger.py).

What Prometheus computes from the lab's series is checked against a real Prometheus in the real
tier; here the fake management API server answers each query as Prometheus would."""

from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

from builders.labcheck_spec import monitoring_spec
from capacity.cli import main
from labcheck.runner import SignalGuard
from labcheck.spec import parse_spec
from labconfig.parse import parse_config
from tests.capacity.hami_fake import capacity_lab
from tests.support.pulumi_harness import lab_stack_config

NOW = 1_796_000_000.0


def ledger_queries(window: str) -> dict[str, str]:
    return parse_spec(json.dumps(_lab_with_prometheus().spec)).monitoring.over(window)


CARD = "GPU-a100-0"


def _sample(tenant: str, namespace: str, value: float, card: str = CARD) -> dict:
    labels = {"tenant": tenant, "namespace": namespace, "card": card}
    return {"metric": labels, "value": [NOW, repr(value)]}


def _run(tmp_path: Path, lab, *argv: str) -> tuple[int, str, str]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(
            ["--spec", str(spec), *argv],
            out=out,
            factory=lab.factory,
            wall=lambda: NOW,
            guard=SignalGuard(),
        )
    return code, out.getvalue(), err.getvalue()


def _lab_with_prometheus():
    lab = capacity_lab()
    lab.spec["monitoring"] = monitoring_spec(parse_config(lab_stack_config()))
    return lab


def test_the_ledger_asks_prometheus_through_the_management_api_and_writes_its_reports(tmp_path):
    lab = _lab_with_prometheus()
    queries = ledger_queries("7200s")
    # 4 pods of 25 % (20000 MB each) of one A100 for the whole two hours, as Prometheus sums them.
    lab.mgmt.prometheus = {
        queries["mb_hours"]: [_sample("tenant-a", "ml", 160000.0)],
        queries["core_hours"]: [_sample("tenant-a", "ml", 200.0)],
        queries["gpu_hours"]: [_sample("tenant-a", "ml", 2.0)],
        queries["pods"]: [_sample("tenant-a", "ml", 4)],
    }
    code, out, err = _run(tmp_path, lab, "--ledger", "--last", "2h", "--report-dir", str(tmp_path))
    assert code == 0, err
    path = lab.mgmt.prometheus_queries[0][0]
    assert path == (
        "/api/v1/namespaces/lab-monitoring/services/http:prometheus-server:80/proxy/api/v1/query"
    )
    assert {q["query"] for _, q in lab.mgmt.prometheus_queries} == set(queries.values())
    assert {q["time"] for _, q in lab.mgmt.prometheus_queries} == {f"{NOW:.3f}"}
    assert "slice-hours over the last 2 h" in out
    assert "tenant-a: 2.000 GPU-hours" in out
    rows = list(csv.DictReader((tmp_path / "ledger.csv").open()))
    assert rows == [
        {
            "tenant": "tenant-a",
            "namespace": "ml",
            "card": CARD,
            "mb_hours": "160000.0",
            "core_hours": "200.0",
            "gpu_hours": "2.0",
            "idle_gpu_hours": "0.0",  # simulated cards: no vGPU monitor, no idle figure
            "pods": "4",
        }
    ]
    report = json.loads((tmp_path / "ledger.json").read_text())
    assert report["gpuHoursByTenant"] == {"tenant-a": 2.0}
    assert report["queries"] == queries
    assert f"wrote {tmp_path / 'ledger.csv'}" in out


def test_rows_of_every_tenant_namespace_and_card_and_totals_per_tenant(tmp_path):
    lab = _lab_with_prometheus()
    queries = ledger_queries("86400s")
    lab.mgmt.prometheus = {
        queries["gpu_hours"]: [
            _sample("tenant-a", "ml", 0.5),
            _sample("tenant-a", "web", 0.25, card="GPU-a100-1"),
            _sample("tenant-b", "ml", 1.5, card="GPU-l4-0"),
        ],
        queries["mb_hours"]: [_sample("tenant-b", "ml", 1000.0, card="GPU-l4-0")],
    }
    code, out, _ = _run(tmp_path, lab, "--ledger")
    assert code == 0
    assert "tenant-a: 0.750 GPU-hours" in out and "tenant-b: 1.500 GPU-hours" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["tenant-b", "ml", "GPU-l4-0", "0", "1000.0", "0.0", "1.500", "0.000"] in lines


def test_a_refused_query_or_a_stack_without_prometheus_is_said_plainly(tmp_path):
    lab = _lab_with_prometheus()
    queries = ledger_queries("86400s")
    lab.mgmt.prometheus = {queries["mb_hours"]: "parse error at char 3"}
    code, _, err = _run(tmp_path, lab, "--ledger")
    assert code == 1
    assert "Prometheus refused" in err and "parse error at char 3" in err
    lab.spec.pop("monitoring")
    code, _, err = _run(tmp_path, lab, "--ledger")
    assert code == 2
    assert "this stack has no Prometheus (monitoring.enabled is false)" in err


def test_the_spec_names_where_prometheus_answers():
    spec = monitoring_spec(parse_config(lab_stack_config()))
    assert spec["jobs"] == {"tenant-a": "tenant-tenant-a", "tenant-b": "tenant-tenant-b"}
    lab = _lab_with_prometheus()
    assert parse_spec(json.dumps(lab.spec)).monitoring.scrape_interval == "30s"
