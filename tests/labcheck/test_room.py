"""GPU checks beside the user's own GPU pods: run where their pods fit, skipped naming the
holders where they do not, and never skipped for labcheck's own leftovers."""

from __future__ import annotations

from labcheck import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from labcheck.checks.room import Ask, all_placed, ask_of, holders
from labcheck.hami import CardState
from labcheck.objects import gpu_pod
from labcheck.result import Status
from tests.support.labcheck_fakes import hami_pod, run_lab, standard_lab

A_NODE, B_NODE = "tenant-a-worker-1", "tenant-b-worker-1"


def _fill_the_a100(lab, pods=4):
    """What the README's examples 1 and 2 leave on tenant-a: the A100's memory all taken."""
    share = 81920 // pods
    for i in range(pods):
        lab.tenant("tenant-a").add_placed_pod(
            hami_pod("gpu-workloads", f"ex-{i}", A_NODE, f"GPU-{A_NODE}-0,NVIDIA,{share},25:;")
        )


def test_a_full_card_held_by_the_users_pods_skips_the_check_naming_them():
    lab = standard_lab()
    _fill_the_a100(lab)
    out, r = run_lab(lab)
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.SKIP
    # What to do comes first: the report's table cuts the evidence at its width.
    assert res.evidence.startswith("4 GPU pod(s) of yours hold the room: delete them to rerun")
    assert "gpu-workloads/ex-0, gpu-workloads/ex-1, gpu-workloads/ex-2 and 1 more" in res.evidence
    assert "do not fit beside them on tenant-a's cards" in res.evidence
    assert r[("gpu.sharing", "tenant-a")].evidence == "blocked: hami.webhook (tenant-a) skip"
    # The other tenant's cards are free: its checks run and pass.
    assert r[("gpu.sharing", "tenant-b")].status is Status.PASS
    assert out.ok
    # The user's pods are left alone; only labcheck's own pods were created (none here).
    server = lab.tenant("tenant-a")
    assert {n for _, n in server.pods} == {f"ex-{i}" for i in range(4)}
    assert not [d for d in server.deleted if "ex-" in d[1]]


def test_the_users_pods_that_leave_room_do_not_stop_the_checks():
    lab = standard_lab()
    lab.tenant("tenant-b").add_placed_pod(
        hami_pod("notebooks", "lab-anna", B_NODE, f"GPU-{B_NODE}-0,NVIDIA,4096,0:;")
    )
    _, r = run_lab(lab, only=["hami.webhook", "gpu.sharing", "gpu.policy"])
    for check in ("hami.webhook", "gpu.sharing", "gpu.policy"):
        assert r[(check, "tenant-b")].status is Status.PASS, r[(check, "tenant-b")]


def test_sharing_is_skipped_when_its_pods_would_need_two_cards_beside_the_users_pod():
    """Without the room check this failed as "binpack annotation ignored": the third pod
    could only go to the other card."""
    lab = standard_lab()
    lab.tenant("tenant-b").add_placed_pod(
        hami_pod("notebooks", "big", B_NODE, f"GPU-{B_NODE}-0,NVIDIA,12000,0:;")
    )
    _, r = run_lab(lab, only=["hami.webhook", "gpu.sharing"])
    res = r[("gpu.sharing", "tenant-b")]
    assert res.status is Status.SKIP, res
    assert "do not fit on one card beside them" in res.evidence
    assert "notebooks/big" in res.evidence


def test_labchecks_own_leftovers_never_turn_a_failure_into_a_skip():
    lab = standard_lab()
    leftover = hami_pod(
        "labcheck-old", "lc-old-share-0", A_NODE, f"GPU-{A_NODE}-0,NVIDIA,81920,100:;"
    )
    leftover["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    lab.tenant("tenant-a").add_placed_pod(leftover)
    _, r = run_lab(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert "no card with room" in res.cause


def test_holders_are_the_running_pods_with_slices_on_the_nodes_only():
    pods = [
        hami_pod("ns", "running", A_NODE, "GPU-1,NVIDIA,1000,0:;"),
        hami_pod("ns", "done", A_NODE, "GPU-1,NVIDIA,1000,0:;", phase="Succeeded"),
        hami_pod("ns", "elsewhere", "other-node", "GPU-9,NVIDIA,1000,0:;"),
    ]
    assert holders(pods, [A_NODE]) == ["ns/running"]


def _card(id_: str, used_mb: int = 0) -> CardState:
    card = CardState(id_, "NVIDIA L4", 23034, 100, 10)
    if used_mb:
        card.take(used_mb, 0)
    return card


def test_a_pod_asking_two_cards_needs_two_distinct_cards_with_room():
    two = Ask(mem_mb=10000, cores=0, gpus=2, nodes=("n",), policy="spread")
    assert all_placed({"n": [_card("a"), _card("b")]}, [two], one_card=False)
    assert not all_placed({"n": [_card("a"), _card("b", used_mb=20000)]}, [two], one_card=False)


def test_asks_are_placed_in_order_and_one_card_means_the_same_card():
    asks = [Ask(8000, 0, 1, ("n",), "binpack")] * 2
    assert all_placed({"n": [_card("a", 4000), _card("b")]}, asks, one_card=True)
    assert not all_placed({"n": [_card("a", 10000), _card("b")]}, asks, one_card=True)
    assert all_placed({"n": [_card("a", 10000), _card("b")]}, asks, one_card=False)


def test_the_ask_of_a_check_pod_reads_its_limits_node_and_policy():
    body = gpu_pod("p", "img", {}, mem_mb=512, cores=20, gpus=2, node="n2", gpu_policy="spread")
    assert ask_of(body, ["n1", "n2"], "binpack") == Ask(512, 20, 2, ("n2",), "spread")
    plain = gpu_pod("q", "img", {}, mem_mb=64)
    assert ask_of(plain, ["n1", "n2"], "binpack") == Ask(64, 0, 1, ("n1", "n2"), "binpack")
