"""HAMi-DRA's mutating webhook where the real tier has no HAMi-DRA (the module proxy refuses it):
the model of tests/support/hami_dra_model.py served over TLS and registered as its chart does.

As read in Project-HAMi/HAMi-DRA (fact `hami-dra-webhook-claim`, pkg/webhook/dra/mutating.go at
052848d1): for a pod CREATE it creates each container's ResourceClaim through its own client
(without looking at the request's dryRun, under a registration that says sideEffects None), then
answers with the pod rewritten. Registered as charts/hami-dra/templates/webhook/
mutatingwebhookconfiguration.yaml renders it with the program's values (`mutate.hami.io`, pods
CREATE, admissionReviewVersions v1, failurePolicy Fail, namespaces of webhook.config.scope left
out). Not modelled: its validating webhook on pod DELETE (failurePolicy Ignore), which deletes
a deleted pod's claims (fact `hami-dra-claim-cleanup`): here the claims stay until their namespace
or whoever made the pod deletes them, as when that webhook misses a delete.
"""

from __future__ import annotations

from typing import Any

from admission_webhook import TlsWebhook
from controlplane import ControlPlane
from test_agent_real import rest

from builders.hami_dra import NAMESPACE, WEBHOOK_EXCLUDED_NAMESPACES
from tests.support import hami_dra_model as model


class HamiDraWebhook(TlsWebhook):
    name, path = "hami-dra-mutatingwebhookconfiguration", "/mutate"

    def __init__(self, plane: ControlPlane) -> None:
        super().__init__(plane)
        self.client = rest(plane)  # the webhook's own ServiceAccount: may create claims
        self.claims_created: list[str] = []

    def review(self, request: dict) -> dict:
        pod = dict(request["object"])
        pod["metadata"] = {**pod["metadata"], "namespace": request["namespace"]}
        claims = model.webhook_claims(pod)
        if not claims:
            return {"uid": request["uid"], "allowed": True}
        for claim in claims:
            path = f"/apis/resource.k8s.io/v1/namespaces/{request['namespace']}/resourceclaims"
            self.client.call("POST", path, claim)
            self.claims_created.append(f"{request['namespace']}/{claim['metadata']['name']}")
        admitted = model.webhook_pod(pod)
        patch = [
            {"op": "replace", "path": "/spec", "value": admitted["spec"]},
            {"op": "add", "path": "/metadata/labels", "value": admitted["metadata"]["labels"]},
        ]
        return self.json_patch(request, patch)

    def webhooks(self, client_config: dict[str, Any]) -> list[dict]:
        excluded = [*WEBHOOK_EXCLUDED_NAMESPACES, NAMESPACE]
        return [
            {
                "name": "mutate.hami.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "sideEffects": "None",
                "timeoutSeconds": 10,
                "failurePolicy": "Fail",
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": excluded,
                        }
                    ]
                },
            }
        ]
