"""Bounded polling with an injectable clock, so tests run instantly."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class WaitTimeout(Exception):
    """The condition did not hold within the bound; `last` describes what was seen."""

    def __init__(self, what: str, timeout: float, last: str) -> None:
        super().__init__(f"{what}: not reached within {timeout:g}s (last seen: {last})")
        self.what = what
        self.timeout = timeout
        self.last = last


def wait_for(
    probe: Callable[[], tuple[T | None, str]],
    *,
    what: str,
    timeout: float,
    clock: Clock,
    interval: float = 1.0,
) -> T:
    """Call probe() until it returns a value; probe returns (value or None, description).

    Always bounded: at least one probe, never longer than `timeout` (plus one probe).
    """
    deadline = clock.now() + timeout
    while True:
        value, seen = probe()
        if value is not None:
            return value
        remaining = deadline - clock.now()
        if remaining <= 0:
            raise WaitTimeout(what, timeout, seen)
        clock.sleep(min(interval, remaining))
