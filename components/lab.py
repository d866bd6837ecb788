"""Wires the components into one dependency graph:

preflight -> network -> kind -> MetalLB + (cert-manager -> Kamaji) -> per tenant, in parallel:
control plane -> workers -> flannel -> HAMi -> simulated-GPU agent -> validation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import pulumi

from components.cni import Flannel, FlannelArgs
from components.config import LabConfig, TenantConfig
from components.hami import Hami, HamiArgs
from components.kamaji import Kamaji, KamajiArgs
from components.management import ManagementCluster, ManagementClusterArgs
from components.metallb import MetalLB, MetalLBArgs
from components.netplan import NetworkPlan, plan_network
from components.network import LabNetwork, LabNetworkArgs
from components.preflight_step import HostPreflight, HostPreflightArgs
from components.simulated_gpus import SimulatedGpus, SimulatedGpusArgs
from components.tenant import Tenant, TenantArgs
from components.validation import Validation, ValidationArgs, labcheck_spec
from components.workers import WorkerPool, WorkerPoolArgs


@dataclass
class TenantParts:
    control_plane: Tenant
    workers: WorkerPool
    cni: Flannel
    hami: Hami
    gpus: SimulatedGpus | None
    inventory: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def last_steps(self) -> list[pulumi.Resource]:
        return [self.hami, *([self.gpus] if self.gpus else [])]


@dataclass
class Lab:
    plan: NetworkPlan
    network: LabNetwork
    management: ManagementCluster
    metallb: MetalLB
    kamaji: Kamaji
    tenants: dict[str, TenantParts]
    spec: pulumi.Output[str]  # what labcheck needs, kubeconfigs included: a secret
    validation: Validation | None


def build_tenant(
    cfg: LabConfig,
    tenant: TenantConfig,
    plan: NetworkPlan,
    network: LabNetwork,
    management: ManagementCluster,
    platform: list[pulumi.Resource],
) -> TenantParts:
    """One tenant's subtree; it depends on the shared platform only, never on other tenants."""
    control_plane = Tenant(
        tenant.name,
        TenantArgs(
            tenant=tenant,
            address=str(plan.tenant_addresses[tenant.name]),
            management_provider=management.provider,
            depends_on=platform,
        ),
    )
    child = pulumi.ResourceOptions(parent=control_plane)
    workers = WorkerPool(
        f"{tenant.name}-workers",
        WorkerPoolArgs(
            tenant_name=tenant.name,
            node_names=tenant.worker_names,
            image=tenant.node_image,
            network_name=network.name,
            tenant_kubeconfig=control_plane.kubeconfig,
            control_plane=control_plane.control_plane,
        ),
        child,
    )
    cni = Flannel(
        f"{tenant.name}-cni",
        FlannelArgs(
            version=cfg.flannel_chart_version,
            pod_cidr=tenant.pod_cidr,
            provider=control_plane.provider,
            depends_on=[workers],
        ),
        child,
    )
    hami = Hami(
        f"{tenant.name}-hami",
        HamiArgs(
            tenant=tenant,
            chart_version=cfg.hami_chart_version,
            split_count=cfg.hami_split_count,
            node_lock_timeout=cfg.hami_node_lock_timeout,
            provider=control_plane.provider,
            depends_on=[cni],
        ),
        child,
    )
    gpus = None
    inventory: dict[str, list[dict[str, Any]]] = {}
    if tenant.gpu_mode == "simulated" and tenant.gpus:
        gpus = SimulatedGpus(
            f"{tenant.name}-simulated-gpus",
            SimulatedGpusArgs(
                tenant=tenant,
                split_count=cfg.hami_split_count,
                image=cfg.gpu_agent_image,
                provider=control_plane.provider,
                depends_on=[hami],
            ),
            child,
        )
        inventory = gpus.inventory
    return TenantParts(control_plane, workers, cni, hami, gpus, inventory)


def build_lab(cfg: LabConfig, stack: str) -> Lab:
    plan = plan_network(cfg)
    first: list[pulumi.Resource] = []
    if cfg.preflight:
        first.append(
            HostPreflight(
                "preflight",
                HostPreflightArgs(
                    tenants=len(cfg.tenants), workers=sum(t.workers for t in cfg.tenants)
                ),
            )
        )
    network = LabNetwork(
        "lab-network",
        LabNetworkArgs(name=cfg.network_name, plan=plan, after=first),
    )
    management = ManagementCluster(
        "management",
        ManagementClusterArgs(
            cluster_name=cfg.management_cluster_name,
            node_image=cfg.management_node_image,
            network_name=network.name,
        ),
    )
    metallb = MetalLB(
        "metallb",
        MetalLBArgs(
            version=cfg.metallb_version,
            pool_range=plan.pool_range,
            provider=management.provider,
            kubeconfig=management.kubeconfig,
        ),
    )
    kamaji = Kamaji(
        "kamaji",
        KamajiArgs(
            cert_manager_version=cfg.cert_manager_version,
            chart_version=cfg.kamaji_chart_version,
            image_tag=cfg.kamaji_image_tag,
            etcd_replicas=cfg.kamaji_etcd_replicas,
            etcd_volume_size=cfg.kamaji_etcd_volume_size,
            provider=management.provider,
        ),
    )
    platform: list[pulumi.Resource] = [metallb, kamaji]
    tenants = {
        t.name: build_tenant(cfg, t, plan, network, management, platform) for t in cfg.tenants
    }
    spec = spec_output(cfg, plan, stack, management, tenants)
    validation = _validation(cfg, stack, spec, tenants) if cfg.validate_lab else None
    return Lab(plan, network, management, metallb, kamaji, tenants, spec, validation)


def spec_output(
    cfg: LabConfig,
    plan: NetworkPlan,
    stack: str,
    management: ManagementCluster,
    tenants: dict[str, TenantParts],
) -> pulumi.Output[str]:
    names = list(tenants)
    kubeconfigs = [tenants[n].control_plane.kubeconfig for n in names]
    inventories = {n: parts.inventory for n, parts in tenants.items()}
    return pulumi.Output.secret(
        pulumi.Output.all(management.kubeconfig, *kubeconfigs).apply(
            lambda values: json.dumps(
                labcheck_spec(
                    cfg,
                    plan,
                    stack,
                    values[0],
                    dict(zip(names, values[1:], strict=True)),
                    inventories,
                )
            )
        )
    )


def _validation(
    cfg: LabConfig, stack: str, spec: pulumi.Output[str], tenants: dict[str, TenantParts]
) -> Validation:
    last_steps = [step for parts in tenants.values() for step in parts.last_steps]
    # Re-run on any config change and whenever a worker was recreated.
    config_hash = hashlib.sha256(cfg.model_dump_json().encode()).hexdigest()
    triggers: list[Any] = [config_hash]
    triggers += [join.id for parts in tenants.values() for join in parts.workers.joins]
    return Validation(
        "validation",
        ValidationArgs(
            spec_json=spec,
            report_dir=f"reports/{stack}",
            triggers=triggers,
            depends_on=last_steps,
        ),
    )
