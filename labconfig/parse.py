"""parse_config: the typed model, then the rules across keys, then the address plan; the first
broken rule is a ConfigError that names its key."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from labconfig.addresses import plan_network
from labconfig.base import UNREAD_SECRET
from labconfig.gpu_models import (
    KNOWN_GPU_MODELS,
    NVML_MOCK_PROFILES,
    find_by_name,
    lookup_model,
)
from labconfig.model import (
    MAX_CARDS_PER_WORKER,
    PINNED_NODE_IMAGE,
    WORKER_IMAGES,
    ConfigError,
    LabConfig,
    TenantConfig,
    kind_node_container,
    tenant_ceiling,
)
from labconfig.versions import kubernetes_minor


def _format_location(loc: tuple[int | str, ...]) -> str:
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else (f".{part}" if key else str(part))
    return key


def _check_tenants(cfg: LabConfig, secrets_set: bool) -> None:
    seen: dict[str, int] = {}
    for index, tenant in enumerate(cfg.tenants):
        key = f"tenants[{index}]"
        if tenant.name in seen:
            raise ConfigError(
                f"{key}.name",
                f"duplicate tenant name {tenant.name!r} (also tenants[{seen[tenant.name]}])",
            )
        seen[tenant.name] = index
        _check_ceiling(cfg, tenant, key)
        for gpu_index, gpu in enumerate(tenant.gpus):
            if lookup_model(gpu.model) is None and gpu.memory_mb is None:
                raise ConfigError(
                    f"{key}.gpus[{gpu_index}].model",
                    f"unknown GPU model {gpu.model!r}: use one of {', '.join(KNOWN_GPU_MODELS)}, "
                    "or describe a custom model with memoryMb (and product)",
                )
        # Each entry's count is bounded by the model; the worker holds all entries at once.
        cards = sum(gpu.count for gpu in tenant.gpus)
        if cards > MAX_CARDS_PER_WORKER:
            raise ConfigError(
                f"{key}.gpus",
                f"{cards} cards on each worker (the counts of all entries added up): a worker "
                f"holds at most {MAX_CARDS_PER_WORKER}",
            )
        _check_workers(cfg, tenant, key, secrets_set)
        _check_gpu_mode(tenant, key)
        _check_gpu_sharing(tenant, key)


def _check_ceiling(cfg: LabConfig, tenant: TenantConfig, key: str) -> None:
    ceiling = "v{}.{}".format(*tenant_ceiling(cfg.kamaji_image_tag))
    if kubernetes_minor(tenant.kubernetes_version) > kubernetes_minor(ceiling):
        raise ConfigError(
            f"{key}.kubernetesVersion",
            f"{tenant.kubernetes_version} is newer than {ceiling}, the newest tenant version "
            f"Kamaji {cfg.kamaji_image_tag} runs: its webhook refuses a TenantControlPlane above "
            f"the kubeadm it is built with ({ceiling}); use {ceiling} or older (docs/versions.md)",
        )


def _check_workers(cfg: LabConfig, tenant: TenantConfig, key: str, secrets_set: bool) -> None:
    if tenant.worker_mode == "remote":
        if not tenant.remote_workers:
            raise ConfigError(f"{key}.remoteWorkers", "workerMode remote needs at least one host")
        if secrets_set and not cfg.ssh_private_key.get_secret_value():
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


# nvml-mock reports its profile's card: nothing of it can be described differently.
NVML_MOCK_FIXED = {"memory_mb": "memoryMb", "product": "product", "cores": "cores"}


def _check_gpu_mode(tenant: TenantConfig, key: str) -> None:
    if tenant.gpu_mode == "real" and tenant.worker_mode != "remote":
        raise ConfigError(
            f"{key}.gpuMode",
            "real GPUs need workerMode remote (GPU hosts over SSH): container workers have no GPU",
        )
    if tenant.gpu_mode == "nvml-mock":
        _check_nvml_mock(tenant, key)


# HAMi-DRA asks for Kubernetes >= 1.34 with DRAConsumableCapacity (its README); the program
# turns the gate on where it is alpha (builders/hami_dra.py).
MIN_DRA_MINOR = 34
# HAMi's own settings, which mean nothing where DRA allocates the cards.
HAMI_ONLY = {"scheduler_policy": "schedulerPolicy", "gpu_quota_mb": "gpuQuotaMb"}


def _check_gpu_sharing(tenant: TenantConfig, key: str) -> None:
    if tenant.gpu_sharing != "dra":
        return
    if tenant.gpu_mode != "simulated":
        raise ConfigError(
            f"{key}.gpuMode",
            "gpuSharing dra runs HAMi-DRA's fake kubelet plugin: simulated cards only",
        )
    if not tenant.gpus:
        raise ConfigError(f"{key}.gpus", "gpuSharing dra needs the cards its plugin publishes")
    if kubernetes_minor(tenant.kubernetes_version) < (1, MIN_DRA_MINOR):
        raise ConfigError(
            f"{key}.kubernetesVersion",
            f"gpuSharing dra needs v1.{MIN_DRA_MINOR} or newer (consumable device capacity), "
            f"got {tenant.kubernetes_version}",
        )
    hami_only = sorted(tenant.model_fields_set & HAMI_ONLY.keys())
    if hami_only:
        raise ConfigError(
            f"{key}.{HAMI_ONLY[hami_only[0]]}",
            "is HAMi's setting: with gpuSharing dra the Kubernetes scheduler allocates the cards",
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


def _check_management(cfg: LabConfig, secrets_set: bool) -> None:
    has_kubeconfig = bool(cfg.management_kubeconfig.get_secret_value())
    if cfg.management_mode == "kind":
        for key, set_ in (
            ("managementKubeconfig", has_kubeconfig),
            ("managementStack", bool(cfg.management_stack)),
        ):
            if set_:
                raise ConfigError(key, "is only used with managementMode existing")
        return
    if has_kubeconfig == bool(cfg.management_stack) and (has_kubeconfig or secrets_set):
        raise ConfigError(
            "managementMode",
            "existing needs exactly one of managementKubeconfig (secret) or managementStack",
        )


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


def _check_mirror_auth(cfg: LabConfig) -> None:
    """Credentials per mirror host; the messages never show a value."""
    text = cfg.registry_mirror_auth.get_secret_value()
    if text in ("", UNREAD_SECRET):  # a host tool's read: set, not decrypted
        return
    key = "registryMirrorAuth"
    try:
        auth = json.loads(text)
    except json.JSONDecodeError:
        auth = None
    if not isinstance(auth, dict):
        raise ConfigError(key, 'must be a JSON object {"<mirror host>": "user:password"}')
    hosts = {mirror.host for mirror in cfg.registry_mirrors}
    for host, credentials in auth.items():
        if host not in hosts:
            raise ConfigError(
                key, f"{host!r} is no mirror's host: one of {', '.join(sorted(hosts)) or 'none'}"
            )
        if not isinstance(credentials, str) or ":" not in credentials:
            raise ConfigError(key, f"{host}: must be 'user:password'")
    plain = sorted(m.host for m in cfg.registry_mirrors if m.plain_http and m.host in auth)
    if plain:
        raise ConfigError(
            key, f"{plain[0]} is a plainHttp mirror: its password would cross in clear"
        )


def parse_config(raw: Mapping[str, Any], secrets_set: bool = True) -> LabConfig:
    """Validates raw stack config (camelCase keys, values decoded) into a ``LabConfig``.

    ``secrets_set=False`` reads a stack file alone, before the user has set its secrets: a
    secret the stack will need (``managementKubeconfig``, ``sshPrivateKey``) may be missing.
    """
    try:
        cfg = LabConfig.model_validate(dict(raw))
    except ValidationError as error:
        first = error.errors()[0]
        key = _format_location(first["loc"]) or "config"
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] != "missing":
            message += f" (got {json.dumps(first.get('input'), default=str)})"
        raise ConfigError(key, message) from None
    _check_management(cfg, secrets_set)
    _check_tenants(cfg, secrets_set)
    _check_node_names(cfg)
    _check_mirror_auth(cfg)
    plan_network(cfg)  # raises ConfigError for subnets, ranges and addresses that do not fit
    return cfg
