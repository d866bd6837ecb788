"""The tenant's metrics reader: what the lab's Prometheus scrapes the tenant as."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from builders.prometheus_scrape import READER, reader_manifests


@dataclass(frozen=True)
class MetricsReaderArgs:
    dra: bool  # a HAMi-DRA tenant: its monitor's service, in its namespace
    provider: k8s.Provider
    depends_on: list[pulumi.Resource]  # the chart that makes the service and its namespace
    vgpu_monitor: bool = False  # real or NVML cards: also HAMi's vGPU monitor pods


def reader_credentials(data: dict[str, str] | None) -> dict[str, str]:
    """The token Secret's `token` and `ca.crt` (base64, as Secret data): what Prometheus needs.

    The provider returns the Secret once the tenant's token controller has filled it
    (fact pulumi-kubernetes-awaits-service-account-token); an empty one is an error here,
    not a scrape that fails with 401 later."""
    data = data or {}
    missing = [key for key in ("token", "ca.crt") if not data.get(key)]
    if missing:
        raise ValueError(
            f"the tenant's {READER} token Secret has no {' or '.join(missing)}: "
            "is the tenant's controller-manager running?"
        )
    return {"token": data["token"], "ca.crt": data["ca.crt"]}


class MetricsReader(pulumi.ComponentResource):
    credentials: pulumi.Output[dict[str, str]]

    def __init__(
        self, name: str, args: MetricsReaderArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("kamaji-hami-lab:index:MetricsReader", name, None, opts)
        on_tenant = pulumi.ResourceOptions(
            parent=self, provider=args.provider, depends_on=args.depends_on
        )
        account, role, binding, token = reader_manifests(args.dra, args.vgpu_monitor)
        self.account = k8s.core.v1.ServiceAccount(
            f"{name}-account", metadata=account["metadata"], opts=on_tenant
        )
        self.role = k8s.rbac.v1.Role(
            f"{name}-role", metadata=role["metadata"], rules=role["rules"], opts=on_tenant
        )
        self.binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata=binding["metadata"],
            role_ref=binding["roleRef"],
            subjects=binding["subjects"],
            opts=on_tenant,
        )
        self.token = k8s.core.v1.Secret(
            f"{name}-token",
            type=token["type"],
            metadata=token["metadata"],
            opts=pulumi.ResourceOptions.merge(
                on_tenant, pulumi.ResourceOptions(depends_on=[self.account])
            ),
        )
        self.credentials = pulumi.Output.secret(self.token.data.apply(reader_credentials))
        self.register_outputs({"serviceAccount": READER})
