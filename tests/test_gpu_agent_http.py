"""HttpKubeApi request building and error mapping, against a fake opener (no network)."""

from __future__ import annotations

import io
import json
import ssl
import urllib.error
import urllib.parse

import pytest

from gpu_agent import AuthError, Conflict, HttpKubeApi, NotFound, TransientError
from gpu_agent.kube import ApiError


class FakeResponse(io.BytesIO):
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Opener:
    def __init__(self, *replies):
        self.replies = list(replies)
        self.requests = []

    def __call__(self, req, timeout):
        self.requests.append((req, timeout))
        reply = self.replies.pop(0) if self.replies else {}
        if isinstance(reply, BaseException):
            raise reply
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


def test_status_json_patch():
    client, opener = api({})
    ops = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "20"}]
    client.patch_node_status("n1", ops)
    req, _ = opener.requests[0]
    assert (req.get_method(), req.full_url) == (
        "PATCH",
        "https://10.96.0.1:443/api/v1/nodes/n1/status",
    )
    assert headers(req)["content-type"] == "application/json-patch+json"
    assert json.loads(req.data) == ops


def test_pod_paths_are_quoted():
    client, opener = api({}, {})
    client.get_pod("team-a", "p/1")
    client.patch_pod("team-a", "p1", {"metadata": {"annotations": {"a": "b"}}})
    assert opener.requests[0][0].full_url.endswith("/api/v1/namespaces/team-a/pods/p%2F1")
    req = opener.requests[1][0]
    assert req.full_url.endswith("/api/v1/namespaces/team-a/pods/p1")
    assert headers(req)["content-type"] == "application/merge-patch+json"


def test_list_pods_paginates_with_field_selector():
    client, opener = api(
        {"items": [{"n": 1}], "metadata": {"continue": "c1"}},
        {"items": [{"n": 2}], "metadata": {}},
    )
    client.page_size = 1
    assert client.list_pods("spec.nodeName!=") == [{"n": 1}, {"n": 2}]
    first, second = (urllib.parse.urlsplit(r.full_url) for r, _ in opener.requests)
    assert first.path == second.path == "/api/v1/pods"
    assert urllib.parse.parse_qs(first.query) == {
        "fieldSelector": ["spec.nodeName!="],
        "limit": ["1"],
    }
    assert urllib.parse.parse_qs(second.query)["continue"] == ["c1"]


def test_list_nodes_without_selector():
    client, opener = api({"items": []})
    assert client.list_nodes() == []
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


def test_other_4xx_is_plain_api_error():
    client, _ = api(http_error(422))
    with pytest.raises(ApiError) as info:
        client.patch_pod("a", "b", {})
    assert type(info.value) is ApiError


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
