"""The capacity run in a DRA tenant (HAMi-DRA's webhooks modelled in tests/support/dra_fake.py):
every entry name the mix allows gives claim names the API server takes, a --namespace too long
for them is refused before anything is created, and a pod refused after the webhook made its
claim leaves no claim."""

from __future__ import annotations

import pytest

from capacity.mix import MixError, parse_mix
from capacity.run import PLACED, REFUSED, RunSettings, run_capacity
from labcheck import dra
from labcheck.spec import parse_spec
from tests.support.dra_fake import DraServer, with_dra_tenant

TEAM = "team-dra"
WALL = 1_788_220_800.0


def mix(name: str, count: int):
    entry = {"tenant": "tenant-dra", "name": name, "count": count, "gpumem": 1000}
    return parse_mix({"entries": [entry]})


def run(lab, m, namespace: str | None = None):
    return run_capacity(
        parse_spec(lab.spec), m, factory=lab.factory, clock=lab.clock, run_id="1a2b3c4d",
        settings=RunSettings(wall=lambda: WALL, namespace=namespace),
    )  # fmt: skip


def server(lab) -> DraServer:
    s = lab.tenant("tenant-dra")
    assert isinstance(s, DraServer)
    return s


def claims(s: DraServer) -> list[str]:
    return [c["metadata"]["name"] for c in s.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)]


@pytest.mark.upstream("hami-dra-webhook-claim")
def test_the_longest_entry_name_is_placed_in_a_dra_tenant_and_nothing_is_left():
    lab = with_dra_tenant()
    result = run(lab, mix("a" * 30, 12))  # two-digit indexes: the longest names of the run
    assert [p.state for p in result.pods] == [PLACED] * 12
    assert result.pods[-1].planned.name == f"{'a' * 30}-11"
    s = server(lab)
    assert not s.pods and claims(s) == [] and not result.cleanup_errors
    made = [d for d in s.deleted if d[0] == dra.CLAIMS]
    assert ("resourceclaims", f"capacity-1a2b3c4d/capacity-1a2b3c4d-{'a' * 30}-11-slice") in made


@pytest.mark.upstream("hami-dra-webhook-claim")
def test_a_namespace_too_long_for_the_claim_names_is_refused_before_anything_is_created():
    lab = with_dra_tenant()
    s = server(lab)
    long_ns = "team-with-a-rather-long-namespace-name-x"  # 40 characters
    s.namespaces[long_ns] = {"metadata": {"name": long_ns}}
    with pytest.raises(MixError) as refused:
        run(lab, mix("llm", 1), namespace=long_ns)
    assert str(refused.value).splitlines() == [
        "the mix's claim names are too long:",
        "  entry llm: in DRA tenant tenant-dra HAMi-DRA names each pod's claim "
        "<namespace>-<pod>-slice, which the API server allows at most 63 characters: pod "
        f"cap-1a2b3c4d-llm-0 in namespace {long_ns} gives 65; use an entry name of at most 1 "
        "characters or a shorter --namespace",
    ]
    assert not [c for c in s.calls if c[0].startswith("create")]


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_a_pod_refused_after_the_webhook_made_its_claim_leaves_no_claim():
    lab = with_dra_tenant()
    s = server(lab)
    s.namespaces[TEAM] = {"metadata": {"name": TEAM}}  # no namespace deletion cleans up here
    s.knobs.pods_quota_full = True  # a quota refuses every pod, after the mutating webhook
    result = run(lab, mix("llm", 2), namespace=TEAM)
    assert [p.state for p in result.pods] == [REFUSED] * 2
    assert claims(s) == [] and not s.pods
    assert sorted(name for kind, name in s.deleted if kind == dra.CLAIMS) == [
        f"{TEAM}/{TEAM}-cap-1a2b3c4d-llm-{i}-slice" for i in range(2)
    ]
