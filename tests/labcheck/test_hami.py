"""HAMi annotation parsing and the placement predictor (lab-facts 6.2 / 6.3)."""

from __future__ import annotations

import json

import pytest

from labcheck.hami import (
    CardState,
    Slice,
    apply_usage,
    is_hami_reason,
    parse_allocated,
    parse_register,
    pending_reason,
    pick_card,
    predict,
    quantity_int,
)


def cards(n=2, devmem=23034, count=10):
    return [CardState(f"GPU-{i}", "NVIDIA L4", devmem, 100, count) for i in range(n)]


def test_parse_allocated_devices_and_containers():
    assert parse_allocated("GPU-a,NVIDIA,1024,25:;") == [[Slice("GPU-a", 1024, 25)]]
    two = parse_allocated("GPU-a,NVIDIA,10,0:GPU-b,NVIDIA,20,5:;GPU-c,NVIDIA,30,0:;")
    assert two == [[Slice("GPU-a", 10, 0), Slice("GPU-b", 20, 5)], [Slice("GPU-c", 30, 0)]]
    assert parse_allocated("") == [] and parse_allocated(";;") == []
    assert parse_allocated("garbage") == []


def test_parse_register_json_array():
    raw = json.dumps(
        [
            {
                "id": "GPU-1",
                "index": 0,
                "count": 10,
                "devmem": 81920,
                "devcore": 100,
                "type": "NVIDIA A100",
                "health": True,
            }
        ]
    )
    (c,) = parse_register(raw)
    assert (c.id, c.devmem, c.count) == ("GPU-1", 81920, 10)
    with pytest.raises(ValueError):
        parse_register('{"not": "a list"}')


def test_spread_uses_least_used_card_and_ties_go_to_last_listed():
    assert predict(cards(), [(1000, 0), (1000, 0)], "spread").cards == ["GPU-1", "GPU-0"]


def test_binpack_stacks_on_most_used_card():
    assert predict(cards(), [(1000, 0), (1000, 0), (1000, 0)], "binpack").cards == [
        "GPU-1",
        "GPU-1",
        "GPU-1",
    ]


def test_fit_rules():
    c = cards(1, devmem=1000, count=2)
    assert pick_card(c, 1001, 0, "spread") is None  # memory
    c[0].take(100, 100)
    assert pick_card(c, 10, 0, "spread") is None  # 0-core request on a card at 100% cores
    c = cards(1)
    c[0].take(10, 10)
    assert pick_card(c, 10, 100, "spread") is None  # whole-card cores need an idle card
    c = cards(1, count=1)
    c[0].take(1, 0)
    assert pick_card(c, 1, 0, "binpack") is None  # split count exhausted


def test_apply_usage_counts_only_live_pods_on_the_node():
    cs = cards()
    live = {
        "metadata": {
            "annotations": {
                "hami.io/vgpu-node": "n1",
                "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,500,10:;",
            }
        },
        "status": {"phase": "Running"},
    }
    done = json.loads(json.dumps(live))
    done["status"]["phase"] = "Succeeded"
    other = json.loads(json.dumps(live))
    other["metadata"]["annotations"]["hami.io/vgpu-node"] = "n2"
    apply_usage(cs, [live, done, other], "n1")
    assert (cs[0].used, cs[0].usedmem, cs[0].usedcores) == (1, 500, 10)
    assert cs[1].used == 0


def test_pending_reason_from_conditions_and_events():
    pod = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/1 nodes are available: 1 NodeUnfitPod",
                }
            ]
        }
    }
    text = pending_reason(pod, [{"reason": "FilteringFailed", "message": "CardInsufficientMemory"}])
    assert "NodeUnfitPod" in text and "FilteringFailed" in text and is_hami_reason(text)
    assert not is_hami_reason("0/1 nodes are available: 1 Insufficient cpu")


def test_quantity_int():
    assert quantity_int("10") == 10 and quantity_int(20) == 20 and quantity_int("2k") == 2000
