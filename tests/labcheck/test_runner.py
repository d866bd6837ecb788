"""Runner: prerequisites, crash containment, interruption and guaranteed cleanup."""

from __future__ import annotations

import signal

import pytest

from labcheck.cluster import ClusterError
from labcheck.context import RunContext
from labcheck.objects import Created
from labcheck.result import CheckFailed, CheckSkipped, Status
from labcheck.runner import Check, Interrupted, SignalGuard, run_checks
from labcheck.spec import parse_spec
from labcheck.waiting import WaitTimeout, wait_for
from tests.support.labcheck_fakes import FakeClock, standard_lab


class ListReporter:
    def __init__(self):
        self.started, self.finished = [], []

    def start(self, check, tenant):
        self.started.append((check.id, tenant))

    def finish(self, result):
        self.finished.append(result)


def make_ctx(lab=None):
    lab = lab or standard_lab()
    return lab, RunContext(
        spec=parse_spec(lab.spec), factory=lab.factory, clock=lab.clock, run_id="r1"
    )


def by_key(outcome):
    return {(r.check, r.tenant): r for r in outcome.results}


def test_statuses_and_prerequisites():
    def ok(ctx, t):
        return f"fine {t.name}"

    def fail_b(ctx, t):
        if t.name == "tenant-b":
            raise CheckFailed("x", "y", "z")
        return "ok"

    def skip(ctx):
        raise CheckSkipped("not here")

    checks = [
        Check("a", "A", ok),
        Check("b", "B", fail_b, requires=("a",)),
        Check("c", "C", ok, requires=("b",)),
        Check("g", "G", skip, per_tenant=False),
        Check("h", "H", lambda ctx: "global ok", per_tenant=False, requires=("b",)),
    ]
    _, ctx = make_ctx()
    rep = ListReporter()
    out = run_checks(ctx, checks, rep)
    r = by_key(out)
    assert r[("a", "tenant-a")].status is Status.PASS
    assert r[("b", "tenant-b")].status is Status.FAIL and r[("b", "tenant-b")].cause == "z"
    assert r[("c", "tenant-a")].status is Status.PASS
    assert r[("c", "tenant-b")].status is Status.SKIP
    assert "blocked: b (tenant-b) fail" in r[("c", "tenant-b")].evidence
    assert r[("g", "")].status is Status.SKIP
    assert r[("h", "")].status is Status.SKIP  # a global check needs every tenant's b
    assert out.results[-1].check == "cleanup" and not out.ok
    assert len(rep.finished) == len(out.results)


def test_crashes_and_api_errors_become_errors_and_the_run_goes_on():
    def boom(ctx, t):
        raise RuntimeError("bug")

    def api(ctx, t):
        raise ClusterError(500, "error dialing backend: No agent available")

    def timeout(ctx, t):
        raise WaitTimeout("pod Running", 5, "phase Pending")

    _, ctx = make_ctx()
    out = run_checks(
        ctx, [Check("x", "X", boom), Check("y", "Y", api), Check("w", "W", timeout)], ListReporter()
    )
    r = by_key(out)
    assert r[("x", "tenant-a")].status is Status.ERROR
    assert "RuntimeError: bug" in r[("x", "tenant-a")].seen
    assert "Konnectivity" in r[("y", "tenant-b")].cause
    assert r[("w", "tenant-a")].status is Status.FAIL
    assert r[("w", "tenant-a")].expected == "pod Running within 5s"


def test_only_filter():
    _, ctx = make_ctx()
    out = run_checks(
        ctx,
        [Check("gpu.a", "A", lambda c, t: "a"), Check("nodes.b", "B", lambda c, t: "b")],
        ListReporter(),
        only=["gpu.*"],
    )
    assert {r.check for r in out.results} == {"gpu.a", "cleanup"}


def test_interrupt_stops_the_run_and_cleans_up():
    lab, ctx = make_ctx()

    def creates_then_interrupted(ctx, t):
        ctx.namespace(t)
        raise Interrupted(signal.SIGTERM)

    never = []
    out = run_checks(
        ctx,
        [
            Check("a", "A", creates_then_interrupted),
            Check("b", "B", lambda c, t: never.append(1) or "x"),
        ],
        ListReporter(),
    )
    assert out.interrupted == signal.SIGTERM and not out.ok and never == []
    assert out.results[0].status is Status.ERROR and "interrupted" in out.results[0].seen
    assert out.results[-1].check == "cleanup" and out.results[-1].status is Status.PASS
    assert "labcheck-r1" not in lab.tenant("tenant-a").namespaces


def test_cleanup_failures_are_reported():
    _, ctx = make_ctx()

    class Stubborn:
        label = "tenant-a"

        def delete_pod(self, ns, name):
            raise ClusterError(403, "forbidden")

    ctx.tracker.add(Created(Stubborn(), "pod", "p", "ns"))
    out = run_checks(ctx, [], ListReporter())
    (res,) = out.results
    assert res.status is Status.FAIL and "forbidden" in res.seen and not out.ok


def test_signal_guard_raises_once_and_not_while_cleaning():
    g = SignalGuard()
    with pytest.raises(Interrupted) as exc:
        g.handler(signal.SIGINT, None)
    assert exc.value.signum == signal.SIGINT
    g.handler(signal.SIGINT, None)  # second signal: no second exception mid-cleanup
    g2 = SignalGuard()
    g2.cleaning = True
    g2.handler(signal.SIGTERM, None)
    assert g2.received == signal.SIGTERM


def test_signal_guard_install_and_restore():
    before = signal.getsignal(signal.SIGTERM)
    g = SignalGuard()
    g.install()
    assert signal.getsignal(signal.SIGTERM) == g.handler
    g.restore()
    assert signal.getsignal(signal.SIGTERM) == before


def test_wait_for_is_bounded_and_uses_the_clock():
    clock = FakeClock()
    with pytest.raises(WaitTimeout) as exc:
        wait_for(lambda: (None, "still pending"), what="x", timeout=10, clock=clock, interval=3)
    assert clock.t == 10 and exc.value.last == "still pending"
    calls = []

    def probe():
        calls.append(1)
        return ("done" if len(calls) == 3 else None), "n"

    assert wait_for(probe, what="y", timeout=10, clock=FakeClock(), interval=1) == "done"


def test_a_check_of_hamis_sharing_is_skipped_for_a_dra_tenant_and_says_why():
    lab = standard_lab()
    for tenant in lab.spec["tenants"]:
        if tenant["name"] == "tenant-b":
            tenant["gpuSharing"] = "dra"
    _, ctx = make_ctx(lab)
    ran = []
    checks = [
        Check("any", "Any", lambda ctx, t: ran.append(("any", t.name)) or "ok"),
        Check(
            "hami.x", "X", lambda ctx, t: ran.append(("hami.x", t.name)) or "ok", sharing=("hami",)
        ),
    ]
    r = by_key(run_checks(ctx, checks, ListReporter()))
    assert ran == [("any", "tenant-a"), ("any", "tenant-b"), ("hami.x", "tenant-a")]
    assert r[("hami.x", "tenant-a")].status is Status.PASS
    skipped = r[("hami.x", "tenant-b")]
    assert skipped.status is Status.SKIP
    assert skipped.evidence == "a check of hami: this tenant's gpuSharing is dra"


def test_every_check_of_hamis_own_objects_is_marked_as_one():
    from labcheck.checks import ALL_CHECKS

    hami_only = {c.id for c in ALL_CHECKS if c.sharing == ("hami",)}
    assert {c.id for c in ALL_CHECKS if c.id.startswith(("hami.", "gpu."))} <= hami_only
    assert "isolation.gpu-placement" in hami_only
    assert {"tenant.api", "nodes.joined", "konnectivity.exec"}.isdisjoint(hami_only)
