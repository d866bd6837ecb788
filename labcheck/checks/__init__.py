"""The ordered check registry. Order matters: cheap, fundamental checks first, and GPU
checks one after another so each starts from a node with our pods already gone."""

from __future__ import annotations

from ..runner import Check
from . import (
    dra,
    dra_pods,
    extender,
    gpu,
    isolation,
    konnectivity,
    management,
    monitoring,
    registries,
    tenant,
    versions,
)

API = ("tenant.api",)
GPU = ("tenant.api", "nodes.joined", "hami.webhook")
HAMI = ("hami",)  # HAMi's webhook, scheduler, annotations and quota: not a DRA tenant's

ALL_CHECKS: tuple[Check, ...] = (
    Check(
        "mgmt.kamaji",
        "Kamaji controller and datastore ready",
        management.kamaji_ready,
        per_tenant=False,
    ),
    Check(
        "mgmt.webhooks",
        "cert-manager and MetalLB webhooks serving",
        management.webhooks_serving,
        per_tenant=False,
    ),
    Check(
        "tcp.ready",
        "TenantControlPlane Ready on its pinned address",
        management.tcp_ready,
        requires=("mgmt.kamaji",),
    ),
    Check(
        "tcp.distinct",
        "Tenant endpoints distinct",
        management.tcp_distinct,
        per_tenant=False,
        requires=("tcp.ready",),
    ),
    Check(
        "tenant.api",
        "Tenant API version and /readyz",
        tenant.api_reachable,
        requires=("tcp.ready",),
    ),
    Check(
        "tenant.versions",
        "Stack, TenantControlPlane, API server and kubelets agree on the version",
        versions.versions_agree,
        requires=("tcp.ready", *API),  # it reads the TenantControlPlane too
    ),
    Check(
        "nodes.joined",
        "Configured workers joined, Ready, and only those",
        tenant.workers_joined,
        requires=API,
    ),
    Check(
        "nodes.management-clean",
        "Management cluster has no tenant workers",
        management.management_has_no_workers,
        per_tenant=False,
    ),
    Check(
        "mgmt.registries",
        "Management cluster's images: registries, site mirrors, its node's mirror files",
        registries.management_registries,
        per_tenant=False,
    ),
    Check(
        "images.registries",
        "Tenant's images: registries, site mirrors, each node's mirror files",
        registries.tenant_registries,
        requires=("nodes.joined",),  # its pods read each node's files
    ),
    Check(
        "konnectivity.logs",
        "Pod logs through Konnectivity",
        konnectivity.logs,
        requires=("nodes.joined",),
    ),
    Check(
        "konnectivity.exec",
        "Exec through Konnectivity",
        konnectivity.exec_,
        requires=("nodes.joined",),
    ),
    Check(
        "konnectivity.port-forward",
        "Port-forward through Konnectivity",
        konnectivity.port_forward,
        requires=("nodes.joined",),
    ),
    Check(
        "monitoring.targets",
        "Prometheus scrapes the tenant through its API server",
        monitoring.targets_up,
        requires=API,
    ),
    Check(
        "monitoring.truth",
        "Prometheus's slices are what the tenant's pods and claims hold",
        monitoring.metrics_match_objects,
        requires=("monitoring.targets",),
    ),
    Check(
        "sharing.one-mode",
        "One GPU-sharing mode in the tenant (HAMi or DRA)",
        dra.one_mode,
        requires=API,
    ),
    Check(
        "dra.slices",
        "Each worker publishes its cards as shareable devices",
        dra.slices,
        requires=API,
        sharing=("dra",),
    ),
    Check(
        "dra.sharing",
        "GPU pods become claims that share one card",
        dra_pods.sharing,
        requires=("nodes.joined", "dra.slices"),
        sharing=("dra",),
    ),
    Check(
        "dra.exhaustion",
        "One pod too many waits with the scheduler's reason",
        dra_pods.exhaustion,
        requires=("nodes.joined", "dra.slices"),
        sharing=("dra",),
    ),
    # Read only (a dry run): whether a burst of GPU pods waits for HAMi's node lock.
    Check(
        "hami.lock-wait",
        "GPU pods wait for HAMi's node lock",
        gpu.lock_wait,
        requires=API,
        sharing=HAMI,
    ),
    # Read only, before the GPU pods: whether kube-scheduler outwaits a Bind held on a node lock.
    Check(
        "hami.extender-timeout",
        "Extender httpTimeout outlasts the node-lock retry",
        extender.extender_timeout,
        requires=API,
        sharing=HAMI,
    ),
    Check(
        "hami.webhook",
        "GPU pod gets schedulerName hami-scheduler",
        gpu.webhook,
        requires=("nodes.joined",),
        sharing=HAMI,
    ),
    Check(
        "gpu.inventory",
        "Node allocatable and registered cards match inventory",
        gpu.inventory,
        requires=API,
        sharing=HAMI,
    ),
    Check(
        "gpu.sharing", "Fractional slices share one card", gpu.sharing, requires=GPU, sharing=HAMI
    ),
    Check("gpu.policy", "Placement follows binpack/spread", gpu.policy, requires=GPU, sharing=HAMI),
    Check(
        "gpu.oversubscription",
        "Over-asking pod stays Pending with HAMi's reason",
        gpu.oversubscription,
        requires=GPU,
        sharing=HAMI,
    ),
    Check("gpu.quota", "GPU memory ResourceQuota enforced", gpu.quota, requires=GPU, sharing=HAMI),
    Check(
        "gpu.node-lock",
        "Back-to-back GPU pods bind; node lock released",
        gpu.node_lock,
        requires=GPU,
        sharing=HAMI,
    ),
    Check(
        "isolation.cross-tenant",
        "Tenant credentials refused by other tenants",
        isolation.cross_tenant,
        per_tenant=False,
        requires=API,
    ),
    Check(
        "isolation.management",
        "Tenant credentials refused by the management API",
        isolation.management_refused,
        requires=API,
    ),
    Check(
        "isolation.gpu-placement",
        "GPU pods stay on the tenant's own nodes",
        isolation.gpu_placement,
        requires=API,
        sharing=HAMI,
    ),
    Check(
        "gpu.memory-limit",
        "nvidia-smi in a pod reports the slice (real GPUs)",
        gpu.memory_limit,
        requires=GPU,
        sharing=HAMI,
    ),
    # Last, after every GPU check and before cleanup; creates nothing.
    Check(
        "gpu.placement",
        "What HAMi holds on every card (picture)",
        gpu.placement,
        requires=API,
        sharing=HAMI,
    ),
)
