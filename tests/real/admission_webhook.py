"""An admission webhook of the real tier: served over TLS on loopback with a CA of its own and
registered on the plane as its chart registers it; a subclass says what it answers (a mutating
webhook, and optionally a validating one on the same server)."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from abc import ABC, abstractmethod
from http.server import ThreadingHTTPServer
from typing import Any

from controlplane import ControlPlane, write_pki
from hami_extender import json_handler


class TlsWebhook(ABC):
    name = ""  # the MutatingWebhookConfiguration's name
    path = "/"  # where the API server posts the AdmissionReview
    # The ValidatingWebhookConfiguration's name and path, for a subclass that has one.
    validating_name, validating_path = "", "/validate"

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.pki = write_pki(plane.workdir / f"{self.name}-pki")
        self.server: ThreadingHTTPServer | None = None

    @abstractmethod
    def review(self, request: dict) -> dict:
        """The AdmissionResponse for one request."""

    @abstractmethod
    def webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        """The configuration's webhooks, each with ``client_config``."""

    def validate(self, request: dict) -> dict:
        """The validating webhook's AdmissionResponse for one request. Only a subclass that
        sets ``validating_name`` registers one; without it the API server never posts here, and
        a request that does is refused."""
        message = f"{self.name} registers no validating webhook"
        return {"uid": request["uid"], "allowed": False, "status": {"message": message}}

    def validating_webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        """The ValidatingWebhookConfiguration's webhooks (none: not registered)."""
        return []

    @staticmethod
    def json_patch(request: dict, patch: list[dict]) -> dict:
        return {
            "uid": request["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
        }

    def serve(self) -> None:
        def answer(path: str, review: dict) -> dict:
            handle = self.validate if path.split("?")[0] == self.validating_path else self.review
            response = handle(review["request"])
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
        configs = [
            ("MutatingWebhookConfiguration", self.name, self.webhooks(self._client(self.path))),
            ("ValidatingWebhookConfiguration", self.validating_name,
             self.validating_webhooks(self._client(self.validating_path))),
        ]  # fmt: skip
        for kind, name, webhooks in configs:
            if webhooks:
                config = {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": kind,
                    "metadata": {"name": name},
                    "webhooks": webhooks,
                }
                self.plane.kubectl("apply", "-f", "-", input=json.dumps(config))

    def _client(self, path: str) -> dict[str, Any]:
        assert self.server is not None
        return {
            "url": f"https://127.0.0.1:{self.server.server_address[1]}{path}",
            "caBundle": base64.b64encode(self.pki.ca_cert.read_bytes()).decode(),
        }

    def unregister(self) -> None:
        """Remove the registration: pods are admitted without this webhook again."""
        self.plane.kubectl("delete", "mutatingwebhookconfiguration", self.name)
        if self.validating_name:
            self.plane.kubectl("delete", "validatingwebhookconfiguration", self.validating_name)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
