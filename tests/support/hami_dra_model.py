"""A model of HAMi-DRA where the real tier has no HAMi-DRA (the module proxy refuses it): what its
fake kubelet plugin publishes for the program's inventory, and what its webhook does to a pod.

Read in Project-HAMi/HAMi-DRA (docs/upstream-facts/tenant.md `hami-dra-*`):
- the plugin (cmd/fake-driver/driver.go:45-59) publishes its config's devices for its node
  through k8s.io/dynamic-resource-allocation's kubeletplugin helper: one node-local slice owned
  by the Node; the pool is named after the node, as HAMi-DRA's real plugin names it (the fake
  plugin's own config code was not readable: its pool name is the one assumption here);
- the webhook (pkg/webhook/dra/mutating.go, pkg/config/dra_device.go at 052848d1) turns a
  container's `nvidia.com/gpu` limit into one plain ResourceClaim `<ns>-<pod>-<container>-nvidia`
  (ExactCount of the count, the class, a CEL selector on the type attribute, `cores` as given and
  `memory` as MiB x 2**20 bytes), strips the three resources, adds the claim to the pod and
  labels it `hami.io/dra`.
Differences: no kubelet runs the pods (kwok does), so nothing is prepared on a node; names longer
than 63 characters (hashed by the webhook) are not modelled; init containers are left alone, as
the webhook leaves them.
"""

from __future__ import annotations

import copy
from typing import Any

from builders.hami_dra import DEVICE_CLASS, DEVICE_TYPE, DRIVER
from labcheck.dra import quantity

GPU = "nvidia.com/gpu"
GPU_MEMORY = "nvidia.com/gpumem"
GPU_CORES = "nvidia.com/gpucores"
DRA_LABEL = "hami.io/dra"


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
    return f"{namespace}-{pod}-{container}-nvidia"


def webhook_claims(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The ResourceClaims the webhook creates: one per container asking `nvidia.com/gpu`."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    claims = []
    for container in pod["spec"]["containers"]:
        limits = container.get("resources", {}).get("limits", {})
        if GPU not in limits:
            continue
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
            "selectors": [
                {"cel": {"expression": f'device.attributes["{DRIVER}"].type == "{DEVICE_TYPE}"'}}
            ],
        }
        if capacity:
            request["capacity"] = {"requests": capacity}
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name(namespace, name, container["name"]),
                    "namespace": namespace,
                },
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
            }
        )
    return claims


def webhook_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the webhook admits it: GPU resources gone, each container given its claim."""
    out = copy.deepcopy(pod)
    namespace, name = out["metadata"]["namespace"], out["metadata"]["name"]
    for container in out["spec"]["containers"]:
        resources = container.get("resources", {})
        if GPU not in resources.get("limits", {}):
            continue
        for kind in ("limits", "requests"):
            for resource in (GPU, GPU_MEMORY, GPU_CORES):
                resources.get(kind, {}).pop(resource, None)
        claim = claim_name(namespace, name, container["name"])
        out["spec"].setdefault("resourceClaims", []).append(
            {"name": claim, "resourceClaimName": claim}
        )
        resources.setdefault("claims", []).append({"name": claim})
        out["metadata"].setdefault("labels", {})[DRA_LABEL] = "true"
    return out
