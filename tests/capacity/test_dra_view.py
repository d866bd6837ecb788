"""capacity's reading of a DRA tenant, on objects as the real kube-apiserver v1.36.3 returned
them (tests/capacity/data/dra-two-l4.json: two of the lab's pods placed on one L4, one too large
for any card; recorded from the real tier's side-by-side fixtures)."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path

import pytest

from capacity.hours import card_infos, holdings
from capacity.views import HAMI, DraView
from labcheck.hami import Slice

DATA = json.loads((Path(__file__).parent / "data" / "dra-two-l4.json").read_text())
WORKER = "tenant-b-dra-worker-1"


def view(claims=None, slices=None) -> DraView:
    return DraView(
        copy.deepcopy(DATA["claims"] if claims is None else claims),
        copy.deepcopy(DATA["slices"] if slices is None else slices),
    )


def pod(name: str) -> dict:
    return copy.deepcopy(next(p for p in DATA["pods"] if p["metadata"]["name"] == name))


def card_uuid(index: int) -> str:
    device = DATA["slices"][0]["spec"]["devices"][index]
    return device["attributes"]["uuid"]["string"]


@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_a_placed_pod_holds_the_share_its_claim_was_allocated():
    v = view()
    assert v.placed(pod("llm-0"))
    # consumedCapacity "8000Mi" and "25" on gpu-0: MiB as HAMi counts MB, cores in percent.
    assert v.slices(pod("llm-0")) == [Slice(card_uuid(0), 8000, 25)]


def test_a_pod_whose_claim_is_not_allocated_is_not_placed_even_if_bound():
    bound = pod("too-big-0")
    bound["spec"]["nodeName"] = WORKER
    assert not view().placed(bound)
    assert not view(claims=[]).placed(pod("llm-0"))  # its claim not read: not placed yet


@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_the_schedulers_refusal_is_a_verdict_when_no_card_has_room():
    v = view()
    assert v.room_for(pod("too-big-0")) == []  # 30000 MiB asked, an L4 has 23034
    assert "cannot allocate all claims" in v.unfit(pod("too-big-0"))
    assert v.unfit(pod("llm-0")) == ""


def test_the_same_refusal_with_a_card_that_has_room_is_a_wait_not_a_verdict():
    """kube-scheduler left a pod of a burst "cannot allocate all claims" with room on the card
    (docs/hami-and-dra.md): capacity keeps such a pod pending instead of judging the cards."""
    small = pod("too-big-0")
    claims = copy.deepcopy(DATA["claims"])
    mine = next(c for c in claims if c["metadata"]["name"] == "team-too-big-0-slice")
    mine["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = (
        "1048576k"  # 1000 MiB, in the form the API server writes
    )
    v = view(claims=claims)
    assert v.room_for(small) == [f"{WORKER}/gpu-0", f"{WORKER}/gpu-1"]
    assert v.unfit(small) == ""
    assert v.waiting(small).endswith(
        f"(yet {WORKER}/gpu-0, {WORKER}/gpu-1 have room: kube-scheduler tries the pod again "
        "when a claim or slice changes)"
    )
    assert v.waiting(pod("too-big-0")).startswith("Unschedulable: 0/1 nodes are available")


@pytest.mark.upstream("kube-quantity-canonical-form")
def test_room_counts_every_allocated_claim_memory_and_cores():
    claims = copy.deepcopy(DATA["claims"])
    # The two placed claims hold 16000 MiB and 50 % of gpu-0; ask for what is left and one more.
    mine = next(c for c in claims if c["metadata"]["name"] == "team-too-big-0-slice")
    asks = mine["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]
    asks.update(memory=f"{(23034 - 16000) * 2**20}", cores="50")
    assert view(claims=claims).room_for(pod("too-big-0")) == [f"{WORKER}/gpu-0", f"{WORKER}/gpu-1"]
    asks.update(cores="51")
    assert view(claims=claims).room_for(pod("too-big-0")) == [f"{WORKER}/gpu-1"]


def test_the_cards_map_shows_each_pods_share_and_what_is_left():
    v = view()
    (m,) = [v.tenant_map("tenant-b-dra", [], DATA["pods"])]
    first, second = m.cards
    assert (first.id, first.type, first.devmem, first.devcore) == (
        card_uuid(0),
        "NVIDIA L4",
        23034,
        100,
    )
    assert [(s.pod, s.mem_mb, s.cores) for s in first.segments] == [
        ("team/llm-0", 8000, 25),
        ("team/llm-1", 8000, 25),
    ]
    assert (first.used_mb, first.used_cores, first.largest_free_mb) == (16000, 50, 7034)
    assert first.count == 0 and first.no_room == ""  # a DRA device has no slot count
    assert (second.used_mb, second.segments) == (0, ())


def test_the_cards_are_the_drivers_devices_by_uuid():
    cards = card_infos({"tenant-b-dra": view().cards([])})
    assert sorted(cards) == sorted([card_uuid(0), card_uuid(1)])
    assert cards[card_uuid(0)].where == (f"tenant-b-dra/{WORKER}",)
    assert HAMI.cards([]) == []


def test_slice_hours_run_from_the_pods_scheduled_time():
    scheduled = next(
        c["lastTransitionTime"]
        for c in pod("llm-0")["status"]["conditions"]
        if c["type"] == "PodScheduled"
    )
    start = datetime.fromisoformat(scheduled.replace("Z", "+00:00")).timestamp()
    held, notes = holdings("tenant-b-dra", DATA["pods"], start + 3600, view=view())
    assert {(h.pod, h.mem_mb, h.cores, h.start, h.end) for h in held} == {
        ("team/llm-0", 8000, 25, start, start + 3600),
        ("team/llm-1", 8000, 25, start, start + 3600),
    }
    assert notes == ["tenant-b-dra: team/too-big-0: not bound with its claims allocated"]


def test_a_hami_pod_is_not_counted_in_a_dra_tenant_and_the_reverse():
    hami_pod = {"metadata": {"name": "x", "namespace": "team", "annotations": {}}, "spec": {}}
    assert not view().asks(hami_pod)
    assert not HAMI.asks(pod("llm-0"))


@pytest.mark.upstream("hami-dra-webhook-claim")
def test_a_percentage_the_webhook_left_on_the_pod_is_a_verdict():
    p = pod("llm-0")
    del p["spec"]["nodeName"]
    p["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpumem-percentage": "50"}
    message = (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpumem-percentage. still not "
        "schedulable, preemption: 0/1 nodes are available: 1 Preemption is not helpful."
    )
    p["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    claims = [c for c in DATA["claims"] if c["metadata"]["name"] != "team-llm-0-slice"]
    assert view(claims=claims).unfit(p) == (
        f"{message} (HAMi-DRA's webhook leaves nvidia.com/gpumem-percentage on the pod)"
    )
