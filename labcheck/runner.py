"""Runs checks in order, resolves prerequisites, and always cleans up."""

from __future__ import annotations

import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import Any, Protocol

from .cluster import ClusterError, likely_cause
from .context import RunContext
from .result import CheckFailed, CheckSkipped, Evidence, Result, Status
from .spec import Tenant
from .waiting import WaitTimeout

# A check returns its evidence (a string, or Evidence with detail lines) on success;
# per-tenant checks get the tenant.
CheckFn = Callable[..., str | Evidence]


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    fn: CheckFn
    per_tenant: bool = True
    requires: tuple[str, ...] = ()
    # The tenants' GPU sharing modes it checks: HAMi's own checks say nothing of a DRA tenant.
    sharing: tuple[str, ...] = ("hami", "dra")


class Interrupted(BaseException):
    """SIGINT/SIGTERM. A BaseException that is not KeyboardInterrupt, because the
    kubernetes websocket layer converts KeyboardInterrupt into an ApiException."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Turns the first SIGINT/SIGTERM into Interrupted; ignores signals while cleaning."""

    def __init__(self) -> None:
        self.cleaning = False
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    def handler(self, signum: int, _frame: object) -> None:
        first = self.received is None
        self.received = self.received or signum
        if first and not self.cleaning:
            raise Interrupted(signum)

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self.handler)

    def restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()


class Reporter(Protocol):
    def start(self, check: Check, tenant: str) -> None: ...
    def finish(self, result: Result) -> None: ...


@dataclass
class RunOutcome:
    results: list[Result] = field(default_factory=list)
    interrupted: int | None = None

    @property
    def ok(self) -> bool:
        return self.interrupted is None and not any(r.status.bad for r in self.results)


def selected(check: Check, patterns: Sequence[str]) -> bool:
    return not patterns or any(fnmatch(check.id, p) for p in patterns)


def _blocked_by(
    check: Check,
    tenant: str,
    done: dict[tuple[str, str], Result],
    by_id: dict[str, Check],
    tenants: list[str],
) -> str:
    for req in check.requires:
        dep = by_id.get(req)
        if dep is None:
            continue
        keys = (
            [(req, tenant)]
            if dep.per_tenant and tenant
            else [(req, t) for t in tenants]
            if dep.per_tenant
            else [(req, "")]
        )
        for key in keys:
            res = done.get(key)
            if res is not None and res.status is not Status.PASS:
                who = f" ({key[1]})" if key[1] else ""
                return f"{req}{who} {res.status.value}"
    return ""


def _execute(ctx: RunContext, check: Check, tenant: Tenant | None) -> tuple[Status, dict]:
    ctx.check = check.id
    try:
        evidence = check.fn(ctx, tenant) if check.per_tenant else check.fn(ctx)
        if isinstance(evidence, Evidence):
            return Status.PASS, {"evidence": evidence.text, "detail": evidence.detail}
        return Status.PASS, {"evidence": evidence}
    except CheckSkipped as exc:
        return Status.SKIP, {"evidence": str(exc)}
    except CheckFailed as exc:
        return Status.FAIL, {"expected": exc.expected, "seen": exc.seen, "cause": exc.cause}
    except WaitTimeout as exc:
        return Status.FAIL, {
            "expected": f"{exc.what} within {exc.timeout:g}s",
            "seen": exc.last,
            "cause": "timed out",
        }
    except ClusterError as exc:
        return Status.ERROR, {
            "expected": "API calls succeed",
            "seen": str(exc),
            "cause": likely_cause(exc),
        }
    except Exception as exc:  # a bug in a check must not stop the run or its cleanup
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return Status.ERROR, {
            "expected": "check runs",
            "cause": "labcheck bug",
            "seen": f"{type(exc).__name__}: {exc} "
            f"({last.filename.rsplit('/', 1)[-1]}:{last.lineno})",
        }


def run_checks(
    ctx: RunContext,
    checks: Sequence[Check],
    reporter: Reporter,
    only: Sequence[str] = (),
    guard: SignalGuard | None = None,
) -> RunOutcome:
    out = RunOutcome()
    done: dict[tuple[str, str], Result] = {}
    by_id = {c.id: c for c in checks}
    tenant_names = [t.name for t in ctx.spec.tenants]
    try:
        for check in checks:
            if not selected(check, only):
                continue
            targets: list[Tenant | None] = list(ctx.spec.tenants) if check.per_tenant else [None]
            for tenant in targets:
                tname = tenant.name if tenant else ""
                reporter.start(check, tname)
                t0 = ctx.clock.now()
                blocked = _blocked_by(check, tname, done, by_id, tenant_names)
                if tenant and tenant.gpu_sharing not in check.sharing:
                    status = Status.SKIP
                    info = {"evidence": f"a check of {' or '.join(check.sharing)}: "
                            f"this tenant's gpuSharing is {tenant.gpu_sharing}"}  # fmt: skip
                elif blocked:
                    status, info = Status.SKIP, {"evidence": f"blocked: {blocked}"}
                else:
                    try:
                        status, info = _execute(ctx, check, tenant)
                    except Interrupted as exc:
                        out.interrupted = exc.signum
                        status, info = (
                            Status.ERROR,
                            {
                                "expected": "check completes",
                                "seen": f"interrupted ({exc})",
                                "cause": "run interrupted; cleanup follows",
                            },
                        )
                res = Result(check.id, check.title, tname, status, ctx.clock.now() - t0, **info)
                done[(check.id, tname)] = res
                out.results.append(res)
                reporter.finish(res)
                if out.interrupted is not None:
                    return out
    except Interrupted as exc:  # arrived between checks
        out.interrupted = exc.signum
        return out
    finally:
        if guard:
            guard.cleaning = True
        t0 = ctx.clock.now()
        count = len(ctx.tracker.items)
        errors = ctx.tracker.cleanup()
        res = Result(
            "cleanup",
            "Remove every object this run created",
            "",
            Status.FAIL if errors else Status.PASS,
            ctx.clock.now() - t0,
            evidence=f"deleted {count} object(s) by name",
        )
        if errors:
            res.expected, res.seen = "all test objects deleted", "; ".join(errors)
            res.cause = (
                "delete by hand: kubectl delete ns,pod -l app.kubernetes.io/"
                "managed-by=labcheck (check the run-id label)"
            )
        out.results.append(res)
        reporter.finish(res)
    return out
