"""Check 5: logs, exec and port-forward reach a pod through the Konnectivity tunnel."""

from __future__ import annotations

from ..cluster import ClusterError, likely_cause
from ..context import RunContext
from ..objects import HTTP_PORT
from ..result import CheckFailed
from ..spec import Tenant

TUNNEL_CAUSE = "Konnectivity tunnel broken (agent not connected or server sidecar down)"


def _cause(exc: ClusterError) -> str:
    cause = likely_cause(exc)
    return cause if "Konnectivity" in cause else f"{cause}; or {TUNNEL_CAUSE}"


def _pod(ctx: RunContext, t: Tenant) -> tuple[str, str]:
    pod = ctx.tools_pod(t)
    return ctx.namespace(t), pod["metadata"]["name"]


def logs(ctx: RunContext, t: Tenant) -> str:
    ns, name = _pod(ctx, t)
    token = ctx.token(t)

    def probe() -> tuple[str | None, str]:
        # The container may be Running a moment before its first line is flushed.
        text = ctx.tenant(t).pod_logs(ns, name)
        return (text if token in text else None), repr(text[-120:])

    try:
        ctx.wait(probe, f"token in logs of {name}", ctx.timeouts.api_seconds)
    except ClusterError as exc:
        raise CheckFailed("pod logs via the API server", str(exc), _cause(exc)) from None
    return f"logs of {ns}/{name} contain the run token"


def exec_(ctx: RunContext, t: Tenant) -> str:
    ns, name = _pod(ctx, t)
    try:
        out = ctx.tenant(t).exec_pod(ns, name, ["cat", "/www/index.html"])
    except ClusterError as exc:
        raise CheckFailed("exec into the pod", str(exc), _cause(exc)) from None
    if ctx.token(t) not in out:
        raise CheckFailed(
            "exec output contains the run token",
            repr(out[:120]),
            "exec reached another container or the stream was cut",
        )
    return f"exec `cat /www/index.html` in {name} returned the token"


def port_forward(ctx: RunContext, t: Tenant) -> str:
    ns, name = _pod(ctx, t)
    request = b"GET / HTTP/1.0\r\nHost: labcheck\r\n\r\n"
    try:
        reply = ctx.tenant(t).port_forward(ns, name, HTTP_PORT, request)
    except ClusterError as exc:
        raise CheckFailed(f"port-forward to {name}:{HTTP_PORT}", str(exc), _cause(exc)) from None
    text = reply.decode(errors="replace")
    if ctx.token(t) not in text:
        raise CheckFailed(
            "HTTP reply with the run token",
            repr(text[:120]),
            "port-forward stream opened but no data came back through the tunnel",
        )
    return f"HTTP GET via port-forward {name}:{HTTP_PORT} returned the token"
