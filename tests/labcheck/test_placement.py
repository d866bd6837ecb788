"""The placement picture (issue 12): the model from recorded placements, the gpu.placement step,
the text bars, the JSON numbers and the images."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import replace

import pytest

from labcheck.cli import main
from labcheck.cluster import ClusterError
from labcheck.hami import CardState, apply_usage
from labcheck.picture import PNG_NAME, SVG_NAME, text_bar, text_bars, title, write_pictures
from labcheck.placement import Segment, TenantMap, tenant_map
from labcheck.result import Status
from tests.support.labcheck_fakes import (
    example_lab,
    hami_pod,
    placement_lab,
    recorded_placements,
    run_cli,
    run_lab,
    standard_lab,
)

A_NODE, B_NODE = "tenant-a-worker-1", "tenant-b-worker-1"


def maps() -> dict[str, TenantMap]:
    return {t: tenant_map(t, nodes, pods) for t, (nodes, pods) in recorded_placements().items()}


def numbers(m: TenantMap) -> list[tuple]:
    return [
        (c.node, c.index, c.used_mb, c.free_mb, c.largest_free_mb, c.used_cores, c.slots_used)
        for c in m.cards
    ]


# model ------------------------------------------------------------------------------------
def test_full_card_and_empty_card():
    a = maps()["tenant-a"]
    assert numbers(a) == [(A_NODE, 0, 81920, 0, 0, 100, 1), (A_NODE, 1, 0, 81920, 81920, 0, 0)]
    assert a.cards[0].segments == (Segment("ml-train/trainer", 81920, 100),)
    assert a.cards[0].no_room == "memory full"
    # ml-train/old-job Succeeded: HAMi no longer counts its slice on #1
    assert a.cards[1].segments == () and a.pods == ("ml-train/trainer",)
    assert (a.allocated_mb, a.total_mb, a.largest_free_mb) == (81920, 163840, 81920)
    assert a.cards[0].id == f"GPU-{A_NODE}-0" and a.cards[0].type == "NVIDIA A100-SXM4-80GB"


def test_card_shared_by_three_pods_of_two_namespaces():
    b = maps()["tenant-b"]
    shared = b.cards[0]
    assert shared.segments == (
        Segment("gpu-workloads/infer-0", 8192, 30),
        Segment("gpu-workloads/infer-1", 8192, 30),
        Segment("notebooks/lab-anna", 4096, 0),
    )
    assert numbers(b)[0] == (B_NODE, 0, 20480, 2554, 2554, 60, 3)
    assert shared.no_room == ""


def test_free_memory_out_of_reach_when_the_cores_are_taken():
    b = maps()["tenant-b"]
    cores_full = b.cards[1]
    assert numbers(b)[1] == (B_NODE, 1, 6144, 16890, 0, 100, 1)
    assert cores_full.no_room == "cores all taken"
    # fragmentation: 19444 MB free on the tenant, but the next pod gets at most 2554 MB
    assert (b.allocated_mb, b.total_mb, b.largest_free_mb) == (26624, 46068, 2554)
    assert len(b.pods) == 4
    # tenant-b-worker-2 registers no card: no row for it
    assert {c.node for c in b.cards} == {B_NODE}


@pytest.mark.upstream("hami-card-fit-free-slice")
def test_largest_free_slice_follows_hamis_fit_rules():
    """Fit: used < count, free memory, free cores; a 0-core pod not on a card at 100 % cores."""
    card = CardState("GPU-0", "NVIDIA L4", 23034, 100, 3)
    assert card.largest_free_mb() == 23034
    card.take(1000, 40)
    card.take(1000, 0)
    assert card.largest_free_mb() == 21034
    card.take(1000, 0)  # third slot of 3: memory left, no slot
    assert card.largest_free_mb() == 0
    cores = CardState("GPU-1", "NVIDIA L4", 23034, 100, 10)
    cores.take(2000, 60)
    cores.take(2000, 40)  # all cores taken: neither a cores pod nor a 0-core pod fits
    assert cores.largest_free_mb() == 0
    slots = tenant_map(
        "t",
        [_node([{"devmem": 23034, "devcore": 100, "count": 1}])],
        [hami_pod("ns", "p", "n1", "GPU-n1-0,NVIDIA,100,0:;")],
    )
    assert (slots.cards[0].largest_free_mb, slots.cards[0].no_room) == (0, "all 1 slots taken")


@pytest.mark.upstream("hami-terminating-pod-keeps-its-slices")
def test_a_terminating_pod_still_holds_its_slice():
    """HAMi's cache drops a pod's devices when it ends or is deleted, not when its deletion
    starts: until it is gone the slice is not free (model and predictor alike)."""
    pod = hami_pod("ns", "going", "n1", "GPU-n1-0,NVIDIA,5000,20:;")
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    m = tenant_map("t", [_node([{"devmem": 23034, "devcore": 100, "count": 10}])], [pod])
    assert (m.cards[0].used_mb, m.cards[0].segments) == (5000, (Segment("ns/going", 5000, 20),))
    cards = [CardState("GPU-n1-0", "NVIDIA L4", 23034, 100, 10)]
    apply_usage(cards, [pod], "n1")
    assert (cards[0].used, cards[0].usedmem, cards[0].usedcores) == (1, 5000, 20)
    pod["status"]["phase"] = "Failed"
    assert (
        tenant_map("t", [_node([{"devmem": 23034, "devcore": 100, "count": 10}])], [pod])
        .cards[0]
        .used_mb
        == 0
    )


def test_containers_on_one_card_make_one_segment_and_devices_one_each():
    two_containers = hami_pod(
        "ns", "pair", "n1", "GPU-n1-0,NVIDIA,1000,10:;GPU-n1-0,NVIDIA,500,5:;"
    )
    two_cards = hami_pod("ns", "wide", "n1", "GPU-n1-0,NVIDIA,2000,0:GPU-n1-1,NVIDIA,2000,0:;")
    card = {"devmem": 23034, "devcore": 100, "count": 10}
    m = tenant_map("t", [_node([card, card])], [two_containers, two_cards])
    assert m.cards[0].segments == (Segment("ns/pair", 1500, 15), Segment("ns/wide", 2000, 0))
    assert m.cards[0].slots_used == 3  # HAMi counts a use per container device
    assert m.cards[1].segments == (Segment("ns/wide", 2000, 0),)
    assert m.pods == ("ns/pair", "ns/wide")


def test_a_slice_on_an_unregistered_card_is_reported_not_drawn():
    pod = hami_pod("ns", "lost", "n1", "GPU-gone,NVIDIA,1000,0:;")
    m = tenant_map("t", [_node([{"devmem": 23034, "devcore": 100, "count": 10}])], [pod])
    assert m.stray == ("ns/lost on GPU-gone",) and m.cards[0].used_mb == 0
    assert text_bars(m)[-1] == "stray slice: ns/lost on GPU-gone"


def _node(cards: list[dict], name: str = "n1") -> dict:
    reg = [{"id": f"GPU-{name}-{i}", "type": "NVIDIA L4", **c} for i, c in enumerate(cards)]
    return {
        "metadata": {"name": name, "annotations": {"hami.io/node-nvidia-register": json.dumps(reg)}}
    }


# text bars and JSON -------------------------------------------------------------------------
def test_text_bars_one_per_card():
    b = maps()["tenant-b"]
    # 8192, 16384, 20480 of 23034 MB at 24 characters: ends at 9, 17, 21
    assert text_bar(b.cards[0]) == "[" + "#" * 9 + "=" * 8 + "%" * 4 + "..." + "]"
    assert text_bars(b) == (
        f"{B_NODE} #0 [#########========%%%%...] 20480/23034 MB, cores 60%, next pod up to "
        "2554 MB: # gpu-workloads/infer-0 8192 MB 30%; = gpu-workloads/infer-1 8192 MB 30%; "
        "% notebooks/lab-anna 4096 MB 0%",
        f"{B_NODE} #1 [######..................] 6144/23034 MB, cores 100%, cores all taken: "
        "# notebooks/render 6144 MB 100%",
    )
    a = maps()["tenant-a"]
    assert text_bar(a.cards[0]) == "[" + "#" * 24 + "]"
    assert text_bar(a.cards[1]) == "[" + "." * 24 + "]"


def test_a_tiny_slice_still_gets_a_character():
    m = tenant_map(
        "t",
        [_node([{"devmem": 81920, "devcore": 100, "count": 10}])],
        [hami_pod("ns", "tiny", "n1", "GPU-n1-0,NVIDIA,64,0:;")],
    )
    assert text_bar(m.cards[0], width=10) == "[#.........]"


def test_json_numbers():
    data = maps()["tenant-b"].to_json()
    assert (data["pods"], data["allocatedMb"], data["totalMb"], data["largestFreeMb"]) == (
        4,
        26624,
        46068,
        2554,
    )
    card = data["cards"][1]
    assert card == {
        "node": B_NODE,
        "index": 1,
        "id": f"GPU-{B_NODE}-1",
        "type": "NVIDIA L4",
        "devmem": 23034,
        "devcore": 100,
        "count": 10,
        "usedMb": 6144,
        "freeMb": 16890,
        "usedCores": 100,
        "slotsUsed": 1,
        "largestFreeMb": 0,
        "segments": [{"pod": "notebooks/render", "memMb": 6144, "cores": 100}],
    }
    json.dumps(data)


# the images ---------------------------------------------------------------------------------
def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_pictures_written_and_labelled(tmp_path):
    files = write_pictures(
        list(maps().values()), tmp_path, stack="lab", run_id="1a2b3c4d", when="2026-12-01T10:00"
    )
    assert [f.name for f in files] == [PNG_NAME, SVG_NAME]
    png = files[0].read_bytes()
    width, height = _png_size(png)
    assert width >= 1500 and height >= 500 and len(png) > 40_000
    svg = files[1].read_text()
    for text in (
        "gpu-workloads/infer-0",
        "gpu-workloads/infer-1",
        "notebooks/lab-anna",
        "notebooks/render",
        "ml-train/trainer",
        "8192 MB · 30%",
        "free 2554 MB",
        "free 81920 MB",
        "memory 26624 / 46068 MB (58%)",
        "  tenant-b-worker-1 #1: 0 MB (cores all taken)",
        "next pod: up to 2554 MB",
        "What HAMi holds on each card, live: stack lab, run 1a2b3c4d, 2026-12-01T10:00",
        "live (what the cards hold now)",
    ):
        assert f">{text}<" in svg, text
    assert "ml-train/old-job" not in svg


def test_pods_too_narrow_for_a_label_are_named_under_the_card(tmp_path):
    lab = placement_lab()
    for i in range(6):
        lab.tenant("tenant-b").add_placed_pod(
            hami_pod("gpu-workloads", f"tiny-{i}", B_NODE, f"GPU-{B_NODE}-1,NVIDIA,512,0:;")
        )
    b = tenant_map(
        "tenant-b", lab.tenant("tenant-b").list_nodes(), lab.tenant("tenant-b").list_pods()
    )
    svg = write_pictures([b], tmp_path, stack="lab", run_id="r", when="now")[1].read_text()
    assert "left to right: gpu-workloads/tiny-0 512 MB 0%, gpu-workloads/tiny-1 512 MB 0%" in svg
    assert "more in the JSON report<" in svg
    assert "slots 7/10" in svg


def test_a_long_run_prefixed_name_keeps_its_tail_in_a_narrow_segment(tmp_path):
    pods = [
        hami_pod("labcheck-1a2b3c4d", f"lc-1a2b3c4d-lock-{i}", "n1", "GPU-n1-0,NVIDIA,8192,0:;")
        for i in range(5)
    ]
    m = tenant_map("t", [_node([{"devmem": 81920, "devcore": 100, "count": 10}])], pods)
    svg = write_pictures([m], tmp_path, stack="lab", run_id="r", when="now")[1].read_text()
    assert [f">…lock-{i}<" in svg for i in range(5)] == [True] * 5
    assert ">lc-1a2b3c4d-lock-0<" not in svg  # too wide for a tenth of the bar
    assert "left to right: labcheck-1a2b3c4d/lc-1a2b3c4d-lock-0 8192 MB 0%" in svg


def test_the_title_names_when_the_cards_were_read():
    a, b = maps()["tenant-a"], maps()["tenant-b"]
    sharing = replace(b, during="gpu.sharing")
    kw = {"stack": "lab", "run_id": "r1", "when": "10:00"}
    assert title([a, b], **kw) == "What HAMi holds on each card, live: stack lab, run r1, 10:00"
    assert title([replace(a, during="gpu.sharing"), sharing], **kw) == (
        "What HAMi placed on each card during gpu.sharing: stack lab, run r1, 10:00"
    )
    assert title([a, sharing], **kw) == (
        "What HAMi placed on each card (when: beside each tenant): stack lab, run r1, 10:00"
    )
    assert (a.to_json()["during"], sharing.to_json()["during"]) == (None, "gpu.sharing")


def test_svg_is_the_same_for_the_same_input(tmp_path):
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    one = write_pictures(list(maps().values()), tmp_path / "1", stack="l", run_id="r", when="t")
    two = write_pictures(list(maps().values()), tmp_path / "2", stack="l", run_id="r", when="t")
    assert one[1].read_bytes() == two[1].read_bytes()


# the step in a run ------------------------------------------------------------------------
def test_gpu_placement_step_draws_the_workloads_and_creates_nothing():
    lab = placement_lab()
    _, res = run_lab(lab, only=("gpu.placement",))
    r = res[("gpu.placement", "tenant-b")]
    assert r.status is Status.PASS
    assert r.evidence == (
        "live: 2 card(s) on 1 node(s), 4 pod(s), 26624/46068 MB allocated, "
        "largest free slice 2554 MB"
    )
    assert r.detail == text_bars(maps()["tenant-b"])
    writes = {"create_pod", "create_namespace", "delete_pod", "delete_namespace"}
    for name in ("tenant-a", "tenant-b"):
        assert not writes & {call for call, _ in lab.tenant(name).calls}
    assert res[("cleanup", "")].evidence == "deleted 0 object(s) by name"


def _segments(card: dict) -> list[tuple[str, int, int]]:
    return [(s["pod"], s["memMb"], s["cores"]) for s in card["segments"]]


def _reports(directory) -> tuple[dict, str]:
    """What run_cli wrote: the JSON report and the SVG's text."""
    reports = directory / "reports"
    return json.loads((reports / "labcheck-report.json").read_text()), (
        reports / SVG_NAME
    ).read_text()


def test_a_full_run_draws_the_fullest_batch_not_the_empty_cards_at_the_end(tmp_path):
    """Each GPU check deletes its pods, so at the end the cards are empty; the step draws the
    batch that held the most pods: gpu.node-lock's 5 (more than gpu.sharing's 3). This is the
    run docs/labcheck-placement.png is drawn from."""
    lab = example_lab()
    code, text = run_cli(lab, tmp_path)
    assert code == 0, text
    data, svg = _reports(tmp_path)
    ids = [r["check"] for r in data["results"]]
    assert ids[-2:] == ["gpu.placement", "cleanup"]
    assert max(i for i, c in enumerate(ids) if c.startswith(("gpu.", "hami."))) == len(ids) - 2
    for name in ("tenant-a", "tenant-b"):  # every test pod gone: live, the cards hold none
        assert [key for key in lab.tenant(name).pods if key[0] == "labcheck-t1"] == []
    lock = [f"labcheck-t1/lc-t1-lock-{i}" for i in range(5)]
    a, b = data["placement"]["tenant-a"], data["placement"]["tenant-b"]
    assert (a["during"], b["during"]) == ("gpu.node-lock", "gpu.node-lock")
    # 81920 // (2 * 5) MB each, no cores asked: five pods of one namespace on one A100
    assert _segments(a["cards"][0]) == [(pod, 8192, 0) for pod in lock]
    assert (a["pods"], a["allocatedMb"], a["cards"][0]["slotsUsed"]) == (5, 40960, 5)
    # tenant-b's gpu policy is spread: 5 pods on its 2 L4s, the first beside the workload
    assert _segments(b["cards"][0]) == [
        (lock[2], 2303, 0),
        (lock[4], 2303, 0),
        ("notebooks/lab-anna", 4096, 0),
    ]
    assert _segments(b["cards"][1]) == [(lock[0], 2303, 0), (lock[1], 2303, 0), (lock[3], 2303, 0)]
    result = next(r for r in data["results"] if r["check"] == "gpu.placement")
    assert result["evidence"] == (
        "during gpu.node-lock: 1 card(s) on 1 node(s), 5 pod(s), 40960/81920 MB allocated, "
        "largest free slice 40960 MB"
    )
    assert "    tenant-a-worker-1 #0 [##===%%@@@##............] 40960/81920 MB" in text
    for shown in (
        "What HAMi placed on each card during gpu.node-lock: stack lab, run t1, ",
        "during gpu.node-lock (the run's fullest)<",
        "lc-t1-lock-4<",
        "2 card(s), 6 pod(s)<",
        "notebooks/lab-anna<",
    ):
        assert f">{shown}" in svg, shown


def test_the_sharing_checks_pods_on_one_card_beside_a_workload(tmp_path):
    """gpu.sharing's 3 binpack pods join a tenant's workload on one L4: two namespaces on one
    card, drawn as they were before the check deleted its pods."""
    lab = example_lab()
    code, text = run_cli(
        lab, tmp_path, "--only", "hami.webhook", "--only", "gpu.sharing", "--only", "gpu.placement"
    )
    assert code == 0, text
    data, svg = _reports(tmp_path)
    b = data["placement"]["tenant-b"]
    assert b["during"] == "gpu.sharing"
    share = [(f"labcheck-t1/lc-t1-share-{i}", 5758, 25) for i in range(3)]  # 23034 // 4, 100 // 4
    assert _segments(b["cards"][0]) == [*share, ("notebooks/lab-anna", 4096, 0)]
    assert (b["cards"][0]["usedMb"], b["cards"][0]["usedCores"]) == (21370, 75)
    assert _segments(b["cards"][1]) == []
    assert data["placement"]["tenant-a"]["during"] == "gpu.sharing"
    assert "What HAMi placed on each card during gpu.sharing: stack lab, run t1, " in svg
    for shown in ("labcheck-t1/lc-t1-share-0", "5758 MB · 25%", "notebooks/lab-anna"):
        assert f">{shown}<" in svg, shown  # each line of a label is a text element
    # live, the workload alone is left
    live = tenant_map(
        "tenant-b", lab.tenant("tenant-b").list_nodes(), lab.tenant("tenant-b").list_pods()
    )
    assert live.pods == ("notebooks/lab-anna",)


def test_on_a_tie_the_later_batch_is_kept():
    """gpu.policy runs spread (2 pods on 2 cards), then binpack (2 pods on one card): same
    count, so the later, binpack, is drawn."""
    lab = standard_lab()
    _, res = run_lab(lab, only=("hami.webhook", "gpu.policy", "gpu.placement"))
    r = res[("gpu.placement", "tenant-b")]
    assert r.evidence.startswith("during gpu.policy: 2 card(s) on 1 node(s), 2 pod(s), ")
    assert r.detail == (
        f"{B_NODE} #0 [........................] 0/23034 MB, cores 0%, next pod up to 23034 MB",
        f"{B_NODE} #1 [######======............] 11516/23034 MB, cores 0%, next pod up to "
        "11518 MB: # labcheck-t1/lc-t1-binp-0 5758 MB 0%; = labcheck-t1/lc-t1-binp-1 5758 MB 0%",
    )


def test_a_failed_snapshot_is_reported_by_the_step_not_the_check(tmp_path):
    """An API error while reading the cards during gpu.sharing: gpu.sharing still passes, and
    gpu.placement draws the fullest batch it could read (hami.webhook's) and says what failed."""
    lab = standard_lab()
    server = lab.tenant("tenant-b")

    def hook(name, args):
        sharing = any(n.startswith("lc-t1-share-") for _, n in server.pods)
        if name == "list_nodes" and sharing:
            raise ClusterError(500, "etcdserver: request timed out")

    server.hook = hook
    _, res = run_lab(lab, only=("hami.webhook", "gpu.sharing", "gpu.placement"))
    assert res[("gpu.sharing", "tenant-b")].status is Status.PASS
    r = res[("gpu.placement", "tenant-b")]
    assert r.status is Status.PASS
    assert r.evidence == (
        "during hami.webhook: 2 card(s) on 1 node(s), 1 pod(s), 2303/46068 MB allocated, "
        "largest free slice 23034 MB; 1 GPU check batch(es) not read, see below"
    )
    assert r.detail[-1] == (
        "cards not read during gpu.sharing: HTTP 500: etcdserver: request timed out"
    )
    assert res[("gpu.placement", "tenant-a")].evidence.startswith("during gpu.sharing: ")


def test_with_every_snapshot_failed_the_step_reads_live_and_says_so():
    lab = standard_lab()
    server = lab.tenant("tenant-a")

    def hook(name, args):
        if name == "list_pods" and any(ns == "labcheck-t1" for ns, _ in server.pods):
            raise ClusterError(0, "ConnectTimeoutError: timed out")

    server.hook = hook
    _, res = run_lab(lab, only=("hami.webhook", "gpu.sharing", "gpu.placement"))
    assert res[("hami.webhook", "tenant-a")].status is Status.PASS
    assert res[("gpu.sharing", "tenant-a")].status is Status.PASS
    r = res[("gpu.placement", "tenant-a")]
    assert r.evidence.startswith("live: 1 card(s) on 1 node(s), 0 pod(s), 0/81920 MB")
    assert r.detail[1:] == (
        "cards not read during hami.webhook: ConnectTimeoutError: timed out",
        "cards not read during gpu.sharing: ConnectTimeoutError: timed out",
    )


def test_an_unreadable_registration_fails_the_step_with_its_cause():
    lab = placement_lab()
    node = lab.tenant("tenant-b").nodes[B_NODE]
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "GPU-0,10,23034,100,NVIDIA:"
    _, res = run_lab(lab, only=("gpu.placement",))
    r = res[("gpu.placement", "tenant-b")]
    assert r.status is Status.FAIL
    assert r.expected == "every hami.io/node-nvidia-register a JSON array of cards"
    assert r.seen.startswith("JSONDecodeError: ")
    assert "cannot read" in r.cause
    assert res[("gpu.placement", "tenant-a")].status is Status.PASS


def test_no_gpu_tenant_is_skipped():
    lab = standard_lab()
    lab.add_tenant("tenant-c", "172.30.255.202", [])
    _, res = run_lab(lab, only=("gpu.placement",))
    assert res[("gpu.placement", "tenant-c")].status is Status.SKIP
    assert res[("gpu.placement", "tenant-c")].evidence == "no GPU nodes configured for this tenant"


def test_cli_writes_picture_json_and_terminal_bars(tmp_path):
    lab = placement_lab()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out = io.StringIO()
    argv = ["--spec", str(spec), "--only", "gpu.placement", "--report-dir", str(tmp_path / "r")]
    code = main(argv, out=out, factory=lab.factory, clock=lab.clock, run_id="c1")
    text = out.getvalue()
    assert code == 0, text
    assert f"    {B_NODE} #0 [#########========%%%%...] 20480/23034 MB" in text
    assert f"report: {tmp_path / 'r' / PNG_NAME}" in text
    assert f"report: {tmp_path / 'r' / SVG_NAME}" in text
    data = json.loads((tmp_path / "r" / "labcheck-report.json").read_text())
    assert data["placement"]["tenant-a"]["cards"][0]["largestFreeMb"] == 0
    assert data["placement"]["tenant-b"]["largestFreeMb"] == 2554
    result = next(r for r in data["results"] if r["tenant"] == "tenant-b")
    assert result["detail"] == list(text_bars(maps()["tenant-b"]))
    assert "detail" not in data["results"][-1]  # cleanup: no detail, shape unchanged
    assert _png_size((tmp_path / "r" / PNG_NAME).read_bytes())[0] >= 1500


def test_without_the_step_no_picture(tmp_path):
    lab = standard_lab()
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    argv = ["--spec", str(spec), "--only", "tenant.api", "--report-dir", str(tmp_path / "r")]
    assert main(argv, out=io.StringIO(), factory=lab.factory, clock=lab.clock, run_id="c2") == 0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "labcheck-junit.xml",
        "labcheck-report.json",
    ]
    assert json.loads((tmp_path / "r" / "labcheck-report.json").read_text())["placement"] == {}
