"""TenantControlPlane: one Kamaji control plane per tenant on a pinned MetalLB address.

The component creates the control plane once Kamaji's webhooks admit it, waits until Kamaji
reports it Ready and its address answers from this host, reads the admin kubeconfig Kamaji
writes, and hands it on as a secret and as a Provider for everything in the tenant.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s
import yaml

from builders.admission_policy import policy_api_version
from builders.control_plane import (
    API_PORT,
    LAB_LABEL,
    READY_TIMEOUT_SECONDS,
    apiserver_extra_args,
    tenant_control_plane_manifest,
)
from builders.kubeconfig import checked_kubeconfig
from builders.scripts import (
    admission_policy_api_wait_script,
    api_server_healthz_wait_script,
    control_plane_admission_wait_script,
    control_plane_version_wait_script,
    tenant_admin_authorized_wait_script,
)
from labconfig.model import TenantConfig


def admin_kubeconfig_secret_name(tenant_name: str) -> str:
    return f"{tenant_name}-admin-kubeconfig"


def admin_kubeconfig_secret_id(
    tenant_name: str, api_ready_id: pulumi.Output[str]
) -> pulumi.Output[str]:
    """The ID to read the admin kubeconfig Secret by, known only once the API gate ran.

    A read with a known ID runs even in preview and fails when the object is missing; with an
    unknown ID the engine skips it. So while the control plane (and the gate after it) is
    still to be created, the preview skips the read; once the gate passed, Kamaji has
    written the Secret and every later run reads it fresh.
    """
    return api_ready_id.apply(
        lambda _: f"{tenant_name}/{admin_kubeconfig_secret_name(tenant_name)}"
    )


def decode_kubeconfig(tenant_name: str, data: dict[str, str] | None) -> str:
    """`admin.conf` targets the public LoadBalancer endpoint, reachable from host and workers.

    Missing or unusable, it stops the program (UnusableKubeconfig, a RunError): an empty
    kubeconfig would point the tenant provider, and all it installs, at the user's own cluster.
    """
    encoded = (data or {}).get("admin.conf")
    text = None if encoded is None else base64.b64decode(encoded).decode()
    secret = f"{tenant_name}/{admin_kubeconfig_secret_name(tenant_name)}"
    return checked_kubeconfig(
        text,
        f"tenant {tenant_name}: admin.conf of Secret {secret}",
        fix=f"Kamaji writes it; see `kubectl -n {tenant_name} describe tenantcontrolplane "
        f"{tenant_name}` on the management cluster",
    )


def control_plane_identity(tenant_name: str, address: str, api_ready_id: str) -> str:
    """The tenant provider's `cluster_identifier`: one value per control plane instance.

    `api_ready_id` is the ID of the API gate, new whenever the control plane is re-created
    (its trigger); name and address say which tenant it is.
    """
    return f"{tenant_name}/{address}/{api_ready_id}"


@dataclass(frozen=True)
class TenantArgs:
    tenant: TenantConfig
    address: str
    management_provider: k8s.Provider
    management_kubeconfig: pulumi.Input[str]
    # One value per management cluster instance (ManagementCluster.identity): the gates that
    # act on that cluster run again on a new one.
    management_identity: pulumi.Input[str]
    depends_on: list[pulumi.Resource]
    # The tenant's version once UpgradeGuard accepted it (the config's when omitted): a refused
    # downgrade or minor skip never reaches the TenantControlPlane.
    kubernetes_version: pulumi.Input[str] | None = None


class Tenant(pulumi.ComponentResource):
    kubeconfig: pulumi.Output[str]
    identity: pulumi.Output[str]
    provider: k8s.Provider

    def __init__(
        self, name: str, args: TenantArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:Tenant", name, None, opts)
        tenant = args.tenant
        on_management = pulumi.ResourceOptions(parent=self, provider=args.management_provider)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": tenant.name, "labels": {LAB_LABEL: tenant.name}},
            opts=on_management,
        )
        manifest = tenant_control_plane_manifest(tenant, args.address)
        self.admission_ready = command.local.Command(
            f"{name}-admission-ready",
            create=control_plane_admission_wait_script(),
            environment={
                "LAB_KUBECONFIG": pulumi.Output.secret(args.management_kubeconfig),
                "TCP_MANIFEST": yaml.safe_dump(manifest, sort_keys=False),
            },
            # A new management cluster replaces the gate (an environment change would only
            # update it), so it is deleted and re-run with everything else on that cluster.
            triggers=[args.management_identity],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.namespace, *args.depends_on]),
        )
        spec = manifest["spec"]
        if args.kubernetes_version is not None:
            spec = {
                **spec,
                "kubernetes": {**spec["kubernetes"], "version": args.kubernetes_version},
            }
        self.control_plane = k8s.apiextensions.CustomResource(
            f"{name}-control-plane",
            api_version=manifest["apiVersion"],
            kind=manifest["kind"],
            metadata=manifest["metadata"],
            spec=spec,
            opts=pulumi.ResourceOptions.merge(
                on_management,
                pulumi.ResourceOptions(
                    depends_on=[self.namespace, self.admission_ready],
                    custom_timeouts=pulumi.CustomTimeouts(create=f"{READY_TIMEOUT_SECONDS}s"),
                ),
            ),
        )
        self.endpoint = f"https://{args.address}:{API_PORT}"
        self.api_ready = command.local.Command(
            f"{name}-api-ready",
            create=api_server_healthz_wait_script(),
            environment={"API_ENDPOINT": self.endpoint},
            triggers=[self.control_plane.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.control_plane]),
        )
        admin_secret = k8s.core.v1.Secret.get(
            f"{name}-admin-kubeconfig",
            admin_kubeconfig_secret_id(tenant.name, self.api_ready.id),
            opts=pulumi.ResourceOptions.merge(
                on_management, pulumi.ResourceOptions(depends_on=[self.api_ready])
            ),
        )
        self.kubeconfig = pulumi.Output.secret(
            admin_secret.data.apply(lambda data: decode_kubeconfig(tenant.name, data))
        )
        # Kamaji binds the admin user's group to cluster-admin a few seconds after the control
        # plane reports Ready: nothing is created in the tenant before that.
        self.admin_ready = command.local.Command(
            f"{name}-admin-ready",
            create=tenant_admin_authorized_wait_script(),
            environment={"LAB_KUBECONFIG": self.kubeconfig},
            triggers=[self.api_ready.id],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.api_ready]),
        )
        # From the gate's ID, so the identifier depends on the control plane: when the engine
        # replaces the control plane (with the management cluster, or on its own) it takes the
        # identifier as unknown, DiffConfig replaces the provider, and everything in the tenant
        # is deleted while the old control plane still answers, then re-created on the new one.
        # A constant identifier would keep flannel, HAMi and the agent in the state of a
        # control plane that is gone. The gate's ID is kept in the state: stable across runs.
        self.identity = self.api_ready.id.apply(
            lambda gate_id: control_plane_identity(tenant.name, args.address, gate_id)
        )
        # No delete_unreachable: with it, a refresh while the control plane is down (a host
        # reboot) would silently drop every tenant resource from the state.
        self.provider = k8s.Provider(
            f"{name}-provider",
            # through the gate: every object the provider creates waits for the admin's grant
            kubeconfig=pulumi.Output.all(self.kubeconfig, self.admin_ready.id).apply(
                lambda pair: pair[0]
            ),
            cluster_identifier=self.identity,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # Before the tenant's admission policies (HAMi's lock wait, the simulated GPUs'
        # registration): the API server serves them once it runs with the flags of this
        # version, also right after those flags changed on a running tenant.
        self.policy_api_ready = None
        if api_version := policy_api_version(tenant):
            self.policy_api_ready = command.local.Command(
                f"{name}-policy-api-ready",
                create=admission_policy_api_wait_script(),
                environment={
                    "LAB_KUBECONFIG": self.kubeconfig,
                    "POLICY_API": api_version,
                    # the gate first waits for Kamaji's rollout of these flags, there
                    "MANAGEMENT_KUBECONFIG": pulumi.Output.secret(args.management_kubeconfig),
                    "TCP_NAME": manifest["metadata"]["name"],
                    "TCP_NAMESPACE": manifest["metadata"]["namespace"],
                },
                triggers=[self.api_ready.id, api_version, *apiserver_extra_args(tenant)],
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=[self.control_plane, self.admin_ready]
                ),
            )
        # kubeadm's order: the control plane runs the new version before any kubelet, and
        # kube-proxy, does (the workers and kube-proxy wait for this gate). A new tenant passes
        # it as soon as it serves; a version change runs it again.
        self.version_ready = command.local.Command(
            f"{name}-version-ready",
            create=control_plane_version_wait_script(),
            environment={
                "LAB_KUBECONFIG": self.kubeconfig,
                "VERSION": tenant.kubernetes_version,
                "MANAGEMENT_KUBECONFIG": pulumi.Output.secret(args.management_kubeconfig),
                "TCP_NAME": manifest["metadata"]["name"],
                "TCP_NAMESPACE": manifest["metadata"]["namespace"],
            },
            triggers=[self.api_ready.id, tenant.kubernetes_version],
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[self.control_plane, self.admin_ready]
            ),
        )
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "kubeconfig": self.kubeconfig,
                "address": args.address,
                "identity": self.identity,
            }
        )
