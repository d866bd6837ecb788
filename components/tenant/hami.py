"""HAMi in a tenant: scheduler extender, webhook, and the device plugin on nvml-mock/real cards."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.hami import (
    QUOTA_NAMESPACE,
    SCHEDULER_NAME,
    gpu_quota_manifest,
    hami_values,
    runtime_class_manifest,
)
from builders.lock_wait_policy import POLICY_NAME, policy_manifests
from components.helm import pinned_release
from components.tenant.admission import admission_policy_resources
from labconfig.mirrors import ChartLocation, upstream_chart
from labconfig.model import TenantConfig

NAMESPACE = "kube-system"


@dataclass(frozen=True)
class HamiArgs:
    tenant: TenantConfig
    chart_version: str
    split_count: int
    node_lock_timeout: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]
    chart: ChartLocation = field(default_factory=lambda: upstream_chart("hami"))
    # What the lock-wait policy alone waits for (the tenant serving the policy API): a tenant
    # whose API server never serves it still gets HAMi, only without the wait.
    policy_gate: list[pulumi.Resource] = field(default_factory=list)


class Hami(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: HamiArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Hami", name, None, opts)
        on_tenant = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # After the CNI (or GPU nodes); the lock-wait policy also after the policy-API gate.
        after_nodes = pulumi.ResourceOptions.merge(
            on_tenant, pulumi.ResourceOptions(depends_on=args.depends_on)
        )
        self.runtime_class = None
        if args.tenant.gpu_mode == "real":
            runtime_class = runtime_class_manifest()
            self.runtime_class = k8s.node.v1.RuntimeClass(
                f"{name}-runtime-class",
                metadata=runtime_class["metadata"],
                handler=runtime_class["handler"],
                opts=after_nodes,
            )
        self.release = pinned_release(
            f"{name}-chart",
            chart=args.chart,
            version=args.chart_version,
            namespace=NAMESPACE,
            values=hami_values(args.tenant, args.split_count, args.node_lock_timeout),
            opts=pulumi.ResourceOptions.merge(
                on_tenant,
                pulumi.ResourceOptions(
                    depends_on=[
                        *args.depends_on,
                        *([self.runtime_class] if self.runtime_class else []),
                    ]
                ),
            ),
        )
        # Every GPU pod HAMi places waits for its node lock in Bind (docs/placement-time.md).
        self.lock_wait_policy = admission_policy_resources(
            name,
            policy_manifests(args.tenant),
            pulumi.ResourceOptions.merge(
                after_nodes, pulumi.ResourceOptions(depends_on=args.policy_gate)
            ),
        )
        self.quota = None
        if args.tenant.gpu_quota_mb:
            namespace = k8s.core.v1.Namespace(
                f"{name}-workloads", metadata={"name": QUOTA_NAMESPACE}, opts=on_tenant
            )
            quota = gpu_quota_manifest(args.tenant.gpu_quota_mb)
            self.quota = k8s.core.v1.ResourceQuota(
                f"{name}-gpu-quota",
                metadata=quota["metadata"],
                spec=quota["spec"],
                opts=pulumi.ResourceOptions.merge(
                    on_tenant, pulumi.ResourceOptions(depends_on=[namespace, self.release])
                ),
            )
        self.scheduler_name = SCHEDULER_NAME
        self.register_outputs(
            {
                "schedulerName": self.scheduler_name,
                "lockWaitPolicy": POLICY_NAME if self.lock_wait_policy else None,
            }
        )
