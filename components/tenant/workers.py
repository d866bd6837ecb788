"""Workers: kindest/node containers on the lab network, joined to their tenant with kubeadm."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from builders.control_plane import LAB_LABEL
from builders.scripts import node_delete_script, worker_join_script
from components.registry_mirrors import mirror_files
from labconfig.mirrors import RegistryMirror
from labconfig.model import ProxyConfig
from planning.node_labels import kubelet_node_labels, registration_labels

# The labels the node's kubelet registers with, kept on the container too: the container is
# replaced (a fresh node registers) when they change, since a kubelet applies --node-labels
# only when it creates its Node.
NODE_LABELS_LABEL = "kamaji-hami-lab/node-labels"
# The control plane instance the node joined (Tenant.identity). Labels are ForceNew, so a new
# control plane replaces the container: its kubelet.conf would make the join skip, and its
# certificates are of a control plane that is gone.
CONTROL_PLANE_LABEL = "kamaji-hami-lab/control-plane"
# In-cluster names kind adds to NO_PROXY as well (CoreDNS's default service domains).
CLUSTER_DOMAINS = (".svc", ".svc.cluster", ".svc.cluster.local")


@dataclass(frozen=True)
class WorkerPoolArgs:
    tenant_name: str
    node_names: list[str]
    image: str
    network_name: pulumi.Input[str]
    tenant_kubeconfig: pulumi.Input[str]
    # The gate that the control plane runs the tenant's version (Tenant.version_ready).
    control_plane: pulumi.Resource
    control_plane_identity: pulumi.Input[str]
    gpu_mode: str
    # The stack's `proxy` config; the lab subnet, the tenant's pod and service CIDRs are
    # never proxied.
    proxy: ProxyConfig
    no_proxy: tuple[str, ...]
    # What must finish before Docker is touched at all (the host preflight).
    after: Sequence[pulumi.Resource] = field(default_factory=list)
    # The site's mirrors (`registryMirrors`): each node's containerd pulls through them.
    registry_mirrors: Sequence[RegistryMirror] = ()
    registry_mirror_auth: Mapping[str, str] = field(default_factory=dict)  # by mirror host


def proxy_environment(
    proxy: ProxyConfig, no_proxy: Sequence[str], node_names: Sequence[str]
) -> list[str]:
    """The stack's proxy config for a worker container, as kind passes a proxy to its nodes.

    HTTP_PROXY, HTTPS_PROXY and NO_PROXY are passed in both cases; NO_PROXY also lists the
    lab's own networks, the node names and the cluster domains, so containerd pulls through
    the proxy while in-lab traffic does not. The node image turns these into systemd's
    default environment, so containerd and the kubelet see them. No proxy: no variables.
    """
    if not (proxy.http or proxy.https):
        return []
    excluded = (proxy.no_proxy, *no_proxy, *node_names, *CLUSTER_DOMAINS)
    values = {
        "HTTP_PROXY": proxy.http,
        "HTTPS_PROXY": proxy.https,
        "NO_PROXY": ",".join(part for part in excluded if part),
    }
    return [
        f"{key}={value}" for name, value in values.items() if value for key in (name, name.lower())
    ]


def node_container_args(
    node_name: str,
    tenant_name: str,
    image: pulumi.Input[str],
    network_name: pulumi.Input[str],
    node_labels: Mapping[str, str] | None = None,
    env: Sequence[str] = (),
    control_plane_identity: pulumi.Input[str] | None = None,
) -> dict:
    """The flags kind gives its own nodes: systemd inside, privileged, private cgroup namespace.

    Every input below is one the Docker daemon stores as given (or one the provider does not read
    back), so the next `pulumi up` reads back what it declared and replaces nothing. The one
    exception Docker makes: a privileged container without a `label=` security option gets
    `label=disable` appended, so it is declared here, as Docker would add it.
    """
    labels = [
        docker.ContainerLabelArgs(label=LAB_LABEL, value=tenant_name),
        docker.ContainerLabelArgs(label="app.kubernetes.io/part-of", value="kamaji-hami-lab"),
    ]
    if node_labels:
        registered = kubelet_node_labels(dict(node_labels))
        labels.append(docker.ContainerLabelArgs(label=NODE_LABELS_LABEL, value=registered))
    if control_plane_identity is not None:
        labels.append(
            docker.ContainerLabelArgs(label=CONTROL_PLANE_LABEL, value=control_plane_identity)
        )
    return {
        "name": node_name,
        "hostname": node_name,
        "image": image,
        "privileged": True,
        "security_opts": ["seccomp=unconfined", "apparmor=unconfined", "label=disable"],
        "tmpfs": {"/tmp": "", "/run": ""},
        "volumes": [
            # an anonymous volume, as kind's --volume /var; removed with the container
            docker.ContainerVolumeArgs(container_path="/var"),
            docker.ContainerVolumeArgs(
                host_path="/lib/modules", container_path="/lib/modules", read_only=True
            ),
        ],
        "cgroupns_mode": "private",
        "init": False,
        "tty": True,
        "restart": "on-failure",
        "max_retry_count": 1,
        "remove_volumes": True,
        "networks_advanced": [docker.ContainerNetworksAdvancedArgs(name=network_name)],
        "labels": labels,
        "envs": list(env) or None,
    }


class WorkerPool(pulumi.ComponentResource):
    """All worker nodes of one tenant, one after the other.

    A new image (a version upgrade) replaces the containers in kubeadm's order: none before the
    control plane runs the new version, and each only after the one before it has joined again,
    so a single node at a time is drained and away. The same chain makes a new tenant's workers
    join one after the other. A changed `proxy` stack config replaces the worker containers
    too, as every container environment change does; the config diff says why (the variables
    themselves are secret).
    """

    def __init__(
        self, name: str, args: WorkerPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:WorkerPool", name, None, opts)
        image = docker.RemoteImage(
            f"{name}-image",
            name=args.image,
            keep_locally=True,  # other tenants and kind itself share the image
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        labels = registration_labels(args.gpu_mode)
        env = proxy_environment(args.proxy, args.no_proxy, args.node_names)
        self.containers: list[docker.Container] = []
        self.joins: list[command.local.Command] = []
        previous: list[pulumi.Resource] = []  # the join of the node before this one
        for node_name in args.node_names:
            container_args = node_container_args(
                node_name,
                args.tenant_name,
                image.image_id,
                args.network_name,
                labels,
                env,
                control_plane_identity=args.control_plane_identity,
            )
            if env:  # a proxy URL may carry credentials
                container_args["envs"] = pulumi.Output.secret(env)
            container = docker.Container(
                node_name,
                **container_args,
                # The name is fixed: the old container must go before the new one is created.
                # pulumi-docker asks for this too; the option keeps it whatever the provider says.
                # Its join's delete (the drain) runs first (fact
                # pulumi-engine-delete-before-replace-deletes-dependents-first).
                opts=pulumi.ResourceOptions(
                    parent=self,
                    delete_before_replace=True,
                    depends_on=[args.control_plane, *previous],
                ),
            )
            mirrors = mirror_files(
                f"{node_name}-registry-mirrors",
                node_name,
                args.registry_mirrors,
                container.id,
                pulumi.ResourceOptions(parent=self, depends_on=[container]),
                args.registry_mirror_auth,
            )
            join = command.local.Command(
                f"{node_name}-join",
                create=worker_join_script(),
                # Host kubectl only: works whether the container runs, stopped or is gone.
                delete=node_delete_script(),
                environment={
                    "NODE_NAME": node_name,
                    "NODE_LABELS": kubelet_node_labels(labels),
                    "LAB_KUBECONFIG": args.tenant_kubeconfig,
                },
                # A new container must join again; the script skips a node that has joined.
                triggers=[container.id],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[container, args.control_plane, *([mirrors] if mirrors else [])],
                    # Both ends act on the Node of this name: remove the old one first.
                    delete_before_replace=True,
                ),
            )
            self.containers.append(container)
            self.joins.append(join)
            previous = [join]
        self.node_names = list(args.node_names)
        self.register_outputs({"nodeNames": self.node_names})
