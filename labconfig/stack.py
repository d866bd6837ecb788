"""The stack config as Pulumi hands it to the program (CLI or Automation API), and as raw
`pulumi config` values for the host tools; secrets stay SecretStr."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Collection, Mapping
from typing import Any

import pulumi
import yaml
from pydantic import SecretStr

from labconfig.base import UNREAD_SECRET
from labconfig.model import PROJECT, ConfigError, LabConfig

_FIELDS_BY_KEY = {field.alias or name: field for name, field in LabConfig.model_fields.items()}
# Read as JSON objects (`Config.get_object`); every other key is a scalar.
STRUCTURED_KEYS = (
    "tenants",
    "proxy",
    "preflightAccept",
    "registryMirrors",
    "chartSources",
    "monitoring",
)
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


def stack_file_values(stack_yaml: str) -> tuple[dict[str, str], list[str]]:
    """A `Pulumi.<stack>.yaml`'s `config:` as Pulumi's config map and its secret keys, for tools
    that read a stack without the CLI; a secret's (encrypted) value is never read."""
    values, secrets = {}, []
    for key, value in (yaml.safe_load(stack_yaml) or {}).get("config", {}).items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            secrets.append(key)
            values[key] = UNREAD_SECRET
        else:
            values[key] = value if isinstance(value, str) else json.dumps(value)
    return values, secrets
