"""Progress table on the terminal, JSON and JUnit XML reports, the placement picture."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from . import __version__
from .picture import write_pictures
from .placement import TenantMap
from .result import Result, Status
from .runner import Check, RunOutcome

COLUMNS = (("CHECK", 26), ("TENANT", 12), ("RESULT", 6), ("TIME", 7))
MARK = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.SKIP: "SKIP", Status.ERROR: "ERROR"}
JSON_NAME = "labcheck-report.json"
JUNIT_NAME = "labcheck-junit.xml"


def _row(cells: list[str], evidence: str, width: int) -> str:
    head = " ".join(c.ljust(w)[:w] for c, (_, w) in zip(cells, COLUMNS, strict=True))
    room = max(width - len(head) - 1, 20)
    ev = evidence if len(evidence) <= room else evidence[: room - 1] + "…"
    return f"{head} {ev}".rstrip()


@dataclass
class TerminalReporter:
    out: TextIO
    tty: bool = False
    width: int = 120
    _pending: bool = field(default=False, init=False)

    def header(self, stack: str, run_id: str) -> None:
        self.out.write(f"labcheck {__version__}: stack {stack}, run {run_id}\n")
        self.out.write(_row([c for c, _ in COLUMNS], "EVIDENCE", self.width) + "\n")
        self.out.flush()

    def start(self, check: Check, tenant: str) -> None:
        if self.tty:  # progress line, overwritten by the result row
            row = _row([check.id, tenant or "-", "...", ""], check.title, self.width)
            self.out.write(f"\r{row}")
            self.out.flush()
            self._pending = True

    def finish(self, r: Result) -> None:
        if self._pending:
            self.out.write("\r\x1b[2K")
            self._pending = False
        evidence = r.evidence if r.status in (Status.PASS, Status.SKIP) else r.seen
        cells = [r.check, r.tenant or "-", MARK[r.status], f"{r.seconds:.1f}s"]
        self.out.write(_row(cells, evidence, self.width) + "\n")
        for line in r.detail:
            self.out.write(f"    {line}\n")
        if r.status.bad:
            for key in ("expected", "seen", "cause"):
                value = getattr(r, key)
                if value:
                    self.out.write(f"    {key:9} {value}\n")
        self.out.flush()

    def summary(self, outcome: RunOutcome, files: list[Path]) -> None:
        counts = Counter(r.status for r in outcome.results)
        parts = [f"{counts.get(s, 0)} {s.value}" for s in Status]
        verdict = "OK" if outcome.ok else "FAILED"
        if outcome.interrupted is not None:
            verdict = "INTERRUPTED"
        self.out.write(f"\n{verdict}: " + ", ".join(parts) + "\n")
        for f in files:
            self.out.write(f"report: {f}\n")
        self.out.flush()


def to_json(
    outcome: RunOutcome,
    *,
    stack: str,
    run_id: str,
    started: str,
    finished: str,
    placement: Mapping[str, TenantMap] | None = None,
) -> dict[str, Any]:
    counts = Counter(r.status.value for r in outcome.results)
    return {
        "tool": "labcheck",
        "version": __version__,
        "stack": stack,
        "runId": run_id,
        "startedAt": started,
        "finishedAt": finished,
        "ok": outcome.ok,
        "interrupted": outcome.interrupted is not None,
        "summary": {s.value: counts.get(s.value, 0) for s in Status},
        "results": [r.to_json() for r in outcome.results],
        # tenant -> every card and the slices on it (the picture's numbers)
        "placement": {t: m.to_json() for t, m in (placement or {}).items()},
    }


def to_junit(outcome: RunOutcome, *, stack: str) -> ET.ElementTree:
    counts = Counter(r.status for r in outcome.results)
    total = sum(r.seconds for r in outcome.results)
    attrs = {
        "tests": str(len(outcome.results)),
        "failures": str(counts[Status.FAIL]),
        "errors": str(counts[Status.ERROR]),
        "skipped": str(counts[Status.SKIP]),
        "time": f"{total:.3f}",
    }
    suites = ET.Element("testsuites", {"name": "labcheck", **attrs})
    suite = ET.SubElement(suites, "testsuite", {"name": f"labcheck.{stack}", **attrs})
    for r in outcome.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"labcheck.{r.tenant or 'global'}",
                "name": r.check,
                "time": f"{r.seconds:.3f}",
            },
        )
        detail = f"expected: {r.expected}\nseen: {r.seen}\ncause: {r.cause}"
        if r.status is Status.FAIL:
            el = ET.SubElement(
                case, "failure", {"message": f"{r.title}: {r.seen}"[:500], "type": "CheckFailed"}
            )
            el.text = detail
        elif r.status is Status.ERROR:
            el = ET.SubElement(case, "error", {"message": r.seen[:500], "type": "CheckError"})
            el.text = detail
        elif r.status is Status.SKIP:
            ET.SubElement(case, "skipped", {"message": r.evidence[:500]})
        if r.evidence:
            ET.SubElement(case, "system-out").text = r.evidence
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_reports(
    outcome: RunOutcome,
    directory: Path,
    *,
    stack: str,
    run_id: str,
    started: str,
    finished: str,
    placement: Mapping[str, TenantMap] | None = None,
) -> list[Path]:
    """JSON and JUnit always; the placement picture (PNG, SVG) when gpu.placement ran."""
    directory.mkdir(parents=True, exist_ok=True)
    jpath, xpath = directory / JSON_NAME, directory / JUNIT_NAME
    data = to_json(
        outcome,
        stack=stack,
        run_id=run_id,
        started=started,
        finished=finished,
        placement=placement,
    )
    jpath.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    to_junit(outcome, stack=stack).write(xpath, encoding="utf-8", xml_declaration=True)
    files = [jpath, xpath]
    if placement:
        maps = list(placement.values())
        files += write_pictures(maps, directory, stack=stack, run_id=run_id, when=finished)
    return files
