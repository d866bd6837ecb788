"""An admission webhook of the real tier: served over TLS on loopback with a CA of its own and
registered on the plane as its chart registers it; a subclass says what it answers."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from controlplane import ControlPlane, write_pki
from hami_extender import json_handler


class TlsWebhook:
    name = ""  # the MutatingWebhookConfiguration's name
    path = "/"  # where the API server posts the AdmissionReview

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.pki = write_pki(plane.workdir / f"{self.name}-pki")
        self.server: ThreadingHTTPServer | None = None

    def review(self, request: dict) -> dict:
        """The AdmissionResponse for one request."""
        raise NotImplementedError

    def webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        """The configuration's webhooks, each with ``client_config``."""
        raise NotImplementedError

    @staticmethod
    def json_patch(request: dict, patch: list[dict]) -> dict:
        return {
            "uid": request["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }

    def serve(self) -> None:
        def answer(_: str, review: dict) -> dict:
            response = self.review(review["request"])
            return {
                "apiVersion": review["apiVersion"],
                "kind": review["kind"],
                "response": response,
            }

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.pki.serving_cert, self.pki.serving_key)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), json_handler(answer))
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        client_config = {
            "url": f"https://127.0.0.1:{self.server.server_address[1]}{self.path}",
            "caBundle": base64.b64encode(self.pki.ca_cert.read_bytes()).decode(),
        }
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": self.webhooks(client_config),
        }
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(config))

    def unregister(self) -> None:
        """Remove the registration: pods are admitted without this webhook again."""
        self.plane.kubectl("delete", "mutatingwebhookconfiguration", self.name)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
