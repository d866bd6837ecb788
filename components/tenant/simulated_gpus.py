"""SimulatedGpus: deploys the project's gpu_agent into a tenant whose GPUs are simulated.

The agent's code is the ``gpu_agent`` package of this repository (standard library only),
shipped in a ConfigMap and run on a stock Python image: no image build, no registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from builders.simulated_gpus import (
    agent_config,
    agent_manifests,
    registration_policy_manifests,
)
from components.tenant.admission import admission_policy_resources
from labconfig.model import TenantConfig


@dataclass(frozen=True)
class SimulatedGpusArgs:
    tenant: TenantConfig
    split_count: int
    image: str
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]
    # What the registration policy alone waits for (the tenant serving the policy API).
    policy_gate: list[pulumi.Resource] = field(default_factory=list)


class SimulatedGpus(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: SimulatedGpusArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:SimulatedGpus", name, None, opts)
        config = agent_config(args.tenant, args.split_count)
        m = agent_manifests(config, args.image)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata=m["service_account"]["metadata"], opts=child
        )
        role = k8s.rbac.v1.ClusterRole(
            f"{name}-role",
            metadata=m["cluster_role"]["metadata"],
            rules=m["cluster_role"]["rules"],
            opts=child,
        )
        binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-binding",
            metadata=m["cluster_role_binding"]["metadata"],
            role_ref=m["cluster_role_binding"]["roleRef"],
            subjects=m["cluster_role_binding"]["subjects"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[role, account])
            ),
        )
        maps = [
            k8s.core.v1.ConfigMap(
                f"{name}-{key}", metadata=m[key]["metadata"], data=m[key]["data"], opts=child
            )
            for key in ("code", "config")
        ]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-agent",
            metadata=m["deployment"]["metadata"],
            spec=m["deployment"]["spec"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[binding, *maps, *args.depends_on])
            ),
        )
        # A re-joined node is registered in its own creation, so HAMi reads its cards at once.
        self.registration_policy = admission_policy_resources(
            f"{name}-registration",
            registration_policy_manifests(args.tenant, args.split_count),
            pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[*args.depends_on, *args.policy_gate])
            ),
        )
        self.inventory = config["nodes"]
        self.register_outputs({"inventory": self.inventory})
