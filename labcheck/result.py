"""Outcome types shared by checks, runner and reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"  # the check itself crashed or hit an unexpected API error

    @property
    def bad(self) -> bool:
        return self in (Status.FAIL, Status.ERROR)


class CheckFailed(Exception):
    """Raised by a check: what it expected, what it saw, and the likely cause."""

    def __init__(self, expected: str, seen: str, cause: str = "") -> None:
        super().__init__(f"expected {expected}; saw {seen}")
        self.expected = expected
        self.seen = seen
        self.cause = cause


class CheckSkipped(Exception):
    """Raised by a check that does not apply (reported as skipped, never as passed)."""


@dataclass(frozen=True)
class Evidence:
    """What a check may return instead of a plain string: a one-line summary plus lines the
    terminal prints under the row (and the JSON report keeps)."""

    text: str
    detail: tuple[str, ...] = ()


@dataclass
class Result:
    check: str
    title: str
    tenant: str  # "" for checks that are not per tenant
    status: Status
    seconds: float
    evidence: str = ""
    expected: str = ""
    seen: str = ""
    cause: str = ""
    detail: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["seconds"] = round(self.seconds, 3)
        detail = d.pop("detail")
        if detail:  # only checks that have some: the other results keep their shape
            d["detail"] = list(detail)
        return d
