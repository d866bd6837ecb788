"""The stand-in's model of HAMi's client-go token bucket (hami_extender.TokenBucket), pure.

golang.org/x/time/rate v0.14.0 `reserveN` (rate.go:337-380): tokens refill at the rate up to
the burst, a reservation may take the bucket below zero, and its wait is the deficit / rate; so
callers are served in the order they reserve. No binaries: a fake clock.
"""

from __future__ import annotations

import pytest
from hami_extender import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.upstream("hami-v2.10-one-rate-limited-client")
def test_the_burst_is_free_then_each_call_waits_its_turn():
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    # Reserved in order: the 4th waits one token's time, the 5th two.
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    assert bucket.waited == pytest.approx(0.3)


@pytest.mark.upstream("hami-v2.10-one-rate-limited-client")
def test_idle_time_refills_no_more_than_the_burst():
    clock = Clock()
    bucket = TokenBucket(qps=10, burst=2, clock=clock)
    bucket.reserve(), bucket.reserve(), bucket.reserve()  # one token in debt
    clock.now += 0.05  # half a token back: still in debt
    assert bucket.reserve() == pytest.approx(0.15)
    clock.now += 60  # a long idle refills to the burst, not beyond
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)


def test_wait_sleeps_the_reservation():
    clock, slept = Clock(), []
    bucket = TokenBucket(qps=4, burst=1, clock=clock, sleep=slept.append)
    bucket.wait()
    bucket.wait()
    assert slept == [pytest.approx(0.25)]
