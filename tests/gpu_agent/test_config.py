"""Config parsing and the HAMi wire-format helpers."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_agent import Card, ConfigError, config, hami, load_config, parse_config

A100 = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}


def test_parse_defaults_and_count_override():
    cfg = parse_config(
        {"splitCount": 10, "resyncSeconds": 2, "nodes": {"w1": [A100, {**A100, "count": 4}]}}
    )
    assert cfg.nodes["w1"] == (
        Card("NVIDIA A100-SXM4-80GB", 81920, 100, 10),
        Card("NVIDIA A100-SXM4-80GB", 81920, 100, 4),
    )
    assert cfg.resync_seconds == 2.0 and cfg.busy_resync_seconds == 0.5
    assert cfg.node_labels == {"gpu": "on"}


def test_devcore_defaults_to_whole_card():
    cfg = parse_config({"nodes": {"w1": [{"type": "NVIDIA L4", "devmem": 23034}]}})
    assert cfg.nodes["w1"][0].devcore == 100 and cfg.split_count == 10


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([], "config: expected a JSON object"),
        ({"nodes": {}}, "nodes: expected a non-empty object"),
        ({"nodes": {"w1": []}}, r"nodes\.w1: expected a non-empty list"),
        # HAMi types start with NVIDIA
        ({"nodes": {"w1": [{**A100, "type": "A100"}]}}, r"nodes\.w1\[0\]\.type: must be"),
        ({"nodes": {"w1": [{**A100, "devmem": 0}]}}, r"nodes\.w1\[0\]\.devmem: expected an int"),
        ({"nodes": {"w1": [{**A100, "devmem": "81920"}]}}, r"\.devmem: .* got '81920'"),
        ({"nodes": {"w1": [{**A100, "count": True}]}}, r"nodes\.w1\[0\]\.count: .* got True"),
        ({"nodes": {"w1": [{**A100, "devmen": 1}]}}, r"unknown key\(s\) \['devmen'\]"),  # typo
        ({"nodes": {"w1": [A100]}, "splitcount": 10}, r"config: unknown key\(s\) \['splitcount'\]"),
        ({"nodes": {"w1": [A100]}, "splitCount": 0}, "splitCount: expected an integer >= 1"),
        ({"nodes": {"w1": [A100]}, "resyncSeconds": -1}, "resyncSeconds: expected a positive"),
        ({"nodes": {"w1": [A100]}, "nodeLabels": {"gpu": 1}}, "nodeLabels: expected an object"),
        (
            {"nodes": {"w1": [A100]}, "requeueAfterRegisterSeconds": -1},
            "requeueAfterRegisterSeconds: expected a number of seconds >= 0, got -1",
        ),
    ],
)
def test_bad_config_is_rejected(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_requeue_delay_defaults_to_hami_tick_plus_margin_and_can_be_off():
    assert parse_config({"nodes": {"w1": [A100]}}).requeue_after_register_seconds == 17.0
    off = parse_config({"nodes": {"w1": [A100]}, "requeueAfterRegisterSeconds": 0})
    assert off.requeue_after_register_seconds == 0.0


def test_load_from_env_and_file(tmp_path):
    text = json.dumps({"nodes": {"w1": [A100]}})
    assert load_config({"GPU_AGENT_CONFIG": text}).nodes["w1"][0].devmem == 81920
    path = tmp_path / "c.json"
    path.write_text(text)
    assert "w1" in load_config({"GPU_AGENT_CONFIG_FILE": str(path)}).nodes


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "set GPU_AGENT_CONFIG \\(JSON\\) or GPU_AGENT_CONFIG_FILE \\(path\\)"),
        ({"GPU_AGENT_CONFIG": "{nope"}, "config is not valid JSON"),
        (
            {"GPU_AGENT_CONFIG_FILE": "/nonexistent/c.json"},
            "GPU_AGENT_CONFIG_FILE=/nonexistent/c.json",
        ),
    ],
)
def test_load_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env)


def test_card_ids_are_stable_and_distinct():
    # Pinned values, not a second call (that would only hit the cache): a changed id after an
    # upgrade would orphan the scheduler's accounting of every running allocation.
    assert hami.card_id("w1", 0) == "GPU-5a14291b-51d6-5b01-8d56-d97692a869d5"
    assert hami.card_id("w1", 1) == "GPU-5d83ca06-f239-5738-92ba-2db0b177be6c"
    assert hami.card_id.__wrapped__("w1", 0) == hami.card_id("w1", 0)  # the cache adds nothing
    ids = {hami.card_id(n, i) for n in ("w1", "w2") for i in range(4)}
    assert len(ids) == 8
    assert all(i.startswith("GPU-") and len(i) == 40 for i in ids)


def test_register_annotation_fields():
    cards = hami.register_cards("w1", [Card("NVIDIA L4", 23034, 100, 4)])
    assert cards == [
        {
            "id": hami.card_id("w1", 0),
            "index": 0,
            "count": 4,
            "devmem": 23034,
            "devcore": 100,
            "type": "NVIDIA L4",
            "numa": 0,
            "mode": "hami-core",
            "health": True,
        }
    ]
    encoded = hami.encode_register(cards)
    assert " " not in encoded.replace("NVIDIA L4", "")
    assert hami.decode_register(encoded) == cards
    assert hami.decode_register("GPU-x,10,81920,100,NVIDIA,0,true:") is None  # <= 2.7 CSV


@pytest.mark.parametrize(
    ("value", "erased"),
    [
        ("GPU-a,NVIDIA,1024,10:;", ";;"),  # one container
        ("GPU-a,NVIDIA,1024,10:GPU-b,NVIDIA,1024,10:;", ";;"),  # one container, two cards
        ("GPU-a,NVIDIA,1024,10:;GPU-b,NVIDIA,2048,20:;", ";;;"),  # two containers
        (";GPU-a,NVIDIA,1024,10:;", ";;;"),  # init container without GPU first
    ],
)
def test_erase_to_allocate(value, erased):
    assert hami.erase_to_allocate(value) == erased
    # Like upstream's re-encoding, erasing is not idempotent (';;' -> ';;;'): the agent
    # only erases values that still need allocation.
    assert hami.needs_allocation(value) and not hami.needs_allocation(erased)


def test_lock_parsing_and_ownership():
    lock = "2026-11-30T10:00:00Z,team-a,p1"
    assert hami.lock_owner(lock) == ("team-a", "p1")
    assert hami.lock_owner("2026-11-30T10:00:00Z") is None  # legacy, no owner
    assert hami.lock_owner("a,b,c,d") is None
    assert hami.owns_lock(lock, "team-a", "p1")
    assert not hami.owns_lock(lock, "team-a", "1")
    assert not hami.owns_lock("2026-11-30T10:00:00Z,team-a,xp1", "team-a", "p1")
    assert not hami.owns_lock("2026-11-30T10:00:00Z,xteam-a,p1", "team-a", "p1")


def test_help_says_where_the_config_comes_from_with_an_example_that_loads():
    """Issue 17 item 9: `python -m gpu_agent --help` never named GPU_AGENT_CONFIG, the agent's
    only source of config. The example it shows loads, and it names every key but the
    deprecated one."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    help_text = subprocess.run(
        [sys.executable, "-m", "gpu_agent", "--help"],
        cwd=Path(config.__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert re.search(r"^  GPU_AGENT_CONFIG +the config as JSON text", help_text, re.M)
    assert re.search(r"^  GPU_AGENT_CONFIG_FILE +the path of a JSON file", help_text, re.M)
    example = re.search(r"e\.g\. GPU_AGENT_CONFIG='(.+)'$", help_text, re.M)
    assert example, help_text
    assert load_config({"GPU_AGENT_CONFIG": example[1]}).nodes["w1"][0].devmem == 23034
    keys = re.search(r"keys: (.+?); see docs/gpu-agent\.md", help_text, re.S)
    assert keys, help_text
    named = set(re.findall(r"\b([a-z][A-Za-z]+)\b(?![^{]*})", keys[1])) & config._TOP_KEYS
    assert named == config._TOP_KEYS - {"busyResyncSeconds"}
