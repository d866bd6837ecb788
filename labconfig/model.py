"""The stack config, parsed once into a typed model.

Every user error becomes a ``ConfigError`` that names the config key, the bad value and what is
allowed, raised before any resource is registered. Defaults here are the pinned versions of
``../shared/reference/lab-facts.md``; ``Pulumi.yaml`` documents the same keys and defaults
(a test keeps the two in step).
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from labconfig.base import UNREAD_SECRET, ConfigModel
from labconfig.base import ConfigError as ConfigError  # re-exported: every caller imports it here
from labconfig.gpu_models import (
    KNOWN_GPU_MODELS,
    NVML_MOCK_PROFILES,
    GpuModel,
    find_by_name,
    lookup_model,
    model_table,
)
from labconfig.kamaji_sources import KAMAJI_GIT_URL, kamaji_source
from labconfig.mirrors import (
    ChartLocation,
    RegistryMirror,
    chart_location,
    check_chart_sources,
    check_registry_mirrors,
)
from labconfig.monitoring import MonitoringConfig
from labconfig.node_images import KIND_NODE_IMAGE, WORKER_IMAGES
from labconfig.preflight_checks import PREFLIGHT_CHECKS
from labconfig.versions import kubernetes_minor

PROJECT = "kamaji-hami-lab"

# Stock Python (the agent needs only the standard library), pinned by digest.
GPU_AGENT_IMAGE = (
    "python:3.13.7-alpine3.22"
    "@sha256:9ba6d8cbebf0fb6546ae71f2a1c14f6ffd2fdab83af7fa5669734ef30ad48844"
)
# kubeadm reads only its v1beta4 config format, which the workers' join writes, from v1.31 on.
OLDEST_TENANT_MINOR = (1, 31)
DEFAULT_KAMAJI_TAG = "26.8.2-edge"


def tenant_ceiling(kamaji_tag: str) -> tuple[int, int]:
    """The newest tenant minor that Kamaji `kamaji_tag` accepts: its webhook refuses a
    TenantControlPlane above its kubeadm's minor (`kamaji-kubeadm-ceiling`)."""
    return kubernetes_minor(kamaji_source(kamaji_tag).kubeadm_version)


def _newest_pinned(ceiling: tuple[int, int]) -> str:
    fitting = (v for v in WORKER_IMAGES if OLDEST_TENANT_MINOR <= kubernetes_minor(v) <= ceiling)
    return max(fitting, key=lambda v: tuple(int(part) for part in v[1:].split(".")))


# The tenant minors the lab accepts with its pinned Kamaji.
SUPPORTED_TENANT_MINORS = range(OLDEST_TENANT_MINOR[1], tenant_ceiling(DEFAULT_KAMAJI_TAG)[1] + 1)
# The newest version the whole chain runs: Kamaji's ceiling, and a worker image kind publishes.
DEFAULT_TENANT_VERSION = _newest_pinned(tenant_ceiling(DEFAULT_KAMAJI_TAG))

# fullmatch, never match: "$" also matches before a trailing newline ("a\n" passed).
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _dns_label(value: str) -> str:
    if not DNS_LABEL.fullmatch(value):
        raise ValueError("must be a DNS label: lower-case letters, digits and '-'")
    return value


# Names that become namespaces, node names, container and network names.
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
K8S_VERSION = re.compile(r"v1\.(\d+)\.(\d+)")
# A registry host may carry a port (a site mirror such as 127.0.0.1:5000/kindest/node:…).
PINNED_NODE_IMAGE = re.compile(
    r"(?:[\w.-]+:\d+/)?[\w./-]*kindest/node:(v1\.\d+\.\d+)@sha256:[0-9a-f]{64}"
)


REGISTRY_REPOSITORY_TAG = re.compile(r"[\w.-]+(?::\d+)?/[\w./-]+:\w[\w.-]*")


# The most cards one worker holds, all its `gpus` entries together (a 16-GPU server).
MAX_CARDS_PER_WORKER = 16


class GpuSpec(ConfigModel):
    """A group of identical cards on each GPU worker of a tenant."""

    model: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=MAX_CARDS_PER_WORKER)
    memory_mb: int | None = Field(default=None, ge=1024, le=1_048_576)
    cores: int = Field(default=100, ge=1, le=100)
    product: str | None = None  # NVML name for a custom model; defaults to the model name

    def resolved(self, table: dict[str, GpuModel] = KNOWN_GPU_MODELS) -> GpuModel:
        """The card this entry describes, from the model table of its tenant's GPU mode."""
        known = lookup_model(self.model, table)
        if known is None:
            # the model validator guarantees memory_mb for unknown models
            return GpuModel(self.product or self.model, self.memory_mb or 0, self.cores)
        return GpuModel(
            self.product or known.product, self.memory_mb or known.memory_mb, self.cores
        )


# A Kubernetes CPU quantity in whole millicores (Kubernetes allows no finer CPU): 100m, 0.5, 1.
CPU_QUANTITY = re.compile(r"\d+m|\d+(\.\d{1,3})?")


def millicores(quantity: str) -> int:
    """`250m` -> 250, `0.5` -> 500, `1` -> 1000 (a quantity CPU_QUANTITY admits)."""
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return int(Decimal(quantity) * 1000)


def _number_as_text(value: Any) -> Any:
    # `apiServer: 0.5` in the stack file arrives as a number; Kubernetes takes it as text.
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _cpu_quantity(value: str) -> str:
    if not CPU_QUANTITY.fullmatch(value) or millicores(value) == 0:
        raise ValueError(
            "must be a CPU quantity of at least 1m in whole millicores, such as 100m, 0.5 or 1"
        )
    return value


CpuQuantity = Annotated[str, BeforeValidator(_number_as_text), AfterValidator(_cpu_quantity)]


class ControlPlaneCpuRequests(ConfigModel):
    """The CPU requests of a tenant's control plane pod, by container (its memory is fixed in
    planning/footprint.py). A small host lowers them: the kind node holds every tenant's pod
    and, while Kamaji rolls one, a second pod of that tenant."""

    api_server: CpuQuantity = "250m"
    controller_manager: CpuQuantity = "100m"
    scheduler: CpuQuantity = "50m"
    konnectivity_server: CpuQuantity = "50m"

    @property
    def cpus(self) -> float:
        """The pod's CPU requests together, in CPUs."""
        quantities = (
            self.api_server,
            self.controller_manager,
            self.scheduler,
            self.konnectivity_server,
        )
        return sum(millicores(q) for q in quantities) / 1000


class SchedulerPolicy(ConfigModel):
    node: Literal["binpack", "spread"] = "binpack"
    gpu: Literal["spread", "binpack"] = "spread"


class RemoteWorker(ConfigModel):
    """A GPU host reached over SSH (key: the secret `sshPrivateKey`), joined with kubeadm."""

    name: DnsLabel = Field(min_length=1, max_length=63)
    host: str = Field(min_length=1)
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)


class ProxyConfig(ConfigModel):
    """The proxy the worker containers and the kind cluster pull images through; none by default.

    Taken from the stack config only, never from the environment of whoever runs Pulumi: the
    workers' environment is ForceNew, so a stray HTTPS_PROXY in one shell would replace them.
    kind's Command environment is no trigger: a change reaches only a cluster created later.
    """

    http: str = ""
    https: str = ""
    no_proxy: str = ""  # comma-separated, as NO_PROXY; the lab's own networks are added

    @model_validator(mode="after")
    def _a_proxy_for_no_proxy(self) -> ProxyConfig:
        if self.no_proxy and not (self.http or self.https):
            raise ValueError("noProxy is only used with http or https")
        return self


GpuMode = Literal["simulated", "nvml-mock", "real"]
# hami: HAMi's scheduler extender and webhook (and its device plugin on nvml-mock or real cards);
# dra: Kubernetes Dynamic Resource Allocation with HAMi-DRA's webhook and fake kubelet plugin
# (simulated cards only).
GpuSharing = Literal["hami", "dra"]


class TenantConfig(ConfigModel):
    name: DnsLabel = Field(min_length=1, max_length=40)
    kubernetes_version: str = DEFAULT_TENANT_VERSION
    worker_image: str | None = None
    workers: int = Field(default=1, ge=1, le=20)
    worker_mode: Literal["container", "remote"] = "container"
    remote_workers: tuple[RemoteWorker, ...] = ()
    # simulated: gpu_agent registers the cards; nvml-mock: HAMi's real device plugin on
    # NVIDIA's fake NVML; real: HAMi's device plugin on real cards.
    gpu_mode: GpuMode = "simulated"
    gpu_sharing: GpuSharing = "hami"
    gpus: tuple[GpuSpec, ...] = ()
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    address: str | None = None
    scheduler_policy: SchedulerPolicy = SchedulerPolicy()
    gpu_quota_mb: int | None = Field(default=None, ge=1)
    control_plane_cpu_requests: ControlPlaneCpuRequests = ControlPlaneCpuRequests()

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        match = K8S_VERSION.fullmatch(value)
        if not match:
            raise ValueError("must look like v1.35.0")
        if kubernetes_minor(value) < OLDEST_TENANT_MINOR:
            raise ValueError(
                f"must be v1.{OLDEST_TENANT_MINOR[1]}.0 or newer: the workers join with "
                "kubeadm's v1beta4 config, which older kubeadm cannot read"
            )
        return value  # the ceiling depends on kamajiImageTag: parse_config checks it

    @property
    def node_image(self) -> str:
        return self.worker_image or WORKER_IMAGES[self.kubernetes_version]

    @property
    def worker_names(self) -> list[str]:
        if self.worker_mode == "remote":
            return [worker.name for worker in self.remote_workers]
        return [f"{self.name}-worker-{i}" for i in range(1, self.workers + 1)]

    @property
    def container_workers(self) -> int:
        return self.workers if self.worker_mode == "container" else 0

    @property
    def cards(self) -> list[GpuModel]:
        """Every card of one GPU worker, in annotation order."""
        table = model_table(self.gpu_mode)
        return [gpu.resolved(table) for gpu in self.gpus for _ in range(gpu.count)]


class LabConfig(ConfigModel):
    # kind: a kind cluster on this host; existing: a cluster given by kubeconfig or by the
    # `managementKubeconfig` output of another stack (managementStack).
    management_mode: Literal["kind", "existing"] = "kind"
    management_kubeconfig: SecretStr = SecretStr("")
    management_stack: str = ""
    install_platform: bool = True  # existing mode: install cert-manager, MetalLB and Kamaji
    ssh_private_key: SecretStr = SecretStr("")
    proxy: ProxyConfig = ProxyConfig()
    network_name: DnsLabel = "kamaji-hami-lab"
    subnet: str = "172.30.0.0/16"
    gateway: str = ""
    container_range: str = ""
    pool_range: str = ""
    management_cluster_name: DnsLabel = "kamaji-hami-lab"
    management_node_image: str = KIND_NODE_IMAGE
    cert_manager_version: str = "v1.18.3"
    metallb_version: str = "0.15.3"
    # Kamaji's charts come from this tag's commit (labconfig/kamaji_sources.py).
    kamaji_image_tag: str = DEFAULT_KAMAJI_TAG
    kamaji_etcd_replicas: int = Field(default=1, ge=1, le=5)
    kamaji_etcd_volume_size: str = "2Gi"
    flannel_chart_version: str = "v0.28.9"
    hami_chart_version: str = "2.10.0"
    hami_split_count: int = Field(default=10, ge=1, le=100)
    hami_node_lock_timeout: str = "5m"
    # Chart 0.2.2 (the tree of HAMi-DRA bf26feb) pulls webhook and monitor v0.2.0; its fake
    # plugin's default is `latest`, so the program names the v0.2.0 release's image (facts
    # `hami-dra-chart-images`, `hami-dra-fake-driver-config`).
    hami_dra_chart_version: str = "0.2.2"
    hami_dra_fake_driver_image: str = "ghcr.io/project-hami/hami-dra-fake-driver:v0.2.0"
    gpu_agent_image: str = GPU_AGENT_IMAGE
    nvml_mock_chart_version: str = "0.3.0"
    nvml_mock_image: str = "ghcr.io/nvidia/nvml-mock:0.3.0"
    # A mirrored or air-gapped site (docs/mirrored-site.md): by default everything is pulled
    # from upstream. `kamajiGitUrl` may be a mirror's URL or the path of a local clone.
    registry_mirrors: tuple[RegistryMirror, ...] = ()
    # Secret: {"<mirror host>": "user:password"}, sent as basic auth to that mirror only.
    registry_mirror_auth: SecretStr = SecretStr("")
    chart_sources: dict[str, str] = Field(default_factory=dict)
    kamaji_git_url: str = Field(default=KAMAJI_GIT_URL, min_length=1)
    preflight: bool = True
    # Host checks a user accepts knowingly, by name, with why: still run, reported as warnings.
    preflight_accept: dict[str, str] = Field(default_factory=dict)
    validate_lab: bool = Field(default=True, alias="validate")
    monitoring: MonitoringConfig = MonitoringConfig()
    # Grafana's admin password; empty: the chart makes one (`make dashboard` says where).
    grafana_admin_password: SecretStr = SecretStr("")
    tenants: tuple[TenantConfig, ...] = Field(min_length=1)

    def mirror_auth(self) -> dict[str, str]:
        """`registryMirrorAuth` by mirror host (checked by parse_config)."""
        text = self.registry_mirror_auth.get_secret_value()
        return json.loads(text) if text not in ("", UNREAD_SECRET) else {}

    def chart(self, name: str) -> ChartLocation:
        """Where chart `name` comes from: the stack's `chartSources`, else upstream."""
        return chart_location(name, self.chart_sources)

    @field_validator("management_node_image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not PINNED_NODE_IMAGE.fullmatch(value):
            raise ValueError("must be a kindest/node image pinned by digest (…:v1.35.0@sha256:…)")
        return value

    @field_validator("preflight_accept")
    @classmethod
    def _known_checks(cls, value: dict[str, str]) -> dict[str, str]:
        for name, why in value.items():
            if name not in PREFLIGHT_CHECKS:
                raise ValueError(
                    f"no host check is named {name!r}: one of {', '.join(PREFLIGHT_CHECKS)}"
                )
            if not why.strip():
                raise ValueError(f"say why {name!r} is accepted (the warning repeats it)")
        return value

    @field_validator("registry_mirrors")
    @classmethod
    def _one_mirror_per_registry(
        cls, value: tuple[RegistryMirror, ...]
    ) -> tuple[RegistryMirror, ...]:
        return check_registry_mirrors(value)

    @field_validator("chart_sources")
    @classmethod
    def _known_charts(cls, value: dict[str, str]) -> dict[str, str]:
        return check_chart_sources(value)

    @field_validator("hami_dra_fake_driver_image")
    @classmethod
    def _registry_repository_tag(cls, value: str) -> str:
        # The chart takes the image as registry, repository and tag (builders/hami_dra.py).
        if not REGISTRY_REPOSITORY_TAG.fullmatch(value):
            raise ValueError("must be registry/repository:tag (a tag, not a digest)")
        if value.rpartition(":")[2] == "latest":
            # HAMi-DRA publishes `latest` on every push to main (fact `hami-dra-chart-images`).
            raise ValueError(
                "must name a release tag, not latest (it moves with HAMi-DRA's main branch), "
                "e.g. ghcr.io/project-hami/hami-dra-fake-driver:v0.2.0"
            )
        return value

    @field_validator("kamaji_image_tag")
    @classmethod
    def _chart_source_pinned(cls, value: str) -> str:
        kamaji_source(value)  # the charts are fetched from this tag's pinned commit
        return value

    @field_validator("hami_node_lock_timeout")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not re.fullmatch(r"\d+(s|m)", value):
            raise ValueError("must be a duration such as 90s or 5m")
        return value


def nvml_mock_profile(tenant: TenantConfig) -> str:
    """The nvml-mock profile of a tenant's single card model (validated by parse_config)."""
    profile = find_by_name(NVML_MOCK_PROFILES, tenant.gpus[0].model)
    assert profile is not None  # parse_config rejects models without a profile
    return profile.name


def kind_node_container(cluster_name: str) -> str:
    """The docker container kind names after the cluster for its single node."""
    return f"{cluster_name}-control-plane"
