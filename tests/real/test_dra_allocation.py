"""A DRA tenant's cards allocated by the real Kubernetes control plane: v1.36.3 with its
defaults and v1.35.4 with the gates the program gives a DRA tenant through Kamaji's extraArgs,
against the slices HAMi-DRA's fake plugin publishes for the program's inventory and the claims
its webhook makes for the lab's pod specs (tests/support/hami_dra_model.py). kwok plays the
kubelets.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from binaries import K8S_NEXT_VERSION, K8S_VERSION
from controlplane import ControlPlane, admin_conf
from hami_dra_webhook import HamiDraWebhook

from builders.control_plane import tenant_control_plane_manifest
from builders.hami_dra import fake_driver_config
from labcheck.checks import ALL_CHECKS
from labcheck.context import RunContext
from labcheck.dra import quantity
from labcheck.kube import factory as kube_factory
from labcheck.result import Status
from labcheck.runner import run_checks
from labcheck.spec import parse_spec
from labcheck.waiting import SystemClock
from labconfig.model import TenantConfig
from tests.support import hami_dra_model as dra
from tests.support.labcheck_fakes import Quiet
from tests.support.pulumi_harness import PROJECT_DIR, run_program, stack_config

NAMESPACE = "gpu-workloads"
SHARE, BOTH_L4, OVER_QUOTA, TOO_LARGE = (
    "1-four-pods-share-one-a100.yaml",
    "2-one-pod-on-both-l4.yaml",
    "3-over-the-gpu-quota.yaml",
    "4-too-large-for-any-card.yaml",
)
WORKER = "tenant-dra-worker-1"
HOSTNAME = "kubernetes.io/hostname"
COMPONENTS = {"scheduler": "kube-scheduler", "controllerManager": "kube-controller-manager"}
# The dra stack's DRA tenant: one A100 80GB on its one worker.
DRA_TENANT = {"name": "tenant-dra", "gpuSharing": "dra", "gpus": [{"model": "A100-80GB"}]}


def dra_tenant(version: str, gpus: list[dict] | None = None) -> TenantConfig:
    # The tenant model alone: a stack would also name a v1.36 workerImage, which kwok needs not.
    tenant = {**DRA_TENANT, "kubernetesVersion": version, **({"gpus": gpus} if gpus else {})}
    return TenantConfig.model_validate(tenant)


def program_args(version: str) -> tuple[list[str], dict[str, list[str]]]:
    """The API server's and the other components' extra flags the program's TCP gives."""
    tcp = tenant_control_plane_manifest(dra_tenant(version), "172.30.255.200")
    extra = tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]
    return extra["apiServer"], {COMPONENTS[k]: v for k, v in extra.items() if k in COMPONENTS}


def share_pod(name: str, memory_mb: int, cores: int | None, scheduler: str | None = None) -> dict:
    """A pod as the lab's examples write it (one slice of a card), without a scheduler name."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "gpu",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "limits": {
                            dra.GPU: 1,
                            dra.GPU_MEMORY: memory_mb,
                            **({dra.GPU_CORES: cores} if cores is not None else {}),
                        }
                    },
                }
            ],
        },
    }
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    return pod


def apply(plane: ControlPlane, *objects: dict) -> None:
    plane.kubectl(
        "create",
        "-f",
        "-",
        input=json.dumps({"kind": "List", "apiVersion": "v1", "items": list(objects)}),
    )


def admit(plane: ControlPlane, pod: dict) -> None:
    """What the webhook does before the pod is stored: its claims first, then the pod."""
    apply(plane, *dra.webhook_claims(pod), dra.webhook_pod(pod))


def claim_results(plane: ControlPlane, pod: str) -> list[dict]:
    name = dra.claim_name(NAMESPACE, pod, "gpu")
    claim = plane.get_json("resourceclaim", name, "-n", NAMESPACE)
    return claim["status"]["allocation"]["devices"]["results"]


def wait_placed(plane: ControlPlane, pod: str, what: str = "") -> dict:
    return plane.wait_for_object(
        "pod", pod, "-n", NAMESPACE,
        condition=lambda p: p["spec"].get("nodeName") == WORKER,
        what=what or f"{pod} placed", timeout=60,
    )  # fmt: skip


def wait_unschedulable(plane: ControlPlane, pod: str) -> dict:
    return plane.wait_for_object(
        "pod", pod, "-n", NAMESPACE,
        condition=lambda p: scheduled_condition(p).get("reason") == "Unschedulable",
        what=f"{pod} Unschedulable", timeout=60,
    )  # fmt: skip


def scheduled_condition(pod: dict) -> dict:
    found = [c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    return found[0] if found else {}


def lab_tenant_plane(
    start: Callable[..., ControlPlane],
    version: str,
    name: str = "",
    component_args: dict[str, list[str]] | None = None,
    gpus: list[dict] | None = None,
) -> ControlPlane:
    """A plane with the program's flags for a DRA tenant of ``version`` (or other component
    flags), the tenant's workers as kwok nodes, the chart's class and the plugin's slices of its
    cards (the dra stack's one A100, or ``gpus``)."""
    apiserver, components = program_args(version)
    plane = start(
        name or f"dra-{version}",
        kubernetes=version,
        tenant_args=apiserver,
        component_args=components if component_args is None else component_args,
    )
    tenant = dra_tenant(version, gpus)
    for node in tenant.worker_names:
        plane.create_fake_node(node, {HOSTNAME: node})  # as a kubelet labels its node
    apply(
        plane,
        dra.device_class(),
        *dra.resource_slices(fake_driver_config(tenant.cards, tenant.worker_names)),
    )
    plane.create_namespace(NAMESPACE)
    return plane


@pytest.fixture(scope="module")
def start_plane(start_control_plane) -> Iterator[Callable[..., ControlPlane]]:
    """start_control_plane, but each plane stopped when this module ends: five planes left
    running would load the tests after it (placement bursts with time bounds)."""
    started: list[ControlPlane] = []

    def start(*args: Any, **kwargs: Any) -> ControlPlane:
        started.append(start_control_plane(*args, **kwargs))
        return started[-1]

    yield start
    for plane in reversed(started):
        plane.stop()


@pytest.fixture(
    scope="module", params=[K8S_NEXT_VERSION, K8S_VERSION], ids=["v1.36", "v1.35-gated"]
)
def plane(request, start_plane) -> Iterator[ControlPlane]:
    yield lab_tenant_plane(start_plane, request.param)


@pytest.mark.upstream("dra-consumable-capacity-gate")
def test_the_published_card_keeps_its_shared_capacity(plane):
    (device,) = plane.get_json("resourceslices")["items"][0]["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert quantity(device["capacity"]["memory"]["requestPolicy"]["default"]) == 80 * 2**30
    assert device["capacity"]["cores"]["requestPolicy"]["validRange"]["step"] == "1"


def labcheck_on(plane: ControlPlane, checks: list[str]) -> dict:
    """labcheck through its real client on the plane, as the dra stack's tenant-dra: the
    program's labcheckSpec with the tenant's kubeconfig pointed at the plane."""
    spec = json.loads(run_program(stack_config("dra"), stack="dra").outputs["labcheckSpec"])
    (tenant,) = [t for t in spec["tenants"] if t["name"] == "tenant-dra"]
    spec["tenants"] = [{**tenant, "kubeconfig": yaml.safe_dump(admin_conf(plane))}]
    parsed = parse_spec(json.dumps(spec))
    ctx = RunContext(
        spec=parsed, factory=kube_factory(10), clock=SystemClock(), run_id="dra", poll_seconds=0.5
    )
    outcome = run_checks(ctx, ALL_CHECKS, Quiet(), only=checks)
    return {(r.check, r.tenant): r for r in outcome.results}


def test_labcheck_finds_the_cards_published_shareable_and_one_mode(plane):
    results = labcheck_on(plane, ["dra.slices", "sharing.one-mode"])
    slices = results[("dra.slices", "tenant-dra")]
    assert slices.status is Status.PASS, slices
    assert slices.detail == [f"{WORKER}/gpu-0: 81920 MB, 100 % cores, shareable"]
    assert results[("sharing.one-mode", "tenant-dra")].status is Status.PASS


@pytest.mark.upstream("hami-dra-webhook-claim")
@pytest.mark.upstream("hami-dra-claim-cleanup")
def test_labcheck_creates_pods_that_share_the_card_and_one_too_many_that_waits(plane):
    """Before the tests below fill the card: labcheck's DRA pod checks through HAMi-DRA's
    webhooks (their model, served over TLS) and the real scheduler; nothing of theirs is left."""
    hook = HamiDraWebhook(plane)
    hook.serve()
    try:
        results = labcheck_on(plane, ["dra.sharing", "dra.exhaustion"])
    finally:
        hook.unregister()
        hook.close()
    shared, full = results[("dra.sharing", "tenant-dra")], results[("dra.exhaustion", "tenant-dra")]
    assert shared.status is Status.PASS, shared
    assert shared.evidence == f"2 pods share {WORKER}/gpu-0: 27306 MiB, 33 % each"
    assert full.status is Status.PASS, full
    assert "cannot allocate all claims" in full.evidence
    # 2 sharing, the first of them once more (deleted with its pod by the webhook on DELETE,
    # then created again under its name); exhaustion: 1 per card + 1.
    share_0 = "labcheck-dra/labcheck-dra-lc-dra-dra-share-0-gpu"
    assert len(hook.claims_created) == 5 and hook.claims_created.count(share_0) == 2
    assert share_0 in hook.claims_deleted
    assert shared.detail[-1].endswith("its claim went with it, placed again")
    assert plane.get_json("resourceclaims", "-A")["items"] == []
    assert plane.get_json("pods", "-A")["items"] == []


@pytest.mark.upstream("dra-consumable-capacity-gate")
def test_without_the_gate_a_v1_35_api_server_drops_what_makes_a_card_shareable(start_plane):
    plane = start_plane("dra-ungated", full=False)
    tenant = dra_tenant(K8S_VERSION)
    (stored_slice,) = dra.resource_slices(fake_driver_config(tenant.cards, tenant.worker_names))
    apply(plane, stored_slice)
    (device,) = plane.get_json("resourceslice", stored_slice["metadata"]["name"])["spec"]["devices"]
    assert "allowMultipleAllocations" not in device
    assert list(device["capacity"]["memory"]) == ["value"]  # its requestPolicy is gone too


@pytest.mark.upstream("dra-consumable-capacity-gate")
def test_with_the_gate_off_in_the_scheduler_the_first_pod_takes_the_whole_card(
    start_plane,
):
    """Why the program gives a v1.35 DRA tenant's scheduler the gate too, not only its API
    server: the slice keeps its shared capacity, yet the scheduler's allocator ignores it."""
    plane = lab_tenant_plane(start_plane, K8S_VERSION, "dra-scheduler-ungated", {})
    admit(plane, share_pod("first", 20000, 25))
    wait_placed(plane, "first")
    assert "shareID" not in claim_results(plane, "first")[0]
    admit(plane, share_pod("second", 20000, 25))
    pod = wait_unschedulable(plane, "second")
    assert "cannot allocate all claims" in scheduled_condition(pod)["message"]


@pytest.mark.upstream("dra-consumable-capacity-allocation")
@pytest.mark.upstream("hami-dra-webhook-claim")
def test_four_pods_share_the_one_card_each_with_its_own_share(plane):
    pods = [f"share-{i}" for i in range(1, 5)]
    # One after the other: a pod of a burst may be left Unschedulable for a while (burst test).
    for name in pods:
        admit(plane, share_pod(name, 20000, 25))
        plane.wait_for_object(
            "pod", name, "-n", NAMESPACE,
            condition=lambda p: p["status"].get("phase") == "Running",
            what=f"{name} Running", timeout=60,
        )  # fmt: skip
    results = [claim_results(plane, name) for name in pods]
    assert all(len(r) == 1 for r in results)
    assert {(r[0]["pool"], r[0]["device"]) for r in results} == {(WORKER, "gpu-0")}
    assert len({r[0]["shareID"] for r in results}) == 4
    for (result,) in results:
        assert quantity(result["consumedCapacity"]["memory"]) == 20000 * 2**20
        assert quantity(result["consumedCapacity"]["cores"]) == 25


@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_a_fifth_pod_waits_with_the_schedulers_reason_once_the_cores_are_taken(plane):
    # After the four above: 80000 of 81920 MiB and all 100 % of the cores are held.
    admit(plane, share_pod("share-5", 1000, 1))
    pod = wait_unschedulable(plane, "share-5")
    assert "cannot allocate all claims" in scheduled_condition(pod)["message"]
    plane.kubectl("delete", "pod", "share-4", "-n", NAMESPACE, "--wait=true")
    plane.kubectl(
        "delete", "resourceclaim", dra.claim_name(NAMESPACE, "share-4", "gpu"), "-n", NAMESPACE
    )
    wait_placed(plane, "share-5", "share-5 placed once share-4 is gone")


@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_a_pod_asking_more_memory_than_a_card_has_never_fits(plane):
    admit(plane, share_pod("too-large", 90000, 10))
    pod = wait_unschedulable(plane, "too-large")
    assert "cannot allocate all claims" in scheduled_condition(pod)["message"]


@pytest.mark.upstream("dra-webhook-keeps-the-scheduler-name")
def test_a_pod_that_names_hamis_scheduler_is_never_placed_in_a_dra_tenant(plane):
    # The lab's HAMi examples name hami-scheduler; no scheduler of that name runs here, and the
    # webhook leaves the name as it is. A pod created after it, without the name, is placed.
    admit(plane, share_pod("names-hami", 100, 1, scheduler="hami-scheduler"))
    admit(plane, share_pod("names-none", 100, 1))
    wait_placed(plane, "names-none")
    stranded = plane.get_json("pod", "names-hami", "-n", NAMESPACE)
    assert stranded["spec"]["schedulerName"] == "hami-scheduler"
    assert not stranded["spec"].get("nodeName")
    assert not stranded["status"].get("conditions")  # no scheduler ever looked at it


@pytest.mark.upstream("dra-consumable-capacity-allocation")
def test_a_pod_that_asks_no_cores_takes_none_of_them_as_in_hami(plane):
    # The card's cores requestPolicy default is 0 (builders/hami_dra.py): no gpucores, no
    # compute limit, and the card's cores stay for the pods that ask for them.
    admit(plane, share_pod("no-cores", 100, None))
    wait_placed(plane, "no-cores")
    (result,) = claim_results(plane, "no-cores")
    assert quantity(result["consumedCapacity"]["cores"]) == 0
    assert quantity(result["consumedCapacity"]["memory"]) == 100 * 2**20


BURST = 20


def test_a_burst_of_20_pods_on_one_card_is_placed_at_once_or_waits_for_the_next_claim_change(
    start_plane,
):
    """The burst docs/placement-time.md measures for HAMi (20 GPU pods created at once on one
    node), here with DRA: 20 claims of 4000 MiB and 4 % each on the one A100 (80 % of its
    cores). Nothing holds a node lock, so no Bind waits out kube-scheduler's backoff; but in
    about one run in ten the scheduler leaves one pod Unschedulable ("cannot allocate all
    claims") with capacity left, and it stays so until a claim on the card changes: then it is
    placed (docs/hami-and-dra.md)."""
    plane = lab_tenant_plane(start_plane, K8S_NEXT_VERSION, "dra-burst")
    pods = [share_pod(f"burst-{i}", 4000, 4) for i in range(1, BURST + 1)]
    claims = [claim for pod in pods for claim in dra.webhook_claims(pod)]
    apply(plane, *claims)  # the webhook makes each pod's claim before the pod is stored
    started = time.monotonic()
    apply(plane, *(dra.webhook_pod(pod) for pod in pods))
    placed: dict[str, float] = {}
    stranded: dict[str, str] = {}
    deadline = started + 60
    while len(placed) + len(stranded) < BURST and time.monotonic() < deadline:
        for pod in plane.get_json("pods", "-n", NAMESPACE)["items"]:
            name, condition = pod["metadata"]["name"], scheduled_condition(pod)
            if pod["spec"].get("nodeName"):
                placed.setdefault(name, time.monotonic() - started)
                stranded.pop(name, None)
            elif condition.get("reason") == "Unschedulable":
                stranded[name] = condition.get("message", "")
        time.sleep(0.2)
    times = sorted(placed.values())
    print(
        f"\n  DRA burst of {BURST} pods on one A100: {len(times)}/{BURST} placed, "
        f"median {statistics.median(times):.1f} s, last {times[-1]:.1f} s; "
        f"{len(stranded)} left Unschedulable"
    )
    assert len(placed) + len(stranded) == BURST, (placed, stranded)
    assert all("cannot allocate all claims" in message for message in stranded.values())
    assert times[-1] <= 5, times  # HAMi with the lab's lock wait: last 1.6-1.9 s
    if stranded:  # a claim on the card changes: one placed pod goes, with its claim
        gone = next(iter(placed))
        plane.kubectl("delete", "pod", gone, "-n", NAMESPACE, "--wait=true")
        plane.kubectl(
            "delete", "resourceclaim", dra.claim_name(NAMESPACE, gone, "gpu"), "-n", NAMESPACE
        )
        for name in stranded:
            wait_placed(plane, name, f"{name} placed after a claim on the card changed")
        del placed[gone]
    present = [*placed, *stranded]
    assert len({claim_results(plane, name)[0]["shareID"] for name in present}) == len(present)


EXAMPLES = PROJECT_DIR / "examples"


def example_pods(plane: ControlPlane, name: str, bound: float = 20) -> dict[str, dict]:
    """The example's pods once every one is placed, or as they are after `bound` seconds (a pod
    that cannot fit stays unplaced). A pod whose claim was not allocated on its first try (the
    claims of the pods before it still in flight) is placed on kube-scheduler's retry, after its
    backoff: a fixed wait of 5 s once read such a pod unplaced."""
    names = [d["metadata"]["name"] for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    deadline = time.monotonic() + bound
    while True:
        pods = {n: plane.get_json("pod", n, "-n", NAMESPACE) for n in names}
        placed = all(p["spec"].get("nodeName") for p in pods.values())
        if placed or time.monotonic() >= deadline:
            return pods
        time.sleep(0.5)


@pytest.mark.upstream("dra-webhook-keeps-the-scheduler-name", "hami-dra-webhook-claim")
@pytest.mark.parametrize("version", [K8S_VERSION, K8S_NEXT_VERSION], ids=["v1.35-gated", "v1.36"])
def test_the_examples_run_unchanged_in_a_dra_tenant(start_plane, version):
    """examples/ applied as their headers say, unchanged, in DRA tenants with the cards of the
    HAMi tenants they were written for: examples/1 on one A100 80GB (the dra stack's
    tenant-dra), 2-4 on two L4 (the lab stack's tenant-b)."""
    a100 = lab_tenant_plane(start_plane, version, "dra-examples-a100")
    l4 = lab_tenant_plane(start_plane, version, "dra-examples-l4",
                          gpus=[{"model": "L4", "count": 2}])  # fmt: skip
    results: dict[str, dict[str, dict]] = {}
    for plane, names in ((a100, [SHARE]), (l4, [BOTH_L4, OVER_QUOTA, TOO_LARGE])):
        hook = HamiDraWebhook(plane)
        hook.serve()
        try:
            for name in names:
                done = plane.kubectl("apply", "-f", str(EXAMPLES / name), check=False)
                results[name] = example_pods(plane, name) if done.returncode == 0 else {}
                print(f"\n  {name}: {done.stdout.strip()} {done.stderr.strip()}")
                for pod, body in results[name].items():
                    print(f"    {pod}: node {body['spec'].get('nodeName')}, "
                          f"{scheduled_condition(body).get('message', '')}")  # fmt: skip
        finally:
            hook.unregister()
            hook.close()
    # examples/1: all four placed on the one A100, each with its own share.
    share = results[SHARE]
    assert len(share) == 4 and all(p["spec"].get("nodeName") == WORKER for p in share.values())
    assert all(p["spec"]["schedulerName"] == "default-scheduler" for p in share.values())
    shares = {claim_results(a100, name)[0]["shareID"] for name in share}
    assert len(shares) == 4
    # examples/2: one claim of two shares of 8000 MiB and 50 % each. kube-scheduler v1.36.3 puts
    # them on the two L4 (as HAMi does); v1.35.4 with the gate puts both on one L4 (in 3 runs of
    # 3 each, 2026-12-07).
    (two,) = results[BOTH_L4].values()
    assert two["spec"].get("nodeName") == WORKER
    used = sorted(
        (r["device"], quantity(r["consumedCapacity"]["memory"]) // 2**20,
         quantity(r["consumedCapacity"]["cores"]))
        for r in claim_results(l4, "two-l4")
    )  # fmt: skip
    other = "gpu-1" if version == K8S_NEXT_VERSION else "gpu-0"
    assert used == [("gpu-0", 8000, 50), (other, 8000, 50)]
    # examples/3 and 4: no GPU quota refuses the first at admission; neither fits an L4.
    for name in (OVER_QUOTA, TOO_LARGE):
        (pod,) = results[name].values()
        assert not pod["spec"].get("nodeName")
        assert "cannot allocate all claims" in scheduled_condition(pod)["message"]


@pytest.mark.upstream("hami-dra-webhook-claim", "hami-dra-claim-cleanup", "hami-dra-card-selection")
def test_what_a_user_meets_in_a_dra_tenant_from_the_real_api_server(start_plane, tmp_path):
    """HAMi-DRA's webhooks (the model, as the real v0.2.0 ran on 2026-12-07) before the real
    API server: its answers to what a user does, word for word as the docs quote them."""
    plane = lab_tenant_plane(start_plane, K8S_VERSION, "dra-user")
    hook = HamiDraWebhook(plane)
    hook.serve()
    try:
        claims = lambda: sorted(  # noqa: E731
            c["metadata"]["name"]
            for c in plane.get_json("resourceclaims", "-n", NAMESPACE)["items"]
        )
        path = tmp_path / "share-1.json"
        path.write_text(json.dumps(share_pod("share-1", 20000, 25)))
        plane.kubectl("apply", "-f", str(path))
        wait_placed(plane, "share-1")
        assert claims() == ["gpu-workloads-share-1-gpu"]
        # The same file again while the pod runs: its limits against the stored claim.
        again = plane.kubectl("apply", "-f", str(path), check=False)
        assert again.returncode == 1
        assert 'The Pod "share-1" is invalid: spec: Forbidden: pod updates may not change' in (
            again.stderr
        )
        # Deleted and applied again: the webhook on DELETE took its claim, the name is free.
        plane.kubectl("delete", "-f", str(path))
        assert claims() == []
        plane.kubectl("apply", "-f", str(path))
        wait_placed(plane, "share-1", "share-1 placed again")
        plane.kubectl("delete", "-f", str(path))
        # generateName: the claim carries 5 random characters of its own.
        generated = {**share_pod("x", 100, 1), "metadata": {"generateName": "gen-",
                                                            "namespace": NAMESPACE}}  # fmt: skip
        pod = json.loads(plane.kubectl("create", "-o", "json", "-f", "-",
                                       input=json.dumps(generated)).stdout)  # fmt: skip
        (claim,) = claims()
        assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == claim
        assert (
            len(claim) == len("gpu-workloads--gpu") + 5 and pod["metadata"]["name"][4:] not in claim
        )
        plane.kubectl("delete", "pod", pod["metadata"]["name"], "-n", NAMESPACE)
        # A claim name over 63 characters: the claim is made, the pod refused.
        name = "p" * (63 - len(f"{NAMESPACE}--gpu") + 1)
        refused = plane.kubectl("create", "-f", "-", check=False,
                                input=json.dumps(share_pod(name, 100, 1)))  # fmt: skip
        assert "must be no more than 63 characters" in refused.stderr
        assert f'spec.resourceClaims[0].name: Invalid value: "{NAMESPACE}-{name}-gpu"' in (
            refused.stderr
        )
        assert claims() == [f"{NAMESPACE}-{name}-gpu"]
        plane.kubectl("delete", "resourceclaim", f"{NAMESPACE}-{name}-gpu", "-n", NAMESPACE)
        # The negative card selectors: the API server refuses the claim, the webhook the pod.
        for key, value in [(dra.NO_USE_TYPE, "A100"), (dra.NO_USE_UUID, "GPU-x,GPU-y")]:
            body = share_pod("picky", 100, 1)
            body["metadata"]["annotations"] = {key: value}
            refused = plane.kubectl("create", "-f", "-", check=False, input=json.dumps(body))
            assert 'admission webhook "mutate.hami.io" denied the request: failed to create ' in (
                refused.stderr
            )
            assert "Syntax error: mismatched input 'not' expecting <EOF>" in refused.stderr
            assert claims() == []
        # The positive ones: the exact product name is placed, a part of it never is.
        for name, product in [("exact", "NVIDIA A100-SXM4-80GB"), ("part", "A100")]:
            body = share_pod(name, 100, 1)
            body["metadata"]["annotations"] = {dra.USE_TYPE: product}
            plane.kubectl("create", "-f", "-", input=json.dumps(body))
        wait_placed(plane, "exact")
        part = wait_unschedulable(plane, "part")
        assert "cannot allocate all claims" in scheduled_condition(part)["message"]
    finally:
        hook.unregister()
        hook.close()
