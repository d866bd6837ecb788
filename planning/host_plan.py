"""What the lab asks of the host it runs on: sizing, kube-proxy versions, network, tools."""

from __future__ import annotations

import json
from dataclasses import dataclass

from labconfig.model import LabConfig
from planning.footprint import Footprint, lab_footprint


@dataclass(frozen=True)
class Sizing:
    """What a run deploys; its record in the command's stdout is the next run's baseline."""

    tenants: int
    workers: int  # container workers, in all tenants

    @property
    def footprint(self) -> Footprint:
        return lab_footprint(self.tenants, self.workers)

    def record(self) -> str:
        return json.dumps({"tenants": self.tenants, "workers": self.workers})

    @classmethod
    def from_record(cls, text: str | None) -> Sizing | None:
        """The last line of a previous run's stdout, or None when there is no usable one."""
        lines = (text or "").strip().splitlines()
        try:
            data = json.loads(lines[-1])
            return cls(tenants=int(data["tenants"]), workers=int(data["workers"]))
        except (IndexError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class HostPlan:
    sizing: Sizing
    kube_proxy_versions: tuple[str, ...]  # tenants whose kube-proxy runs in a container here
    kind_cluster: bool  # the management cluster is kind on this host, on a network we create
    network_name: str
    subnet: str
    # Kamaji's charts are cloned from its git tag and their dependencies built on this host
    # (components/platform/kamaji_chart.py): git and helm are needed wherever the lab installs
    # Kamaji.
    kamaji_charts: bool = True


def host_plan(cfg: LabConfig) -> HostPlan | None:
    """What this stack runs on this host; None when nothing does (existing cluster, remote)."""
    workers = sum(t.container_workers for t in cfg.tenants)
    kind_cluster = cfg.management_mode == "kind"
    if not kind_cluster and workers == 0:
        return None
    versions = sorted({t.kubernetes_version for t in cfg.tenants if t.container_workers})
    return HostPlan(
        sizing=Sizing(tenants=len(cfg.tenants), workers=workers),
        kube_proxy_versions=tuple(versions),
        kind_cluster=kind_cluster,
        network_name=cfg.network_name,
        subnet=cfg.subnet,
        kamaji_charts=kind_cluster or cfg.install_platform,
    )
