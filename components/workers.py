"""Workers: kindest/node containers on the lab network, joined to their tenant with kubeadm."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components.scripts import worker_join_script, worker_leave_script
from components.tenant import LAB_LABEL


@dataclass(frozen=True)
class WorkerPoolArgs:
    tenant_name: str
    node_names: list[str]
    image: str
    network_name: pulumi.Input[str]
    tenant_kubeconfig: pulumi.Input[str]
    control_plane: pulumi.Resource


def node_container_args(
    node_name: str, tenant_name: str, image: pulumi.Input[str], network_name: pulumi.Input[str]
) -> dict:
    """The flags kind gives its own nodes: systemd inside, privileged, private cgroup namespace."""
    return {
        "name": node_name,
        "hostname": node_name,
        "image": image,
        "privileged": True,
        "security_opts": ["seccomp=unconfined", "apparmor=unconfined"],
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
        "labels": [
            docker.ContainerLabelArgs(label=LAB_LABEL, value=tenant_name),
            docker.ContainerLabelArgs(label="app.kubernetes.io/part-of", value="kamaji-hami-lab"),
        ],
    }


class WorkerPool(pulumi.ComponentResource):
    """All worker nodes of one tenant."""

    def __init__(
        self, name: str, args: WorkerPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:WorkerPool", name, None, opts)
        image = docker.RemoteImage(
            f"{name}-image",
            name=args.image,
            keep_locally=True,  # other tenants and kind itself share the image
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.containers: list[docker.Container] = []
        self.joins: list[command.local.Command] = []
        for node_name in args.node_names:
            container = docker.Container(
                node_name,
                **node_container_args(
                    node_name, args.tenant_name, image.image_id, args.network_name
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            join = command.local.Command(
                f"{node_name}-join",
                create=worker_join_script(),
                delete=worker_leave_script(),
                environment={"NODE_NAME": node_name, "LAB_KUBECONFIG": args.tenant_kubeconfig},
                # A new container must join again; the script skips a node that has joined.
                triggers=[container.id],
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[container, args.control_plane]
                ),
            )
            self.containers.append(container)
            self.joins.append(join)
        self.node_names = list(args.node_names)
        self.register_outputs({"nodeNames": self.node_names})
