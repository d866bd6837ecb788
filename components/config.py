"""The stack config, parsed once into a typed model.

Every user error becomes a ``ConfigError`` that names the config key, the bad value and what is
allowed, raised before any resource is registered. Defaults here are the pinned versions of
``../shared/reference/lab-facts.md``; ``Pulumi.yaml`` documents the same keys and defaults
(a test keeps the two in step).
"""

from __future__ import annotations

import contextvars
import json
import re
from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

import pulumi
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from components.gpu_models import (
    KNOWN_GPU_MODELS,
    NVML_MOCK_PROFILES,
    GpuModel,
    find_by_name,
    lookup_model,
    mock_plugin_max_memory_mb,
    model_table,
)
from components.kamaji_sources import kamaji_source
from components.versions import kubernetes_minor

PROJECT = "kamaji-hami-lab"

KIND_NODE_IMAGE = (
    "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f"
)
# Stock Python (the agent needs only the standard library), pinned by digest.
GPU_AGENT_IMAGE = (
    "python:3.13.7-alpine3.22"
    "@sha256:9ba6d8cbebf0fb6546ae71f2a1c14f6ffd2fdab83af7fa5669734ef30ad48844"
)
# kindest/node images by Kubernetes version, pinned by digest as kind asks. A tenant whose
# version is not here must name its own `workerImage`.
WORKER_IMAGES: dict[str, str] = {"v1.35.0": KIND_NODE_IMAGE}
# Kamaji edge accepts tenant versions up to v1.36.x; its e2e runs v1.35.
SUPPORTED_TENANT_MINORS = range(31, 37)

# fullmatch, never match: "$" also matches before a trailing newline ("a\n" passed).
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _dns_label(value: str) -> str:
    if not DNS_LABEL.fullmatch(value):
        raise ValueError("must be a DNS label: lower-case letters, digits and '-'")
    return value


# Names that become namespaces, node names, container and network names.
DnsLabel = Annotated[str, AfterValidator(_dns_label)]
K8S_VERSION = re.compile(r"v1\.(\d+)\.(\d+)")
PINNED_NODE_IMAGE = re.compile(r"[\w./-]*kindest/node:(v1\.\d+\.\d+)@sha256:[0-9a-f]{64}")


class ConfigError(Exception):
    """A stack config value the lab cannot use; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class _Model(BaseModel):
    # camelCase keys like every Pulumi config, unknown keys rejected so typos do not pass silently.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class GpuSpec(_Model):
    """A group of identical cards on each GPU worker of a tenant."""

    model: str = Field(min_length=1)
    count: int = Field(default=1, ge=1, le=16)
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


class SchedulerPolicy(_Model):
    node: Literal["binpack", "spread"] = "binpack"
    gpu: Literal["spread", "binpack"] = "spread"


class RemoteWorker(_Model):
    """A GPU host reached over SSH (key: the secret `sshPrivateKey`), joined with kubeadm."""

    name: DnsLabel = Field(min_length=1, max_length=63)
    host: str = Field(min_length=1)
    user: str = "root"
    port: int = Field(default=22, ge=1, le=65535)


class ProxyConfig(_Model):
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


class TenantConfig(_Model):
    name: DnsLabel = Field(min_length=1, max_length=40)
    kubernetes_version: str = "v1.35.0"
    worker_image: str | None = None
    workers: int = Field(default=1, ge=1, le=20)
    worker_mode: Literal["container", "remote"] = "container"
    remote_workers: tuple[RemoteWorker, ...] = ()
    # simulated: mock device plugin + gpu_agent; nvml-mock: HAMi's real device plugin on
    # NVIDIA's fake NVML; real: HAMi's device plugin on real cards.
    gpu_mode: GpuMode = "simulated"
    gpus: tuple[GpuSpec, ...] = ()
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    address: str | None = None
    scheduler_policy: SchedulerPolicy = SchedulerPolicy()
    gpu_quota_mb: int | None = Field(default=None, ge=1)

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        match = K8S_VERSION.fullmatch(value)
        if not match:
            raise ValueError("must look like v1.35.0")
        minor = int(match.group(1))
        if minor not in SUPPORTED_TENANT_MINORS:
            lo, hi = SUPPORTED_TENANT_MINORS.start, SUPPORTED_TENANT_MINORS.stop - 1
            raise ValueError(f"Kamaji supports tenant versions v1.{lo} to v1.{hi}")
        return value

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


class LabConfig(_Model):
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
    # Kamaji's charts come from this tag's commit (components/kamaji_sources.py).
    kamaji_image_tag: str = "26.8.2-edge"
    kamaji_etcd_replicas: int = Field(default=1, ge=1, le=5)
    kamaji_etcd_volume_size: str = "2Gi"
    flannel_chart_version: str = "v0.28.9"
    hami_chart_version: str = "2.10.0"
    hami_split_count: int = Field(default=10, ge=1, le=100)
    hami_node_lock_timeout: str = "5m"
    gpu_agent_image: str = GPU_AGENT_IMAGE
    nvml_mock_chart_version: str = "0.3.0"
    nvml_mock_image: str = "ghcr.io/nvidia/nvml-mock:0.3.0"
    preflight: bool = True
    validate_lab: bool = Field(default=True, alias="validate")
    tenants: tuple[TenantConfig, ...] = Field(min_length=1)

    @field_validator("management_node_image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not PINNED_NODE_IMAGE.fullmatch(value):
            raise ValueError("must be a kindest/node image pinned by digest (…:v1.35.0@sha256:…)")
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


def _format_location(loc: tuple[int | str, ...]) -> str:
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def _check_tenants(cfg: LabConfig) -> None:
    seen: dict[str, int] = {}
    for index, tenant in enumerate(cfg.tenants):
        key = f"tenants[{index}]"
        if tenant.name in seen:
            raise ConfigError(
                f"{key}.name",
                f"duplicate tenant name {tenant.name!r} (also tenants[{seen[tenant.name]}])",
            )
        seen[tenant.name] = index
        for gpu_index, gpu in enumerate(tenant.gpus):
            if lookup_model(gpu.model) is None and gpu.memory_mb is None:
                raise ConfigError(
                    f"{key}.gpus[{gpu_index}].model",
                    f"unknown GPU model {gpu.model!r}: use one of {', '.join(KNOWN_GPU_MODELS)}, "
                    "or describe a custom model with memoryMb (and product)",
                )
        _check_workers(cfg, tenant, key)
        _check_gpu_mode(tenant, key)


def _check_workers(cfg: LabConfig, tenant: TenantConfig, key: str) -> None:
    if tenant.worker_mode == "remote":
        if not tenant.remote_workers:
            raise ConfigError(f"{key}.remoteWorkers", "workerMode remote needs at least one host")
        if not cfg.ssh_private_key.get_secret_value():
            raise ConfigError(
                "sshPrivateKey",
                "remote workers need the SSH key: "
                "pulumi config set --secret sshPrivateKey < ~/.ssh/id_ed25519",
            )
        names = [w.name for w in tenant.remote_workers]
        for index, name in enumerate(names):
            if name in names[:index]:
                raise ConfigError(
                    f"{key}.remoteWorkers[{index}].name", f"duplicate worker name {name!r}"
                )
        return
    if tenant.remote_workers:
        raise ConfigError(f"{key}.remoteWorkers", "is only used with workerMode remote")
    if tenant.worker_image is None and tenant.kubernetes_version not in WORKER_IMAGES:
        raise ConfigError(
            f"{key}.workerImage",
            f"no pinned kindest/node image is known for {tenant.kubernetes_version}; "
            f"set workerImage (known: {', '.join(WORKER_IMAGES)})",
        )
    if tenant.worker_image is not None:
        match = PINNED_NODE_IMAGE.fullmatch(tenant.worker_image)
        if not match:
            raise ConfigError(
                f"{key}.workerImage",
                f"{tenant.worker_image!r} must be a kindest/node image pinned by digest",
            )
        if kubernetes_minor(match.group(1)) != kubernetes_minor(tenant.kubernetes_version):
            raise ConfigError(
                f"{key}.workerImage",
                f"{match.group(1)} does not match kubernetesVersion "
                f"{tenant.kubernetes_version}: the kubelet must have the tenant's minor",
            )


def nvml_mock_profile(tenant: TenantConfig) -> str:
    """The nvml-mock profile of a tenant's single card model (validated by parse_config)."""
    profile = find_by_name(NVML_MOCK_PROFILES, tenant.gpus[0].model)
    assert profile is not None  # parse_config rejects models without a profile
    return profile.name


# The node's card memory the mock device plugin can advertise (see mock_plugin_max_memory_mb).
MAX_SIMULATED_NODE_MEMORY_MB = mock_plugin_max_memory_mb()
# nvml-mock reports its profile's card: nothing of it can be described differently.
NVML_MOCK_FIXED = {"memory_mb": "memoryMb", "product": "product", "cores": "cores"}


def _check_gpu_mode(tenant: TenantConfig, key: str) -> None:
    if tenant.gpu_mode == "real" and tenant.worker_mode != "remote":
        raise ConfigError(
            f"{key}.gpuMode",
            "real GPUs need workerMode remote (GPU hosts over SSH): container workers have no GPU",
        )
    if tenant.gpu_mode == "simulated":
        _check_simulated_memory(tenant, key)
    if tenant.gpu_mode == "nvml-mock":
        _check_nvml_mock(tenant, key)


def _check_simulated_memory(tenant: TenantConfig, key: str) -> None:
    total = sum(card.memory_mb for card in tenant.cards)
    if total > MAX_SIMULATED_NODE_MEMORY_MB:
        raise ConfigError(
            f"{key}.gpus",
            f"the cards of one simulated worker total {total} MB; HAMi's mock device plugin "
            "advertises one device per MB in a single message, which the kubelet caps at 4 MiB: "
            f"at most {MAX_SIMULATED_NODE_MEMORY_MB} MB per worker (fewer or smaller cards, or "
            "gpuMode nvml-mock)",
        )


def _check_nvml_mock(tenant: TenantConfig, key: str) -> None:
    profile = find_by_name(NVML_MOCK_PROFILES, tenant.gpus[0].model) if tenant.gpus else None
    if len(tenant.gpus) != 1 or profile is None:
        raise ConfigError(
            f"{key}.gpus",
            "nvml-mock simulates one card model per node from its profiles: give exactly one "
            f"entry with a model of {', '.join(NVML_MOCK_PROFILES)}",
        )
    fixed = sorted(tenant.gpus[0].model_fields_set & NVML_MOCK_FIXED.keys())
    if fixed:
        name, card = NVML_MOCK_FIXED[fixed[0]], profile.card
        raise ConfigError(
            f"{key}.gpus[0].{name}",
            f"nvml-mock reports its profile's card ({card.product}, {card.memory_mb} MiB, "
            f"{card.cores}%): remove {name}",
        )


def _check_management(cfg: LabConfig) -> None:
    has_kubeconfig = bool(cfg.management_kubeconfig.get_secret_value())
    if cfg.management_mode == "kind":
        for key, set_ in (
            ("managementKubeconfig", has_kubeconfig),
            ("managementStack", bool(cfg.management_stack)),
        ):
            if set_:
                raise ConfigError(key, "is only used with managementMode existing")
        return
    if has_kubeconfig == bool(cfg.management_stack):
        raise ConfigError(
            "managementMode",
            "existing needs exactly one of managementKubeconfig (secret) or managementStack",
        )


def kind_node_container(cluster_name: str) -> str:
    """The docker container kind names after the cluster for its single node."""
    return f"{cluster_name}-control-plane"


def _check_node_names(cfg: LabConfig) -> None:
    """Worker names are docker container names (container mode) and node names: one each."""
    reserved = kind_node_container(cfg.management_cluster_name)
    owner: dict[str, int] = {}
    for index, tenant in enumerate(cfg.tenants):
        for name in tenant.worker_names:
            if tenant.worker_mode == "container" and name == reserved:
                raise ConfigError(
                    f"tenants[{index}].name",
                    f"worker {name!r} would take the name of kind's node container",
                )
            if name in owner and owner[name] != index:
                raise ConfigError(
                    f"tenants[{index}].name",
                    f"worker {name!r} is also a worker of tenants[{owner[name]}]",
                )
            owner[name] = index


def parse_config(raw: Mapping[str, Any]) -> LabConfig:
    """Validates raw stack config (camelCase keys, values decoded) into a ``LabConfig``."""
    try:
        cfg = LabConfig.model_validate(dict(raw))
    except ValidationError as error:
        first = error.errors()[0]
        key = _format_location(first["loc"]) or "config"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] != "missing":
            message += f" (got {json.dumps(first.get('input'), default=str)})"
        raise ConfigError(key, message) from None
    _check_management(cfg)
    _check_tenants(cfg)
    _check_node_names(cfg)
    # Imported here: netplan depends on this module's models.
    from components.netplan import plan_network

    plan_network(cfg)  # raises ConfigError for subnets, ranges and addresses that do not fit
    return cfg


_FIELDS_BY_KEY = {field.alias or name: field for name, field in LabConfig.model_fields.items()}
# Read as JSON objects (`Config.get_object`); every other key is a scalar.
STRUCTURED_KEYS = ("tenants", "proxy")
# May be set as secrets (a proxy URL can carry credentials): the workers keep them secret.
MAY_BE_SECRET_KEYS = ("proxy",)
# Kept as SecretStr here and as secret Outputs downstream; set with `pulumi config set --secret`.
SECRET_KEYS = tuple(key for key, f in _FIELDS_BY_KEY.items() if f.annotation is SecretStr)
# Scalars Pulumi reads by type (`true`/`True`/`false`/`False`, `int()`); text otherwise.
_TYPED_READERS = {
    bool: (pulumi.Config.get_bool, "true or false"),
    int: (pulumi.Config.get_int, "an integer"),
}


def read_stack_config(config: pulumi.Config) -> dict[str, Any]:
    """This project's stack config, read through Pulumi's own API, ready for ``parse_config``.

    The CLI's language host and the Automation API both hand the config, and the list of keys
    set as secrets, to ``pulumi.runtime.set_all_config``; ``pulumi.Config`` reads it from there,
    so the program sees the same under both. Every key the stack sets is returned, known or not,
    so that a typo is refused rather than ignored. The secret keys come back as ``SecretStr``
    and must have been set as secrets; no other key may be, since the lab puts them in names and
    plain outputs.
    """
    return {key: _read_key(config, key) for key in sorted(_keys_set(config))}


def _keys_set(config: pulumi.Config) -> set[str]:
    # Config.get looks a key up in the runtime's map, then in PULUMI_CONFIG: list both. The SDK
    # has no public call that lists keys, so this reads its internal `runtime.config.CONFIG`
    # (a ContextVar holding the map set_all_config sets). tests/test_pulumi_project.py pins
    # that internal to the SDK version of requirements.txt: re-check it when that changes.
    prefix = f"{config.name}:"
    names = {*pulumi.runtime.config.CONFIG.get(), *pulumi.runtime.get_config_env()}
    return {name.removeprefix(prefix) for name in names if name.startswith(prefix)}


def _read_key(config: pulumi.Config, key: str) -> Any:
    field = _FIELDS_BY_KEY.get(key)
    secret = pulumi.runtime.is_config_secret(config.full_key(key))
    if (secret and key not in MAY_BE_SECRET_KEYS) or key in SECRET_KEYS:
        return _read_secret(config, key, known=field is not None)
    if key in STRUCTURED_KEYS:
        try:
            return config.get_object(key)
        except pulumi.ConfigTypeError:
            text = config.get(key)
            raise ConfigError(key, f"is not valid structured config (JSON): {text!r}") from None
    if field is None or field.annotation not in _TYPED_READERS:
        return config.get(key)
    reader, expected = _TYPED_READERS[field.annotation]
    try:
        return reader(config, key)
    except pulumi.ConfigTypeError:
        raise ConfigError(key, f"must be {expected} (got {config.get(key)!r})") from None


def _read_secret(config: pulumi.Config, key: str, known: bool) -> SecretStr:
    """A secret key, or any key set as a secret: it must be both, or it would leak."""
    value = config.get(key) or ""
    is_secret = pulumi.runtime.is_config_secret(config.full_key(key))
    if key in SECRET_KEYS and value and not is_secret:
        raise ConfigError(
            key, f"is a secret: set it with pulumi config set --secret {key} (it is plain text)"
        )
    if key not in SECRET_KEYS and known:
        raise ConfigError(
            key, "is set as a secret, but the lab uses it in plain text: set it without --secret"
        )
    return SecretStr(value)  # an unknown key is refused by name, its value not shown


def raw_stack_config(
    config_map: Mapping[str, str], secret_keys: Collection[str] = ()
) -> dict[str, Any]:
    """``read_stack_config`` for Pulumi's config map outside a program (``pulumi config --json``).

    ``config_map`` and ``secret_keys`` use full keys (``kamaji-hami-lab:subnet``), as the CLI
    passes them to a program. The SDK's runtime config is ContextVars, so they are set in a
    copy of the current context only: the caller's own config is left as it was.
    """
    return contextvars.copy_context().run(_read_config_map, dict(config_map), list(secret_keys))


def _read_config_map(config_map: dict[str, str], secret_keys: list[str]) -> dict[str, Any]:
    pulumi.runtime.set_all_config(config_map, secret_keys)
    return read_stack_config(pulumi.Config(PROJECT))
