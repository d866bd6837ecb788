"""ManagementCluster: kind on the lab network, its kubeconfig a secret feeding a Provider."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from components.scripts import kind_cluster_config, kind_create_script, kind_delete_script


@dataclass(frozen=True)
class ManagementClusterArgs:
    cluster_name: str
    node_image: str
    network_name: pulumi.Input[str]


def kind_environment(args: ManagementClusterArgs) -> dict[str, pulumi.Input[str]]:
    return {
        "KIND_CLUSTER_NAME": args.cluster_name,
        "KIND_CONFIG": kind_cluster_config(args.cluster_name, args.node_image),
        # Undocumented but stable: kind joins this network (ours, IPv4 only) instead of
        # creating its dual-stack `kind` network. kind prints a warning about it.
        "KIND_EXPERIMENTAL_DOCKER_NETWORK": args.network_name,
    }


class ManagementCluster(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(
        self, name: str, args: ManagementClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:ManagementCluster", name, None, opts)
        self.cluster = command.local.Command(
            f"{name}-kind",
            create=kind_create_script(),
            delete=kind_delete_script(),
            environment=kind_environment(args),
            # A new node image or network means a new cluster.
            triggers=[args.node_image, args.network_name],
            # stdout is the kubeconfig: keep it out of the logs and the state in clear.
            logging=command.local.Logging.STDERR,
            opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["stdout"]),
        )
        self.kubeconfig = pulumi.Output.secret(self.cluster.stdout)
        self.context = f"kind-{args.cluster_name}"
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            # Keeps the provider (and all it manages) from being replaced when the kubeconfig
            # is unknown during a later preview.
            cluster_identifier=self.context,
            # The lab owns this cluster: if it is already gone, destroy still ends cleanly.
            delete_unreachable=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "context": self.context})


@dataclass(frozen=True)
class ExistingClusterArgs:
    context: str  # a name for the cluster, used as the provider's identity
    kubeconfig: pulumi.Input[str] | None = None  # from secret config, or
    stack: str = ""  # another stack whose `managementKubeconfig` output is the cluster


class ExistingManagementCluster(pulumi.ComponentResource):
    """A management cluster this stack does not own: reached by kubeconfig, never deleted."""

    kubeconfig: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(
        self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:ExistingManagementCluster", name, None, opts)
        if args.stack:
            # A later stack reuses an earlier one's cluster, e.g. the lab's kind cluster.
            self.reference = pulumi.StackReference(
                f"{name}-stack", stack_name=args.stack, opts=pulumi.ResourceOptions(parent=self)
            )
            source = self.reference.require_output("managementKubeconfig")
        else:
            source = args.kubeconfig
        self.kubeconfig = pulumi.Output.secret(source)
        self.context = args.context
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            cluster_identifier=self.context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"kubeconfig": self.kubeconfig, "context": self.context})
