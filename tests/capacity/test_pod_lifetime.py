"""Slice-hours of a pod of several containers: it holds its slices until its last container
ends (docs/capacity.md: the latest `finishedAt` of its containers), whichever is listed first."""

from __future__ import annotations

import pytest

from capacity.hours import holdings, slice_hours
from tests.capacity.hami_fake import WALL0

H = 3600


def ended(name: str, at: str) -> dict:
    return {"name": name, "state": {"terminated": {"exitCode": 0, "finishedAt": at}}}


@pytest.mark.parametrize("order", [1, -1], ids=["longest-last", "longest-first"])
def test_a_two_container_pod_is_charged_until_its_last_container_ends(order):
    """Two containers on one card (4000 MB, 25 % and 2000 MB, 0 %, as HAMi encodes them, one
    `;` per container), ended 1 h and 3 h after the bind."""
    statuses = [ended("short", "2026-09-01T01:00:00Z"), ended("long", "2026-09-01T03:00:00Z")]
    pod = {
        "metadata": {
            "namespace": "team",
            "name": "pair",
            "annotations": {
                "hami.io/vgpu-node": "w1",
                "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,4000,25:;GPU-1,NVIDIA,2000,0:;",
                "hami.io/bind-phase": "success",
                "hami.io/bind-time": str(WALL0),
            },
        },
        "spec": {"nodeName": "w1"},
        "status": {"phase": "Succeeded", "containerStatuses": statuses[::order]},
    }
    held, notes = holdings("tenant-a", [pod], now=WALL0 + 24 * H)
    assert notes == [] and {(h.start, h.end) for h in held} == {(WALL0, WALL0 + 3 * H)}
    hours = slice_hours(held, WALL0, WALL0 + 24 * H).by_tenant["tenant-a"]
    assert (hours.mb_hours, hours.core_hours) == ((4000 + 2000) * 3, 25 * 3)
