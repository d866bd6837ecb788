"""The real Cluster adapter, with the HTTP layer replaced (no network)."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from labcheck.cluster import ClusterError, cross_kubeconfig, likely_cause, server_of
from labcheck.kube import KubeCluster, _read_http, _ws_message, _ws_status
from tests.support.labcheck_fakes import kubeconfig


class FakeHTTP:
    """Stands in for ApiClient.call_api: records requests, replays canned responses."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.requests = []

    def __call__(
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        self.requests.append(
            SimpleNamespace(
                method=method, url=url, headers=header_params, body=body, timeout=_request_timeout
            )
        )
        status, data = self.responses.pop(0)
        if isinstance(status, Exception):
            raise status
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        return SimpleNamespace(status=status, reason="R", read=lambda: payload)


@pytest.fixture
def cluster():
    return KubeCluster(kubeconfig("https://10.0.0.1:6443", "tok"), "t", timeout=7)


def install(cluster, *responses):
    http = FakeHTTP(responses)
    cluster._api.call_api = http
    return http


def test_requests_carry_timeout_token_and_paths(cluster):
    http = install(cluster, (200, {"items": [{"metadata": {"name": "n1"}}]}))
    assert cluster.list_nodes() == [{"metadata": {"name": "n1"}}]
    req = http.requests[0]
    assert req.url == "https://10.0.0.1:6443/api/v1/nodes" and req.timeout == 7
    assert req.headers["authorization"] == "Bearer tok"


def test_create_pod_posts_json_and_returns_the_server_object(cluster):
    http = install(cluster, (201, {"spec": {"schedulerName": "hami-scheduler"}}))
    out = cluster.create_pod("ns", {"metadata": {"name": "p"}})
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    req = http.requests[0]
    assert req.method == "POST" and req.url.endswith("/api/v1/namespaces/ns/pods")
    assert req.body == {"metadata": {"name": "p"}}


def test_dry_run_custom_and_label_selector_query(cluster):
    http = install(cluster, (201, {}), (200, {"items": []}))
    cluster.create_custom(
        "metallb.io",
        "v1beta1",
        "ipaddresspools",
        {"metadata": {}},
        namespace="metallb-system",
        dry_run=True,
    )
    cluster.list_pods("ns", "a=b")
    assert http.requests[0].url.endswith(
        "/apis/metallb.io/v1beta1/namespaces/metallb-system/ipaddresspools?dryRun=All"
    )
    assert "labelSelector=a%3Db" in http.requests[1].url


def test_http_errors_map_to_cluster_errors(cluster):
    install(cluster, (404, {"kind": "Status", "message": 'pods "p" not found'}))
    with pytest.raises(ClusterError) as exc:
        cluster.get_pod("ns", "p")
    assert exc.value.status == 404 and exc.value.message == 'pods "p" not found'
    install(cluster, (OSError("connection refused"), None))
    with pytest.raises(ClusterError) as exc:
        cluster.version()
    assert exc.value.status == 0 and "connection refused" in exc.value.message


def test_delete_is_idempotent_and_forces_zero_grace(cluster):
    http = install(cluster, (404, {"message": "gone"}), (200, {}))
    cluster.delete_pod("ns", "p")
    cluster.delete_namespace("labcheck-x")
    assert "gracePeriodSeconds=0" in http.requests[0].url
    assert http.requests[1].url.endswith("/api/v1/namespaces/labcheck-x")


def test_workloads_get_their_kind(cluster):
    install(
        cluster,
        (200, {"items": [{"metadata": {"name": "kamaji"}}]}),
        (200, {"items": [{"metadata": {"name": "etcd"}}]}),
    )
    kinds = [w["kind"] for w in cluster.list_workloads("kamaji-system")]
    assert kinds == ["Deployment", "StatefulSet"]


def test_raw_paths_return_text(cluster):
    install(cluster, (200, b"ok"))
    assert cluster.get_raw("/readyz") == "ok"


def test_unusable_kubeconfig_is_a_cluster_error():
    with pytest.raises(ClusterError, match="unusable kubeconfig"):
        KubeCluster({"clusters": [], "users": [], "contexts": []}, "bad", 5)


@pytest.mark.upstream("websocket-handshake-error-text")
def test_a_failed_websocket_handshake_reports_the_servers_status_message():
    """websocket-client puts the response headers between the status line and the body."""
    body = '{"kind":"Status","message":"error dialing backend: No agent available","code":500}'
    reason = f"Handshake status 500 Internal Server Error -+-+- {{'audit-id': 'x'}} -+-+- {body}"
    assert (
        _ws_message(SimpleNamespace(reason=reason)) == "error dialing backend: No agent available"
    )
    no_body = "Handshake status 403 Forbidden -+-+- {} -+-+- None"
    assert _ws_message(SimpleNamespace(reason=no_body)) == "Handshake status 403 Forbidden"


def test_ws_status_and_http_reader():
    err = SimpleNamespace(status=0, reason="Handshake status 500 Internal Server Error")
    assert _ws_status(err) == 500
    assert _ws_status(SimpleNamespace(status=0, reason="timed out")) == 0
    a, b = socket.socketpair()
    a.settimeout(1)
    b.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
    assert _read_http(a).endswith(b"hello")  # stops at Content-Length, not EOF
    b.close()
    a.close()


def test_cross_kubeconfig_keeps_target_ca_and_foreign_user():
    target = kubeconfig("https://b:6443", "b-token", ca="Qg==")
    creds = kubeconfig("https://a:6443", "a-token", ca="QQ==")
    kc = cross_kubeconfig(target, creds)
    assert server_of(kc) == "https://b:6443"
    assert kc["clusters"][0]["cluster"]["certificate-authority-data"] == "Qg=="
    assert kc["users"][0]["user"] == {"token": "a-token"}
    with pytest.raises(ValueError):
        cross_kubeconfig({"contexts": [], "clusters": [], "users": []}, creds)


@pytest.mark.parametrize(
    ("status", "message", "needle"),
    [
        (500, "error dialing backend: No agent available", "Konnectivity"),
        (500, 'failed calling webhook "x": context deadline exceeded', "webhook"),
        (0, "timed out", "unreachable"),
        (401, "Unauthorized", "credentials"),
        (403, "forbidden", "RBAC"),
        (404, "nope", "not found"),
    ],
)
def test_likely_cause(status, message, needle):
    assert needle in likely_cause(ClusterError(status, message))


def test_exec_uses_stream_with_timeout_and_maps_handshake_errors(cluster, monkeypatch):
    import kubernetes.stream
    from kubernetes.client.exceptions import ApiException

    seen = {}

    def fake_stream(fn, name, ns, **kw):
        seen.update(kw, name=name, ns=ns, fn=fn.__name__)
        return "token\n"

    monkeypatch.setattr(kubernetes.stream, "stream", fake_stream)
    assert cluster.exec_pod("ns", "p", ["cat", "f"]) == "token\n"
    assert seen["fn"] == "connect_get_namespaced_pod_exec" and seen["_request_timeout"] == 7
    assert seen["command"] == ["cat", "f"] and seen["tty"] is False

    def broken(*a, **kw):
        raise ApiException(status=0, reason="Handshake status 500: No agent available")

    monkeypatch.setattr(kubernetes.stream, "stream", broken)
    with pytest.raises(ClusterError) as exc:
        cluster.exec_pod("ns", "p", ["true"])
    assert exc.value.status == 500 and "Konnectivity" in likely_cause(exc.value)


def test_port_forward_sends_payload_and_reads_reply(cluster, monkeypatch):
    import kubernetes.stream

    mine, theirs = socket.socketpair()

    class PF:
        closed = False

        def socket(self, port):
            assert port == 8080
            return mine

        def error(self, port):
            return None

        def close(self):
            PF.closed = True

    def fake_pf(fn, name, ns, **kw):
        assert kw["ports"] == "8080" and kw["_request_timeout"] == 7
        theirs.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc")
        return PF()

    monkeypatch.setattr(kubernetes.stream, "portforward", fake_pf)
    assert cluster.port_forward("ns", "p", 8080, b"GET / HTTP/1.0\r\n\r\n").endswith(b"abc")
    assert theirs.recv(100).startswith(b"GET /") and PF.closed
    theirs.close()
    mine.close()


def test_endpoint_slices_are_listed_by_their_service_label(cluster):
    """T11: EndpointSlices of a Service carry kubernetes.io/service-name=<service>."""
    http = install(cluster, (200, {"items": [{"endpoints": None}]}))
    assert cluster.list_endpoint_slices("kube-system", "hami-scheduler") == [{"endpoints": None}]
    assert http.requests[0].url == (
        "https://10.0.0.1:6443/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"
        "?labelSelector=kubernetes.io/service-name%3Dhami-scheduler"
    )


def test_the_hami_scheduler_deployment_and_config_map_are_read_with_get(cluster):
    http = install(cluster, (200, {"kind": "Deployment"}), (200, {"data": {"config.yaml": ""}}))
    assert cluster.get_deployment("kube-system", "hami-scheduler") == {"kind": "Deployment"}
    assert cluster.get_config_map("kube-system", "hami-scheduler") == {"data": {"config.yaml": ""}}
    assert [(r.method, r.url) for r in http.requests] == [
        (
            "GET",
            "https://10.0.0.1:6443/apis/apps/v1/namespaces/kube-system/deployments/hami-scheduler",
        ),
        ("GET", "https://10.0.0.1:6443/api/v1/namespaces/kube-system/configmaps/hami-scheduler"),
    ]
