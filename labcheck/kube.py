"""The real Cluster, on the official kubernetes client (kubernetes==37.0.2).

Plain REST calls (ApiClient.param_serialize + call_api) return the server's JSON as dicts,
so checks see exactly what kubectl would and no client model can drop a field. Exec and
port-forward use kubernetes.stream. Every call carries a timeout.
"""

from __future__ import annotations

import json
import re
import socket
from typing import Any
from urllib.parse import quote

from .cluster import ClusterError, Obj

_STATUS_IN_TEXT = re.compile(r"\b([1-5]\d\d)\b")


def _message(body: bytes | str | None, fallback: str) -> str:
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if body:
        try:
            doc = json.loads(body)
            if isinstance(doc, dict) and doc.get("message"):
                return str(doc["message"])
        except ValueError:
            pass
        return body.strip()[:500]
    return fallback


class KubeCluster:
    def __init__(self, kubeconfig: dict[str, Any], label: str, timeout: float) -> None:
        import websocket
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        self.label = label
        self._timeout = timeout
        # websocket-client connects without a timeout unless this default is set.
        websocket.setdefaulttimeout(timeout)
        conf = client.Configuration()
        try:
            self._api = config.new_client_from_config_dict(
                kubeconfig, persist_config=False, client_configuration=conf
            )
        except (ConfigException, KeyError, ValueError, TypeError) as exc:
            raise ClusterError(0, f"{label}: unusable kubeconfig: {exc}") from None
        self._api.configuration.retries = 1  # bounded: at most one retry per call
        self._core = client.CoreV1Api(self._api)

    # plumbing ---------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        accept: str = "application/json",
    ) -> bytes:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            params = self._api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self._api.call_api(*params, _request_timeout=self._timeout)
            data = resp.read()
        except ApiException as exc:
            raise ClusterError(exc.status or 0, _message(exc.body, str(exc.reason))) from None
        except Exception as exc:  # urllib3/ssl/socket errors: no HTTP answer
            raise ClusterError(0, f"{type(exc).__name__}: {exc}") from None
        if not 200 <= resp.status < 300:
            raise ClusterError(resp.status, _message(data, str(resp.reason)))
        return data or b""

    def _json(
        self, method: str, path: str, query: list[tuple[str, str]] | None = None, body: Any = None
    ) -> Obj:
        return json.loads(self._request(method, path, query, body) or b"{}")

    def _items(self, path: str, query: list[tuple[str, str]] | None = None) -> list[Obj]:
        return list(self._json("GET", path, query).get("items") or [])

    # Cluster protocol -----------------------------------------------------------------------
    def version(self) -> Obj:
        return self._json("GET", "/version")

    def get_raw(self, path: str, query: list[tuple[str, str]] | None = None) -> str:
        return self._request("GET", path, query, accept="*/*").decode(errors="replace")

    def list_nodes(self) -> list[Obj]:
        return self._items("/api/v1/nodes")

    def get_node(self, name: str) -> Obj:
        return self._json("GET", f"/api/v1/nodes/{quote(name)}")

    def list_pods(self, namespace: str | None = None, label_selector: str = "") -> list[Obj]:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods" if namespace else "/api/v1/pods"
        return self._items(path, [("labelSelector", label_selector)] if label_selector else None)

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self._json("GET", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")

    def create_pod(self, namespace: str, body: Obj, dry_run: bool = False) -> Obj:
        """The pod as created; with ``dry_run``, as admission would store it, nothing created."""
        query = [("dryRun", "All")] if dry_run else None
        return self._json("POST", f"/api/v1/namespaces/{quote(namespace)}/pods", query, body)

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self._request(
                "DELETE",
                f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}",
                [("gracePeriodSeconds", "0")],
            )
        except ClusterError as exc:
            if exc.status != 404:
                raise

    def pod_logs(self, namespace: str, name: str) -> str:
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/log"
        return self._request("GET", path, [("limitBytes", "65536")], accept="*/*").decode(
            errors="replace"
        )

    def exec_pod(self, namespace: str, name: str, command: list[str]) -> str:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        try:
            out = stream(
                self._core.connect_get_namespaced_pod_exec,
                name,
                namespace,
                command=command,
                stderr=True,
                stdin=False,
                stdout=True,
                tty=False,
                _request_timeout=self._timeout,
            )
        except ApiException as exc:
            raise ClusterError(_ws_status(exc), _ws_message(exc)) from None
        return out if isinstance(out, str) else bytes(out).decode(errors="replace")

    def port_forward(self, namespace: str, name: str, port: int, payload: bytes) -> bytes:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        try:
            pf = portforward(
                self._core.connect_get_namespaced_pod_portforward,
                name,
                namespace,
                ports=str(port),
                _request_timeout=self._timeout,
            )
        except ApiException as exc:
            raise ClusterError(_ws_status(exc), _ws_message(exc)) from None
        try:
            sock = pf.socket(port)
            sock.settimeout(self._timeout)
            sock.sendall(payload)
            data = _read_http(sock)
            err = pf.error(port)
        except OSError as exc:
            raise ClusterError(0, f"port-forward stream: {exc}") from None
        finally:
            pf.close()
        if not data and err:
            raise ClusterError(0, f"port-forward error: {err}")
        return data

    def list_events(self, namespace: str, object_name: str) -> list[Obj]:
        return self._items(
            f"/api/v1/namespaces/{quote(namespace)}/events",
            [("fieldSelector", f"involvedObject.name={object_name}")],
        )

    def create_namespace(self, name: str, labels: dict[str, str]) -> Obj:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
        }
        return self._json("POST", "/api/v1/namespaces", body=body)

    def delete_namespace(self, name: str) -> None:
        try:
            self._request("DELETE", f"/api/v1/namespaces/{quote(name)}")
        except ClusterError as exc:
            if exc.status != 404:
                raise

    def get_resource_quota(self, namespace: str, name: str) -> Obj:
        return self._json(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/resourcequotas/{quote(name)}"
        )

    def list_endpoint_slices(self, namespace: str, service: str) -> list[Obj]:
        # The EndpointSlice controller labels every slice of a Service with its name.
        return self._items(
            f"/apis/discovery.k8s.io/v1/namespaces/{quote(namespace)}/endpointslices",
            [("labelSelector", f"kubernetes.io/service-name={service}")],
        )

    def list_workloads(self, namespace: str) -> list[Obj]:
        out = []
        for plural, kind in (("deployments", "Deployment"), ("statefulsets", "StatefulSet")):
            for item in self._items(f"/apis/apps/v1/namespaces/{quote(namespace)}/{plural}"):
                item["kind"] = kind  # list items come without kind
                out.append(item)
        return out

    def get_config_map(self, namespace: str, name: str) -> Obj:
        return self._json("GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}")

    def get_deployment(self, namespace: str, name: str) -> Obj:
        return self._json(
            "GET", f"/apis/apps/v1/namespaces/{quote(namespace)}/deployments/{quote(name)}"
        )

    @staticmethod
    def _custom_path(group: str, version: str, plural: str, namespace: str | None) -> str:
        ns = f"/namespaces/{quote(namespace)}" if namespace else ""
        return f"/apis/{group}/{version}{ns}/{plural}"

    def get_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> Obj:
        path = self._custom_path(group, version, plural, namespace)
        return self._json("GET", f"{path}/{quote(name)}")

    def list_custom(
        self, group: str, version: str, plural: str, namespace: str | None = None
    ) -> list[Obj]:
        return self._items(self._custom_path(group, version, plural, namespace))

    def create_custom(
        self,
        group: str,
        version: str,
        plural: str,
        body: Obj,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        query = [("dryRun", "All")] if dry_run else None
        return self._json("POST", self._custom_path(group, version, plural, namespace), query, body)

    def delete_custom(
        self, group: str, version: str, plural: str, name: str, namespace: str | None = None
    ) -> None:
        path = self._custom_path(group, version, plural, namespace)
        try:
            self._request("DELETE", f"{path}/{quote(name)}")
        except ClusterError as exc:
            if exc.status != 404:
                raise


def _ws_status(exc: Any) -> int:
    """Websocket failures arrive as ApiException(status=0, reason='Handshake status 500 ...')."""
    if exc.status:
        return int(exc.status)
    m = _STATUS_IN_TEXT.search(str(exc.reason or ""))
    return int(m.group(1)) if m else 0


# websocket-client's failed handshake: "Handshake status <code> <reason> -+-+- <headers dict>
# -+-+- <body>"; the kubernetes stream client passes it on as the ApiException's reason.
_WS_PARTS = " -+-+- "


def _ws_message(exc: Any) -> str:
    """The API server's own Status message of a failed websocket handshake, without the
    response headers (audit id, date) websocket-client puts in front of it."""
    reason = str(exc.reason or "")
    head, _, rest = reason.partition(_WS_PARTS)
    body = rest.rpartition(_WS_PARTS)[2]
    return _message(None if body in ("", "None") else body, head)


def _read_http(sock: socket.socket) -> bytes:
    """Read one HTTP/1.0 reply. The tunnel does not forward the pod's close, so stop at
    Content-Length (or on timeout) instead of waiting for EOF."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data
        if not chunk:
            return data
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            m = re.search(rb"(?im)^content-length:\s*(\d+)", head)
            if m and len(body) >= int(m.group(1)):
                return data


def factory(timeout: float):  # -> ClusterFactory
    def make(kubeconfig: dict[str, Any], label: str) -> KubeCluster:
        return KubeCluster(kubeconfig, label, timeout)

    return make
