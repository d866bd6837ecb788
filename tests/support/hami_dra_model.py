"""A model of HAMi-DRA v0.2.0 (the webhook and fake kubelet plugin chart 0.2.2 pulls) where the
tests have no HAMi-DRA (the module proxy refuses it): what its fake kubelet plugin publishes for
the program's inventory, what its webhooks do to a pod, and what the API server answers.

Read in Project-HAMi/HAMi-DRA at a5d8661 ("release: bump to v0.2.0"; docs/upstream-facts/
tenant.md `hami-dra-*`) and checked once against the real webhook and plugin built from it:
- the plugin (cmd/fake-driver/main.go:188-199) publishes its config's devices for its node in
  one pool named after the node, one node-local slice owned by the Node;
- the mutating webhook (pkg/webhook/dra/mutating.go:50-145), on pod CREATE, creates for each
  container whose limits hold `nvidia.com/gpu`, in container order, one plain ResourceClaim
  `<namespace>-<pod>-<container>` (`<namespace>-<5 random characters>-<container>` for a pod
  that has only a generateName: its name is not set yet), never shortened, no owner reference:
  ExactCount of the count, the class, a CEL selector on the type attribute, one more per
  `nvidia.com/use-gpuuuid`, `nouse-gpuuuid`, `use-gputype`, `nouse-gputype` annotation
  (:198-231; the negative ones write `not in`, which is not CEL), `cores` as given and
  `memory` as MiB x 2**20 bytes. A claim the API server refuses refuses the pod ("failed to
  create ResourceClaim ..."), leaving the claims made before it. It then strips the three
  resources, adds the claim to the pod under the same name and labels it `hami.io/dra`; the API
  server refuses a pod whose claim name is not a DNS label (over 63 characters) after the claim
  exists;
- the validating webhook (pkg/webhook/dra/validating.go:44-78, failurePolicy Ignore), on pod
  DELETE, deletes the claims named in the pod's `spec.resourceClaims`.
Differences: no kubelet runs the pods (kwok does), so nothing is prepared on a node; init
containers are left alone, as the webhook leaves them.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

from builders.hami_dra import DEVICE_CLASS, DEVICE_TYPE, DRIVER
from labcheck.dra import quantity

GPU = "nvidia.com/gpu"
GPU_MEMORY = "nvidia.com/gpumem"
GPU_CORES = "nvidia.com/gpucores"
DRA_LABEL = "hami.io/dra"
# pkg/constants/constants.go:23-26, in the order addAnnotationSelectors reads them.
USE_UUID, NO_USE_UUID = "nvidia.com/use-gpuuuid", "nvidia.com/nouse-gpuuuid"
USE_TYPE, NO_USE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
SELECTORS = ((USE_UUID, "uuid", "in"), (NO_USE_UUID, "uuid", "not in"),
             (USE_TYPE, "productName", "in"), (NO_USE_TYPE, "productName", "not in"))  # fmt: skip
# A pod's spec.resourceClaims[].name is a DNS label (k8s pkg/apis/core/validation).
MAX_CLAIM_NAME = 63
# k8s.io/apimachinery/pkg/util/rand.String's alphabet (no vowels, no 0, 1, 3).
RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class ApiError(Exception):
    """The API server's answer to a request it refused: HTTP status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def device_class() -> dict[str, Any]:
    """The chart's class for its driver (templates/hami-dra-driver/deviceclass.yaml)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && '
                        f'device.attributes["{DRIVER}"].type == "{DEVICE_TYPE}"'
                    }
                }
            ]
        },
    }


def resource_slices(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The slices the plugin on each node of the config publishes (one pool per node)."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": copy.deepcopy(entry["devices"]),
            },
        }
        for node, entry in config["nodes"].items()
    ]


def claim_name(namespace: str, pod: str, container: str) -> str:
    return f"{namespace}-{pod}-{container}"


def random_suffix(rng: random.Random | None = None) -> str:
    """Five characters as apimachinery's rand.String(5) draws them."""
    return "".join((rng or random).choice(RAND_ALPHABET) for _ in range(5))


def selectors(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's CEL selectors: the type attribute, then one per selection annotation, its
    values split on "," and joined into a list as they are (no trimming, no escaping)."""
    exprs = [f'device.attributes["{DRIVER}"].type == "{DEVICE_TYPE}"']
    annotations = pod["metadata"].get("annotations") or {}
    for key, attribute, op in SELECTORS:
        if key in annotations:
            values = '","'.join(annotations[key].split(","))
            exprs.append(f'device.attributes["{DRIVER}"].{attribute} {op} ["{values}"]')
    return [{"cel": {"expression": e}} for e in exprs]


def _claim(name: str, namespace: str, limits: dict[str, Any], pod: dict[str, Any]) -> dict:
    capacity = {}
    if GPU_CORES in limits:
        capacity["cores"] = str(quantity(str(limits[GPU_CORES])))
    if GPU_MEMORY in limits:
        # The API server hands a webhook its canonical form ("8000" arrives as "8k"); the
        # webhook reads it as a resource.Quantity.
        capacity["memory"] = str(quantity(str(limits[GPU_MEMORY])) * 1024 * 1024)
    request: dict[str, Any] = {
        "deviceClassName": DEVICE_CLASS,
        "allocationMode": "ExactCount",
        "count": quantity(str(limits[GPU])),
        "selectors": selectors(pod),
    }
    if capacity:
        request["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def _gpu_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in pod["spec"]["containers"] if GPU in c.get("resources", {}).get("limits", {})]


def webhook_claims(pod: dict[str, Any], rng: random.Random | None = None) -> list[dict[str, Any]]:
    """The ResourceClaims the webhook creates: one per container asking `nvidia.com/gpu`."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"].get("name", "")
    return [
        _claim(claim_name(namespace, name or random_suffix(rng), c["name"]), namespace,
               c["resources"]["limits"], pod)
        for c in _gpu_containers(pod)
    ]  # fmt: skip


def webhook_pod(pod: dict[str, Any], claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The pod as the webhook admits it: GPU resources gone, each container given its claim
    (`claims`: the ones webhook_claims made for it, else named from the pod)."""
    out = copy.deepcopy(pod)
    names = [c["metadata"]["name"] for c in claims or webhook_claims(pod)]
    for container, claim in zip(_gpu_containers(out), names, strict=True):
        resources = container["resources"]
        for kind in ("limits", "requests"):
            for resource in (GPU, GPU_MEMORY, GPU_CORES):
                resources.get(kind, {}).pop(resource, None)
        out["spec"].setdefault("resourceClaims", []).append(
            {"name": claim, "resourceClaimName": claim}
        )
        resources["claims"] = [{"name": claim}]
        out["metadata"].setdefault("labels", {})[DRA_LABEL] = "true"
    return out


def claim_refusal(claim: dict[str, Any]) -> str | None:
    """Why the API server refuses the claim (422), or None: a selector that is not CEL (the
    compiler's words for `not in`)."""
    name = claim["metadata"]["name"]
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    for i, selector in enumerate(exactly["selectors"]):
        expr = selector["cel"]["expression"]
        if (at := expr.find(" not in [")) >= 0:
            return (
                f'ResourceClaim.resource.k8s.io "{name}" is invalid: spec.devices.requests[0].'
                f"exactly.selectors[{i}].cel.expression: Invalid value: {json.dumps(expr)}: "
                f"compilation failed: ERROR: <input>:1:{at + 2}: Syntax error: mismatched "
                "input 'not' expecting <EOF>"
            )
    return None


def pod_refusal(pod: dict[str, Any]) -> str | None:
    """Why the API server refuses the admitted pod (422), or None: a claim name that is not a
    DNS label."""
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
    for i, ref in enumerate(pod["spec"].get("resourceClaims") or []):
        if len(ref["name"]) > MAX_CLAIM_NAME:
            return (
                f'Pod "{name}" is invalid: spec.resourceClaims[{i}].name: Invalid value: '
                f'"{ref["name"]}": must be no more than {MAX_CLAIM_NAME} characters'
            )
    return None


def webhook_admit(
    pod: dict[str, Any],
    create_claim: Callable[[dict[str, Any]], None],
    rng: random.Random | None = None,
) -> dict[str, Any]:
    """The mutating webhook on a pod CREATE: the pod as it admits it. `create_claim` creates
    one claim or raises ApiError as the API server would; the webhook then refuses the pod
    (ApiError 500), leaving the claims it made before."""
    claims = webhook_claims(pod, rng)
    for claim in claims:
        try:
            create_claim(claim)
        except ApiError as exc:
            ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
            raise ApiError(
                500, f"failed to create ResourceClaim {ns}/{name}: {exc.message}"
            ) from None
    return webhook_pod(pod, claims) if claims else copy.deepcopy(pod)


def admit(
    pod: dict[str, Any],
    create_claim: Callable[[dict[str, Any]], None],
    rng: random.Random | None = None,
) -> dict[str, Any]:
    """The webhook, then the API server's validation of what it admitted. Raises ApiError: 500
    when the webhook refuses the pod, 422 when a claim name is too long for the pod (its
    claims stay)."""
    try:
        admitted = webhook_admit(pod, create_claim, rng)
    except ApiError as exc:
        message = f'admission webhook "mutate.hami.io" denied the request: {exc.message}'
        raise ApiError(exc.status, message) from None
    if refusal := pod_refusal(admitted):
        raise ApiError(422, refusal)
    return admitted


def claims_deleted_with(pod: dict[str, Any]) -> list[str]:
    """The claims the validating webhook deletes when the pod is deleted: those named in its
    spec.resourceClaims, for a pod the mutating webhook labelled."""
    if DRA_LABEL not in (pod["metadata"].get("labels") or {}):
        return []
    return [ref["name"] for ref in pod["spec"].get("resourceClaims") or []]


def generated_name(generate_name: str, rng: random.Random | None = None) -> str:
    """The name the API server gives a pod created with generateName, after admission."""
    return generate_name + random_suffix(rng)
