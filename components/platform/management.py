"""ManagementCluster: kind on the lab network, its kubeconfig a secret feeding a Provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

from builders.kubeconfig import checked_kubeconfig
from builders.scripts import kind_cluster_config, kind_create_script, kind_delete_script
from components.registry_mirrors import mirror_files
from labconfig.mirrors import RegistryMirror
from labconfig.model import ProxyConfig, kind_node_container


@dataclass(frozen=True)
class ManagementClusterArgs:
    cluster_name: str
    node_image: str  # pinned by digest (config validates it)
    network_name: pulumi.Input[str]
    proxy: ProxyConfig  # the stack's `proxy` config, as the workers get it
    # The site's mirrors (`registryMirrors`): the kind node pulls through them too.
    registry_mirrors: Sequence[RegistryMirror] = ()
    registry_mirror_auth: Mapping[str, str] = field(default_factory=dict)  # by mirror host


def kind_proxy_environment(proxy: ProxyConfig) -> dict[str, pulumi.Input[str]]:
    """The stack's proxy for kind, which hands HTTP(S)_PROXY and NO_PROXY to its node containers.

    kind reads each variable from its own environment (upper case, else lower case), and
    pulumi-command runs the script with the provider's environment, the shell's proxy included,
    with these entries appended (the last one of a name wins). So all six are set, empty when
    not configured: kind reads an empty value as unset. NO_PROXY is the configured list alone:
    kind adds the lab network's subnets, the node names, its pod and service subnets and the
    `.svc` domains itself. A set value is secret, as a proxy URL may carry credentials.
    """
    values = {"HTTP_PROXY": proxy.http, "HTTPS_PROXY": proxy.https, "NO_PROXY": proxy.no_proxy}
    return {
        key: pulumi.Output.secret(value) if value else ""
        for name, value in values.items()
        for key in (name, name.lower())
    }


def kind_environment(args: ManagementClusterArgs) -> dict[str, pulumi.Input[str]]:
    return {
        "KIND_CLUSTER_NAME": args.cluster_name,
        "KIND_CONFIG": kind_cluster_config(args.cluster_name, args.node_image),
        "KIND_NODE_IMAGE": args.node_image,  # a cluster of that name is reused only on this image
        # Undocumented but stable: kind joins this network (ours, IPv4 only) instead of
        # creating its dual-stack `kind` network. kind prints a warning about it.
        "KIND_EXPERIMENTAL_DOCKER_NETWORK": args.network_name,
        # Not a trigger: a proxy change is an update, whose re-run `create` reuses the running
        # cluster, so it does not reach an existing kind node; only a new cluster gets it.
        **kind_proxy_environment(args.proxy),
    }


def kind_cluster_triggers(args: ManagementClusterArgs) -> list[pulumi.Input[str]]:
    """What makes a different cluster. pulumi-command's `triggers` is `replaceOnChanges`; any
    other input change is an update, which re-runs `create` and, for a new name, would start a
    second cluster and leak the first."""
    return [args.cluster_name, args.node_image, args.network_name]


def cluster_identity(cluster_name: str, node_image: str, network: str, instance: str) -> str:
    """The management provider's `cluster_identifier`: one value per kind cluster instance.

    `instance` is the kind Command's ID, new on every replacement; name, image digest and
    network make the plan say why the provider (and all it manages) moves.
    """
    digest = node_image.rsplit("@", 1)[-1]
    return f"kind-{cluster_name}/{network}/{digest}/{instance}"


class ManagementCluster(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str]
    identity: pulumi.Output[str]
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
            triggers=kind_cluster_triggers(args),
            # stdout is the kubeconfig: keep it out of the logs and the state in clear.
            logging=command.local.Logging.STDERR,
            opts=pulumi.ResourceOptions(
                parent=self,
                additional_secret_outputs=["stdout"],
                # A replacement deletes the old cluster (with the old state's `delete`) before
                # creating the new one. Create-before-delete would let `create` adopt the live
                # cluster by name and the old delete remove it afterwards.
                delete_before_replace=True,
            ),
        )
        # Before anything is installed: every chart's images are pulled through the mirrors.
        self.registry_mirrors = mirror_files(
            f"{name}-registry-mirrors",
            kind_node_container(args.cluster_name),
            args.registry_mirrors,
            self.cluster.id,
            pulumi.ResourceOptions(parent=self, depends_on=[self.cluster]),
            args.registry_mirror_auth,
        )
        # Checked once known: an empty stdout would leave the provider to the user's kubeconfig.
        self.kubeconfig = pulumi.Output.secret(
            self.cluster.stdout.apply(
                lambda stdout: checked_kubeconfig(
                    stdout,
                    f"the kubeconfig of kind cluster {args.cluster_name} "
                    "(stdout of its create script)",
                    fix=f"see `kind get kubeconfig --name {args.cluster_name}`",
                )
            )
        )
        self.context = f"kind-{args.cluster_name}"
        # Derived from the Command's ID, so the identifier depends on the cluster: when the
        # engine plans the delete-before-replace it treats it as unknown, which makes the
        # provider's DiffConfig replace it, so every resource the provider manages is deleted
        # from the old cluster while it still runs and re-created on the new one. A constant
        # identifier would hide the new kubeconfig from DiffConfig instead.
        self.identity = pulumi.Output.all(self.cluster.id, args.network_name).apply(
            lambda values: cluster_identity(
                args.cluster_name, args.node_image, network=values[1], instance=values[0]
            )
        )
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            # Also keeps the provider (and all it manages) from being replaced when only the
            # kubeconfig turns unknown during a later preview.
            cluster_identifier=self.identity,
            # No delete_unreachable: with it, a refresh while the node is down (after a reboot)
            # drops every Kubernetes resource from state. `make destroy` of a lab whose cluster
            # is gone sets PULUMI_K8S_DELETE_UNREACHABLE=true, which the provider reads when
            # this option is not set.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.registry_mirrors] if self.registry_mirrors else None,
            ),
        )
        self.register_outputs(
            {"kubeconfig": self.kubeconfig, "context": self.context, "identity": self.identity}
        )


@dataclass(frozen=True)
class ExistingClusterArgs:
    context: str  # a name for the cluster, used as the provider's identity
    kubeconfig: pulumi.Input[str] | None = None  # from secret config, or
    stack: str = ""  # another stack whose `managementKubeconfig` output is the cluster


def _referenced_kubeconfig(stack: str, kubeconfig: str | None) -> str:
    """The referenced stack must have brought its cluster up: say so instead of a KeyError."""
    if not kubeconfig:
        # RunError: the engine prints the message alone, without a Python traceback.
        raise pulumi.RunError(
            f"managementStack {stack} has no managementKubeconfig output: bring that stack up "
            f"first (make up STACK={stack.rsplit('/', 1)[-1]})"
        )
    return kubeconfig


class ExistingManagementCluster(pulumi.ComponentResource):
    """A management cluster this stack does not own: reached by kubeconfig, never deleted."""

    kubeconfig: pulumi.Output[str]
    identity: pulumi.Output[str]
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
            source = self.reference.get_output("managementKubeconfig").apply(
                lambda kubeconfig: checked_kubeconfig(
                    _referenced_kubeconfig(args.stack, kubeconfig),
                    f"managementKubeconfig output of stack {args.stack}",
                )
            )
        else:
            source = pulumi.Output.from_input(args.kubeconfig).apply(
                lambda kubeconfig: checked_kubeconfig(
                    kubeconfig,
                    "managementKubeconfig (secret config)",
                    fix="Set the file's contents, not its path: "
                    "pulumi config set --secret managementKubeconfig < FILE",
                )
            )
        self.kubeconfig = pulumi.Output.secret(source)
        self.context = args.context
        self.identity = pulumi.Output.from_input(args.context)
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=self.kubeconfig,
            cluster_identifier=self.context,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs(
            {"kubeconfig": self.kubeconfig, "context": self.context, "identity": self.identity}
        )
