"""`python -m labcheck`: sources, reports, exit codes, interruption."""

from __future__ import annotations

import io
import json
import shlex
import signal
import xml.etree.ElementTree as ET

import pytest

from labcheck.cli import main
from labcheck.runner import Interrupted, SignalGuard
from tests.support.fake_tools import fake_tools
from tests.support.labcheck_fakes import standard_lab


def write_spec(tmp_path, lab):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(lab.spec))
    return path


def call(argv, lab, **kw):
    out = io.StringIO()
    code = main(argv, out=out, factory=lab.factory, clock=lab.clock, run_id="c1", **kw)
    return code, out.getvalue()


def test_spec_file_run_writes_reports_and_exits_zero(tmp_path):
    lab = standard_lab()
    code, text = call(
        ["--spec", str(write_spec(tmp_path, lab)), "--report-dir", str(tmp_path / "rep")], lab
    )
    assert code == 0, text
    assert "OK:" in text and "labcheck-junit.xml" in text
    data = json.loads((tmp_path / "rep" / "labcheck-report.json").read_text())
    assert data["ok"] and data["runId"] == "c1" and data["summary"]["fail"] == 0
    suite = ET.parse(tmp_path / "rep" / "labcheck-junit.xml").getroot().find("testsuite")
    # 9, and the 4 monitoring checks of a spec without Prometheus
    assert suite.get("failures") == "0" and int(suite.get("skipped")) == 13


def test_failure_exits_one(tmp_path):
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.webhook = False
    code, text = call(["--spec", str(write_spec(tmp_path, lab)), "--only", "hami.*"], lab)
    assert code == 1
    assert "schedulerName is default-scheduler" in text and "FAILED" in text


def test_spec_env(tmp_path, monkeypatch):
    lab = standard_lab()
    monkeypatch.setenv("LABCHECK_SPEC", json.dumps(json.dumps(lab.spec)))
    code, _ = call(["--spec-env", "LABCHECK_SPEC", "--only", "tenant.api"], lab)
    assert code == 0


def test_bad_spec_exits_two_and_names_the_key(tmp_path, capsys):
    lab = standard_lab()
    lab.spec["tenants"][0]["gpuMode"] = "gpu-ish"
    code, _ = call(["--spec", str(write_spec(tmp_path, lab))], lab)
    assert code == 2
    assert "tenants[0].gpuMode" in capsys.readouterr().err


def test_stack_source_uses_pulumi(monkeypatch):
    lab = standard_lab()
    seen = []

    def fake_load(stack, cwd=None):
        seen.append((stack, cwd))
        from labcheck.spec import parse_spec

        return parse_spec(lab.spec)

    monkeypatch.setattr("labcheck.cli.load_from_stack", fake_load)
    code, _ = call(["--stack", "lab", "--cwd", "/proj", "--only", "tcp.*"], lab)
    assert code == 0 and seen == [("lab", "/proj")]


def test_list_and_usage_errors():
    lab = standard_lab()
    code, text = call(["--list"], lab)
    assert code == 0 and "gpu.node-lock" in text and "isolation.cross-tenant" in text
    with pytest.raises(SystemExit) as exc:
        call([], lab)
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        call(["--stack", "lab", "--spec", "x"], lab)


def test_sigterm_mid_run_cleans_up_and_exits_143(tmp_path):
    lab = standard_lab()
    server = lab.tenant("tenant-b")
    created = []

    def hook(name, args):
        if name == "create_pod":
            created.append(args)
            if len(created) == 3:
                raise Interrupted(signal.SIGTERM)

    server.hook = hook
    code, text = call(
        ["--spec", str(write_spec(tmp_path, lab)), "--report-dir", str(tmp_path)],
        lab,
        guard=SignalGuard(),
    )
    assert code == 128 + signal.SIGTERM
    assert "INTERRUPTED" in text
    assert not server.pods and "labcheck-c1" not in server.namespaces
    assert not lab.tenant("tenant-a").pods
    data = json.loads((tmp_path / "labcheck-report.json").read_text())
    assert data["interrupted"] is True and data["results"][-1]["check"] == "cleanup"


# What pulumi v3.274.1 prints for a stack no `up` has finished (stack_output.go:181), one
# never created (backenderr.go:47), and a failure that has nothing to do with either.
NOT_UP = "error: current stack does not have output property 'labcheckSpec'"
NO_STACK = "error: no stack named 'lab' found"
NO_PASSPHRASE = (
    'error: constructing secrets manager of type "passphrase": passphrase must be set with '
    "PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE environment variables"
)


@pytest.mark.upstream("pulumi-stack-output-not-up-yet")
@pytest.mark.parametrize(
    ("error", "hinted"), [(NOT_UP, True), (NO_STACK, True), (NO_PASSPHRASE, False)]
)
def test_stack_that_was_never_brought_up_says_to_run_make_up_first(
    error, hinted, tmp_path, monkeypatch, capsys
):
    """Issue 17 item 9: before any `up`, `--stack lab` said only that the stack has no output
    `labcheckSpec`. Through the CLI's own call of a fake `pulumi` (what the real one prints)."""
    fake_tools(
        tmp_path, {"pulumi": f"echo 'warning: x' >&2\necho {shlex.quote(error)} >&2\nexit 255\n"}
    )
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    code, out = call(["--stack", "lab"], standard_lab())
    err = capsys.readouterr().err
    assert (code, out) == (2, "")
    assert err.startswith(
        f"labcheck: 'pulumi stack output labcheckSpec --stack lab' failed: {error}"
    )
    hint = (
        "The spec is an output of the stack's `pulumi up`: bring the lab up first "
        "(make up STACK=lab), or give a saved spec with --spec FILE."
    )
    assert (hint in err) is hinted
    assert err.count("\n") == (2 if hinted else 1)
