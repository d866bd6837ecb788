"""The agent's boundary to the Kubernetes API: a small protocol and a stdlib HTTP client."""

from __future__ import annotations

import http.client
import json
import math
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

Obj = dict[str, Any]

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class Conflict(ApiError):
    """409: a resourceVersion precondition failed; re-read and retry."""


class NotFound(ApiError):
    """404: the object is gone."""


class Unprocessable(ApiError):
    """422: the server cannot apply the patch, e.g. a JSON Patch `test` op did not match."""


class Gone(ApiError):
    """410: the resourceVersion is too old (history compacted); only a fresh LIST helps."""


class AuthError(ApiError):
    """401/403 or TLS verification failure: retrying cannot help, so the agent exits."""


class TransientError(ApiError):
    """5xx, 429, timeouts and connection errors: retried on the next pass."""


def error_for(status: int, message: str) -> ApiError:
    if status == 409:
        return Conflict(status, message)
    if status == 404:
        return NotFound(status, message)
    if status == 422:
        return Unprocessable(status, message)
    if status == 410:
        return Gone(status, message)
    if status in (401, 403):
        return AuthError(status, message)
    if status == 429 or status >= 500:
        return TransientError(status, message)
    return ApiError(status, message)


class ObjList(NamedTuple):
    """A LIST result: the items and the list's resourceVersion, where a WATCH resumes."""

    items: list[Obj]
    resource_version: str


class KubeApi(Protocol):
    """The calls the agent makes. A watch yields decoded events {type, object} until the
    stream ends (after about timeout_seconds); type is ADDED, MODIFIED, DELETED, BOOKMARK
    or ERROR. An HTTP 410 raises Gone, a dropped connection TransientError."""

    def list_nodes(self) -> ObjList: ...
    def watch_nodes(self, resource_version: str, timeout_seconds: float) -> Iterator[Obj]: ...
    def get_node(self, name: str) -> Obj: ...
    def patch_node_metadata(self, name: str, merge_patch: Obj) -> Obj: ...
    def patch_node_status(self, name: str, merge_patch: Obj) -> Obj: ...
    def list_pods(self, field_selector: str | None = None) -> ObjList: ...
    def watch_pods(
        self, resource_version: str, timeout_seconds: float, field_selector: str | None = None
    ) -> Iterator[Obj]: ...
    def get_pod(self, namespace: str, name: str) -> Obj: ...
    def patch_pod(self, namespace: str, name: str, json_patch: list[Obj]) -> Obj: ...


# (verb, resource) each KubeApi method needs; the single source of the RBAC rules.
API_CALLS: dict[str, tuple[str, str]] = {
    "list_nodes": ("list", "nodes"),
    "watch_nodes": ("watch", "nodes"),
    "get_node": ("get", "nodes"),
    "patch_node_metadata": ("patch", "nodes"),
    "patch_node_status": ("patch", "nodes/status"),
    "list_pods": ("list", "pods"),
    "watch_pods": ("watch", "pods"),
    "get_pod": ("get", "pods"),
    "patch_pod": ("patch", "pods"),
}


def required_rbac_rules() -> list[dict[str, list[str]]]:
    """Least-privilege ClusterRole rules covering exactly the calls in API_CALLS."""
    by_resource: dict[str, set[str]] = {}
    for verb, resource in API_CALLS.values():
        by_resource.setdefault(resource, set()).add(verb)
    return [
        {"apiGroups": [""], "resources": [res], "verbs": sorted(verbs)}
        for res, verbs in sorted(by_resource.items())
    ]


# Returns a response with .read(), line iteration and .close()
Opener = Callable[[urllib.request.Request, float], Any]
# Errors that mean "the connection or the server had a moment": retry later.
_NETWORK_ERRORS = (TimeoutError, ConnectionError, http.client.HTTPException)


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class HttpKubeApi:
    """KubeApi over urllib: no dependencies, so it runs on a bare python image."""

    def __init__(
        self,
        base_url: str,
        token: str | Callable[[], str] | None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        page_size: int = 500,
        opener: Opener | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        self.page_size = page_size
        if opener is None:
            # ProxyHandler({}): in-cluster calls must not follow a stray HTTPS_PROXY.
            handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
            built = urllib.request.build_opener(*handlers)
            opener = lambda req, timeout: built.open(req, timeout=timeout)  # noqa: E731
        self._open = opener

    @classmethod
    def in_cluster(
        cls, sa_dir: str = SA_DIR, environ: Mapping[str, str] = os.environ, **kw: Any
    ) -> HttpKubeApi:
        host = environ.get("KUBERNETES_SERVICE_HOST")
        port = environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise AuthError(0, "not in a cluster: KUBERNETES_SERVICE_HOST is unset")
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        ctx = ssl.create_default_context(cafile=os.path.join(sa_dir, "ca.crt"))
        return cls(
            f"https://{host}:{port}",
            _file_token(os.path.join(sa_dir, "token")),
            ssl_context=ctx,
            **kw,
        )

    # KubeApi
    def list_nodes(self) -> ObjList:
        return self._list("/api/v1/nodes", {})

    def watch_nodes(self, resource_version: str, timeout_seconds: float) -> Iterator[Obj]:
        return self._watch("/api/v1/nodes", {}, resource_version, timeout_seconds)

    def get_node(self, name: str) -> Obj:
        return self._request("GET", f"/api/v1/nodes/{_q(name)}")

    def patch_node_metadata(self, name: str, merge_patch: Obj) -> Obj:
        return self._request("PATCH", f"/api/v1/nodes/{_q(name)}", merge_patch, MERGE_PATCH)

    def patch_node_status(self, name: str, merge_patch: Obj) -> Obj:
        path = f"/api/v1/nodes/{_q(name)}/status"
        return self._request("PATCH", path, merge_patch, MERGE_PATCH)

    def list_pods(self, field_selector: str | None = None) -> ObjList:
        query = {"fieldSelector": field_selector} if field_selector else {}
        return self._list("/api/v1/pods", query)

    def watch_pods(
        self, resource_version: str, timeout_seconds: float, field_selector: str | None = None
    ) -> Iterator[Obj]:
        query = {"fieldSelector": field_selector} if field_selector else {}
        return self._watch("/api/v1/pods", query, resource_version, timeout_seconds)

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._request("GET", f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}")

    def patch_pod(self, namespace: str, name: str, json_patch: list[Obj]) -> Obj:
        path = f"/api/v1/namespaces/{_q(namespace)}/pods/{_q(name)}"
        return self._request("PATCH", path, json_patch, JSON_PATCH)

    # plumbing
    def _list(self, path: str, query: dict[str, str]) -> ObjList:
        items: list[Obj] = []
        cont = version = ""
        while True:  # paginate so a big cluster never forces one huge response
            page = {**query, "limit": str(self.page_size)}
            if cont:
                page["continue"] = cont
            body = self._request("GET", f"{path}?{urllib.parse.urlencode(page)}")
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            # Every page of one list is the same snapshot; the first page names its version.
            version = version or str(meta.get("resourceVersion") or "")
            cont = meta.get("continue") or ""
            if not cont:
                return ObjList(items, version)

    def _watch(
        self, path: str, query: dict[str, str], resource_version: str, timeout_seconds: float
    ) -> Iterator[Obj]:
        seconds = max(1, math.ceil(timeout_seconds))
        params = {
            **query,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(seconds),
        }
        target = f"{path}?{urllib.parse.urlencode(params)}"
        # The server ends the stream after timeoutSeconds; the socket timeout (per read)
        # ends a connection that died silently soon after that.
        resp = self._open_request("GET", target, None, None, seconds + self.timeout)
        return _EventStream(resp, f"watch {path}")  # opened: HTTP errors (410, 403) raise here

    def _open_request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        headers = {"Accept": "application/json", "User-Agent": "hami-gpu-agent"}
        token = self._token() if callable(self._token) else self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type or "application/json"
        req = urllib.request.Request(self.base_url + path, data, headers, method=method)
        try:
            return self._open(req, self.timeout if timeout is None else timeout)
        except urllib.error.HTTPError as exc:
            raise error_for(exc.code, _status_message(exc)) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise AuthError(0, f"TLS verification failed: {exc.reason}") from None
            raise TransientError(0, f"{method} {path}: {exc.reason}") from None
        except _NETWORK_ERRORS as exc:
            raise TransientError(0, f"{method} {path}: {exc!r}") from None

    def _request(
        self, method: str, path: str, body: Any = None, content_type: str | None = None
    ) -> Obj:
        resp = self._open_request(method, path, body, content_type)
        try:
            with resp:
                raw = resp.read()
        except _NETWORK_ERRORS as exc:
            raise TransientError(0, f"{method} {path}: {exc!r}") from None
        try:
            return json.loads(raw) if raw else {}
        except ValueError as exc:  # a proxy's HTML error page, a truncated body...
            raise TransientError(0, f"{method} {path}: bad JSON: {exc}") from None


class _EventStream:
    """Decoded watch events, one JSON object per line, until the server ends the stream."""

    def __init__(self, resp: Any, what: str) -> None:
        self._resp, self._what = resp, what

    def __iter__(self) -> Iterator[Obj]:
        return self

    def __next__(self) -> Obj:
        while True:
            try:
                line = self._resp.readline()
            except _NETWORK_ERRORS as exc:  # dropped mid-stream: resume from the last version
                self.close()
                raise TransientError(0, f"{self._what}: {exc!r}") from None
            if not line:  # the server ended the stream (timeoutSeconds)
                self.close()
                raise StopIteration
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError as exc:
                self.close()
                raise TransientError(0, f"{self._what}: bad JSON event: {exc}") from None
            if isinstance(event, dict):
                return event

    def close(self) -> None:
        self._resp.close()


def _status_message(exc: urllib.error.HTTPError) -> str:
    try:
        raw = exc.read()
        return str(json.loads(raw).get("message") or raw[:200])
    except Exception:  # the error body is best-effort detail only
        return str(exc.reason)


def _file_token(path: str, max_age: float = 60.0) -> Callable[[], str]:
    """Re-read the projected token now and then: kubelet rotates it in place."""
    cache = {"at": -max_age, "token": ""}

    def token() -> str:
        now = time.monotonic()
        if now - cache["at"] >= max_age:
            try:
                with open(path, encoding="utf-8") as fh:
                    cache["token"] = fh.read().strip()
            except OSError as exc:
                raise AuthError(0, f"cannot read service account token {path}: {exc}") from exc
            cache["at"] = now
        return str(cache["token"])

    return token
