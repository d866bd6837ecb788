"""What the lab asks of the host it runs on: sizing, kube-proxy versions, network, tools."""

from __future__ import annotations

import json
from dataclasses import dataclass

from labconfig.model import PINNED_NODE_IMAGE, LabConfig
from planning.footprint import CONTROL_PLANE, Footprint, lab_footprint


@dataclass(frozen=True)
class Sizing:
    """What a run deploys; its record in the command's stdout is the next run's baseline."""

    tenants: int
    workers: int  # container workers, in all tenants
    # Each tenant's control plane CPU requests (controlPlaneCpuRequests), in tenant order; empty
    # when every tenant requests the defaults, so that such a stack's command line is unchanged.
    # Not in the record: the previous run's memory and disk are all the next run compares.
    control_plane_cpus: tuple[float, ...] = ()
    # Not in the record either: the program's preflight step counts the monitoring (on by
    # default) whatever the stack says, a little more than a stack without it needs.
    monitoring: bool = True

    @property
    def footprint(self) -> Footprint:
        cpus = self.control_plane_cpus or (CONTROL_PLANE.cpus,) * self.tenants
        return lab_footprint(cpus, self.workers, self.monitoring)

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
    # (name, Kubernetes version) of every tenant: the program's scripts run the host's kubectl
    # against each API server, remote workers or not.
    tenant_versions: tuple[tuple[str, str], ...] = ()
    # The kind management cluster's version (its pinned node image's tag); None when the lab
    # does not create it on this host.
    management_version: str | None = None
    # (check name, why) of every host check the stack config accepts (preflightAccept).
    accepted: tuple[tuple[str, str], ...] = ()

    @property
    def api_servers(self) -> tuple[tuple[str, str], ...]:
        """Who the host's kubectl talks to, and at which Kubernetes version."""
        management = (
            (("kind management cluster", self.management_version),)
            if self.management_version
            else ()
        )
        tenants = tuple((f"tenant {name}", version) for name, version in self.tenant_versions)
        return management + tenants


def node_image_version(image: str) -> str:
    """`v1.35.0` of `kindest/node:v1.35.0@sha256:…` (the config admits only pinned images)."""
    match = PINNED_NODE_IMAGE.fullmatch(image)
    if match is None:
        raise ValueError(f"not a pinned kindest/node image: {image!r}")
    return match.group(1)


def host_plan(cfg: LabConfig) -> HostPlan | None:
    """What this stack runs on this host; None when nothing does (existing cluster, remote)."""
    workers = sum(t.container_workers for t in cfg.tenants)
    kind_cluster = cfg.management_mode == "kind"
    if not kind_cluster and workers == 0:
        return None
    versions = sorted({t.kubernetes_version for t in cfg.tenants if t.container_workers})
    cpus = tuple(t.control_plane_cpu_requests.cpus for t in cfg.tenants)
    defaults = all(c == CONTROL_PLANE.cpus for c in cpus)
    return HostPlan(
        sizing=Sizing(len(cfg.tenants), workers, () if defaults else cpus, cfg.monitoring.enabled),
        kube_proxy_versions=tuple(versions),
        kind_cluster=kind_cluster,
        network_name=cfg.network_name,
        subnet=cfg.subnet,
        kamaji_charts=kind_cluster or cfg.install_platform,
        tenant_versions=tuple((t.name, t.kubernetes_version) for t in cfg.tenants),
        management_version=node_image_version(cfg.management_node_image) if kind_cluster else None,
        accepted=tuple(sorted(cfg.preflight_accept.items())),
    )
