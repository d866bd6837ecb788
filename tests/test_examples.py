"""examples/: the GPU pods a user applies to a tenant, each header's promise held against the lab
stack's cards (Pulumi.lab.yaml, as planning describes them to HAMi) with labcheck's model of
HAMi's placement, and against the GPU quota the program declares for that tenant."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from builders.hami import QUOTA_NAMESPACE, gpu_quota_manifest
from labcheck import dra
from labcheck.hami import QUOTA_MEM_KEY, RES_CORES, RES_GPU, RES_MEM, CardState, take_cards
from labconfig.model import TenantConfig
from labconfig.parse import parse_config
from planning.gpu_inventory import node_inventory
from tests.support.dra_fake import with_dra_tenant
from tests.support.pulumi_harness import PROJECT_DIR, stack_config

EXAMPLES = PROJECT_DIR / "examples"
CFG = parse_config(stack_config("lab"))
SHARE, BOTH_L4, OVER_QUOTA, TOO_LARGE = (
    "1-four-pods-share-one-a100.yaml",
    "2-one-pod-on-both-l4.yaml",
    "3-over-the-gpu-quota.yaml",
    "4-too-large-for-any-card.yaml",
)
TENANT_OF = {SHARE: "tenant-a", BOTH_L4: "tenant-b", OVER_QUOTA: "tenant-b", TOO_LARGE: "tenant-b"}


@dataclass(frozen=True)
class Ask:
    """One pod's GPU request: `gpus` cards, each with `mem_mb` and `cores` (HAMi's per card)."""

    pod: str
    gpus: int
    mem_mb: int
    cores: int

    @property
    def quota_mb(self) -> int:
        # What HAMi's webhook counts against the namespace (upstream fact
        # hami-quota-counts-memory-per-card): memory per card times cards.
        return self.mem_mb * self.gpus


def pods(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def asks(name: str) -> list[Ask]:
    out = []
    for pod in pods(name):
        (container,) = pod["spec"]["containers"]
        limits = container["resources"]["limits"]
        out.append(
            Ask(
                pod["metadata"]["name"],
                int(limits[RES_GPU]),
                int(limits[RES_MEM]),
                int(limits.get(RES_CORES, 0)),
            )
        )
    return out


def tenant(name: str) -> TenantConfig:
    return next(t for t in CFG.tenants if t.name == name)


def cards(tenant_name: str) -> list[CardState]:
    """The tenant's cards as its GPU workers register them with HAMi, nothing placed yet."""
    t = tenant(tenant_name)
    return [
        CardState(
            f"{node}-{i}",
            str(c["type"]),
            int(str(c["devmem"])),
            int(str(c["devcore"])),
            CFG.hami_split_count,
        )
        for node, described in node_inventory(t.cards, t.worker_names).items()
        for i, c in enumerate(described)
    ]


def place(on: list[CardState], ask: Ask, policy: str) -> list[str]:
    """The cards HAMi gives the pod, as labcheck predicts HAMi's choice; [] when fewer fit."""
    return take_cards(on, ask.mem_mb, ask.cores, ask.gpus, policy)


def quota_mb(tenant_name: str) -> int:
    """The limit of the ResourceQuota the program declares in the tenant's GPU namespace."""
    memory = tenant(tenant_name).gpu_quota_mb
    assert memory is not None
    return int(gpu_quota_manifest(memory)["spec"]["hard"][QUOTA_MEM_KEY])


def header(name: str) -> str:
    text = (EXAMPLES / name).read_text()
    return text[: text.index("apiVersion:")]


def prose(name: str) -> str:
    """The header as one line of text: its comment marks dropped, its lines joined."""
    return " ".join(line.lstrip("#").strip() for line in header(name).splitlines())


def test_the_examples_are_these_four():
    assert sorted(p.name for p in EXAMPLES.iterdir()) == sorted(TENANT_OF)


@pytest.mark.upstream(
    "hami-webhook-sets-the-scheduler-name", "dra-webhook-keeps-the-scheduler-name"
)
@pytest.mark.parametrize("name", sorted(TENANT_OF))
def test_each_header_says_how_to_apply_it_and_the_pods_run_in_both_modes(name: str):
    """Every pod in the program's GPU namespace, naming no scheduler (HAMi's webhook gives it
    HAMi's in a HAMi tenant; HAMi-DRA's keeps what the pod says, and only kube-scheduler runs
    in a DRA tenant), asking only the resources both webhooks read, as limits; the header names
    its tenant's kubeconfig, the command that applies this very file, and what a DRA tenant
    does with it."""
    text = header(name)
    assert all(line.startswith("#") for line in text.splitlines()), "a comment header first"
    assert "export PULUMI_CONFIG_PASSPHRASE=" in text  # make kubeconfig opens the stack
    assert f"make kubeconfig TENANT={TENANT_OF[name]}" in text
    assert f"kubectl apply -f examples/{name}" in text
    assert "Expect:" in text
    assert "In a DRA tenant" in text or "in a DRA tenant" in text
    for pod in pods(name):
        assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
        assert pod["metadata"]["namespace"] == QUOTA_NAMESPACE
        assert "schedulerName" not in pod["spec"]
        (container,) = pod["spec"]["containers"]
        assert set(container["resources"]) == {"limits"}
        assert set(container["resources"]["limits"]) <= {RES_GPU, RES_MEM, RES_CORES}


@pytest.mark.upstream("hami-card-fit-free-slice")
def test_four_pods_share_tenant_a_s_one_a100():
    on = cards("tenant-a")
    assert [(c.type, c.devmem) for c in on] == [("NVIDIA A100-SXM4-80GB", 81920)]
    share = asks(SHARE)
    assert [(a.gpus, a.mem_mb, a.cores) for a in share] == [(1, 20000, 25)] * 4
    placed = [place(on, a, tenant("tenant-a").scheduler_policy.gpu) for a in share]
    assert placed == [[on[0].id]] * 4
    card = on[0]
    assert (card.used, card.usedmem, card.usedcores) == (4, 80000, 100)
    assert card.largest_free_mb() == 0  # cores all taken: a fifth pod stays Pending
    text = header(SHARE)
    assert "1920 MB and 0% cores free" in text and "80000/81920 MB" in text
    # A fifth pod: past the quota's remainder it is refused at admission, within it Pending.
    left = quota_mb("tenant-a") - sum(a.quota_mb for a in share)
    assert left == 1920 and not card.fits(left, 0)
    assert f"one asking more than {left} MB is refused at `kubectl apply`" in prose(SHARE)


@pytest.mark.upstream("hami-allocated-annotation-multi-card")
def test_the_two_card_pod_takes_both_of_tenant_b_s_l4():
    on = cards("tenant-b")
    assert [(c.type, c.devmem) for c in on] == [("NVIDIA L4", 23034)] * 2
    (ask,) = asks(BOTH_L4)
    assert ask.gpus == 2
    placed = place(on, ask, tenant("tenant-b").scheduler_policy.gpu)
    assert sorted(placed) == [c.id for c in on]
    assert [(c.usedmem, c.usedcores) for c in on] == [(8000, 50)] * 2
    assert f"{23034 - 8000} MB and 50% left per card" in header(BOTH_L4)


@pytest.mark.upstream("hami-filter-reasons", "kube-scheduler-extender-failed-node-message")
def test_the_too_large_pod_fits_no_card_of_its_tenant_even_empty():
    (ask,) = asks(TOO_LARGE)
    policy = tenant("tenant-b").scheduler_policy.gpu
    assert place(cards("tenant-b"), ask, policy) == []
    assert ask.mem_mb > max(c.devmem for c in cards("tenant-b"))
    # ... nor beside the two-card pod, which the header says may run with it
    on = cards("tenant-b")
    place(on, asks(BOTH_L4)[0], policy)
    assert place(on, ask, policy) == []
    assert "2/2 CardInsufficientMemory" in header(TOO_LARGE)  # both cards, HAMi's GenReason


@pytest.mark.upstream("hami-quota-counts-memory-per-card")
def test_only_the_quota_example_exceeds_its_tenant_s_gpu_quota():
    """The refusal comes at admission, so only the quota example may exceed the quota: the
    too-large pod must get past it (to stay Pending), beside the two-card pod too, and the four
    sharing pods must all be admitted."""
    assert sum(a.quota_mb for a in asks(SHARE)) <= quota_mb("tenant-a")
    (both,), (over,), (large,) = asks(BOTH_L4), asks(OVER_QUOTA), asks(TOO_LARGE)
    limit = quota_mb("tenant-b")
    assert over.quota_mb > limit
    assert large.quota_mb <= limit and both.quota_mb + large.quota_mb <= limit
    text = header(OVER_QUOTA)
    assert f"{limit} MB" in text and f"= {over.quota_mb} MB" in text
    assert f"{over.mem_mb} MB x {over.gpus} cards" in text
    l4_mb = max(c.devmem for c in cards("tenant-b"))
    assert over.mem_mb > l4_mb and f"more than an L4 holds ({l4_mb} MB)" in prose(OVER_QUOTA)
    assert f"{both.mem_mb} MB x {both.gpus} cards = {both.quota_mb} MB" in header(BOTH_L4)
    assert f"{both.quota_mb + large.quota_mb} with" in header(TOO_LARGE)


@pytest.mark.upstream("hami-dra-webhook-claim", "dra-webhook-keeps-the-scheduler-name")
def test_the_four_sharing_pods_share_a_dra_tenant_s_a100_as_the_header_says():
    """examples/1 unchanged in a DRA tenant with the same card (the dra stack's tenant-dra):
    HAMi-DRA's webhook makes the claims the header names, kube-scheduler puts all four on the
    one device, each with its own share (tests/support/dra_fake.py)."""
    lab = with_dra_tenant()
    server = lab.tenant("tenant-dra")
    server.namespaces[QUOTA_NAMESPACE] = {"metadata": {"name": QUOTA_NAMESPACE}}
    for pod in pods(SHARE):
        server.create_pod(QUOTA_NAMESPACE, pod)
    placed = server.list_pods(QUOTA_NAMESPACE)
    assert [p["spec"].get("nodeName") for p in placed] == ["tenant-dra-worker-1"] * 4
    claims = server.list_custom(dra.GROUP, dra.VERSION, dra.CLAIMS, QUOTA_NAMESPACE)
    names = sorted(c["metadata"]["name"] for c in claims)
    assert names == [f"gpu-workloads-a100-share-{n}-gpu" for n in range(1, 5)]
    assert "gpu-workloads-a100-share-<n>-gpu" in prose(SHARE)
    results = [r for c in claims for r in dra.allocation_results(c)]
    assert {r["device"] for r in results} == {"gpu-0"} and len({r["shareID"] for r in results}) == 4
