"""Slice-hours from what HAMi records on the pods (pure accounting)."""

from __future__ import annotations

import json

import pytest

from capacity.hours import (
    Holding,
    card_infos,
    holdings,
    lifetime,
    slice_hours,
    table,
    to_csv,
)
from capacity.records import bind_time, is_placed, unfit_message
from capacity.views import HAMI
from tests.capacity.hami_fake import WALL0

H = 3600


def pod(name, slices, bound=WALL0, phase="Running", ns="team", finished=None, bind="success"):
    """A pod as HAMi v2.10.0 leaves it (scheduler.go Filter and Bind)."""
    ann = {
        "hami.io/vgpu-node": "w1",
        "hami.io/vgpu-time": str(bound),
        "hami.io/vgpu-devices-allocated": slices,
        "hami.io/bind-phase": bind,
    }
    if bound is not None:
        ann["hami.io/bind-time"] = str(bound)
    status = {"phase": phase}
    if finished:
        status["containerStatuses"] = [
            {"name": "c", "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}
        ]
    return {
        "metadata": {"namespace": ns, "name": name, "annotations": ann},
        "spec": {"nodeName": "w1"},
        "status": status,
    }


def node(name, cards):
    reg = [
        {"id": uid, "index": i, "count": 10, "devmem": mem, "devcore": 100, "type": kind}
        for i, (uid, kind, mem) in enumerate(cards)
    ]
    return {
        "metadata": {"name": name, "annotations": {"hami.io/node-nvidia-register": json.dumps(reg)}}
    }


@pytest.mark.upstream("hami-bind-time-annotation")
def test_bind_time_is_unix_seconds_and_counts_only_a_successful_bind():
    """Bind writes `hami.io/bind-time` (strconv.FormatInt(time.Now().Unix(), 10)) together with
    bind-phase allocating; the slices are the pod's once the phase is success."""
    p = pod("a", "GPU-1,NVIDIA,4000,25:;", bound=WALL0)
    assert bind_time(p) == WALL0 and is_placed(p)
    assert lifetime(p, WALL0 + 2 * H) == (WALL0, WALL0 + 2 * H)
    allocating = pod("b", "GPU-1,NVIDIA,4000,25:;", bind="allocating")
    assert not is_placed(allocating)
    assert lifetime(allocating, WALL0 + H) == "not bound with bind-phase success"
    assert lifetime(pod("c", "GPU-1,NVIDIA,1,0:;", bound=None), WALL0) == "no hami.io/bind-time"
    garbage = pod("d", "GPU-1,NVIDIA,1,0:;")
    garbage["metadata"]["annotations"]["hami.io/bind-time"] = "2026-09-01T00:00:00Z"
    assert bind_time(garbage) is None


def test_an_ended_pod_holds_its_slices_until_its_containers_finished():
    done = pod("a", "GPU-1,NVIDIA,4000,25:;", phase="Succeeded", finished="2026-09-01T01:30:00Z")
    assert lifetime(done, WALL0 + 10 * H) == (WALL0, WALL0 + 1.5 * H)
    lost = pod("b", "GPU-1,NVIDIA,4000,25:;", phase="Failed")
    assert lifetime(lost, WALL0 + H) == "ended, but no container finishedAt"
    # The mix's duration wins over what the pod lived (a capacity run deletes its pods at once).
    assert lifetime(pod("c", "GPU-1,NVIDIA,1,0:;"), WALL0 + 60, duration=8 * H) == (
        WALL0,
        WALL0 + 8 * H,
    )


@pytest.mark.upstream("hami-allocated-annotation-multi-card")
def test_a_two_card_pod_counts_on_both_cards_and_the_window_clips():
    pods = [
        pod("two", "GPU-1,NVIDIA,8000,50:GPU-2,NVIDIA,8000,50:;", bound=WALL0 - H),
        pod("one", "GPU-1,NVIDIA,2000,0:;", bound=WALL0 + H),
        {"metadata": {"namespace": "x", "name": "cpu-only", "annotations": {}}, "status": {}},
    ]
    held, notes = holdings("tenant-b", pods, now=WALL0 + 3 * H)
    assert notes == []
    assert [(h.pod, h.uuid, h.mem_mb) for h in held] == [
        ("team/one", "GPU-1", 2000),
        ("team/two", "GPU-1", 8000),
        ("team/two", "GPU-2", 8000),
    ]
    report = slice_hours(held, since=WALL0, until=WALL0 + 2 * H)  # "two" started before
    assert report.by_card["GPU-1"].mb_hours == 8000 * 2 + 2000 * 1
    assert report.by_card["GPU-2"].core_hours == 50 * 2
    tenant = report.by_tenant["tenant-b"]
    assert (tenant.mb_hours, tenant.core_hours, tenant.pods) == (
        34000,
        200,
        {"team/one", "team/two"},
    )


def test_pods_outside_the_window_or_without_hami_records_are_left_out_with_a_note():
    pods = [
        pod(
            "early",
            "GPU-1,NVIDIA,1000,0:;",
            phase="Succeeded",
            finished="2026-08-31T12:00:00Z",
            bound=WALL0 - 24 * H,
        ),
        pod("pending", "GPU-1,NVIDIA,1000,0:;", bind="allocating"),
    ]
    held, notes = holdings("tenant-a", pods, now=WALL0 + H)
    assert notes == ["tenant-a: team/pending: not bound with bind-phase success"]
    report = slice_hours(held, since=WALL0, until=WALL0 + H, notes=notes)
    assert report.by_tenant == {} and report.notes == notes


def test_tenants_sharing_one_physical_card_add_up_by_uuid():
    """Two tenants whose workers register the same card UUID (one physical GPU passed to both)."""
    shared = ("GPU-7f3a", "NVIDIA L4", 23034)
    nodes = {
        "tenant-a": [node("tenant-a-worker-1", [shared])],
        "tenant-b": [node("tenant-b-worker-1", [shared, ("GPU-own", "NVIDIA L4", 23034)])],
    }
    cards = card_infos({t: HAMI.cards(n) for t, n in nodes.items()})
    assert cards["GPU-7f3a"].where == ("tenant-a/tenant-a-worker-1", "tenant-b/tenant-b-worker-1")
    held = [
        Holding("tenant-a", "a/x", "GPU-7f3a", 6000, 30, WALL0, WALL0 + 2 * H),
        Holding("tenant-b", "b/y", "GPU-7f3a", 4000, 20, WALL0, WALL0 + H),
        Holding("tenant-b", "b/z", "GPU-own", 1000, 0, WALL0, WALL0 + H),
    ]
    report = slice_hours(held, WALL0, WALL0 + 2 * H, cards)
    assert report.by_card["GPU-7f3a"].mb_hours == 6000 * 2 + 4000
    assert report.by_card["GPU-7f3a"].core_hours == 30 * 2 + 20
    assert report.by_tenant["tenant-b"].mb_hours == 4000 + 1000
    assert to_csv(report).splitlines() == [
        "tenant,card,type,nodes,mb_hours,core_pct_hours,pods",
        "tenant-a,GPU-7f3a,NVIDIA L4,tenant-a/tenant-a-worker-1 tenant-b/tenant-b-worker-1,"
        "12000.0,60.0,1",
        "tenant-b,GPU-7f3a,NVIDIA L4,tenant-a/tenant-a-worker-1 tenant-b/tenant-b-worker-1,"
        "4000.0,20.0,1",
        "tenant-b,GPU-own,NVIDIA L4,tenant-b/tenant-b-worker-1,1000.0,0.0,1",
        "tenant-a,*,,,12000.0,60.0,1",
        "tenant-b,*,,,5000.0,20.0,2",
        "*,GPU-7f3a,NVIDIA L4,tenant-a/tenant-a-worker-1 tenant-b/tenant-b-worker-1,16000.0,80.0,2",
        "*,GPU-own,NVIDIA L4,tenant-b/tenant-b-worker-1,1000.0,0.0,1",
    ]
    lines = table(report)
    assert lines[0] == (
        "slice-hours 2026-09-01T00:00:00+00:00 .. 2026-09-01T02:00:00+00:00 (2.00 h), "
        "allocated (not measured use)"
    )
    assert (
        "shared card GPU-7f3a: tenant-a/tenant-a-worker-1, tenant-b/tenant-b-worker-1 "
        "(summed by UUID)" in lines
    )


@pytest.mark.upstream("hami-filter-reasons")
@pytest.mark.parametrize(
    ("message", "unfit"),
    [
        ("0/1 nodes are available: 1 2/2 CardInsufficientMemory. preemption: ...", True),
        ("0/1 nodes are available: 1 NodeInsufficientDevice. preemption: ...", True),
        ("0/1 nodes are available: 1 1/1 CardComputeUnitsExhausted. preemption: ...", True),
        ("0/1 nodes are available: 1 1/1 ExclusiveDeviceAllocateConflict. preemption: ...", True),
        ("0/1 nodes are available: 1 node unregistered. preemption: ...", False),
        ("0/1 nodes are available: 1 Insufficient cpu. preemption: ...", False),
    ],
)
def test_a_pod_did_not_fit_when_hami_s_filter_names_a_card_reason(message, unfit):
    p = {
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": message}]}
    }
    assert bool(unfit_message(p)) is unfit
