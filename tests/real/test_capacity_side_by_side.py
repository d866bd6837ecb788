"""One capacity mix on a HAMi tenant and a DRA tenant with the same cards, side by side
(`--compare`). Real on both sides: Kubernetes only (kube-apiserver, kube-scheduler,
kube-controller-manager v1.35.4, the tenants' default version, each with the program's flags)
and the capacity tool; HAMi is the real tier's stand-in, HAMi-DRA its model.

- HAMi: tenant-b of the `lab` stack (two L4) as in test_capacity_real.py: the real gpu_agent,
  the extender that plays HAMi v2.10.0's Filter and Bind, HAMi's webhook (hami_placement.py).
- DRA: the same two L4 as a DRA tenant (the gate DRAConsumableCapacity on, as the program sets
  it on v1.35): kwok for its worker, the slices HAMi-DRA's fake plugin publishes for the
  program's inventory, and HAMi-DRA's webhooks modelled and served over TLS
  (hami_dra_webhook.py), which make the claims the scheduler allocates and delete them with
  their pods.

capacity runs through its real client, in process, on the program's own labcheckSpec (tenant-b
as the program writes it; the DRA tenant as the program writes a DRA tenant's entry).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from binaries import K8S_VERSION
from controlplane import ControlPlane, admin_conf, on_the_planes_version, wait_until
from hami_dra_webhook import HamiDraWebhook
from hami_placement import PlacementLab, placement_lab, report
from test_capacity_real import MIX, leftovers

from builders.control_plane import tenant_control_plane_manifest
from builders.hami_dra import fake_driver_config
from capacity.cli import main
from capacity.views import DraView
from labcheck.dra import quantity
from labconfig.parse import parse_config
from tests.support import hami_dra_model as model
from tests.support.pulumi_harness import PROJECT_DIR, run_program, stack_config

HAMI, DRA = "tenant-b", "tenant-b-dra"
TEAM = "team-b"  # a namespace of the user's own (--namespace)
# The lab stack with a third tenant: tenant-b's cards (two L4) shared through DRA, on the
# planes' Kubernetes version, as tenant-b. kwok plays its worker.
LAB = stack_config("lab")
CONFIG = on_the_planes_version(
    {
        **LAB,
        "tenants": [
            *LAB["tenants"],
            {"name": DRA, "workers": 1, "gpuSharing": "dra", "gpus": [{"model": "L4", "count": 2}]},
        ],
    }
)
DRA_TENANT = next(t for t in parse_config(CONFIG).tenants if t.name == DRA)
HOSTNAME = "kubernetes.io/hostname"
COMPONENTS = {"scheduler": "kube-scheduler", "controllerManager": "kube-controller-manager"}


@pytest.fixture(scope="module")
def hami_lab(start_control_plane) -> Iterator[PlacementLab]:
    with placement_lab(start_control_plane("side-hami"), webhook=True) as lab:
        yield lab


@pytest.fixture(scope="module")
def dra_plane(start_control_plane) -> Iterator[ControlPlane]:
    tcp = tenant_control_plane_manifest(DRA_TENANT, "172.30.255.202")  # the flags, not the address
    extra = tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]
    plane = start_control_plane(
        "side-dra",
        kubernetes=K8S_VERSION,
        tenant_args=extra["apiServer"],
        component_args={COMPONENTS[k]: v for k, v in extra.items() if k in COMPONENTS},
    )
    for node in DRA_TENANT.worker_names:
        plane.create_fake_node(node, {HOSTNAME: node})  # as a kubelet labels its node
    config = fake_driver_config(DRA_TENANT.cards, DRA_TENANT.worker_names)
    objects = [model.device_class(), *model.resource_slices(config)]
    listed = {"kind": "List", "apiVersion": "v1", "items": objects}
    plane.kubectl("create", "-f", "-", input=json.dumps(listed))
    hook = HamiDraWebhook(plane)
    hook.serve()
    try:
        yield plane
    finally:
        hook.close()
        plane.stop()


@pytest.fixture(scope="module")
def side_spec(hami_lab, dra_plane) -> dict[str, Any]:
    """The program's labcheckSpec for that stack: tenant-b's entry pointed at the HAMi plane, the
    DRA tenant's at the DRA plane (tenant-a is left out: the mix has no pod there)."""
    spec = json.loads(run_program(CONFIG, stack="lab").outputs["labcheckSpec"])
    tenants = {t["name"]: t for t in spec["tenants"]}
    hami, dra = tenants[HAMI], tenants[DRA]
    assert dra["gpuSharing"] == "dra"
    hami["kubeconfig"] = yaml.safe_dump(admin_conf(hami_lab.plane))
    dra["kubeconfig"] = yaml.safe_dump(admin_conf(dra_plane))
    spec["tenants"] = [hami, dra]
    spec["management"]["kubeconfig"] = hami["kubeconfig"]
    return spec


def run(lab: PlacementLab, spec: dict, tmp: Path, mix: dict, *extra: str) -> tuple[int, str, dict]:
    """``python -m capacity --compare`` in process: exit code, output, the JSON report."""
    (tmp / "spec.json").write_text(json.dumps(spec))
    (tmp / "mix.yaml").write_text(yaml.safe_dump(mix))
    out, err = StringIO(), StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main(
                ["--spec", str(tmp / "spec.json"), "--mix", str(tmp / "mix.yaml"),
                 "--compare", f"{HAMI},{DRA}", "--report-dir", str(tmp), *extra],
                out=out,
            )  # fmt: skip
    finally:
        lab.extender.forget_all()  # the run deleted its pods (HAMi's onDelPod)
    report_file = tmp / "capacity-report.json"
    assert report_file.exists(), f"exit {code}: {err.getvalue()}{out.getvalue()}"
    return code, out.getvalue(), json.loads(report_file.read_text())


def claims_left(plane: ControlPlane) -> list[str]:
    items = plane.get_json("resourceclaims", "-A")["items"]
    return [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in items]


def wait_nothing_left(*planes: ControlPlane) -> None:
    for plane in planes:
        wait_until(
            lambda p=plane: not leftovers(p) and not claims_left(p),
            "no pod, namespace or claim of the run left",
            60,
        )


def dra_allocations(plane: ControlPlane) -> dict[str, tuple[str, int, int]]:
    """Per claim the scheduler allocated: the device, MiB and cores it consumed."""
    out = {}
    for claim in plane.get_json("resourceclaims", "-A")["items"]:
        allocation = claim.get("status", {}).get("allocation", {})
        for r in allocation.get("devices", {}).get("results", []):
            used = r["consumedCapacity"]
            out[claim["metadata"]["name"]] = (
                r["device"],
                quantity(used["memory"]) // 2**20,
                quantity(used["cores"]),
            )
    return out


@pytest.mark.upstream("dra-consumable-capacity-allocation")
@pytest.mark.upstream("kube-quantity-canonical-form")  # the webhook gets "8k" for 8000 MiB
def test_one_mix_on_a_hami_and_a_dra_tenant_with_the_same_cards(
    hami_lab, dra_plane, side_spec, tmp_path, capsys
):
    code, out, data = run(hami_lab, side_spec, tmp_path, MIX)
    report(capsys, "\n  ".join(line for line in out.splitlines() if line.startswith("  ")))
    assert code == 0, out
    by = data["byTenant"]
    for tenant in (HAMI, DRA):
        assert (by[tenant]["podsPlaced"], by[tenant]["didNotFit"]) == (4, 1), (tenant, out)
    assert by[HAMI]["gpuSharing"] == "hami" and by[DRA]["gpuSharing"] == "dra"
    # The model too large for an L4 fits neither; the DRA one with the scheduler's words.
    unfit = {u["tenant"]: u for u in data["didNotFit"]}
    assert "CardInsufficientMemory" in unfit[HAMI]["reason"]
    assert "cannot allocate all claims" in unfit[DRA]["reason"]
    # Each DRA pod's slice is the share the scheduler wrote into its claim (read while the pods
    # lived, by the run); the memory and cores the mix asked, on one of the tenant's L4.
    uuids = {
        c.uuid: c for c in DraView([], dra_plane.get_json("resourceslices")["items"]).cards([])
    }
    asked = {e["name"]: (e["gpumem"], e["gpucores"]) for e in MIX["entries"]}
    for pod in (p for p in data["pods"] if p["tenant"] == DRA and p["state"] == "placed"):
        (s,) = pod["slices"]
        assert (s["memMb"], s["cores"]) == asked[pod["entry"]] and s["card"] in uuids, pod
    # The first-fit allocator fills one L4 (22000 of 23034 MiB); HAMi's gpu policy `spread`
    # (tenant-b's schedulerPolicy) puts them on both.
    assert (by[DRA]["cardsUsed"], by[HAMI]["cardsUsed"]) == (1, 2)
    wait_nothing_left(hami_lab.plane, dra_plane)


@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_in_a_namespace_of_its_own_the_run_deletes_the_webhooks_claims_too(
    hami_lab, dra_plane, side_spec, tmp_path
):
    # HAMi-DRA's webhook on pod DELETE fails open, and nothing else (a namespace deletion) would
    # remove a claim with --namespace: the run deletes the claims by name too.
    for plane in (hami_lab.plane, dra_plane):
        plane.create_namespace(TEAM)
    code, out, data = run(hami_lab, side_spec, tmp_path, MIX, "--namespace", TEAM)
    assert code == 0, out
    assert data["byTenant"][DRA]["podsPlaced"] == 4
    assert "cleanup: deleted 15 object(s) by name" in out  # 5 + 5 pods, the 5 DRA claims
    wait_until(lambda: not claims_left(dra_plane), "the run's claims deleted", 30)
    assert dra_plane.get_json("pods", "-n", TEAM)["items"] == []


BURST = {
    "name": "burst-20",
    "entries": [{"tenant": HAMI, "name": "burst", "count": 20, "gpumem": 2000, "gpucores": 4}],
}


def test_a_burst_of_20_pods_side_by_side(hami_lab, dra_plane, side_spec, tmp_path, capsys):
    """The burst docs/placement-time.md measures, through the capacity tool: 20 pods of
    2000 MiB and 4 % on each tenant's two L4 (HAMi's 10 slots per card take exactly 20)."""
    code, out, data = run(hami_lab, side_spec, tmp_path, BURST, "--timeout", "60")
    by = data["byTenant"]
    assert by[HAMI]["podsPlaced"] == 20 and by[HAMI]["cardsUsed"] == 2, out
    times = {t: by[t]["placementSeconds"] for t in (HAMI, DRA)}
    report(
        capsys,
        "capacity --compare, 20 pods: "
        + "; ".join(
            f"{t} median {v['median']:.1f} s, last {v['last']:.1f} s" for t, v in times.items()
        ),
    )
    # kube-scheduler v1.36.3 now and then leaves one pod of a burst "cannot allocate all claims"
    # with room on a card (docs/hami-and-dra.md): capacity then reports it pending with the
    # cards that have room, and exits 1; it never calls it a pod that did not fit.
    assert by[DRA]["didNotFit"] == 0, out
    stuck = [p for p in data["stillPending"] if p["tenant"] == DRA]
    assert by[DRA]["podsPlaced"] + len(stuck) == 20, out
    assert code == (1 if stuck else 0), out
    for pod in stuck:
        assert "cannot allocate all claims" in pod["reason"] and " room: " in pod["reason"], pod
    wait_nothing_left(hami_lab.plane, dra_plane)


PERCENT = {
    "name": "half-cards",
    "entries": [{"tenant": HAMI, "name": "half", "count": 2, "gpumem": "50%", "gpucores": 20}],
}


@pytest.mark.upstream("hami-chart-managed-resources")
@pytest.mark.upstream("hami-dra-webhook-claim")
def test_a_percentage_of_a_card_is_placed_by_hami_and_never_in_a_dra_tenant(
    hami_lab, dra_plane, side_spec, tmp_path
):
    code, out, data = run(hami_lab, side_spec, tmp_path, PERCENT, "--timeout", "30")
    assert code == 0, out
    by = data["byTenant"]
    # HAMi gives each pod half of an L4 (23034 * 50 / 100 MB); kube-scheduler leaves the
    # percentage to HAMi's extender (ignoredByScheduler).
    assert by[HAMI]["podsPlaced"] == 2, out
    slices = [p["slices"][0]["memMb"] for p in data["pods"] if p["tenant"] == HAMI]
    assert slices == [11517, 11517]
    # HAMi-DRA's webhook converts gpu, gpumem and gpucores, not the percentage: it stays on the
    # pod as an extended resource no node has, and the pod never runs there.
    assert by[DRA]["didNotFit"] == 2, out
    for unfit in (u for u in data["didNotFit"] if u["tenant"] == DRA):
        assert "Insufficient nvidia.com/gpumem-percentage" in unfit["reason"]
        assert (
            "HAMi-DRA's webhook leaves nvidia.com/gpumem-percentage on the pod" in unfit["reason"]
        )
    wait_nothing_left(hami_lab.plane, dra_plane)


MIXES = PROJECT_DIR / "capacity" / "mixes"


@pytest.mark.parametrize(("mix", "placed"), [("cannot-fit", (2, 0)), ("inference-heavy", (10, 8))])
def test_the_example_mixes_side_by_side(
    hami_lab, dra_plane, side_spec, tmp_path, capsys, mix, placed
):
    """The example mixes on two L4 in each tenant (--compare ignores each entry's tenant): the
    DRA tenant places none of the pods that ask a percentage of a card."""
    entries = yaml.safe_load((MIXES / f"{mix}.yaml").read_text())
    _, out, data = run(hami_lab, side_spec, tmp_path, entries, "--timeout", "60")
    by = data["byTenant"]
    report(capsys, f"{mix}: " + "; ".join(
        f"{t} {by[t]['podsPlaced']} placed on {by[t]['cardsUsed']} cards" for t in (HAMI, DRA)
    ))  # fmt: skip
    assert (by[HAMI]["podsPlaced"], by[DRA]["podsPlaced"]) == placed, out
    wait_nothing_left(hami_lab.plane, dra_plane)
