"""diagnostics.py and the tier's report hook (conftest.py): which containers are nodes, the
dockerd log's tail, and that a failed test which used the daemon carries the report while a
passed one or one without the daemon does not (the report read from a real node:
test_node_image.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import conftest
import diagnostics
import pytest
from diagnostics import Container


def test_kind_nodes_are_told_by_kinds_entrypoint():
    assert Container("tenant-a-worker-1", '"/usr/local/bin/entrypoint /sbin/init"').is_node
    assert not Container("tenant-a-apiserver", '"/bin/kube-apiserver --v=1"').is_node


class ListingDocker:
    """`docker ps` as diagnostics.py asks it, answered with fixed rows."""

    def __init__(self, stdout: str = "", fail: bool = False) -> None:
        self.stdout, self.fail = stdout, fail

    def run(self, *args: str, **_: Any) -> SimpleNamespace:
        if self.fail:
            raise OSError("the daemon went away")
        if args[0] == "ps":
            return SimpleNamespace(stdout=self.stdout, stderr="")
        return SimpleNamespace(stdout=f"output of {args[-1]}", stderr="")


def test_several_containers_are_listed_by_name_nodes_and_others_apart():
    rows = (
        'tenant-b-worker-1\t"/usr/local/bin/entrypoint /sbin/init"\n'
        'tenant-a-apiserver\t"/bin/kube-apiserver"\n'
        'tenant-a-worker-1\t"/usr/local/bin/entrypoint /sbin/init"\n'
    )
    docker = ListingDocker(rows)
    found = diagnostics.running_containers(docker)  # type: ignore[arg-type]
    assert [c.name for c in found] == [
        "tenant-a-apiserver",
        "tenant-a-worker-1",
        "tenant-b-worker-1",
    ]
    text = diagnostics.report(docker, None)  # type: ignore[arg-type]
    assert (
        text.index("=== tenant-a-worker-1: kubelet journal")
        < text.index("=== tenant-b-worker-1: kubelet journal")
        < text.index("=== tenant-a-apiserver: container output")
    )
    assert "tenant-a-apiserver: kubelet journal" not in text


def test_a_report_that_cannot_be_made_says_why():
    text = diagnostics.report(ListingDocker(fail=True), None)  # type: ignore[arg-type]
    assert text == "=== no diagnostics: OSError: the daemon went away"


def test_the_dockerd_tail_is_the_logs_last_bytes(tmp_path: Path):
    log = tmp_path / "dockerd.log"
    log.write_text("old line\n" * 1000 + "the last line\n")
    tail = diagnostics.dockerd_tail(log)
    assert tail.endswith("the last line")
    assert len(tail) < diagnostics.DOCKERD_LOG_BYTES + 200
    assert "not the tier's own" in diagnostics.dockerd_tail(None)


class Outcome:
    def __init__(self, report: Any) -> None:
        self.report = report

    def get_result(self) -> Any:
        return self.report


def run_hook(failed: bool, fixtures: tuple[str, ...]) -> list[tuple[str, str]]:
    report = SimpleNamespace(failed=failed, sections=[])
    hook = conftest.pytest_runtest_makereport(SimpleNamespace(fixturenames=fixtures), None)
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(Outcome(report))
    return report.sections


@pytest.fixture
def active(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """A session daemon as the `docker` fixture records it; the reports the hook asks for."""
    asked: list[object] = []
    monkeypatch.setattr(conftest, "ACTIVE", {"docker": "daemon", "log": None, "diagnosed": 0})
    monkeypatch.setattr(diagnostics, "report", lambda docker, log: asked.append(docker) or "R")
    return asked


def test_a_failed_test_that_used_the_daemon_carries_the_report(active: list[object]):
    assert run_hook(True, ("tenants", "docker")) == [("host diagnostics", "R")]
    assert active == ["daemon"]


def test_a_passed_test_or_one_without_the_daemon_carries_none(active: list[object]):
    assert run_hook(False, ("docker",)) == []
    assert run_hook(True, ("tmp_path",)) == []
    assert active == []


def test_after_a_few_full_reports_a_failure_only_says_so(active: list[object]):
    for _ in range(conftest.DIAGNOSED_AT_MOST):
        run_hook(True, ("docker",))
    ((_, text),) = run_hook(True, ("docker",))
    assert "first 3 failures" in text and len(active) == conftest.DIAGNOSED_AT_MOST
