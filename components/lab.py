"""Wires the components into one dependency graph:

preflight -> network -> kind -> MetalLB + (cert-manager -> Kamaji) -> per tenant, in parallel:
control plane -> workers + kube-proxy -> flannel -> [GPU nodes] -> HAMi -> [simulated-GPU agent] ->
validation, or in a DRA tenant: control plane -> workers + kube-proxy -> flannel -> cert-manager ->
HAMi-DRA -> validation.

Stack config picks each part: kind or an existing management cluster, container or remote
workers, simulated, nvml-mock or real GPUs. The rest of the graph is the same in every stack.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from builders.control_plane import API_PORT
from builders.labcheck_spec import labcheck_spec
from builders.prometheus_scrape import ScrapeTarget, secret_dir
from components.platform.host_preflight import HostPreflight, HostPreflightArgs
from components.platform.kamaji import Kamaji, KamajiArgs
from components.platform.kamaji_chart import ChartOrigin, ensure_chart_cache
from components.platform.management import (
    ExistingClusterArgs,
    ExistingManagementCluster,
    ManagementCluster,
    ManagementClusterArgs,
)
from components.platform.metallb import MetalLB, MetalLBArgs
from components.platform.monitoring import Monitoring, MonitoringArgs
from components.platform.network import LabNetwork, LabNetworkArgs
from components.tenant.cni import Flannel, FlannelArgs
from components.tenant.control_plane import Tenant, TenantArgs
from components.tenant.gpu_nodes import GpuNodes, GpuNodesArgs
from components.tenant.hami import Hami, HamiArgs
from components.tenant.hami_dra import HamiDra, HamiDraArgs
from components.tenant.kube_proxy import KubeProxy, KubeProxyArgs
from components.tenant.metrics_reader import MetricsReader, MetricsReaderArgs
from components.tenant.remote_workers import RemoteWorkerPool, RemoteWorkerPoolArgs
from components.tenant.simulated_gpus import SimulatedGpus, SimulatedGpusArgs
from components.tenant.workers import WorkerPool, WorkerPoolArgs
from components.upgrade_guard import TenantVersion, UpgradeGuard, UpgradeGuardArgs
from components.validation import Validation, ValidationArgs
from labconfig.addresses import NetworkPlan, plan_network
from labconfig.kamaji_sources import kamaji_source
from labconfig.model import LabConfig, TenantConfig
from planning.gpu_inventory import node_inventory
from planning.host_plan import host_plan

Management = ManagementCluster | ExistingManagementCluster
Workers = WorkerPool | RemoteWorkerPool


@dataclass
class TenantParts:
    control_plane: Tenant
    workers: Workers
    kube_proxy: KubeProxy
    cni: Flannel
    sharing: Hami | HamiDra  # HAMi, or HAMi-DRA in a tenant whose gpuSharing is dra
    gpu_nodes: GpuNodes | None
    gpus: SimulatedGpus | None
    inventory: dict[str, list[dict[str, Any]]]
    metrics_reader: MetricsReader | None = None  # with monitoring: what Prometheus scrapes as

    @property
    def last_steps(self) -> list[pulumi.Resource]:
        return [self.sharing, *([self.gpus] if self.gpus else [])]


@dataclass
class Lab:
    plan: NetworkPlan
    network: LabNetwork | None
    management: Management
    metallb: MetalLB | None
    kamaji: Kamaji | None
    tenants: dict[str, TenantParts]
    spec: pulumi.Output[str]  # what labcheck needs, kubeconfigs included: a secret
    validation: Validation | None
    monitoring: Monitoring | None = None


def _workers(
    cfg: LabConfig,
    tenant: TenantConfig,
    control_plane: Tenant,
    network_name: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    after: list[pulumi.Resource],
) -> Workers:
    if tenant.worker_mode == "remote":
        return RemoteWorkerPool(
            f"{tenant.name}-workers",
            RemoteWorkerPoolArgs(
                tenant_name=tenant.name,
                workers=tenant.remote_workers,
                kubernetes_version=tenant.kubernetes_version,
                gpu_mode=tenant.gpu_mode,
                ssh_private_key=pulumi.Output.secret(cfg.ssh_private_key.get_secret_value()),
                tenant_kubeconfig=control_plane.kubeconfig,
                control_plane=control_plane.version_ready,
                control_plane_identity=control_plane.identity,
            ),
            opts,
        )
    return WorkerPool(
        f"{tenant.name}-workers",
        WorkerPoolArgs(
            tenant_name=tenant.name,
            node_names=tenant.worker_names,
            image=tenant.node_image,
            network_name=network_name,
            tenant_kubeconfig=control_plane.kubeconfig,
            control_plane=control_plane.version_ready,
            control_plane_identity=control_plane.identity,
            gpu_mode=tenant.gpu_mode,
            proxy=cfg.proxy,
            no_proxy=(cfg.subnet, tenant.pod_cidr, tenant.service_cidr),
            after=after,
            registry_mirrors=cfg.registry_mirrors,
            registry_mirror_auth=cfg.mirror_auth(),
        ),
        opts,
    )


def build_tenant(
    cfg: LabConfig,
    tenant: TenantConfig,
    plan: NetworkPlan,
    network_name: pulumi.Input[str],
    management: Management,
    platform: list[pulumi.Resource],
    host_checks: list[pulumi.Resource] | None = None,
    kubernetes_version: pulumi.Input[str] | None = None,
) -> TenantParts:
    """One tenant's subtree; it depends on the shared platform only, never on other tenants."""
    control_plane = Tenant(
        tenant.name,
        TenantArgs(
            tenant=tenant,
            address=str(plan.tenant_addresses[tenant.name]),
            management_provider=management.provider,
            management_kubeconfig=management.kubeconfig,
            management_identity=management.identity,
            depends_on=platform,
            kubernetes_version=kubernetes_version,
        ),
    )
    child = pulumi.ResourceOptions(parent=control_plane)
    workers = _workers(cfg, tenant, control_plane, network_name, child, host_checks or [])
    # As soon as the API server serves, as kubeadm's addon phase: flannel reaches the API
    # server through its Service address, which kube-proxy programs on each node.
    kube_proxy = KubeProxy(
        f"{tenant.name}-kube-proxy",
        KubeProxyArgs(
            tenant=tenant,
            address=str(plan.tenant_addresses[tenant.name]),
            provider=control_plane.provider,
            kubeconfig=control_plane.kubeconfig,
            control_plane_identity=control_plane.identity,
            # kube-proxy is never newer than its API server: after an upgrade's control plane
            depends_on=[control_plane.admin_ready, control_plane.version_ready],
        ),
        child,
    )
    cni = Flannel(
        f"{tenant.name}-cni",
        FlannelArgs(
            version=cfg.flannel_chart_version,
            pod_cidr=tenant.pod_cidr,
            provider=control_plane.provider,
            depends_on=[workers, kube_proxy],
            chart=cfg.chart("flannel"),
        ),
        child,
    )
    gpu_nodes = None
    if tenant.gpu_mode == "nvml-mock":
        gpu_nodes = GpuNodes(
            f"{tenant.name}-gpu-nodes",
            GpuNodesArgs(
                tenant=tenant,
                nvml_mock_chart_version=cfg.nvml_mock_chart_version,
                nvml_mock_image=cfg.nvml_mock_image,
                provider=control_plane.provider,
                depends_on=[cni],
                chart=cfg.chart("nvml-mock"),
            ),
            child,
        )
    inventory = node_inventory(tenant.cards, tenant.worker_names) if tenant.gpus else {}
    if tenant.gpu_sharing == "dra":
        # One mode per cluster, as HAMi asks: no HAMi and no simulated-GPU agent here.
        dra = HamiDra(
            f"{tenant.name}-hami-dra",
            HamiDraArgs(
                tenant=tenant,
                chart_version=cfg.hami_dra_chart_version,
                fake_driver_image=cfg.hami_dra_fake_driver_image,
                cert_manager_version=cfg.cert_manager_version,
                provider=control_plane.provider,
                depends_on=[cni],
                chart=cfg.chart("hami-dra"),
                cert_manager_chart=cfg.chart("cert-manager"),
            ),
            child,
        )
        return TenantParts(
            control_plane, workers, kube_proxy, cni, dra, None, None, inventory,
            _metrics_reader(cfg, tenant, control_plane, dra.release, child),
        )  # fmt: skip
    hami = Hami(
        f"{tenant.name}-hami",
        HamiArgs(
            tenant=tenant,
            chart_version=cfg.hami_chart_version,
            split_count=cfg.hami_split_count,
            node_lock_timeout=cfg.hami_node_lock_timeout,
            provider=control_plane.provider,
            depends_on=[gpu_nodes or cni],
            chart=cfg.chart("hami"),
            policy_gate=_present(control_plane.policy_api_ready),
        ),
        child,
    )
    gpus = None
    if tenant.gpu_mode == "simulated" and tenant.gpus:
        gpus = SimulatedGpus(
            f"{tenant.name}-simulated-gpus",
            SimulatedGpusArgs(
                tenant=tenant,
                split_count=cfg.hami_split_count,
                image=cfg.gpu_agent_image,
                provider=control_plane.provider,
                depends_on=[hami.release],
                policy_gate=_present(control_plane.policy_api_ready),
            ),
            child,
        )
    return TenantParts(
        control_plane, workers, kube_proxy, cni, hami, gpu_nodes, gpus, inventory,
        _metrics_reader(cfg, tenant, control_plane, hami.release, child),
    )  # fmt: skip


def _metrics_reader(
    cfg: LabConfig,
    tenant: TenantConfig,
    control_plane: Tenant,
    chart: pulumi.Resource,
    opts: pulumi.ResourceOptions,
) -> MetricsReader | None:
    if not cfg.monitoring.enabled:
        return None
    return MetricsReader(
        f"{tenant.name}-metrics-reader",
        MetricsReaderArgs(
            dra=tenant.gpu_sharing == "dra",
            provider=control_plane.provider,
            depends_on=[chart],
            vgpu_monitor=_has_vgpu_monitor(tenant),
        ),
        opts,
    )


def _has_vgpu_monitor(tenant: TenantConfig) -> bool:
    """HAMi's device plugin, and its vGPU monitor, run on real and NVML cards only."""
    return tenant.gpu_sharing == "hami" and tenant.gpu_mode in ("real", "nvml-mock")


def _monitoring(
    cfg: LabConfig,
    plan: NetworkPlan,
    management: Management,
    platform: list[pulumi.Resource],
    tenants: dict[str, TenantParts],
) -> Monitoring:
    by_name = {t.name: t for t in cfg.tenants}
    targets = [
        ScrapeTarget(
            tenant=name,
            api_host=f"{plan.tenant_addresses[name]}:{API_PORT}",
            secret_dir=secret_dir(name),
            dra=by_name[name].gpu_sharing == "dra",
            vgpu_monitor=_has_vgpu_monitor(by_name[name]),
        )
        for name in tenants
    ]
    password = cfg.grafana_admin_password.get_secret_value()
    return Monitoring(
        "monitoring",
        MonitoringArgs(
            config=cfg.monitoring,
            targets=targets,
            credentials={
                name: parts.metrics_reader.credentials
                for name, parts in tenants.items()
                if parts.metrics_reader is not None
            },
            provider=management.provider,
            dashboard_address=str(plan.dashboard_address) if plan.dashboard_address else None,
            grafana_admin_password=pulumi.Output.secret(password) if password else None,
            depends_on=platform,
            prometheus_chart=cfg.chart("prometheus"),
            grafana_chart=cfg.chart("grafana"),
        ),
    )


def _management(cfg: LabConfig, network: LabNetwork | None) -> Management:
    if cfg.management_mode == "existing":
        return ExistingManagementCluster(
            "management",
            ExistingClusterArgs(
                context=cfg.management_stack or cfg.management_cluster_name,
                kubeconfig=pulumi.Output.secret(cfg.management_kubeconfig.get_secret_value()),
                stack=cfg.management_stack,
            ),
        )
    assert network is not None  # kind mode always builds the network
    return ManagementCluster(
        "management",
        ManagementClusterArgs(
            cluster_name=cfg.management_cluster_name,
            node_image=cfg.management_node_image,
            network_name=network.name,
            proxy=cfg.proxy,
            registry_mirrors=cfg.registry_mirrors,
            registry_mirror_auth=cfg.mirror_auth(),
        ),
    )


def _platform(
    cfg: LabConfig, plan: NetworkPlan, management: Management, charts_dir: Path | None
) -> tuple[MetalLB | None, Kamaji | None]:
    if charts_dir is None:
        return None, None  # already there: another stack or the cluster's owner installed it
    metallb = MetalLB(
        "metallb",
        MetalLBArgs(
            version=cfg.metallb_version,
            pool_range=plan.pool_range,
            provider=management.provider,
            kubeconfig=management.kubeconfig,
            chart=cfg.chart("metallb"),
        ),
    )
    kamaji = Kamaji(
        "kamaji",
        KamajiArgs(
            cert_manager_version=cfg.cert_manager_version,
            image_tag=cfg.kamaji_image_tag,
            etcd_replicas=cfg.kamaji_etcd_replicas,
            etcd_volume_size=cfg.kamaji_etcd_volume_size,
            provider=management.provider,
            kubeconfig=management.kubeconfig,
            management_identity=management.identity,
            charts_dir=charts_dir,
            cert_manager_chart=cfg.chart("cert-manager"),
        ),
    )
    return metallb, kamaji


def _installs_platform(cfg: LabConfig) -> bool:
    return cfg.management_mode == "kind" or cfg.install_platform


def build_lab(cfg: LabConfig, stack: str) -> Lab:
    # At program time, in preview too, on whichever machine runs the program (the releases'
    # Check loads local charts whenever their path is known), and before the first
    # registration: a machine that cannot fetch them stops with one line, not after half a
    # plan. Fetched once per checkout; never deleted, as another stack may use the same ones.
    charts_dir = (
        ensure_chart_cache(
            kamaji_source(cfg.kamaji_image_tag),
            origin=ChartOrigin(cfg.kamaji_git_url, cfg.chart_sources.get("kamaji-etcd", "")),
        )
        if _installs_platform(cfg)
        else None
    )
    plan = plan_network(cfg)
    host = host_plan(cfg)  # None: nothing of this stack runs on this host
    first: list[pulumi.Resource] = []
    if cfg.preflight and host is not None:
        first.append(HostPreflight("preflight", HostPreflightArgs(plan=host)))
    network = None
    if cfg.management_mode == "kind":
        network = LabNetwork(
            "lab-network", LabNetworkArgs(name=cfg.network_name, plan=plan, after=first)
        )
    # With an existing cluster, container workers join the network its stack created.
    network_name = network.name if network else cfg.network_name
    management = _management(cfg, network)
    metallb, kamaji = _platform(cfg, plan, management, charts_dir)
    platform: list[pulumi.Resource] = [p for p in (metallb, kamaji) if p is not None]
    guard = _upgrade_guard(cfg, stack)
    tenants = {
        t.name: build_tenant(
            cfg, t, plan, network_name, management, platform, first, guard.version(t.name)
        )
        for t in cfg.tenants
    }
    spec = spec_output(cfg, plan, stack, management, tenants)
    monitoring = (
        _monitoring(cfg, plan, management, platform, tenants) if cfg.monitoring.enabled else None
    )
    validation = (
        _validation(cfg, stack, spec, management, tenants, monitoring) if cfg.validate_lab else None
    )
    return Lab(plan, network, management, metallb, kamaji, tenants, spec, validation, monitoring)


def _upgrade_guard(cfg: LabConfig, stack: str) -> UpgradeGuard:
    return UpgradeGuard(
        "upgrades",
        UpgradeGuardArgs(
            tenants=[
                TenantVersion(
                    name=t.name,
                    version=t.kubernetes_version,
                    workers=tuple(t.worker_names),
                    replaced=t.worker_mode != "remote",
                )
                for t in cfg.tenants
            ],
            stack=f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}",
        ),
    )


def spec_output(
    cfg: LabConfig,
    plan: NetworkPlan,
    stack: str,
    management: Management,
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


# Keys newer than the fingerprint count only when a stack sets them, so an upgrade of the
# program does not re-run every stack's validation.
_FINGERPRINT_OPTIONAL = frozenset(
    {
        "registry_mirrors",
        "registry_mirror_auth",
        "chart_sources",
        "kamaji_git_url",
        "monitoring",
        "grafana_admin_password",
    }
)
# And each tenant's.
_TENANT_FINGERPRINT_OPTIONAL = frozenset({"control_plane_cpu_requests"})


def config_fingerprint(cfg: LabConfig) -> str:
    """The stack config's hash (secrets are masked in the dump)."""
    exclude: dict[str, Any] = dict.fromkeys(_FINGERPRINT_OPTIONAL - cfg.model_fields_set, True)
    exclude["tenants"] = {
        index: dict.fromkeys(_TENANT_FINGERPRINT_OPTIONAL - tenant.model_fields_set, True)
        for index, tenant in enumerate(cfg.tenants)
    }
    return hashlib.sha256(cfg.model_dump_json(exclude=exclude).encode()).hexdigest()


def release_fingerprint(releases: list[Any]) -> pulumi.Output[str]:
    """The hash of what the tenants' Helm releases deploy (chart, version, values as the
    engine holds them): a program upgrade that changes HAMi's values, or a chart bump,
    validates again as a config change does; an `up` that upgrades no release does not."""
    deployed = [pulumi.Output.all(r.chart, r.version, r.values) for r in releases]
    return pulumi.Output.all(*deployed).apply(
        lambda seen: hashlib.sha256(
            json.dumps(seen, sort_keys=True, default=str).encode()
        ).hexdigest()
    )


def _validation(
    cfg: LabConfig,
    stack: str,
    spec: pulumi.Output[str],
    management: Management,
    tenants: dict[str, TenantParts],
    monitoring: Monitoring | None = None,
) -> Validation:
    # labcheck's monitoring checks read Prometheus: it runs once Prometheus is installed.
    last_steps = [step for parts in tenants.values() for step in parts.last_steps]
    last_steps += [monitoring] if monitoring else []
    # Re-run on any config change (secrets are masked in the dump), on a new management
    # cluster, whenever a worker joined anew, and when a tenant's chart changes.
    triggers: list[Any] = [config_fingerprint(cfg), management.identity]
    triggers += [join.id for parts in tenants.values() for join in parts.workers.joins]
    triggers.append(
        release_fingerprint(
            [r for parts in tenants.values() for r in (parts.cni.release, parts.sharing.release)]
        )
    )
    return Validation(
        "validation",
        ValidationArgs(
            spec_json=spec,
            report_dir=f"reports/{stack}",
            triggers=triggers,
            depends_on=last_steps,
        ),
    )


def _present(resource: pulumi.Resource | None) -> list[pulumi.Resource]:
    return [resource] if resource is not None else []
