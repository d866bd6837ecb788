"""A capacity run that ends with pods still pending: what the table, the JSON and the verdict
say of them, and the exit code (docs/capacity.md: 1 when some were still pending)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capacity.mix import parse_mix
from capacity.run import PENDING, PLACED, UNFIT
from tests.capacity.hami_fake import HamiLab, capacity_lab
from tests.capacity.test_run import NS, cli, nothing_left, run

# Three small pods on tenant-a's one node, which HAMi binds one per 10 s (its node lock), and
# one 30000 MB pod no L4 of tenant-b can hold.
MIX_YAML = """name: pending
entries:
  - {tenant: tenant-a, name: small, count: 3, gpumem: 1000}
  - {tenant: tenant-b, name: too-big, count: 1, gpumem: 30000}
"""


def lock_bound_lab() -> HamiLab:
    return capacity_lab(bind_seconds=10)


def run_cli(tmp_path: Path, lab: HamiLab, timeout: str) -> tuple[int, str, dict]:
    mix = tmp_path / "mix.yaml"
    mix.write_text(MIX_YAML)
    code, text = cli(lab, tmp_path, "--mix", str(mix), "--timeout", timeout)
    report = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    return code, text, report


@pytest.mark.parametrize(("timeout", "code"), [("15", 1), ("25", 0)])
def test_the_exit_code_is_1_only_when_pods_are_still_pending(tmp_path, timeout, code):
    """The third small pod is bound at 20 s: pending at a 15 s timeout, placed by 25 s. The pod
    that did not fit is a verdict and fails neither run."""
    lab = lock_bound_lab()
    got, _, report = run_cli(tmp_path, lab, timeout)
    assert got == code
    assert len(report["stillPending"]) == (1 if code else 0)
    assert [d["pod"] for d in report["didNotFit"]] == [f"{NS}/too-big-0"]
    assert nothing_left(lab)


def test_the_report_lists_a_pending_pod_apart_from_those_that_did_not_fit(tmp_path):
    code, text, report = run_cli(tmp_path, lock_bound_lab(), "15")
    assert code == 1
    lines = text.splitlines()
    verdict = "2 pods on 1 cards; whole GPUs would need 4; 1 did not fit; 1 still pending"
    assert verdict in lines and report["verdict"] == verdict
    pending_pod = f"{NS}/small-2"
    assert f"pending: tenant-a {pending_pod}: no scheduling verdict yet" in lines
    assert not any(line.startswith("did not fit:") and pending_pod in line for line in lines)
    assert report["stillPending"] == [
        {"tenant": "tenant-a", "pod": pending_pod, "reason": "no scheduling verdict yet"}
    ]
    assert pending_pod not in [d["pod"] for d in report["didNotFit"]]
    assert report["podsPlaced"] == 2 and report["wholeGpuBaselinePlaced"] == 2
    states = {p["pod"]: (p["state"], p["slices"]) for p in report["pods"]}
    assert states[pending_pod] == (PENDING, [])


def test_placement_times_do_not_claim_all_settled_while_pods_are_pending(tmp_path):
    """Placed at 0 s and 10 s: median 5 s, last 10 s; the third never settled."""
    _, text, report = run_cli(tmp_path, lock_bound_lab(), "15")
    placement = next(line for line in text.splitlines() if line.startswith("placement:"))
    assert placement == (
        "placement: median 5.0 s, last 10.0 s after the first create; "
        "1 still pending at the timeout"
    )
    assert report["placementSeconds"] == {"allSettled": None, "median": 5.0, "last": 10.0}


def test_with_every_pod_settled_the_times_end_with_the_last_verdict(tmp_path):
    _, text, report = run_cli(tmp_path, lock_bound_lab(), "25")
    assert "placement: median 10.0 s, last 20.0 s after the first create; all settled after " in (
        text
    )
    assert report["placementSeconds"] == {"allSettled": 20.0, "median": 10.0, "last": 20.0}


@pytest.mark.upstream(
    "hami-registration-read-on-add-and-tick", "kube-scheduler-extender-failed-node-message"
)
def test_a_node_hami_has_not_read_keeps_its_pods_pending_with_hami_s_words(tmp_path):
    """`node unregistered` says nothing about the cards: pending, reported with that reason, and
    the run fails (exit 1) instead of calling the mix unfit."""
    lab = capacity_lab()
    lab.tenant("tenant-b").knobs.registration_read_at = 1000.0
    mix = tmp_path / "mix.yaml"
    mix.write_text("entries:\n  - {tenant: tenant-b, name: llm, count: 2, gpumem: 8000}\n")
    code, text = cli(lab, tmp_path, "--mix", str(mix), "--timeout", "30")
    assert code == 1
    report = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    assert report["verdict"] == (
        "0 pods on 0 cards; whole GPUs would need 2; 0 did not fit; 2 still pending"
    )
    assert report["didNotFit"] == [] and report["cardsUsed"] == []
    for pending in report["stillPending"]:
        assert pending["reason"].startswith(
            "Unschedulable: 0/1 nodes are available: 1 node unregistered."
        )
    assert not any(line.startswith("placement:") for line in text.splitlines())
    assert nothing_left(lab)


def test_a_pod_hami_binds_after_the_wait_ended_is_not_the_run_s_in_the_hours():
    """The verdict was taken at the timeout; a pod HAMi binds while the run reads the cards is
    still pending there, so its slices are not the run's slice-hours either."""
    lab = lock_bound_lab()
    reads = []

    def slow_final_read(name: str, args: tuple) -> None:
        if name == "list_nodes":
            reads.append(name)
            if len(reads) == 2:  # the snapshot's read, after the wait
                lab.clock.sleep(10)

    lab.tenant("tenant-a").hook = slow_final_read
    mix = parse_mix(
        {
            "entries": [
                {
                    "tenant": "tenant-a",
                    "name": "small",
                    "count": 2,
                    "gpumem": 1000,
                    "duration": "1h",
                }
            ]
        }
    )
    result = run(lab, mix, timeout=5)
    assert [p.state for p in result.pods] == [PLACED, PENDING]
    # HAMi holds both slices now, and the card table shows what HAMi holds ...
    assert len(result.maps["tenant-a"].cards[0].segments) == 2
    # ... but the run's slice-hours are its placed pod's only.
    hours = result.hours.by_tenant["tenant-a"]
    assert (hours.pods, hours.mb_hours) == ({f"{NS}/small-0"}, 1000.0)
    assert result.count(UNFIT) == 0 and nothing_left(lab)
