"""`capacity --hours` on a DRA tenant: the shares its claims were allocated, from the pods'
PodScheduled time, on the objects the real kube-apiserver v1.36.3 returned
(tests/capacity/data/dra-two-l4.json: llm-0 and llm-1 with 8000 MiB and 25 % of one L4 each,
too-big-0 unschedulable)."""

from __future__ import annotations

import io
import json
from datetime import datetime
from pathlib import Path

from capacity.cli import main
from labcheck import dra
from labcheck.runner import SignalGuard
from tests.capacity.hami_fake import capacity_lab

DATA = json.loads((Path(__file__).parent / "data" / "dra-two-l4.json").read_text())
TENANT = "tenant-b-dra"  # its worker, tenant-b-dra-worker-1, is the recorded one
SCHEDULED = datetime.fromisoformat("2026-12-05T01:10:58+00:00").timestamp()


def test_hours_count_a_dra_tenants_claims(tmp_path):
    lab = capacity_lab()
    server = lab.add_tenant(TENANT, "172.30.255.210", [])
    lab.spec["tenants"][-1]["gpuSharing"] = "dra"
    for pod in DATA["pods"]:  # the fake's scheduler reads every pod's annotations
        server.add_placed_pod({**pod, "metadata": {"annotations": {}, **pod["metadata"]}})
    for plural, items in ((dra.CLAIMS, DATA["claims"]), (dra.SLICES, DATA["slices"])):
        for item in items:
            meta = item["metadata"]
            server.custom[(plural, meta.get("namespace", ""), meta["name"], dra.GROUP)] = item
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out = io.StringIO()
    code = main(
        ["--spec", str(spec), "--hours", "--last", "2h", "--report-dir", str(tmp_path)],
        out=out,
        factory=lab.factory,
        wall=lambda: SCHEDULED + 3600,  # an hour after both were placed
        guard=SignalGuard(),
    )
    assert code == 0, out.getvalue()
    rows = (tmp_path / "capacity-hours.csv").read_text().splitlines()
    card = DATA["slices"][0]["spec"]["devices"][0]["attributes"]["uuid"]["string"]
    # Two pods, each 8000 MiB and 25 % of the first L4 for one hour.
    assert f"{TENANT},{card},NVIDIA L4,{TENANT}/{TENANT}-worker-1,16000.0,50.0,2" in rows
    assert f"{TENANT},*,,,16000.0,50.0,2" in rows
    assert (
        f"left out: {TENANT}: team/too-big-0: not bound with its claims allocated"
        in out.getvalue().splitlines()
    )
