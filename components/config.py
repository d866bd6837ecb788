"""The stack config, parsed once into a typed model.

Every user error becomes a ``ConfigError`` that names the config key, the bad value and what is
allowed, raised before any resource is registered. Defaults here are the pinned versions of
``../shared/reference/lab-facts.md``; ``Pulumi.yaml`` documents the same keys and defaults
(a test keeps the two in step).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from components.gpu_models import KNOWN_GPU_MODELS, GpuModel, lookup_model

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

DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
K8S_VERSION = re.compile(r"^v1\.(\d+)\.(\d+)$")
PINNED_NODE_IMAGE = re.compile(r"^[\w./-]*kindest/node:(v1\.\d+\.\d+)@sha256:[0-9a-f]{64}$")


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

    def resolved(self) -> GpuModel:
        known = lookup_model(self.model)
        if known is None:
            # the model validator guarantees memory_mb for unknown models
            return GpuModel(self.product or self.model, self.memory_mb or 0, self.cores)
        return GpuModel(
            self.product or known.product, self.memory_mb or known.memory_mb, self.cores
        )


class SchedulerPolicy(_Model):
    node: Literal["binpack", "spread"] = "binpack"
    gpu: Literal["spread", "binpack"] = "spread"


class TenantConfig(_Model):
    name: str = Field(min_length=1, max_length=40)
    kubernetes_version: str = "v1.35.0"
    worker_image: str | None = None
    workers: int = Field(default=1, ge=1, le=20)
    gpu_mode: Literal["simulated"] = "simulated"
    gpus: tuple[GpuSpec, ...] = ()
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    address: str | None = None
    scheduler_policy: SchedulerPolicy = SchedulerPolicy()
    gpu_quota_mb: int | None = Field(default=None, ge=1)

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not DNS_LABEL.match(value):
            raise ValueError("must be a DNS label: lower-case letters, digits and '-'")
        return value

    @field_validator("kubernetes_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        match = K8S_VERSION.match(value)
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
        return [f"{self.name}-worker-{i}" for i in range(1, self.workers + 1)]

    @property
    def cards(self) -> list[GpuModel]:
        """Every card of one GPU worker, in annotation order."""
        return [gpu.resolved() for gpu in self.gpus for _ in range(gpu.count)]


class LabConfig(_Model):
    network_name: str = "kamaji-hami-lab"
    subnet: str = "172.30.0.0/16"
    gateway: str = ""
    container_range: str = ""
    pool_range: str = ""
    management_cluster_name: str = "kamaji-hami-lab"
    management_node_image: str = KIND_NODE_IMAGE
    cert_manager_version: str = "v1.18.3"
    metallb_version: str = "0.15.3"
    kamaji_chart_version: str = "0.0.0+latest"
    kamaji_image_tag: str = "26.8.2-edge"
    kamaji_etcd_replicas: int = Field(default=1, ge=1, le=5)
    kamaji_etcd_volume_size: str = "2Gi"
    flannel_chart_version: str = "v0.28.9"
    hami_chart_version: str = "2.10.0"
    hami_split_count: int = Field(default=10, ge=1, le=100)
    hami_node_lock_timeout: str = "5m"
    gpu_agent_image: str = GPU_AGENT_IMAGE
    preflight: bool = True
    validate_lab: bool = Field(default=True, alias="validate")
    tenants: tuple[TenantConfig, ...] = Field(min_length=1)

    @field_validator("network_name", "management_cluster_name")
    @classmethod
    def _docker_name(cls, value: str) -> str:
        if not DNS_LABEL.match(value):
            raise ValueError("must be a DNS label: lower-case letters, digits and '-'")
        return value

    @field_validator("management_node_image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if not PINNED_NODE_IMAGE.match(value):
            raise ValueError("must be a kindest/node image pinned by digest (…:v1.35.0@sha256:…)")
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
        if tenant.worker_image is None and tenant.kubernetes_version not in WORKER_IMAGES:
            raise ConfigError(
                f"{key}.workerImage",
                f"no pinned kindest/node image is known for {tenant.kubernetes_version}; "
                f"set workerImage (known: {', '.join(WORKER_IMAGES)})",
            )
        if tenant.worker_image is not None:
            match = PINNED_NODE_IMAGE.match(tenant.worker_image)
            if not match:
                raise ConfigError(
                    f"{key}.workerImage",
                    f"{tenant.worker_image!r} must be a kindest/node image pinned by digest",
                )
            if _minor(match.group(1)) != _minor(tenant.kubernetes_version):
                raise ConfigError(
                    f"{key}.workerImage",
                    f"{match.group(1)} does not match kubernetesVersion "
                    f"{tenant.kubernetes_version}: the kubelet must have the tenant's minor",
                )


def _minor(version: str) -> int:
    return int(version.split(".")[1])


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
    _check_tenants(cfg)
    # Imported here: netplan depends on this module's models.
    from components.netplan import plan_network

    plan_network(cfg)  # raises ConfigError for subnets, ranges and addresses that do not fit
    return cfg


STRUCTURED_KEYS = ("tenants",)


def raw_stack_config(config_env: Mapping[str, str]) -> dict[str, Any]:
    """Picks this project's keys out of Pulumi's config map (``project:key`` -> text).

    Every key is kept, known or not, so that a typo is rejected rather than ignored.
    Structured keys arrive as JSON text; scalars stay text and pydantic converts them.
    """
    raw: dict[str, Any] = {}
    prefix = f"{PROJECT}:"
    for full_key, value in config_env.items():
        if not full_key.startswith(prefix):
            continue
        key = full_key.removeprefix(prefix)
        if key in STRUCTURED_KEYS:
            try:
                raw[key] = json.loads(value)
            except json.JSONDecodeError as error:
                raise ConfigError(key, f"is not valid structured config: {error}") from None
        else:
            raw[key] = value
    return raw
