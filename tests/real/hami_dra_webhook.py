"""HAMi-DRA's webhooks where the real tier has no HAMi-DRA (the module proxy refuses it): the
model of tests/support/hami_dra_model.py served over TLS and registered as its chart 0.2.2 does.

As read in Project-HAMi/HAMi-DRA at a5d8661 (v0.2.0; facts `hami-dra-webhook-claim`,
`hami-dra-claim-cleanup`): for a pod CREATE the mutating webhook creates each GPU container's
ResourceClaim through its own client (without looking at the request's dryRun, under a
registration that says sideEffects None), then answers with the pod rewritten; a claim the API
server refuses refuses the pod (500, "failed to create ResourceClaim ..."). For a pod DELETE the
validating webhook deletes the claims the pod names. Registered as
charts/hami-dra/templates/webhook/{mutating,validating}webhookconfiguration.yaml render them with
the program's values (`mutate.hami.io` on pods CREATE, no failurePolicy: the API's default Fail;
`validate.hami.io` on pods DELETE, failurePolicy Ignore; admissionReviewVersions v1; the
namespaces of webhook.config.scope left out).
"""

from __future__ import annotations

import json
import urllib.error
from typing import Any

from admission_webhook import TlsWebhook
from controlplane import ControlPlane
from test_agent_real import rest

from builders.hami_dra import NAMESPACE, WEBHOOK_EXCLUDED_NAMESPACES
from tests.support import hami_dra_model as model


class HamiDraWebhook(TlsWebhook):
    name, path = "hami-dra-mutatingwebhookconfiguration", "/mutate"
    validating_name, validating_path = "hami-dra-validatingwebhookconfiguration", "/validate"

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(plane)
        self.client = rest(plane)  # the webhook's own ServiceAccount: may create claims
        self.claims_created: list[str] = []
        self.claims_deleted: list[str] = []

    def _call(self, method: str, path: str, body: Any = None) -> None:
        try:
            self.client.call(method, path, body)
        except urllib.error.HTTPError as exc:
            status = json.loads(exc.read() or b"{}")
            raise model.ApiError(exc.code, status.get("message", str(exc))) from None

    def review(self, request: dict) -> dict:
        pod = dict(request["object"])
        ns = request["namespace"]
        pod["metadata"] = {**pod["metadata"], "namespace": ns}

        def create_claim(claim: dict) -> None:
            self._call("POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", claim)
            self.claims_created.append(f"{ns}/{claim['metadata']['name']}")

        try:
            admitted = model.webhook_admit(pod, create_claim)
        except model.ApiError as exc:
            status = {"code": exc.status, "message": exc.message}
            return {"uid": request["uid"], "allowed": False, "status": status}
        if model.DRA_LABEL not in (admitted["metadata"].get("labels") or {}):
            return {"uid": request["uid"], "allowed": True}
        patch = [
            {"op": "replace", "path": "/spec", "value": admitted["spec"]},
            {"op": "add", "path": "/metadata/labels", "value": admitted["metadata"]["labels"]},
        ]
        return self.json_patch(request, patch)

    def validate(self, request: dict) -> dict:
        pod, ns = request["oldObject"], request["namespace"]
        for name in model.claims_deleted_with(pod):
            try:
                path = f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}"
                self._call("DELETE", path)
                self.claims_deleted.append(f"{ns}/{name}")
            except model.ApiError as exc:
                if exc.status != 404:
                    raise
        return {"uid": request["uid"], "allowed": True}

    def _selector(self) -> dict[str, Any]:
        excluded = [*WEBHOOK_EXCLUDED_NAMESPACES, NAMESPACE]
        return {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": excluded}
            ]
        }

    def _webhook(self, name: str, operation: str, client_config: dict[str, Any]) -> dict:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": client_config,
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": [operation],
                    "resources": ["pods"],
                    "scope": "*",
                }
            ],
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "namespaceSelector": self._selector(),
        }

    def webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        return [self._webhook("mutate.hami.io", "CREATE", client_config)]

    def validating_webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        return [{**self._webhook("validate.hami.io", "DELETE", client_config),
                 "failurePolicy": "Ignore"}]  # fmt: skip
