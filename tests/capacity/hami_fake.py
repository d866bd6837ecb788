"""The fake lab of tests/support/labcheck_fakes.py with HAMi v2.10.0's writes for what a mix
asks and labcheck's tests never do: several cards per pod, `nvidia.com/gpumem-percentage`, the
bind time, the per-card Filter reasons, and one bind per node at a time.

Written from HAMi's source, not from capacity's code (docs/upstream-facts/capacity.md):
pkg/device/nvidia/device.go Fit (:762-837: the card checks in this order, memreq from the
percentage), pkg/scheduler/score.go:99-102 (NodeInsufficientDevice), pkg/device/common/common.go
GenReason, pkg/device/devices.go:451-483 (the annotation's encoding), pkg/scheduler/scheduler.go
:1031-1034 (Bind: bind-phase allocating, bind-time), :1124-1127 (Filter: vgpu-node,
vgpu-time) and :851 (`node unregistered` until HAMi has read the node's registration).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tests.support.labcheck_fakes import A100, L4, FakeClock, FakeLab, FakeServer

Obj = dict[str, Any]
# The fake's wall clock: Unix time at the fake clock's zero (2026-09-01T00:00:00Z).
WALL0 = 1_788_220_800


def gen_reason(reasons: Counter[str], cards: int) -> str:
    """common.GenReason: "<count>/<cards> <reason>", sorted, joined with ", "."""
    return ", ".join(sorted(f"{n}/{cards} {r}" for r, n in reasons.items()))


class HamiServer(FakeServer):
    bind_seconds = 0.0  # one bind per node per this many seconds (HAMi's node lock)

    def __init__(self, name: str, clock: FakeClock) -> None:
        super().__init__(name, clock)
        self.next_bind: dict[str, float] = {}

    def wall(self) -> int:
        return int(WALL0 + self.clock.now())

    def _usage(self, node: str) -> dict[str, list[int]]:
        use: dict[str, list[int]] = {}
        for p in self.pods.values():
            ann = p["metadata"]["annotations"]
            if ann.get("hami.io/vgpu-node") != node:
                continue
            if p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for ctr in ann.get("hami.io/vgpu-devices-allocated", "").split(";"):
                for dev in filter(None, ctr.split(":")):
                    uuid, _, mem, cores = dev.split(",")
                    u = use.setdefault(uuid, [0, 0, 0])
                    u[0] += 1
                    u[1] += int(mem)
                    u[2] += int(cores)
        return use

    def _fit(self, node: str, nums: int, mem: int, pct: int | None, cores: int, policy: str):
        cards = self._registered(node)
        if nums > len(cards):
            return None, "NodeInsufficientDevice"
        use = self._usage(node)

        def load(c: Obj) -> float:
            u = use.get(c["id"], [0, 0, 0])
            return u[0] / c["count"] + u[1] / c["devmem"] + u[2] / c["devcore"]

        # spread tries the least loaded card first, binpack the most loaded.
        ordered = sorted(cards, key=load, reverse=policy == "binpack")
        chosen: list[tuple[str, int]] = []
        why: Counter[str] = Counter()
        for c in ordered:
            used, usedmem, usedcores = use.get(c["id"], [0, 0, 0])
            memreq = mem or (c["devmem"] * pct // 100 if pct else c["devmem"])
            if used >= c["count"]:
                why["CardTimeSlicingExhausted"] += 1
            elif c["devmem"] - usedmem < memreq:
                why["CardInsufficientMemory"] += 1
            elif c["devcore"] - usedcores < cores:
                why["CardInsufficientCore"] += 1
            elif cores == 100 and used > 0:
                why["ExclusiveDeviceAllocateConflict"] += 1
            elif cores == 0 and usedcores >= c["devcore"]:
                why["CardComputeUnitsExhausted"] += 1
            else:
                chosen.append((c["id"], memreq))
                if len(chosen) == nums:
                    return chosen, ""
        if chosen:
            why["AllocatedCardsInsufficientRequest"] = len(chosen)
        return None, gen_reason(why, len(cards))

    def _schedule(self, ns: str, name: str, pod: Obj, mem: int, cores: int, now: float) -> None:
        spec, ann = pod["spec"], pod["metadata"]["annotations"]
        limits = spec["containers"][0]["resources"]["limits"]
        nums = int(limits.get("nvidia.com/gpu", 1))
        pct = (
            int(limits["nvidia.com/gpumem-percentage"])
            if "nvidia.com/gpumem-percentage" in (limits)
            else None
        )
        policy = ann.get("hami.io/gpu-scheduler-policy", "spread")
        if now < self.knobs.registration_read_at:
            # HAMi has not read the nodes' registrations yet: "node unregistered", no verdict.
            self._reject_unregistered(ns, name, pod, list(self.nodes), now)
            return
        reasons = []
        for node in self.nodes:
            if now < self.next_bind.get(node, 0.0):
                return  # the node lock: tried again on a later tick
            chosen, reason = self._fit(node, nums, mem, pct, cores, policy)
            if chosen is None:
                reasons.append(reason)
                continue
            devices = "".join(f"{uuid},NVIDIA,{m},{cores}:" for uuid, m in chosen) + ";"
            ann["hami.io/vgpu-node"] = node
            ann["hami.io/vgpu-time"] = str(self.wall())
            ann["hami.io/vgpu-devices-to-allocate"] = devices
            ann["hami.io/vgpu-devices-allocated"] = devices
            ann["hami.io/bind-time"] = str(self.wall())
            ann["hami.io/bind-phase"] = "success"  # the agent completed the allocation
            spec["nodeName"] = node
            pod["status"]["phase"] = "Running"
            self.next_bind[node] = now + self.bind_seconds
            return
        self._unschedulable(pod, reasons)
        self.events[(ns, name)] = [
            {
                "type": "Warning",
                "reason": "FilteringFailed",
                "message": f"no available node, {len(self.nodes)} nodes do not meet",
            }
        ]


class HamiLab(FakeLab):
    def _server(self, name: str, url: str, token: str, kind: type[FakeServer] | None = None):
        s = (kind or HamiServer)(name, self.clock)
        self.servers[url] = s
        self.tokens[token] = url
        return s

    def wall(self) -> float:
        return WALL0 + self.clock.now()


def capacity_lab(clock: FakeClock | None = None, bind_seconds: float = 0.0) -> HamiLab:
    """The lab stack's cards: tenant-a one A100 80GB, tenant-b two L4 (Pulumi.lab.yaml)."""
    lab = HamiLab(clock)
    for name, address, cards, quota in (
        ("tenant-a", "172.30.255.200", [A100], 81920),
        ("tenant-b", "172.30.255.201", [L4, L4], 46068),
    ):
        server = lab.add_tenant(name, address, cards, quota_mb=quota)
        server.bind_seconds = bind_seconds
    return lab
