"""HttpKubeApi request building and error mapping, against a fake opener (no network)."""

from __future__ import annotations

import io
import json
import ssl
import urllib.error
import urllib.parse

import pytest

from gpu_agent import AuthError, Conflict, Gone, HttpKubeApi, NotFound, ObjList, TransientError
from gpu_agent.kube import ApiError, Unprocessable


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class BrokenStream(FakeResponse):
    """A watch response whose connection dies after its first line."""

    def readline(self, *args):
        if self.tell():
            raise ConnectionResetError("peer reset")
        return super().readline(*args)


class Opener:
    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests = []

    def __call__(self, req, timeout):
        self.requests.append((req, timeout))
        reply = self.replies.pop(0) if self.replies else {}
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, FakeResponse):
            return reply
        return FakeResponse(reply if isinstance(reply, bytes) else json.dumps(reply).encode())


def http_error(code, message="boom"):
    body = io.BytesIO(json.dumps({"kind": "Status", "message": message}).encode())
    return urllib.error.HTTPError("https://k/x", code, "err", {}, body)


def api(*replies, token="tok"):
    opener = Opener(*replies)
    return HttpKubeApi("https://10.96.0.1:443/", token, opener=opener, timeout=7), opener


def headers(req):
    return {k.lower(): v for k, v in req.header_items()}


def test_get_node_request():
    client, opener = api({"metadata": {"name": "n1"}})
    assert client.get_node("n1") == {"metadata": {"name": "n1"}}
    req, timeout = opener.requests[0]
    assert (req.get_method(), req.full_url, timeout) == (
        "GET",
        "https://10.96.0.1:443/api/v1/nodes/n1",
        7,
    )
    h = headers(req)
    assert h["authorization"] == "Bearer tok"
    assert h["accept"] == "application/json"
    assert req.data is None and "content-type" not in h


def test_merge_patch_with_precondition():
    client, opener = api({})
    body = {"metadata": {"annotations": {"hami.io/mutex.lock": None}, "resourceVersion": "42"}}
    client.patch_node_metadata("n1", body)
    req, _ = opener.requests[0]
    assert req.get_method() == "PATCH"
    assert req.full_url.endswith("/api/v1/nodes/n1")
    assert headers(req)["content-type"] == "application/merge-patch+json"
    sent = json.loads(req.data)
    assert sent == body  # null survives: that is what deletes the key
    assert b'"hami.io/mutex.lock":null' in req.data


def test_status_merge_patch():
    client, opener = api({})
    body = {"status": {"capacity": {"nvidia.com/gpu": "20"}}}
    client.patch_node_status("n1", body)
    req, _ = opener.requests[0]
    assert (req.get_method(), req.full_url) == (
        "PATCH",
        "https://10.96.0.1:443/api/v1/nodes/n1/status",
    )
    assert headers(req)["content-type"] == "application/merge-patch+json"
    assert json.loads(req.data) == body


def test_pod_json_patch_and_quoted_paths():
    client, opener = api({}, {})
    client.get_pod("team-a", "p/1")
    ops = [{"op": "test", "path": "/metadata/annotations/hami.io~1bind-phase", "value": "x"}]
    client.patch_pod("team-a", "p1", ops)
    assert opener.requests[0][0].full_url.endswith("/api/v1/namespaces/team-a/pods/p%2F1")
    req = opener.requests[1][0]
    assert req.full_url.endswith("/api/v1/namespaces/team-a/pods/p1")
    assert headers(req)["content-type"] == "application/json-patch+json"
    assert json.loads(req.data) == ops


def test_list_pods_paginates_with_field_selector():
    client, opener = api(
        {"items": [{"n": 1}], "metadata": {"continue": "c1", "resourceVersion": "77"}},
        {"items": [{"n": 2}], "metadata": {"resourceVersion": "77"}},
    )
    client.page_size = 1
    # the list's version is where a watch resumes
    assert client.list_pods("spec.nodeName!=") == ObjList([{"n": 1}, {"n": 2}], "77")
    first, second = (urllib.parse.urlsplit(r.full_url) for r, _ in opener.requests)
    assert first.path == second.path == "/api/v1/pods"
    assert urllib.parse.parse_qs(first.query) == {
        "fieldSelector": ["spec.nodeName!="],
        "limit": ["1"],
    }
    assert urllib.parse.parse_qs(second.query)["continue"] == ["c1"]


def test_list_nodes_without_selector():
    client, opener = api({"items": [], "metadata": {"resourceVersion": "5"}})
    assert client.list_nodes() == ObjList([], "5")
    url = urllib.parse.urlsplit(opener.requests[0][0].full_url)
    assert url.path == "/api/v1/nodes" and "fieldSelector" not in url.query


@pytest.mark.parametrize(
    ("code", "exc"),
    [
        (409, Conflict),
        (404, NotFound),
        (401, AuthError),
        (403, AuthError),
        (429, TransientError),
        (500, TransientError),
        (503, TransientError),
    ],
)
def test_http_errors_map_to_classes(code, exc):
    client, _ = api(http_error(code, "the message"))
    with pytest.raises(exc) as info:
        client.get_node("n1")
    assert info.value.status == code and "the message" in str(info.value)


def test_422_is_unprocessable_and_other_4xx_plain_api_errors():
    """A failed JSON Patch `test` op is 422 (kube-apiserver patch.go), its own class."""
    client, _ = api(http_error(422, "testing value failed"), http_error(400))
    with pytest.raises(Unprocessable, match="testing value failed") as info:
        client.patch_pod("a", "b", [])
    assert info.value.status == 422
    with pytest.raises(ApiError) as info:
        client.get_pod("a", "b")
    assert type(info.value) is ApiError and info.value.status == 400


@pytest.mark.parametrize(
    "err",
    [TimeoutError("timed out"), ConnectionResetError(), urllib.error.URLError("refused")],
)
def test_network_errors_are_transient(err):
    client, _ = api(err)
    with pytest.raises(TransientError):
        client.list_nodes()


def test_tls_verification_failure_is_fatal():
    client, _ = api(urllib.error.URLError(ssl.SSLCertVerificationError("bad cert")))
    with pytest.raises(AuthError):
        client.list_nodes()


def test_non_json_body_is_transient():
    client, _ = api(b"<html>proxy error</html>")
    with pytest.raises(TransientError):
        client.get_node("n1")


def watch_body(*events):
    lines = (e if isinstance(e, bytes) else json.dumps(e).encode() + b"\n" for e in events)
    return FakeResponse(b"".join(lines))


def test_watch_pods_request_and_stream():
    added = {"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "8"}}}
    mark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    body = watch_body(added, b"\n", mark)  # a blank keep-alive line is skipped
    client, opener = api(body)
    events = client.watch_pods("7", 60, "spec.nodeName!=")
    req, timeout = opener.requests[0]  # opened at the call, before the first event is read
    url = urllib.parse.urlsplit(req.full_url)
    assert (req.get_method(), url.path) == ("GET", "/api/v1/pods")
    assert urllib.parse.parse_qs(url.query) == {
        "watch": ["1"],
        "resourceVersion": ["7"],
        "allowWatchBookmarks": ["true"],
        "timeoutSeconds": ["60"],
        "fieldSelector": ["spec.nodeName!="],
    }
    assert timeout == 60 + 7  # a silent dead connection ends soon after the server would
    assert headers(req)["authorization"] == "Bearer tok"
    assert list(events) == [added, mark]
    assert body.closed


def test_watch_nodes_request_rounds_timeout_up():
    client, opener = api(watch_body())
    assert list(client.watch_nodes("12", 0.2)) == []
    req, timeout = opener.requests[0]
    url = urllib.parse.urlsplit(req.full_url)
    query = urllib.parse.parse_qs(url.query)
    assert url.path == "/api/v1/nodes" and "fieldSelector" not in query
    assert query["timeoutSeconds"] == ["1"] and query["resourceVersion"] == ["12"]
    assert timeout == 1 + 7


@pytest.mark.parametrize(("code", "exc"), [(410, Gone), (403, AuthError), (503, TransientError)])
def test_watch_http_errors_raise_at_the_call(code, exc):
    client, _ = api(http_error(code, "too old resource version"))
    with pytest.raises(exc):
        client.watch_pods("1", 30)


def test_watch_connection_drop_mid_stream_is_transient():
    added = {"type": "ADDED", "object": {"metadata": {"name": "p"}}}
    body = BrokenStream(json.dumps(added).encode() + b"\n" + b'{"type": "MOD')
    client, _ = api(body)
    events = client.watch_nodes("1", 30)
    assert next(events) == added
    with pytest.raises(TransientError):
        next(events)
    assert body.closed


def test_watch_bad_json_line_is_transient():
    client, _ = api(FakeResponse(b"<html>proxy</html>\n"))
    with pytest.raises(TransientError):
        list(client.watch_pods("1", 30))


def test_watch_close_closes_the_connection():
    body = watch_body({"type": "BOOKMARK", "object": {}})
    client, _ = api(body)
    client.watch_nodes("1", 30).close()
    assert body.closed


def test_in_cluster_config(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("sa-token\n")
    real_ctx = ssl.create_default_context
    cafiles = []

    def fake_ctx(*, cafile):
        cafiles.append(cafile)
        return real_ctx()

    monkeypatch.setattr(ssl, "create_default_context", fake_ctx)
    opener = Opener({})
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    client = HttpKubeApi.in_cluster(str(tmp_path), env, opener=opener)
    assert cafiles == [str(tmp_path / "ca.crt")]
    assert client.base_url == "https://[fd00::1]:6443"
    client.list_nodes()
    assert headers(opener.requests[0][0])["authorization"] == "Bearer sa-token"


def test_in_cluster_outside_a_cluster_is_fatal():
    with pytest.raises(AuthError):
        HttpKubeApi.in_cluster("/nonexistent", {})


def test_unreadable_token_is_fatal(tmp_path, monkeypatch):
    monkeypatch.setattr(ssl, "create_default_context", lambda **kw: None)
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    client = HttpKubeApi.in_cluster(str(tmp_path), env, opener=Opener({}))
    with pytest.raises(AuthError):
        client.list_nodes()
