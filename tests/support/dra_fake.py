"""A DRA tenant's API server for the hermetic tests: HAMi-DRA's webhooks (the model of
tests/support/hami_dra_model.py) on pod create and delete, and kube-scheduler's allocation of
consumable capacity as the real v1.36.3 showed it in tests/real/test_dra_allocation.py: the
first device (in the slices' order, on the pod's node selector) with the memory and cores a
claim asks left gets it, with its own share ID and consumedCapacity; otherwise the pod is
Unschedulable with "cannot allocate all claims". A pod naming another scheduler is never looked
at (fact `dra-webhook-keeps-the-scheduler-name`). Not modelled: the burst in which the real
scheduler leaves a pod with room unplaced (docs/hami-and-dra.md), preemption, several requests
per claim, the claims' selectors.
"""

from __future__ import annotations

import contextlib
import copy
import random
import uuid
from datetime import UTC, datetime

from builders import hami_dra as built
from labcheck import dra
from labcheck.cluster import ClusterError
from labconfig.gpu_models import KNOWN_GPU_MODELS
from tests.support import hami_dra_model as model
from tests.support.labcheck_fakes import A100, FakeLab, FakeServer, Obj, standard_lab

NODE = "tenant-dra-worker-1"  # the DRA tenant with_dra_tenant adds
WALL0 = datetime(2026, 9, 1, tzinfo=UTC).timestamp()
UNFIT = (
    "0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, preemption: "
    "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(WALL0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DraServer(FakeServer):
    """`webhooks`: HAMi-DRA's webhook is serving; its validating webhook on pod DELETE fails
    open (failurePolicy Ignore), so a pod deleted while it is down leaves its claims."""

    webhooks = True

    def create_pod(self, namespace: str, body: Obj, dry_run: bool = False) -> Obj:
        if namespace not in self.namespaces:  # NamespaceLifecycle runs before the webhooks
            raise ClusterError(404, f'namespaces "{namespace}" not found')
        pod = copy.deepcopy(body)
        pod["metadata"]["namespace"] = namespace
        rng = random.Random(self._seq)

        def create_claim(claim: Obj) -> None:
            # Like HAMi-DRA's webhook: the claims are created whatever the request's dryRun says.
            name = claim["metadata"]["name"]
            if refusal := model.claim_refusal(claim):
                raise model.ApiError(422, refusal)
            if self._claim(namespace, name) is not None:
                raise model.ApiError(409, f'resourceclaims.resource.k8s.io "{name}" already exists')
            self.create_custom(dra.GROUP, dra.VERSION, dra.CLAIMS, claim, namespace)

        try:
            admitted = model.admit(pod, create_claim, rng)
        except model.ApiError as exc:
            raise ClusterError(exc.status, exc.message) from None
        if not admitted["metadata"].get("name"):
            admitted["metadata"]["name"] = model.generated_name(
                admitted["metadata"]["generateName"], rng
            )
        return super().create_pod(namespace, admitted, dry_run)

    def delete_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.get((namespace, name))
        super().delete_pod(namespace, name)
        for claim in model.claims_deleted_with(pod) if pod and self.webhooks else ():
            with contextlib.suppress(ClusterError):
                self.delete_custom(dra.GROUP, dra.VERSION, dra.CLAIMS, claim, namespace)

    def delete_namespace(self, name: str) -> None:
        super().delete_namespace(name)  # the namespace controller deletes its claims too
        for key in [k for k in self.custom if k[0] == dra.CLAIMS and k[1] == name]:
            del self.custom[key]

    def _claim(self, namespace: str, name: str) -> Obj | None:
        return self.custom.get((dra.CLAIMS, namespace, name, dra.GROUP))

    def _used(self) -> dict[tuple[str, str], list[int]]:
        used: dict[tuple[str, str], list[int]] = {}
        for (plural, *_), claim in self.custom.items():
            if plural != dra.CLAIMS:
                continue
            for r in dra.allocation_results(claim):
                held = used.setdefault((r["pool"], r["device"]), [0, 0])
                held[0] += dra.quantity(r["consumedCapacity"]["memory"]) // 2**20
                held[1] += dra.quantity(r["consumedCapacity"]["cores"])
        return used

    def _allocate(self, claim: Obj, node_wanted: str | None) -> str | None:
        """The first device with room for the claim's one request; its node, or None."""
        exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
        asks = (exactly.get("capacity") or {}).get("requests") or {}
        used = self._used()
        slices = self.list_custom(dra.GROUP, dra.VERSION, dra.SLICES)
        for (pool, name), card in dra.cards(slices).items():
            if node_wanted and card.node != node_wanted:
                continue
            mem = dra.quantity(asks["memory"]) // 2**20 if "memory" in asks else card.memory_mb
            cores = dra.quantity(asks["cores"]) if "cores" in asks else 0
            held = used.get((pool, name), [0, 0])
            if held[0] + mem > card.memory_mb or held[1] + cores > card.cores:
                continue
            share = str(uuid.uuid5(uuid.NAMESPACE_URL, claim["metadata"]["name"]))
            result = {
                "request": "gpu", "driver": dra.DRIVER, "pool": pool, "device": name,
                "shareID": share, "consumedCapacity": {"memory": f"{mem}Mi", "cores": str(cores)},
            }  # fmt: skip
            claim["status"] = {"allocation": {"devices": {"results": [result]}}}
            return card.node
        return None

    def _tick(self) -> None:
        now = self.clock.now()
        for (ns, _), pod in sorted(self.pods.items(), key=lambda kv: kv[1]["_seq"]):
            spec = pod["spec"]
            if spec.get("nodeName") or not spec.get("resourceClaims"):
                continue
            if spec.get("schedulerName") != "default-scheduler":
                continue  # no scheduler of that name runs: no condition, no event
            want = (spec.get("nodeSelector") or {}).get("kubernetes.io/hostname")
            (ref,) = spec["resourceClaims"]
            claim = self._claim(ns, ref["resourceClaimName"])
            node = self._allocate(claim, want) if claim is not None else None
            if node is None:
                condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                             "message": UNFIT, "lastTransitionTime": _stamp(now)}  # fmt: skip
            else:
                spec["nodeName"] = node
                pod["status"]["phase"] = "Running"
                condition = {"type": "PodScheduled", "status": "True",
                             "lastTransitionTime": _stamp(now)}  # fmt: skip
            pod["status"]["conditions"] = [condition]
        super()._tick()


def published_slice(node: str) -> dict:
    """What HAMi-DRA's fake plugin publishes for the program's config of one A100 80GB."""
    config = built.fake_driver_config([KNOWN_GPU_MODELS["A100-80GB"]], [node])
    return {
        "metadata": {"name": f"{node}-{built.DRIVER}"},
        "spec": {
            "driver": built.DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": config["nodes"][node]["devices"],
        },
    }


def with_dra_tenant() -> FakeLab:
    """The standard fake lab with tenant-dra: one A100 80GB, shared through HAMi-DRA."""
    lab = standard_lab()
    server = lab.add_tenant("tenant-dra", "172.30.255.210", [A100], kind=DraServer)
    lab.spec["tenants"][-1]["gpuSharing"] = "dra"
    del server.nodes[NODE]["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    publish(server, published_slice(NODE))
    return lab


def publish(server, item: dict) -> None:
    server.custom[("resourceslices", "", item["metadata"]["name"], dra.GROUP)] = item
