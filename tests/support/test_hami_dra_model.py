"""The model of HAMi-DRA v0.2.0 behind a DRA tenant's fake API server (tests/support/dra_fake.py)
does what the real webhook did against the real API server (docs/upstream-facts/tenant.md
`hami-dra-*`): claim names, generateName, the 63-character refusal, the claims deleted with the
pod, and the negative card selectors refused."""

from __future__ import annotations

from typing import Any

import pytest

from labcheck import dra
from labcheck.cluster import ClusterError
from tests.support import hami_dra_model as model
from tests.support.dra_fake import DraServer
from tests.support.labcheck_fakes import FakeClock

NS = "gpu-workloads"


def server() -> DraServer:
    s = DraServer("tenant-dra", FakeClock())
    s.create_namespace(NS, {})
    return s


def pod(name: str, *containers: str, annotations: dict[str, str] | None = None) -> dict:
    limits = {model.GPU: "1", model.GPU_MEMORY: "20000", model.GPU_CORES: "25"}
    meta: dict[str, Any] = {"generateName": name} if name.endswith("-") else {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": c, "image": "pause", "resources": {"limits": dict(limits)}}
                for c in containers or ("gpu",)
            ]
        },
    }


def claims(s: DraServer) -> list[str]:
    return sorted(c["metadata"]["name"] for c in s.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS))


@pytest.mark.upstream("hami-dra-webhook-claim")
def test_each_gpu_container_gets_a_claim_named_namespace_pod_container():
    s = server()
    created = s.create_pod(NS, pod("share-1", "a", "b"))
    assert claims(s) == ["gpu-workloads-share-1-a", "gpu-workloads-share-1-b"]
    assert created["spec"]["resourceClaims"] == [
        {"name": n, "resourceClaimName": n} for n in claims(s)
    ]
    assert [c["resources"] for c in created["spec"]["containers"]] == [
        {"limits": {}, "claims": [{"name": n}]} for n in claims(s)
    ]
    assert created["metadata"]["labels"] == {model.DRA_LABEL: "true"}


@pytest.mark.upstream("hami-dra-webhook-claim")
def test_a_generated_pod_name_is_not_in_its_claims_name():
    s = server()
    created = s.create_pod(NS, pod("gen-"))
    name = created["metadata"]["name"]
    (claim,) = claims(s)
    assert name.startswith("gen-") and len(name) == len("gen-") + 5
    middle = claim.removeprefix(f"{NS}-").removesuffix("-gpu")
    assert len(middle) == 5 and set(middle) <= set(model.RAND_ALPHABET)
    assert name[4:] != middle and "gen-" not in claim
    assert created["spec"]["resourceClaims"][0]["name"] == claim


@pytest.mark.upstream("hami-dra-webhook-claim", "hami-dra-claim-cleanup")
def test_a_claim_name_over_63_characters_refuses_the_pod_and_leaves_the_claim():
    s = server()
    fits = "p" * (63 - len(f"{NS}--gpu"))  # the claim's name is exactly 63 characters
    s.create_pod(NS, pod(fits))
    with pytest.raises(ClusterError) as refused:
        s.create_pod(NS, pod(fits + "q"))
    assert refused.value.status == 422
    assert "spec.resourceClaims[0].name" in refused.value.message
    assert "must be no more than 63 characters" in refused.value.message
    assert (NS, fits + "q") not in s.pods
    assert claims(s) == [f"{NS}-{fits}-gpu", f"{NS}-{fits}q-gpu"]  # the second one stays


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_the_claims_go_with_the_pod_so_the_same_pod_can_be_created_again():
    s = server()
    s.create_pod(NS, pod("share-1", "a", "b"))
    s.delete_pod(NS, "share-1")
    assert claims(s) == []
    s.create_pod(NS, pod("share-1", "a", "b"))  # `kubectl delete -f` then `apply -f` again
    assert claims(s) == ["gpu-workloads-share-1-a", "gpu-workloads-share-1-b"]


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_with_the_webhook_down_a_deleted_pod_leaves_its_claim_and_its_name_is_refused():
    s = server()
    s.create_pod(NS, pod("share-1"))
    s.webhooks = False  # the DELETE webhook fails open (failurePolicy Ignore)
    s.delete_pod(NS, "share-1")
    s.webhooks = True
    assert claims(s) == ["gpu-workloads-share-1-gpu"]
    with pytest.raises(ClusterError) as refused:
        s.create_pod(NS, pod("share-1"))
    assert refused.value.status == 500
    assert refused.value.message == (
        'admission webhook "mutate.hami.io" denied the request: failed to create ResourceClaim '
        "gpu-workloads/gpu-workloads-share-1-gpu: resourceclaims.resource.k8s.io "
        '"gpu-workloads-share-1-gpu" already exists'
    )


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_a_dry_run_makes_the_claim_for_real():
    s = server()
    s.create_pod(NS, pod("dry"), dry_run=True)
    assert not s.pods and claims(s) == ["gpu-workloads-dry-gpu"]


@pytest.mark.upstream("hami-dra-card-selection")
@pytest.mark.parametrize(
    ("key", "value", "column"),
    [(model.NO_USE_TYPE, "A100", 64), (model.NO_USE_UUID, "GPU-x,GPU-y", 57)],
)
def test_the_negative_card_selectors_are_not_cel_and_refuse_the_pod(key, value, column):
    s = server()
    with pytest.raises(ClusterError) as refused:
        s.create_pod(NS, pod("picky", annotations={key: value}))
    assert refused.value.status == 500
    assert refused.value.message.startswith(
        'admission webhook "mutate.hami.io" denied the request: failed to create ResourceClaim '
        'gpu-workloads/gpu-workloads-picky-gpu: ResourceClaim.resource.k8s.io "gpu-workloads-'
        'picky-gpu" is invalid: spec.devices.requests[0].exactly.selectors[1].cel.expression'
    )
    assert refused.value.message.endswith(
        f"compilation failed: ERROR: <input>:1:{column}: Syntax error: mismatched input 'not' "
        "expecting <EOF>"
    )
    assert not s.pods and claims(s) == []


@pytest.mark.upstream("hami-dra-card-selection")
def test_the_positive_card_selectors_become_in_selectors_on_the_exact_values():
    s = server()
    ask = {model.USE_TYPE: "NVIDIA A100-SXM4-80GB", model.USE_UUID: "GPU-a,GPU-b"}
    s.create_pod(NS, pod("picky", annotations=ask))
    (claim,) = s.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)
    exprs = [
        x["cel"]["expression"]
        for x in claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"]
    ]
    attr = f'device.attributes["{dra.DRIVER}"]'
    assert exprs == [
        f'{attr}.type == "hami-gpu"',
        f'{attr}.uuid in ["GPU-a","GPU-b"]',
        f'{attr}.productName in ["NVIDIA A100-SXM4-80GB"]',
    ]
