"""The HAMi stand-in (hami_extender.py) does what HAMi v2.10.0 did on the same inputs.

The same pods were run once in the whole lab against the real HAMi v2.10.0 extender (tenant-b:
one worker, two L4, the spread policy; docs/hami-stand-in.md has the side-by-side). Here they
go through the real kube-apiserver and kube-scheduler v1.35.4 with HAMi's chart profile, the
stand-in, the real gpu_agent and kwok (hami_placement.placement_lab, tenant-b's node), and
each must come out as HAMi placed it: the cards, their order and MB in the device annotations,
one slot per container that asks, the reasons and events of a pod that does not fit, and the
handshake annotations HAMi writes on the node when its informer reports it added.

The card ids are the agent's (gpu_agent.hami.card_id), the same in the lab and here because the
node has the same name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from controlplane import wait_until
from hami_extender import HANDSHAKES, POD_GROUP_LABEL
from hami_placement import PlacementLab, delete_all_pods, placement_lab_on_new_plane
from test_agent_real import ALLOCATED, GPU_NODE, LOCK, TO_ALLOCATE, WORK_NS, allocated, annotations

from builders.lock_wait_policy import POD_GROUP_VALUE
from gpu_agent.hami import card_id

CARD0, CARD1 = card_id(GPU_NODE, 0), card_id(GPU_NODE, 1)  # L4 #0 and #1, 23034 MB each
HANDSHAKE_VALUE = re.compile(r"Requesting_\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


@pytest.fixture(scope="module")
def lab(start_control_plane) -> Iterator[PlacementLab]:
    with placement_lab_on_new_plane(start_control_plane, "hami-standin") as lab:
        yield lab


@pytest.fixture
def clean(lab: PlacementLab) -> Iterator[PlacementLab]:
    try:
        yield lab
    finally:
        delete_all_pods(lab)


def container(name: str, **limits: int) -> dict[str, Any]:
    keys = {
        "gpu": "nvidia.com/gpu",
        "mem": "nvidia.com/gpumem",
        "pct": "nvidia.com/gpumem-percentage",
        "cores": "nvidia.com/gpucores",
    }
    body: dict[str, Any] = {"name": name, "image": "registry.invalid/gpu:1"}
    if limits:
        body["resources"] = {"limits": {keys[k]: str(v) for k, v in limits.items()}}
    return body


def pod(name: str, *containers: dict[str, Any]) -> dict[str, Any]:
    """A GPU pod as the lab's tenant stores it: HAMi's scheduler, the lock-wait policy's label."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {POD_GROUP_LABEL: POD_GROUP_VALUE}},
        "spec": {"schedulerName": "hami-scheduler", "containers": list(containers)},
    }


def place(lab: PlacementLab, body: dict[str, Any]) -> dict[str, Any]:
    """Create the pod and wait until its allocation is complete and the lock free again."""
    name = body["metadata"]["name"]
    lab.admin.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", body)

    def done() -> bool:
        return allocated(lab.admin.pod(name), GPU_NODE) and LOCK not in annotations(
            lab.admin.node(GPU_NODE)
        )

    wait_until(done, f"{name} allocated", 30)
    return lab.admin.pod(name)


def refused(lab: PlacementLab, body: dict[str, Any]) -> str:
    """Create the pod; the message of its PodScheduled=False condition."""
    name = body["metadata"]["name"]
    lab.admin.call("POST", f"/api/v1/namespaces/{WORK_NS}/pods", body)

    def condition() -> dict[str, Any] | None:
        conditions = lab.admin.pod(name)["status"].get("conditions") or []
        return next((c for c in conditions if c["type"] == "PodScheduled"), None)

    wait_until(lambda: (condition() or {}).get("status") == "False", f"{name} unschedulable", 30)
    return (condition() or {})["message"]


def devices(placed: dict[str, Any]) -> tuple[str, str]:
    ann = annotations(placed)
    return ann[ALLOCATED], ann[TO_ALLOCATE]


def has_event(lab: PlacementLab, name: str, reason: str, message: str) -> bool:
    """Whether HAMi's recorder posted that event for the pod (it posts in the background)."""
    deadline = time.monotonic() + 5
    while (reason, message) not in hami_events(lab, name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def hami_events(lab: PlacementLab, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the events HAMi's recorder posted for the pod."""
    items = lab.admin.call("GET", f"/api/v1/namespaces/{WORK_NS}/events")["items"]
    ours = [
        e
        for e in items
        if e["involvedObject"]["name"] == name
        and (e.get("source") or {}).get("component") == "hami-scheduler"
    ]
    return [(e["reason"], e["message"]) for e in ours]


@pytest.mark.upstream("hami-v2.10-handshake-on-node-add")
def test_the_node_add_writes_hamis_handshakes(lab):
    """The informer's first list is the node's add: the register pass writes one handshake per
    vendor, later passes none while it holds Requesting; one removed is written again, with a
    GET of the node and a patch through HAMi's client."""
    registry = lab.extender.registry
    registry.restart_ticker()  # no tick pass for 15 s: this test's passes are its own
    node = annotations(lab.admin.node(GPU_NODE))
    written = {key: node.get(key, "") for key in HANDSHAKES}
    assert all(HANDSHAKE_VALUE.fullmatch(value) for value in written.values()), written
    assert registry.handshakes == len(HANDSHAKES) == 5

    before = lab.extender.api.requests.copy()
    registry.register_pass()
    assert registry.handshakes == 5
    assert lab.extender.api.requests == before

    lab.admin.call(
        "PATCH", f"/api/v1/nodes/{GPU_NODE}", {"metadata": {"annotations": {HANDSHAKES[0]: None}}}
    )
    wait_until(
        lambda: HANDSHAKES[0] not in annotations(registry.latest or {"metadata": {}}),
        "the informer saw the handshake go", 10,
    )  # fmt: skip
    registry.register_pass()
    assert HANDSHAKE_VALUE.fullmatch(annotations(lab.admin.node(GPU_NODE))[HANDSHAKES[0]])
    assert dict(lab.extender.api.requests - before) == {"GET nodes": 1, "PATCH nodes": 1}


@pytest.mark.upstream(
    "hami-v2.10-annotation-skips-containers-without-cards", "hami-app-containers-add-up-on-a-card"
)
def test_every_container_is_read_and_only_those_asking_get_a_slot(clean):
    """HAMi reads every container: a pod whose second container asks for a card is placed (the
    first alone asks nothing), and a pod with two asking containers gets a card for each, in
    one annotation slot per asking container. Before, the stand-in read only the first."""
    second = place(clean, pod("second", container("c0"), container("c1", gpu=1, mem=1000, cores=5)))
    assert devices(second) == (f"{CARD1},NVIDIA,1000,5:;", ";;")
    both = place(
        clean,
        pod(
            "both",
            container("c0", gpu=1, mem=1500, cores=5),
            container("c1"),
            container("c2", gpu=1, mem=2500, cores=5),
        ),
    )
    assert devices(both) == (f"{CARD0},NVIDIA,1500,5:;{CARD1},NVIDIA,2500,5:;", ";;;")
    grants = clean.extender.allocations[both["metadata"]["uid"]]
    assert [(g.card.id, g.mem, g.cores) for g in grants] == [(CARD0, 1500, 5), (CARD1, 2500, 5)]


@pytest.mark.upstream(
    "hami-v2.10-card-order",
    "hami-allocated-annotation-multi-card",
    "hami-gpumem-percentage",
    "hami-filter-reasons",
    "hami-v2.10-scheduler-events",
)
def test_the_lab_sequence_lands_where_hami_put_it(clean):
    """tenant-b's sequence as the real HAMi placed it in the lab: two cards for `gpu: 2` (the
    last registered first on a tie), the tie of two equal cards to the last one, a percentage
    as MB of the card, a card per container, no memory asked as the whole card (which then
    fits nowhere), and a pod asking more cards than the node has."""
    expected = [
        ("b1", [container("c0", gpu=2, mem=2000, cores=10)],
         f"{CARD1},NVIDIA,2000,10:{CARD0},NVIDIA,2000,10:;", "0.00"),
        ("b2", [container("c0", gpu=1, mem=8000, cores=30)], f"{CARD1},NVIDIA,8000,30:;", "2.87"),
        ("b3", [container("c0", gpu=1, pct=25, cores=20)], f"{CARD0},NVIDIA,5758,20:;", "6.60"),
        ("b4", [container("c0", gpu=1, mem=3000, cores=10),
                container("c1", gpu=1, mem=2000, cores=5)],
         f"{CARD0},NVIDIA,3000,10:;{CARD1},NVIDIA,2000,5:;", "9.35"),
    ]  # fmt: skip
    for name, containers, value, score in expected:
        placed = place(clean, pod(name, *containers))
        slots = value.count(";")
        assert devices(placed) == (value, ";" * (slots + 1)), name
        fitted = f"find fit node({GPU_NODE}), 0 nodes not fit, 1 nodes fit({GPU_NODE}:{score})"
        assert has_event(clean, name, "FilteringSucceed", fitted), hami_events(clean, name)
        binding = f"Successfully binding node [{GPU_NODE}] to {WORK_NS}/{name}"
        assert has_event(clean, name, "BindingSucceed", binding), hami_events(clean, name)

    message = refused(clean, pod("b5", container("c0", gpu=1, cores=5)))
    assert message.startswith("0/1 nodes are available: 1 2/2 CardInsufficientMemory."), message
    for failed in (
        f"1 nodes CardInsufficientMemory({GPU_NODE})",
        "no available node, 1 nodes do not meet",
    ):
        assert has_event(clean, "b5", "FilteringFailed", failed), hami_events(clean, "b5")
    placed = place(clean, pod("b6", container("c0", gpu=2, mem=11000, cores=5)))
    assert devices(placed)[0] == f"{CARD0},NVIDIA,11000,5:{CARD1},NVIDIA,11000,5:;"

    message = refused(clean, pod("b7", container("c0", gpu=3, mem=100, cores=1)))
    assert message.startswith("0/1 nodes are available: 1 NodeInsufficientDevice."), message
