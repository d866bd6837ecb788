"""A capacity run without `--timeout` waits the budget docs/capacity.md gives: 5 s per pod of the
mix, at least 60 s (labcheck's burst budget). HAMi's node lock binds one pod per node at a time:
the fake binds one every `bind_seconds`, so the last of N pods is bound (N - 1) * bind_seconds
after the first create, and it is placed or pending by that budget."""

from __future__ import annotations

import json

import pytest

from tests.capacity.hami_fake import capacity_lab
from tests.capacity.test_run import cli, nothing_left


@pytest.mark.parametrize(
    ("count", "bind_seconds", "pending"),
    [
        (20, 5.0, 0),  # the last bound at 95 s: in 20 * 5 = 100 s
        (20, 5.5, 1),  # at 104.5 s: after it
        (4, 15.0, 0),  # at 45 s: in 60 s, the least a run waits, though 4 * 5 is 20 s
        (4, 21.0, 1),  # at 63 s: after it
    ],
)
def test_a_run_without_a_timeout_waits_5_s_a_pod_and_at_least_60_s(
    tmp_path, count, bind_seconds, pending
):
    lab = capacity_lab(bind_seconds=bind_seconds)
    mix = tmp_path / "mix.yaml"
    # tenant-b's one node: two L4 of 10 slots each, room for 20 such pods.
    mix.write_text(f"entries:\n  - {{tenant: tenant-b, name: x, count: {count}, gpumem: 1}}\n")
    code, text = cli(lab, tmp_path, "--mix", str(mix))
    report = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    assert len(report["stillPending"]) == pending, text
    assert report["podsPlaced"] == count - pending
    assert code == (1 if pending else 0)
    assert nothing_left(lab)
