"""The capacity run against the fake API servers, HAMi's writes played as v2.10.0 makes them
(tests/capacity/hami_fake.py): what it reports, and that it always cleans up."""

from __future__ import annotations

import io
import json
import signal
from pathlib import Path

import pytest

from capacity.cli import main
from capacity.mix import MixError, load_mix, parse_mix
from capacity.report import TerminalProgress
from capacity.run import PENDING, PLACED, REFUSED, UNFIT, RunSettings, run_capacity
from labcheck.cluster import ClusterError
from labcheck.runner import Interrupted, SignalGuard
from labcheck.spec import parse_spec
from tests.capacity.hami_fake import WALL0, HamiLab, capacity_lab
from tests.support.labcheck_fakes import fail_call

MIXES = Path(__file__).resolve().parents[2] / "capacity" / "mixes"
NS = "capacity-1a2b3c4d"


def run(lab: HamiLab, mix, **kw):
    return run_capacity(
        parse_spec(lab.spec),
        mix,
        factory=lab.factory,
        clock=lab.clock,
        run_id="1a2b3c4d",
        settings=RunSettings(wall=lab.wall, **kw),
    )


def example(name: str):
    return load_mix(str(MIXES / f"{name}.yaml"))


def nothing_left(lab: HamiLab) -> bool:
    return all(
        NS not in s.namespaces and not any(ns == NS for ns, _ in s.pods)
        for s in lab.servers.values()
    )


def test_inference_mix_shares_three_cards_and_leaves_nothing():
    lab = capacity_lab(bind_seconds=0.5)
    result = run(lab, example("inference-heavy"))
    assert result.verdict() == "14 pods on 3 cards; whole GPUs would need 14; 0 did not fit"
    assert result.cards_used() == [
        "GPU-tenant-a-worker-1-0",
        "GPU-tenant-b-worker-1-0",
        "GPU-tenant-b-worker-1-1",
    ]
    a100 = result.maps["tenant-a"].cards[0]
    assert (a100.used_mb, a100.used_cores, len(a100.segments)) == (80096, 100, 4)
    assert nothing_left(lab) and result.cleaned == 16 and result.cleanup_errors == []
    # Slice-hours: each pod for the mix's duration from HAMi's bind time.
    assert result.hours.by_tenant["tenant-a"].mb_hours == (2 * 38000 + 2 * 2048) * 24
    assert result.hours.since >= WALL0


@pytest.mark.upstream("hami-gpumem-percentage")
def test_a_percentage_slice_is_that_share_of_the_card_it_landed_on():
    """HAMi's Fit: memreq = Totalmem * pct / 100 (integer division), recorded as MB."""
    lab = capacity_lab()
    result = run(lab, example("notebook-heavy"))
    tutor = next(p for p in result.pods if p.planned.entry == "nb-tutor")
    small = next(p for p in result.pods if p.planned.entry == "nb-small")
    assert [s.mem_mb for s in tutor.slices] == [81920 * 10 // 100]
    assert [s.mem_mb for s in small.slices] == [23034 * 15 // 100]  # 3455, not 3455.1
    assert result.verdict() == "19 pods on 3 cards; whole GPUs would need 19; 0 did not fit"


def test_pods_that_do_not_fit_carry_hami_s_reason():
    lab = capacity_lab()
    result = run(lab, example("cannot-fit"))
    assert result.verdict() == "4 pods on 3 cards; whole GPUs would need 8; 3 did not fit"
    reasons = {p.planned.name: p.reason for p in result.pods if p.state == UNFIT}
    assert sorted(reasons) == [
        "infer-30g-2",
        "llm-fp16-0",
        "train-2gpu-0",
    ]
    assert reasons["train-2gpu-0"].startswith("0/1 nodes are available: 1 NodeInsufficientDevice.")
    assert "1 2/2 CardInsufficientMemory" in reasons["llm-fp16-0"]
    assert reasons["infer-30g-2"].endswith(
        "| FilteringFailed: no available node, 1 nodes do not meet"
    )
    assert nothing_left(lab)


def test_a_pod_admission_refuses_did_not_fit_and_the_rest_still_runs():
    lab = capacity_lab()
    mix = parse_mix({"entries": [{"tenant": "tenant-b", "name": "x", "count": 3, "gpumem": 1000}]})
    fail_call(
        lab.tenant("tenant-b"),
        "create_pod",
        403,
        'pods "x-1" is forbidden: admission webhook "vgpu.hami.io" denied the '
        "request: exceeding resource quota",
        when=lambda args: args[1]["metadata"]["name"].endswith("-1"),
    )
    result = run(lab, mix)
    assert [p.state for p in result.pods] == [PLACED, REFUSED, PLACED]
    assert "exceeding resource quota" in result.pods[1].reason
    assert result.verdict() == "2 pods on 2 cards; whole GPUs would need 3; 1 did not fit"


def test_pods_nobody_places_are_reported_pending_after_the_timeout():
    lab = capacity_lab()
    lab.tenant("tenant-b").knobs.scheduler = False
    mix = parse_mix({"entries": [{"tenant": "tenant-b", "name": "x", "count": 2, "gpumem": 1}]})
    result = run(lab, mix, timeout=30)
    assert [p.state for p in result.pods] == [PENDING, PENDING]
    assert lab.clock.now() >= 30 and result.pods[0].reason == "no scheduling verdict yet"
    assert result.verdict().endswith("; 2 still pending") and nothing_left(lab)


def test_an_api_failure_mid_run_still_removes_everything():
    lab = capacity_lab()
    server = lab.tenant("tenant-b")
    fail_call(server, "list_pods", 500, "etcdserver: request timed out")
    with pytest.raises(ClusterError):
        run(lab, example("inference-heavy"))
    assert nothing_left(lab)
    assert ("namespace", NS) in server.deleted and ("namespace", NS) in lab.tenant(
        "tenant-a"
    ).deleted


def test_ctrl_c_while_pods_are_created_removes_them_and_exits_130(tmp_path):
    lab = capacity_lab(bind_seconds=0.5)
    created = []

    def hook(name, args):
        if name == "create_pod":
            created.append(args[1]["metadata"]["name"])
            if len(created) == 5:
                raise Interrupted(signal.SIGINT)

    lab.tenant("tenant-b").hook = hook
    code, text = cli(lab, tmp_path, "--mix", str(MIXES / "inference-heavy.yaml"))
    assert code == 130
    assert "INTERRUPTED" in text and nothing_left(lab)
    report = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    assert report["interrupted"] is True and report["cleanupErrors"] == []


def test_a_mix_naming_an_unknown_tenant_creates_nothing():
    lab = capacity_lab()
    mix = parse_mix({"entries": [{"tenant": "tenant-z", "name": "x", "count": 1, "gpumem": 1}]})
    with pytest.raises(MixError, match="no tenant 'tenant-z'"):
        run(lab, mix)
    assert not any(s.calls for s in lab.servers.values())


def test_progress_without_a_terminal_prints_a_line_per_change():
    lab = capacity_lab(bind_seconds=1.0)
    out = io.StringIO()
    mix = parse_mix({"entries": [{"tenant": "tenant-a", "name": "x", "count": 3, "gpumem": 1}]})
    run_capacity(
        parse_spec(lab.spec),
        mix,
        factory=lab.factory,
        clock=lab.clock,
        run_id="1a2b3c4d",
        progress=TerminalProgress(out),
        settings=RunSettings(wall=lab.wall),
    )
    assert out.getvalue().splitlines() == [
        "placing: 1/3 placed, 0 did not fit, 2 pending (0 s)",
        "placing: 2/3 placed, 0 did not fit, 1 pending (1 s)",
        "placing: 3/3 placed, 0 did not fit, 0 pending (2 s)",
    ]


def cli(lab: HamiLab, directory: Path, *argv: str, run_id: str = "1a2b3c4d") -> tuple[int, str]:
    """`python -m capacity` against the fake lab, the reports in `directory`/reports.

    The docs' example: cli(capacity_lab(bind_seconds=0.5), Path("/tmp/x"), "--mix", <mix>)."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = directory / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out = io.StringIO()
    args = ["--spec", str(spec), "--report-dir", str(directory / "reports"), *argv]
    code = main(
        args,
        out=out,
        factory=lab.factory,
        clock=lab.clock,
        wall=lab.wall,
        run_id=run_id,
        guard=SignalGuard(),
    )
    return code, out.getvalue()


def test_the_cli_writes_the_table_json_csv_and_picture(tmp_path):
    code, text = cli(
        capacity_lab(bind_seconds=0.5), tmp_path, "--mix", str(MIXES / "cannot-fit.yaml")
    )
    assert code == 0
    lines = text.splitlines()
    assert lines[-5] == "4 pods on 3 cards; whole GPUs would need 8; 3 did not fit"
    assert "did not fit: tenant-b capacity-1a2b3c4d/llm-fp16-0: 0/1 nodes" in text
    reports = tmp_path / "reports"
    data = json.loads((reports / "capacity-report.json").read_text())
    assert (data["wholeGpuBaseline"], data["wholeGpuBaselinePlaced"], data["podsPlaced"]) == (
        8,
        4,
        4,
    )
    assert [d["pod"] for d in data["didNotFit"]] == [
        f"{NS}/train-2gpu-0",
        f"{NS}/infer-30g-2",
        f"{NS}/llm-fp16-0",
    ]
    assert data["cards"]["tenant-b"]["allocatedMb"] == 46068
    csv = (reports / "capacity-hours.csv").read_text().splitlines()
    assert csv[0] == "tenant,card,type,nodes,mb_hours,core_pct_hours,pods"
    assert "tenant-b,*,,,276408.0,1200.0,2" in csv  # two whole L4s for 6 h
    assert (reports / "capacity-placement.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_usage_errors_name_the_field(tmp_path, capsys):
    bad = tmp_path / "mix.yaml"
    bad.write_text("entries:\n  - {tenant: tenant-a, name: x, count: 1, gpumem: 6000MB}\n")
    code, text = cli(capacity_lab(), tmp_path, "--mix", str(bad))
    err = capsys.readouterr().err
    assert (code, text) == (2, "")
    assert err.splitlines()[1].startswith("  mix.entries[0].gpumem: must be MB as an integer")
    with pytest.raises(SystemExit):
        cli(capacity_lab(), tmp_path)  # neither --mix nor --hours


def test_hours_of_what_the_tenants_run_now(tmp_path):
    lab = capacity_lab()
    node = "tenant-b-worker-1"
    lab.tenant("tenant-b").add_placed_pod(
        {
            "metadata": {
                "namespace": "notebooks",
                "name": "lab-anna",
                "annotations": {
                    "hami.io/vgpu-node": node,
                    "hami.io/vgpu-devices-allocated": f"GPU-{node}-0,NVIDIA,4096,0:;",
                    "hami.io/bind-phase": "success",
                    "hami.io/bind-time": str(WALL0 - 2 * 3600),
                },
            },
            "spec": {"nodeName": node},
            "status": {"phase": "Running"},
        }
    )
    code, text = cli(lab, tmp_path, "--hours", "--last", "1h")
    assert code == 0
    assert "tenant-b   (all cards)" in text and "4096.0" in text  # one hour of the window
    csv = (tmp_path / "reports" / "capacity-hours.csv").read_text()
    assert "notebooks" not in csv and "tenant-b,*,,,4096.0,0.0,1" in csv


def test_progress_on_a_terminal_rewrites_one_line():
    lab = capacity_lab(bind_seconds=1.0)
    out = io.StringIO()
    progress = TerminalProgress(out, tty=True)
    mix = parse_mix({"entries": [{"tenant": "tenant-a", "name": "x", "count": 2, "gpumem": 1}]})
    run_capacity(
        parse_spec(lab.spec),
        mix,
        factory=lab.factory,
        clock=lab.clock,
        run_id="1a2b3c4d",
        progress=progress,
        settings=RunSettings(wall=lab.wall, poll_seconds=1.0),
    )
    progress.end()
    assert out.getvalue() == (
        "\rplacing: 1/2 placed, 0 did not fit, 1 pending, 0 s "
        "\rplacing: 2/2 placed, 0 did not fit, 0 pending, 1 s \n"
    )
