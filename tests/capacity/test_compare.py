"""One mix on several tenants (`--compare`): the entries copied into each tenant, the pods
created in turn, each tenant's times from its own first create, and the side-by-side table."""

from __future__ import annotations

import json

import pytest

from capacity.mix import MixError, parse_mix
from capacity.plan import plan_pods
from capacity.report import side_by_side, tenant_summary
from capacity.run import RunSettings, Waiting, run_capacity
from labcheck.objects import Created, Tracker
from labcheck.spec import parse_spec
from tests.capacity.hami_fake import capacity_lab
from tests.capacity.test_run import cli
from tests.support.labcheck_fakes import FakeClock, FakeCluster, FakeServer

MIX = {
    "name": "pair",
    "entries": [
        {"tenant": "tenant-a", "name": "llm", "count": 2, "gpumem": 8000, "gpucores": 25},
        {"tenant": "tenant-a", "name": "big", "count": 1, "gpumem": 30000},
    ],
}


def test_every_entry_runs_in_each_compared_tenant_instead_of_its_own():
    mix = parse_mix(MIX).in_tenants(["tenant-a", "tenant-b"])
    assert mix.compared == ("tenant-a", "tenant-b")
    assert [(e.tenant, e.name) for e in mix.entries] == [
        ("tenant-a", "llm"), ("tenant-b", "llm"), ("tenant-a", "big"), ("tenant-b", "big"),
    ]  # fmt: skip
    assert mix.pod_count() == 6 and mix.whole_gpus() == 6


def test_the_pods_are_created_in_turn_so_each_tenant_sees_the_same_pace():
    mix = parse_mix(MIX).in_tenants(["tenant-a", "tenant-b"])
    assert [(p.tenant, p.name) for p in plan_pods(mix, "r")] == [
        ("tenant-a", "llm-0"), ("tenant-b", "llm-0"),
        ("tenant-a", "llm-1"), ("tenant-b", "llm-1"),
        ("tenant-a", "big-0"), ("tenant-b", "big-0"),
    ]  # fmt: skip
    # Without a comparison: entry by entry, as the file lists them.
    assert [p.name for p in plan_pods(parse_mix(MIX), "r")] == [
        "llm-0", "llm-1", "big-0",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("tenants", "error"),
    [
        (["tenant-a"], "name at least two tenants"),
        (["tenant-a", "tenant-a"], "name at least two tenants"),
    ],
)
def test_a_comparison_needs_two_tenants(tenants, error):
    with pytest.raises(MixError, match=error):
        parse_mix(MIX).in_tenants(tenants)


def test_a_comparison_keeps_the_pod_limit_across_tenants():
    big = {"entries": [{"tenant": "t", "name": "x", "count": 300, "gpumem": 1}]}
    with pytest.raises(MixError, match="600 pods in all \\(300 per tenant\\): at most 500"):
        parse_mix(big).in_tenants(["tenant-a", "tenant-b"])


def test_side_by_side_reports_each_tenant_of_the_same_mix():
    lab = capacity_lab(bind_seconds=0.5)
    mix = parse_mix(MIX).in_tenants(["tenant-a", "tenant-b"])
    result = run_capacity(
        parse_spec(lab.spec), mix, factory=lab.factory, clock=lab.clock, run_id="1a2b3c4d",
        settings=RunSettings(wall=lab.wall),
    )  # fmt: skip
    a, b = tenant_summary(result, "tenant-a"), tenant_summary(result, "tenant-b")
    # tenant-a's A100 takes the 30000 MB pod; tenant-b's L4 (23034 MB) cannot.
    assert (a["podsPlaced"], a["didNotFit"], a["cardsUsed"]) == (3, 0, 1)
    assert (b["podsPlaced"], b["didNotFit"], b["cardsUsed"]) == (2, 1, 2)
    assert a["gpuSharing"] == b["gpuSharing"] == "hami"
    lines = side_by_side(result)
    assert lines[1].split() == ["tenant-a", "tenant-b"]
    rows = {line[:18].strip(): line[18:].split() for line in lines[2:]}
    assert rows["pods placed"] == ["3/3", "2/3"]
    assert rows["did not fit"] == ["0", "1"]
    assert rows["cards used"] == ["1", "2"]
    # Each tenant's times from its own first create: tenant-b's pods wait for no tenant-a pod.
    assert a["placementSeconds"]["last"] <= 1.5 and b["placementSeconds"]["last"] <= 1.5


def test_no_table_without_a_comparison():
    lab = capacity_lab()
    result = run_capacity(
        parse_spec(lab.spec), parse_mix(MIX), factory=lab.factory, clock=lab.clock,
        run_id="1a2b3c4d", settings=RunSettings(wall=lab.wall),
    )  # fmt: skip
    assert side_by_side(result) == []


def test_the_cli_compares_and_writes_each_tenant_in_the_json(tmp_path):
    lab = capacity_lab(bind_seconds=0.5)
    (tmp_path / "mix.yaml").write_text(json.dumps(MIX))
    code, text = cli(
        lab, tmp_path, "--mix", str(tmp_path / "mix.yaml"), "--compare", "tenant-a, tenant-b"
    )
    assert code == 0, text
    assert "side by side (each tenant's times from its own first create):" in text
    data = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    assert data["compared"] == ["tenant-a", "tenant-b"]
    assert data["byTenant"]["tenant-b"]["didNotFit"] == 1


def test_compare_without_a_mix_is_a_usage_error(tmp_path, capsys):
    code, _ = cli(capacity_lab(), tmp_path, "--hours", "--compare", "tenant-a,tenant-b")
    assert code == 2
    assert "--compare needs --mix FILE" in capsys.readouterr().err


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_the_claims_the_webhook_made_for_the_runs_pods_are_deleted_with_them():
    server = FakeServer("tenant", FakeClock())
    cl = FakeCluster(server, "tenant")
    claim = {"metadata": {"name": "ns-cap-pod-slice", "namespace": "ns"}}
    server.create_custom("resource.k8s.io", "v1", "resourceclaims", claim, "ns")
    tracker = Tracker([Created(cl, "pod", "cap-pod", "ns")])
    w = Waiting({"t": cl}, {"t": "dra"}, "ns", FakeClock(), {}, 1.0, 0.25, tracker)
    pod = {
        "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": claim["metadata"]["name"]}]}
    }
    w.track_claims("t", {"cap-pod": pod})
    w.track_claims("t", {"cap-pod": pod})  # seen again at the next poll: tracked once
    assert [(i.kind, i.name) for i in tracker.items] == [
        ("pod", "cap-pod"), ("resourceclaim", "ns-cap-pod-slice"),
    ]  # fmt: skip
    assert tracker.cleanup() == []  # the pod already gone (404) is done too
    assert ("resourceclaims", "ns/ns-cap-pod-slice") in server.deleted
    assert not server.list_custom("resource.k8s.io", "v1", "resourceclaims")
