"""Per card: pods on several cards, pods of several containers, and other workloads' pods on the
cards a run uses. What the report gives the run (verdict, stars, slice-hours) and what it shows
of the others (the card table only)."""

from __future__ import annotations

import json

import pytest

from capacity.mix import parse_mix
from capacity.report import terminal_lines, to_json
from capacity.run import PLACED, UNFIT
from labcheck.placement import CardMap
from tests.capacity.hami_fake import WALL0, HamiLab, capacity_lab
from tests.capacity.test_run import NS, cli, nothing_left, run
from tests.support.labcheck_fakes import hami_pod

NODE = "tenant-b-worker-1"
CARD0, CARD1 = f"GPU-{NODE}-0", f"GPU-{NODE}-1"
H = 3600


def neighbour(lab: HamiLab, namespace: str, name: str, allocated: str, hours_ago: int = 2) -> str:
    """Another workload's pod on tenant-b's L4s, placed by HAMi before the run."""
    pod = hami_pod(namespace, name, NODE, allocated)
    pod["metadata"]["annotations"]["hami.io/bind-time"] = str(WALL0 - hours_ago * H)
    lab.tenant("tenant-b").add_placed_pod(pod)
    return f"{namespace}/{name}"


def segments(card: CardMap) -> dict[str, tuple[int, int]]:
    return {s.pod: (s.mem_mb, s.cores) for s in card.segments}


def ours(entry: str, i: int = 0) -> str:
    return f"{NS}/{entry}-{i}"


def multi_card_lab(trainer_hours_ago: int = 2) -> tuple[HamiLab, str, str]:
    """tenant-b with a notebook of two containers on card 0 (bound 2 h ago) and a two-card
    trainer."""
    lab = capacity_lab()
    anna = neighbour(
        lab, "notebooks", "lab-anna", f"{CARD0},NVIDIA,4096,10:;{CARD0},NVIDIA,2048,5:;"
    )
    ddp = neighbour(
        lab,
        "train",
        "ddp",
        f"{CARD0},NVIDIA,6000,20:{CARD1},NVIDIA,6000,20:;",
        hours_ago=trainer_hours_ago,
    )
    return lab, anna, ddp


MULTI_MIX = {
    "entries": [
        {
            "tenant": "tenant-b",
            "name": "pair",
            "gpus": 2,
            "gpumem": 8000,
            "gpucores": 30,
            "count": 1,
            "duration": "1h",
        },
        {"tenant": "tenant-b", "name": "one", "count": 2, "gpumem": 3000, "duration": "2h"},
    ]
}


@pytest.mark.upstream("hami-allocated-annotation-multi-card")
def test_a_two_card_pod_holds_its_whole_slice_on_each_card():
    lab, _, _ = multi_card_lab()
    result = run(lab, parse_mix(MULTI_MIX))
    pair = next(p for p in result.pods if p.planned.entry == "pair")
    assert pair.state == PLACED
    assert {s.uuid: (s.mem_mb, s.cores) for s in pair.slices} == {
        CARD0: (8000, 30),
        CARD1: (8000, 30),
    }
    # Three pods on two cards; without sharing: two cards for the pair, one per single pod.
    assert result.verdict() == "3 pods on 2 cards; whole GPUs would need 4; 0 did not fit"
    report = to_json(result)
    assert (report["wholeGpuBaseline"], report["wholeGpuBaselinePlaced"]) == (4, 4)
    assert report["cardsUsed"] == [CARD0, CARD1]
    # Slice-hours: the pair's 8000 MB and 30 % for its hour on each card, counted once per card
    # but one pod of the tenant.
    hours = result.hours
    assert (hours.by_card[CARD0].mb_hours, hours.by_card[CARD0].core_hours) == (8000, 30)
    assert hours.by_card[CARD0].pods == {ours("pair")}
    assert hours.by_card[CARD1].mb_hours == 8000 + 2 * 3000 * 2
    assert hours.by_card[CARD1].pods == {ours("pair"), ours("one", 0), ours("one", 1)}
    tenant = hours.by_tenant["tenant-b"]
    assert (tenant.mb_hours, tenant.core_hours, len(tenant.pods)) == (28000, 60, 3)
    assert nothing_left(lab)


@pytest.mark.upstream(
    "hami-app-containers-add-up-on-a-card", "hami-allocated-annotation-multi-card"
)
def test_a_pod_s_containers_on_one_card_are_one_segment_and_a_slot_each():
    """lab-anna's two containers on card 0: one segment of 4096 + 2048 MB and 10 + 5 %, and two
    of the card's ten slots; ddp's two cards: a segment on each."""
    lab, anna, ddp = multi_card_lab()
    result = run(lab, parse_mix(MULTI_MIX))
    card0, card1 = result.maps["tenant-b"].cards
    assert segments(card0) == {ours("pair"): (8000, 30), anna: (6144, 15), ddp: (6000, 20)}
    assert segments(card1) == {
        ours("one", 0): (3000, 0),
        ours("one", 1): (3000, 0),
        ours("pair"): (8000, 30),
        ddp: (6000, 20),
    }
    assert (card0.used_mb, card0.used_cores, card0.slots_used) == (
        8000 + 6144 + 6000,
        65,
        1 + 2 + 1,
    )
    assert (card1.used_mb, card1.used_cores, card1.slots_used) == (3000 * 2 + 8000 + 6000, 50, 4)
    table = terminal_lines(result)
    assert table[1] == (
        "tenant-b: 2 card(s) on 1 node(s), 5 pod(s), 40144/46068 MB allocated, largest free "
        "slice 3034 MB"
    )


@pytest.mark.upstream(
    "hami-app-containers-add-up-on-a-card", "hami-allocated-annotation-multi-card"
)
def test_hours_count_each_container_s_slice_and_the_pod_once(tmp_path):
    """`--hours` over the tenants' pods now: a two-container pod adds both slices on its card."""
    # The trainer has run for one hour of the two-hour window, the notebook for both.
    lab, _, _ = multi_card_lab(trainer_hours_ago=1)
    code, _ = cli(lab, tmp_path, "--hours", "--last", "2h")
    assert code == 0
    csv = (tmp_path / "reports" / "capacity-hours.csv").read_text().splitlines()
    assert f"tenant-b,{CARD0},NVIDIA L4,tenant-b/{NODE},18288.0,50.0,2" in csv  # 6144*2 + 6000
    assert f"tenant-b,{CARD1},NVIDIA L4,tenant-b/{NODE},6000.0,20.0,1" in csv
    assert "tenant-b,*,,,24288.0,70.0,2" in csv


def crowded_lab() -> tuple[HamiLab, str]:
    """A notebook already holds 18000 MB and 80 % of card 0 with two containers."""
    lab = capacity_lab()
    anna = neighbour(
        lab, "notebooks", "lab-anna", f"{CARD0},NVIDIA,10000,40:;{CARD0},NVIDIA,8000,40:;"
    )
    return lab, anna


CROWDED_MIX = {
    "entries": [
        {
            "tenant": "tenant-b",
            "name": "small",
            "count": 2,
            "gpumem": 6000,
            "gpucores": 30,
            "duration": "1h",
        },
        {"tenant": "tenant-b", "name": "big", "count": 1, "gpumem": 12000},
    ]
}


def test_other_workloads_are_on_the_cards_but_not_in_the_run_s_verdict_or_hours(tmp_path):
    lab, anna = crowded_lab()
    mix = tmp_path / "mix.yaml"
    mix.write_text(json.dumps(CROWDED_MIX))  # JSON is YAML
    code, text = cli(lab, tmp_path, "--mix", str(mix))
    assert code == 0
    report = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    # The run's: its two small pods, on card 1 only; its big pod did not fit beside the notebook.
    assert report["verdict"] == "2 pods on 1 cards; whole GPUs would need 3; 1 did not fit"
    assert report["cardsUsed"] == [CARD1]
    assert [d["pod"] for d in report["didNotFit"]] == [ours("big")]
    assert "2/2 CardInsufficientMemory" in report["didNotFit"][0]["reason"]
    # The others': on the card table (card 0 not starred), in no verdict and no slice-hour.
    lines = text.splitlines()
    card_lines = [line for line in lines if f"{NODE} #" in line]
    assert card_lines[0].startswith(f"   {NODE} #0 ") and anna in card_lines[0]
    assert card_lines[1].startswith(f" * {NODE} #1 ") and anna not in card_lines[1]
    assert "tenant-b: 2 card(s) on 1 node(s), 3 pod(s), 30000/46068 MB allocated" in text
    cards = report["cards"]["tenant-b"]["cards"]
    assert cards[0]["segments"] == [{"pod": anna, "memMb": 18000, "cores": 80}]
    assert cards[0]["slotsUsed"] == 2
    assert [r for r in report["sliceHours"] if r["tenant"] == "tenant-b" and r["card"] == "*"] == [
        {
            "tenant": "tenant-b",
            "card": "*",
            "type": "",
            "nodes": "",
            "mb_hours": "12000.0",
            "core_pct_hours": "60.0",
            "pods": "2",
        }
    ]
    assert {r["card"] for r in report["sliceHours"]} == {CARD1, "*"}
    csv = (tmp_path / "reports" / "capacity-hours.csv").read_text()
    assert CARD0 not in csv
    # The run removed what it created, never the others' pods.
    assert ("notebooks", "lab-anna") in lab.tenant("tenant-b").pods and nothing_left(lab)
    assert not any("lab-anna" in what for _, what in lab.tenant("tenant-b").deleted)


def test_a_neighbour_in_the_run_s_namespace_is_not_the_run_s():
    """With --namespace the run shares the namespace: its pods are those it named."""
    lab = capacity_lab()
    lab.tenant("tenant-b").namespaces["team-b"] = {"metadata": {"name": "team-b"}}
    notebook = neighbour(lab, "team-b", "notebook", f"{CARD0},NVIDIA,2000,0:;")
    mix = parse_mix(
        {
            "entries": [
                {"tenant": "tenant-b", "name": "llm", "count": 1, "gpumem": 8000, "duration": "1h"}
            ]
        }
    )
    result = run(lab, mix, namespace="team-b")
    assert [p.state for p in result.pods] == [PLACED] and result.count(UNFIT) == 0
    run_pod = "team-b/cap-1a2b3c4d-llm-0"
    assert result.cards_used() == [CARD1]  # spread: the idle card
    assert segments(result.maps["tenant-b"].cards[0]) == {notebook: (2000, 0)}
    hours = result.hours.by_tenant["tenant-b"]
    assert (hours.pods, hours.mb_hours) == ({run_pod}, 8000.0)
    assert ("team-b", "notebook") in lab.tenant("tenant-b").pods
    assert ("team-b", "cap-1a2b3c4d-llm-0") not in lab.tenant("tenant-b").pods
