"""labcheck on a DRA tenant: its cards published as shareable devices, one mode per tenant."""

from __future__ import annotations

import pytest

from builders import hami_dra as built
from labcheck import dra
from labcheck.result import Status
from tests.support.dra_fake import NODE, DraServer, publish, published_slice, with_dra_tenant
from tests.support.labcheck_fakes import FakeLab, FakeServer, run_lab


def test_labchecks_driver_is_the_one_the_program_installs():
    assert dra.DRIVER == built.DRIVER


@pytest.mark.parametrize(
    ("text", "number"),
    [("81920Mi", 81920 * 2**20), ("80Gi", 80 * 2**30), ("20971520k", 20971520000), ("100", 100)],
)
def test_quantities_in_any_form_the_api_server_writes(text, number):
    assert dra.quantity(text) == number


def test_a_healthy_dra_tenant_passes_and_hamis_checks_say_why_they_skip():
    out, r = run_lab(with_dra_tenant())
    assert not [x for x in out.results if x.status.bad]
    assert r[("dra.slices", "tenant-dra")].status is Status.PASS
    assert r[("dra.slices", "tenant-dra")].evidence == "1 card(s) published as shareable devices"
    assert all(r[("sharing.one-mode", t)].status is Status.PASS for t in ("tenant-a", "tenant-dra"))
    for check in ("hami.webhook", "gpu.sharing", "gpu.inventory"):
        assert r[(check, "tenant-dra")].status is Status.SKIP
        assert "gpuSharing is dra" in r[(check, "tenant-dra")].evidence


def test_an_api_server_without_the_gate_is_named_as_the_cause():
    lab = with_dra_tenant()
    server = lab.tenant("tenant-dra")
    item = published_slice(NODE)
    for device in item["spec"]["devices"]:
        del device["allowMultipleAllocations"]
    publish(server, item)
    _, r = run_lab(lab, only=["dra.slices"])
    result = r[("dra.slices", "tenant-dra")]
    assert result.status is Status.FAIL
    assert "DRAConsumableCapacity" in result.cause


def test_a_worker_without_the_plugin_fails_with_what_is_missing():
    lab = with_dra_tenant()
    lab.tenant("tenant-dra").custom.clear()
    _, r = run_lab(lab, only=["dra.slices"])
    result = r[("dra.slices", "tenant-dra")]
    assert (result.status, result.seen) == (Status.FAIL, "0 published")
    assert "fake kubelet plugin" in result.cause


def test_a_card_published_with_other_memory_fails():
    lab = with_dra_tenant()
    item = published_slice(NODE)
    item["spec"]["devices"][0]["capacity"]["memory"]["value"] = "40960Mi"
    publish(lab.tenant("tenant-dra"), item)
    _, r = run_lab(lab, only=["dra.slices"])
    assert r[("dra.slices", "tenant-dra")].seen == "40960 MB, 100 % cores"


def test_each_mode_found_in_the_other_tenant_fails():
    lab = with_dra_tenant()
    lab.tenant("tenant-dra").nodes[NODE]["metadata"]["annotations"][
        "hami.io/node-nvidia-register"
    ] = "[]"
    publish(lab.tenant("tenant-a"), published_slice("tenant-a-worker-1"))
    _, r = run_lab(lab, only=["tenant.api", "tcp.ready", "mgmt.kamaji", "sharing.one-mode"])
    assert r[("sharing.one-mode", "tenant-dra")].status is Status.FAIL
    assert (
        "HAMi's device plugin runs beside HAMi-DRA" in r[("sharing.one-mode", "tenant-dra")].cause
    )
    assert r[("sharing.one-mode", "tenant-a")].status is Status.FAIL
    assert r[("sharing.one-mode", "tenant-a")].seen == "published on ['tenant-a-worker-1']"
    assert r[("sharing.one-mode", "tenant-b")].status is Status.PASS


def dra_server(lab: FakeLab) -> DraServer:
    server = lab.tenant("tenant-dra")
    assert isinstance(server, DraServer)
    return server


@pytest.mark.upstream("hami-dra-webhook-claim")
@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_two_pods_become_claims_that_share_the_card_each_with_its_own_share():
    lab = with_dra_tenant()
    _, r = run_lab(lab, only=["dra.sharing"])
    result = r[("dra.sharing", "tenant-dra")]
    assert result.status is Status.PASS, result
    # A third of the A100 80GB (81920 MiB) and of its cores each.
    assert result.evidence == f"2 pods share {NODE}/gpu-0: 27306 MiB, 33 % each"
    *shares, again = result.detail
    assert len(shares) == 2 and all(" share " in line for line in shares)
    assert again == (
        "lc-t1-dra-share-0 deleted and created again under its name: its claim went with it, "
        "placed again"
    )
    server = dra_server(lab)
    assert not server.pods and not server.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)
    # The claims HAMi-DRA's webhook named <namespace>-<pod>-<container>, and labcheck deleted
    # by those names what the webhook on pod DELETE had not already.
    made = {name for kind, name in server.deleted if kind == dra.CLAIMS}
    assert made == {f"labcheck-t1/labcheck-t1-lc-t1-dra-share-{i}-gpu" for i in (0, 1)}


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_a_claim_the_delete_webhook_keeps_fails_sharing_with_the_webhook_named():
    lab = with_dra_tenant()
    dra_server(lab).webhooks = False  # validate.hami.io down: it fails open
    _, r = run_lab(lab, only=["dra.sharing"])
    result = r[("dra.sharing", "tenant-dra")]
    assert result.status is Status.FAIL
    assert result.seen == "labcheck-t1-lc-t1-dra-share-0-gpu kept"
    assert "validate.hami.io" in result.cause and "already exists" in result.cause
    server = dra_server(lab)
    assert not server.pods and not server.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)


def test_the_dra_checks_run_twice_with_the_same_names():
    """A second run with the same run id creates the same pods, and so the same claim names,
    again: nothing of the first is in the way."""
    lab = with_dra_tenant()
    for _ in range(2):
        _, r = run_lab(lab, only=["dra.sharing", "dra.exhaustion"])
        assert all(
            r[(c, "tenant-dra")].status is Status.PASS for c in ("dra.sharing", "dra.exhaustion")
        )
    server = dra_server(lab)
    assert not server.pods and not server.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)


def test_a_pod_the_webhook_did_not_rewrite_fails_at_once_with_the_webhook_named():
    lab = with_dra_tenant()
    dra_server(lab).create_pod = lambda ns, body, dry_run=False: FakeServer.create_pod(
        dra_server(lab), ns, body, dry_run
    )  # the webhook is not there
    _, r = run_lab(lab, only=["dra.sharing"])
    result = r[("dra.sharing", "tenant-dra")]
    assert result.status is Status.FAIL
    assert result.seen == (
        "limits ['nvidia.com/gpu', 'nvidia.com/gpucores', 'nvidia.com/gpumem'] kept, 0 claim(s)"
    )
    assert "HAMi-DRA's webhook" in result.cause


def test_one_pod_too_many_waits_with_the_schedulers_reason_and_nothing_is_left():
    lab = with_dra_tenant()
    _, r = run_lab(lab, only=["dra.exhaustion"])
    result = r[("dra.exhaustion", "tenant-dra")]
    assert result.status is Status.PASS, result
    assert result.evidence.startswith(f"1 pod(s) of 49152 MiB placed on {NODE}; one more: ")
    assert "cannot allocate all claims" in result.evidence
    server = dra_server(lab)
    assert not server.pods and not server.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS)


def test_a_scheduler_that_over_allocates_the_card_fails_exhaustion():
    lab = with_dra_tenant()
    server = dra_server(lab)
    server._used = lambda: {}  # every claim finds the card empty: capacity not enforced
    _, r = run_lab(lab, only=["dra.exhaustion"])
    result = r[("dra.exhaustion", "tenant-dra")]
    assert result.status is Status.FAIL
    assert "consumable capacity not enforced" in result.cause
