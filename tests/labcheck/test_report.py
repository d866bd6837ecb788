"""Terminal table, JSON and JUnit XML reports."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

from labcheck.report import TerminalReporter, to_json, to_junit, write_reports
from labcheck.result import Result, Status
from labcheck.runner import Check, RunOutcome


def outcome() -> RunOutcome:
    return RunOutcome(
        results=[
            Result("tenant.api", "API", "tenant-a", Status.PASS, 0.5, evidence="v1.35.0, ok"),
            Result(
                "hami.webhook",
                "Webhook",
                "tenant-a",
                Status.FAIL,
                2.0,
                expected="schedulerName hami-scheduler",
                seen="schedulerName is default-scheduler",
                cause="HAMi webhook not reached; Konnectivity tunnel or kube-proxy broken",
            ),
            Result(
                "gpu.memory-limit",
                "Limit",
                "tenant-a",
                Status.SKIP,
                0.0,
                evidence="gpuMode simulated",
            ),
            Result(
                "mgmt.kamaji",
                "Kamaji",
                "",
                Status.ERROR,
                0.1,
                expected="API calls succeed",
                seen="HTTP 500: boom",
                cause="API server failed",
            ),
        ]
    )


def test_terminal_rows_and_failure_details():
    buf = io.StringIO()
    rep = TerminalReporter(buf, width=100)
    rep.header("lab", "abcd")
    for r in outcome().results:
        rep.finish(r)
    rep.summary(outcome(), [])
    text = buf.getvalue()
    assert "CHECK" in text and "EVIDENCE" in text
    assert "PASS" in text and "SKIP" in text and "ERROR" in text
    assert "expected  schedulerName hami-scheduler" in text
    assert "cause     HAMi webhook not reached" in text
    assert "FAILED: 1 pass, 1 fail, 1 skip, 1 error" in text
    assert all(len(line) <= 100 for line in text.splitlines() if line.startswith("tenant"))


def test_terminal_progress_line_on_tty_is_overwritten():
    buf = io.StringIO()
    rep = TerminalReporter(buf, tty=True)
    rep.start(Check("a.b", "Title", lambda c, t: ""), "tenant-a")
    rep.finish(outcome().results[0])
    assert "\r" in buf.getvalue() and "\x1b[2K" in buf.getvalue()


def test_json_report():
    data = to_json(outcome(), stack="lab", run_id="abcd", started="s", finished="f")
    assert data["ok"] is False and data["stack"] == "lab" and data["runId"] == "abcd"
    assert data["summary"] == {"pass": 1, "fail": 1, "skip": 1, "error": 1}
    assert data["results"][1]["status"] == "fail"
    assert data["results"][1]["cause"].startswith("HAMi webhook")
    json.dumps(data)


def test_junit_report_counts_and_elements():
    root = to_junit(outcome(), stack="lab").getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "1"
    assert suite.get("errors") == "1" and suite.get("skipped") == "1"
    cases = {(c.get("classname"), c.get("name")): c for c in suite.findall("testcase")}
    fail = cases[("labcheck.tenant-a", "hami.webhook")].find("failure")
    assert "default-scheduler" in fail.get("message") and "cause:" in fail.text
    assert cases[("labcheck.tenant-a", "gpu.memory-limit")].find("skipped") is not None
    assert cases[("labcheck.global", "mgmt.kamaji")].find("error") is not None


def test_write_reports(tmp_path):
    files = write_reports(
        outcome(), tmp_path / "r", stack="lab", run_id="x", started="s", finished="f"
    )
    assert [f.name for f in files] == ["labcheck-report.json", "labcheck-junit.xml"]
    assert json.loads(files[0].read_text())["summary"]["fail"] == 1
    assert ET.parse(files[1]).getroot().tag == "testsuites"
