"""RemoteWorkerPool: GPU hosts over SSH, prepared and joined with kubeadm at the tenant version.

A new version upgrades each host in kubeadm's order for a worker, one host after the other and
only once the control plane runs it: drain, the version's packages, `kubeadm upgrade node` and a
kubelet restart, uncordon. On a first `pulumi up` the same steps find nothing to drain or
upgrade, and the join does the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command

from builders.remote_scripts import (
    node_registered_script,
    prepare_script,
    remote_join_script,
    remote_reset_script,
    remote_upgrade_node_script,
)
from builders.scripts import drain_for_upgrade_script, node_delete_script, node_upgraded_script
from labconfig.model import RemoteWorker
from planning.node_labels import kubelet_node_labels, registration_labels


@dataclass(frozen=True)
class RemoteWorkerPoolArgs:
    tenant_name: str
    workers: tuple[RemoteWorker, ...]
    kubernetes_version: str
    gpu_mode: str
    ssh_private_key: pulumi.Input[str]
    tenant_kubeconfig: pulumi.Input[str]
    control_plane: pulumi.Resource
    control_plane_identity: pulumi.Input[str]  # Tenant.identity: a new control plane rejoins


def connection(
    worker: RemoteWorker, private_key: pulumi.Input[str]
) -> command.remote.ConnectionArgs:
    return command.remote.ConnectionArgs(
        host=worker.host, user=worker.user, port=worker.port, private_key=private_key
    )


class RemoteWorkerPool(pulumi.ComponentResource):
    """All remote worker hosts of one tenant."""

    def __init__(
        self, name: str, args: RemoteWorkerPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:RemoteWorkerPool", name, None, opts)
        key = pulumi.Output.secret(args.ssh_private_key)
        labels = kubelet_node_labels(registration_labels(args.gpu_mode))
        self.joins: list[pulumi.Resource] = []
        previous: list[pulumi.Resource] = []  # the host before this one, at the version
        for worker in args.workers:
            ssh = connection(worker, key)
            on_tenant = {
                "NODE_NAME": worker.name,
                "VERSION": args.kubernetes_version,
                "LAB_KUBECONFIG": args.tenant_kubeconfig,
            }
            drain = command.local.Command(
                f"{worker.name}-drain-for-version",
                create=drain_for_upgrade_script(),
                environment=on_tenant,
                triggers=[args.kubernetes_version],
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[args.control_plane, *previous]
                ),
            )
            prepare = command.remote.Command(
                f"{worker.name}-prepare",
                connection=ssh,
                create=prepare_script(worker.name, args.kubernetes_version, args.gpu_mode),
                # A new version or GPU mode prepares the host again (idempotent).
                triggers=[args.kubernetes_version, args.gpu_mode, worker.host],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[drain]),
            )
            upgrade = command.remote.Command(
                f"{worker.name}-upgrade-node",
                connection=ssh,
                create=remote_upgrade_node_script(worker.name),
                triggers=[args.kubernetes_version],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[prepare]),
            )
            # Reset, then join afresh, when the host, its labels or the control plane change:
            # the kubelet applies --node-labels only when it registers the Node, and the join
            # skips a host that has a kubelet.conf. Both act on the same node, hence delete
            # before replace, here and for `registered`.
            join = command.remote.Command(
                f"{worker.name}-join",
                connection=ssh,
                create=remote_join_script(worker.name, labels),
                delete=remote_reset_script(worker.name),
                stdin=args.tenant_kubeconfig,
                triggers=[worker.host, labels, args.control_plane_identity],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[upgrade, args.control_plane],
                    delete_before_replace=True,
                ),
            )
            # Runs where Pulumi runs: waits for the node object, and deletes it on destroy.
            registered = command.local.Command(
                f"{worker.name}-registered",
                create=node_registered_script(),
                delete=node_delete_script(),
                environment={"NODE_NAME": worker.name, "LAB_KUBECONFIG": args.tenant_kubeconfig},
                triggers=[join.id],
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[join], delete_before_replace=True
                ),
            )
            upgraded = command.local.Command(
                f"{worker.name}-at-version",
                create=node_upgraded_script(),
                environment=on_tenant,
                triggers=[args.kubernetes_version, registered.id],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[upgrade, registered]),
            )
            self.joins.append(registered)
            previous = [upgraded]
        self.node_names = [worker.name for worker in args.workers]
        self.register_outputs({"nodeNames": self.node_names})
