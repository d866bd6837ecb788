"""hami.extender-timeout: kube-scheduler waits longer for HAMi's Bind than HAMi's Bind waits for a
held node lock, read from what the chart deployed (read only: two GETs per tenant)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from ..cluster import ClusterError, Obj
from ..context import RunContext
from ..result import CheckFailed, CheckSkipped
from ..spec import Tenant

# The chart names the scheduler Deployment and the ConfigMap kube-scheduler reads after its
# "<fullname>-scheduler" helper (release "hami": "hami-scheduler"); the ConfigMap is found
# through the Deployment's mount, so only the Deployment's name is assumed.
SCHEDULER_DEPLOYMENT = "hami-scheduler"
KUBE_SCHEDULER_CONTAINER = "kube-scheduler"
EXTENDER_CONTAINER = "vgpu-scheduler-extender"
# kube-scheduler's config file flags: --config for a KubeSchedulerConfiguration (the chart on
# Kubernetes >= 1.22), --policy-config-file for the legacy Policy JSON (older ones).
CONFIG_FLAG, POLICY_FLAG = "--config", "--policy-config-file"
RETRY_FLAG = "--node-lock-retry-timeout"
RETRY_DEFAULT = "28s"  # HAMi v2.10.0 cmd/scheduler/main.go:80, when the flag is not passed
# kube-scheduler replaces an unset (zero) httpTimeout with DefaultExtenderTimeout.
KUBE_SCHEDULER_DEFAULT_TIMEOUT_SECONDS = 5.0
CAUSE = (
    "kube-scheduler gives up on a Bind that still waits for a node lock, and the pod waits "
    "out its error backoff: pass a shorter --node-lock-retry-timeout in the chart's "
    "scheduler.extender.extraArgs (builders/hami.py NODE_LOCK_RETRY_SECONDS), or give the "
    "extender a longer httpTimeout in kube-scheduler's config"
)
WIRING_CAUSE = (
    "kube-scheduler's config is not where, or not what, HAMi's chart renders (v2.10.0: a "
    "ConfigMap mounted at /config): read the chart's scheduler templates (configmap.yaml, "
    "deployment.yaml) for where the extender's httpTimeout is set now"
)
NO_DEPLOYMENT_CAUSE = "HAMi not installed in hamiNamespace, or its release is not named hami"
NO_CONFIG_MAP_CAUSE = (
    "the ConfigMap HAMi's scheduler Deployment mounts is gone, so kube-scheduler cannot start "
    "again: upgrade or reinstall the HAMi release"
)

_GO_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5
    "μs": 1e-6,  # U+03BC
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
# "ms" before "m": the alternation takes the first unit that matches.
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration_seconds(text: str) -> float:
    """Go's time.ParseDuration in seconds: "30s", "1m30s", "1.5h", "-2m", "0"."""
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    if body[:1] in "+-":
        body = body[1:]
    if body == "0":
        return 0.0
    total, pos = 0.0, 0
    while pos < len(body):
        part = _GO_PART.match(body, pos)
        if part is None:
            break
        total += float(part.group(1)) * _GO_UNITS[part.group(2)]
        pos = part.end()
    if not body or pos != len(body):
        raise ValueError(f"{text!r} is not a Go duration (such as 30s or 1m30s)")
    return sign * total


def flag_value(argv: list[str], flag: str) -> str | None:
    """A flag's value as pflag reads it (`--flag=v` or `--flag v`; the last one wins)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == "--":  # pflag stops parsing flags here
            break
        if arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
        elif arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def _seconds(value: float) -> str:
    return f"{value:g}s"


@dataclass(frozen=True)
class ConfigSource:
    """Where kube-scheduler reads its config: a ConfigMap key, and in which format."""

    config_map: str
    key: str
    legacy: bool  # the Policy JSON of --policy-config-file

    def where(self, namespace: str) -> str:
        return f"ConfigMap {namespace}/{self.config_map} key {self.key}"


def _containers(deployment: Obj) -> dict[str, Obj]:
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    return {c.get("name", ""): c for c in pod.get("containers") or []}


def _container(deployment: Obj, name: str, where: str) -> Obj:
    found = _containers(deployment)
    if name not in found:
        raise CheckFailed(
            f"a {name} container in {where}", f"containers {sorted(found)}", WIRING_CAUSE
        )
    return found[name]


def _argv(container: Obj) -> list[str]:
    # The chart passes both containers' flags in `command`; a container's argv is both lists.
    return [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]


def config_source(deployment: Obj, where: str) -> ConfigSource:
    """Follow kube-scheduler's config flag through its volume mount to a ConfigMap key."""
    ks = _container(deployment, KUBE_SCHEDULER_CONTAINER, where)
    argv = _argv(ks)
    path, legacy = flag_value(argv, CONFIG_FLAG), False
    if path is None:
        path, legacy = flag_value(argv, POLICY_FLAG), True
    if not path:
        raise CheckFailed(
            f"{KUBE_SCHEDULER_CONTAINER} started with {CONFIG_FLAG} or {POLICY_FLAG}",
            f"argv {argv}",
            WIRING_CAUSE,
        )
    mounts = [
        m
        for m in ks.get("volumeMounts") or []
        if path == m.get("mountPath") or path.startswith(m.get("mountPath", "").rstrip("/") + "/")
    ]
    mount = max(mounts, key=lambda m: len(m.get("mountPath", "")), default=None)
    pod = deployment.get("spec", {}).get("template", {}).get("spec", {})
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    volume = volumes.get(mount.get("name")) if mount else None
    config_map = (volume or {}).get("configMap")
    if mount is None or not config_map or not config_map.get("name"):
        raise CheckFailed(
            f"{path} ({KUBE_SCHEDULER_CONTAINER}'s config) mounted from a ConfigMap",
            f"mount {mount}, volume {volume}",
            WIRING_CAUSE,
        )
    # The file's path inside the volume: below a subPath mount, under that subPath.
    rest = path[len(mount["mountPath"].rstrip("/")) + 1 :] if path != mount["mountPath"] else ""
    relative = "/".join(p for p in (mount.get("subPath", ""), rest) if p)
    items = config_map.get("items")
    key = relative
    if items:  # a projected key: the file's path is the item's, the key is its own
        key = next((i.get("key", "") for i in items if i.get("path") == relative), "")
    if not key:
        raise CheckFailed(
            f"{path} projected from ConfigMap {config_map['name']}",
            f"items {items}",
            WIRING_CAUSE,
        )
    return ConfigSource(config_map["name"], key, legacy)


def extender_http_timeout(text: str, legacy: bool) -> tuple[float, str]:
    """The binding extender's httpTimeout in seconds, and how the config states it.

    Raises ValueError with what is wrong. Only one extender may bind (kube-scheduler
    validates it), and only Bind waits for the node lock."""
    doc: Any = json.loads(text) if legacy else yaml.safe_load(text)
    extenders = doc.get("extenders") if isinstance(doc, dict) else None
    binders = [e for e in extenders or [] if isinstance(e, dict) and e.get("bindVerb")]
    if not binders:
        raise ValueError(f"no extender with a bindVerb among {len(extenders or [])} extender(s)")
    raw = binders[0].get("httpTimeout")
    if legacy:
        # The Policy API's httpTimeout is a time.Duration: an integer of nanoseconds.
        if raw is not None and (not isinstance(raw, int) or isinstance(raw, bool)):
            raise ValueError(f"httpTimeout {raw!r} is not an integer of nanoseconds")
        seconds = (raw or 0) / 1e9
        stated = f"{raw} ns" if raw else "not set"
    else:
        if raw is not None and not isinstance(raw, str):
            raise ValueError(f"httpTimeout {raw!r} is not a duration string such as 30s")
        seconds = go_duration_seconds(raw) if raw else 0.0
        stated = raw or "not set"
    if seconds == 0:
        return KUBE_SCHEDULER_DEFAULT_TIMEOUT_SECONDS, f"{stated} (kube-scheduler's default 5s)"
    return seconds, stated if stated == _seconds(seconds) else f"{stated} ({_seconds(seconds)})"


def _get(read: Callable[[str, str], Obj], what: str, cause: str, namespace: str, name: str) -> Obj:
    try:
        result = read(namespace, name)
    except ClusterError as exc:
        if exc.status != 404:
            raise  # the runner reports it as an API error with its likely cause
        raise CheckFailed(what, str(exc), cause) from None
    return result


def extender_timeout(ctx: RunContext, t: Tenant) -> str:
    if not t.gpu_nodes():
        raise CheckSkipped("no GPU nodes configured for this tenant")
    cl, ns = ctx.tenant(t), t.hami_namespace
    where = f"Deployment {ns}/{SCHEDULER_DEPLOYMENT}"
    deployment = _get(
        cl.get_deployment,
        f"{where} (HAMi's scheduler)",
        NO_DEPLOYMENT_CAUSE,
        ns,
        SCHEDULER_DEPLOYMENT,
    )
    source = config_source(deployment, where)
    extender = _container(deployment, EXTENDER_CONTAINER, where)
    config_map = _get(
        cl.get_config_map,
        f"ConfigMap {ns}/{source.config_map} ({where} mounts it)",
        NO_CONFIG_MAP_CAUSE,
        ns,
        source.config_map,
    )
    data = config_map.get("data") or {}
    if source.key not in data:
        raise CheckFailed(
            f"key {source.key} in ConfigMap {ns}/{source.config_map} ({where} mounts it)",
            f"keys {sorted(data)}",
            WIRING_CAUSE,
        )
    try:
        timeout, timeout_text = extender_http_timeout(str(data[source.key]), source.legacy)
    except (ValueError, yaml.YAMLError) as exc:  # json.JSONDecodeError is a ValueError
        raise CheckFailed(
            f"an extender httpTimeout in {source.where(ns)}",
            f"{type(exc).__name__}: {exc}",
            WIRING_CAUSE,
        ) from None
    passed = flag_value(_argv(extender), RETRY_FLAG)
    try:
        retry = go_duration_seconds(RETRY_DEFAULT if passed is None else passed)
    except ValueError as exc:
        raise CheckFailed(f"{RETRY_FLAG} a Go duration", str(exc), CAUSE) from None
    retry_text = passed if passed is not None else f"{RETRY_DEFAULT} (HAMi's default)"
    values = (
        f"extender httpTimeout {timeout_text} in {source.where(ns)}, "
        f"{RETRY_FLAG} {retry_text} in {EXTENDER_CONTAINER}"
    )
    if timeout <= retry:
        raise CheckFailed(
            f"extender httpTimeout longer than {RETRY_FLAG}",
            f"{values}: Bind may wait {_seconds(retry)}, kube-scheduler only {_seconds(timeout)}",
            CAUSE,
        )
    return f"{values}: {_seconds(timeout - retry)} to spare"
