"""Stack outputs: what a user reads after `pulumi up` (secrets stay secret)."""

from __future__ import annotations

from typing import Any

import pulumi

from components.lab import Lab
from components.upgrade_guard import VERSION_KEY
from labconfig.model import LabConfig
from planning.footprint import lab_footprint


def gpu_inventory(inventory: dict[str, list[dict[str, Any]]], split: int) -> dict[str, list[str]]:
    """Per node, one readable line per card: `NVIDIA L4 23034MB 100% x10 slices`."""
    return {
        node: [
            f"{c['type']} {c['devmem']}MB {c['devcore']}% x{c.get('count', split)} slices"
            for c in cards
        ]
        for node, cards in inventory.items()
    }


def stack_outputs(cfg: LabConfig, lab: Lab) -> dict[str, Any]:
    footprint = lab_footprint(
        [t.control_plane_cpu_requests.cpus for t in cfg.tenants],
        sum(t.container_workers for t in cfg.tenants),
        cfg.monitoring.enabled,
    )
    return {
        "network": {
            "name": lab.network.name if lab.network else cfg.network_name,
            "subnet": str(lab.plan.subnet),
            "gateway": str(lab.plan.gateway),
            "containerRange": str(lab.plan.container_range),
        },
        "poolRange": lab.plan.pool_range,
        "managementContext": lab.management.context,
        "managementKubeconfig": lab.management.kubeconfig,
        # Which Kamaji charts were installed: tag, commit and the charts' git tree ids.
        "kamajiChart": lab.kamaji.chart_source if lab.kamaji else None,
        "tenants": {
            name: {
                "endpoint": parts.control_plane.endpoint,
                "nodes": parts.workers.node_names,
                "gpuMode": next(t.gpu_mode for t in cfg.tenants if t.name == name),
                # What the next run's UpgradeGuard compares the config with.
                VERSION_KEY: next(t.kubernetes_version for t in cfg.tenants if t.name == name),
                "gpus": gpu_inventory(parts.inventory, cfg.hami_split_count),
            }
            for name, parts in lab.tenants.items()
        },
        "tenantKubeconfigs": pulumi.Output.secret(
            {name: parts.control_plane.kubeconfig for name, parts in lab.tenants.items()}
        ),
        "footprint": {
            "cpuRequests": round(footprint.cpus, 2),
            "memoryMB": footprint.memory_mb,
            "diskGB": footprint.disk_gb,
        },
        "labcheckSpec": lab.spec,
        # The sharing dashboard (Grafana), when the stack has one.
        "dashboardUrl": lab.monitoring.dashboard_url if lab.monitoring else None,
        "validationReports": lab.validation.report_dir if lab.validation else None,
    }
