"""Agent configuration: JSON from $GPU_AGENT_CONFIG or the file named by $GPU_AGENT_CONFIG_FILE."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_ENV = "GPU_AGENT_CONFIG"
CONFIG_FILE_ENV = "GPU_AGENT_CONFIG_FILE"

_TOP_KEYS = {
    "splitCount",
    "resyncSeconds",
    "busyResyncSeconds",
    "relistSeconds",
    "nodes",
    "nodeLabels",
    "requeueAfterRegisterSeconds",
}
_CARD_KEYS = {"type", "devmem", "devcore", "count"}


class ConfigError(ValueError):
    """The configuration is unusable; the agent exits non-zero rather than guess."""


@dataclass(frozen=True)
class Card:
    type: str
    devmem: int  # MB, as nvidia-smi reports it
    devcore: int  # percent of the card, 100 = whole card
    count: int  # vGPU slots on this card (HAMi's split count)


@dataclass(frozen=True)
class Config:
    split_count: int
    # Delay before a failed item is retried, and before the owner of a lock the pod
    # watch has not shown yet is looked up by GET.
    resync_seconds: float
    nodes: Mapping[str, tuple[Card, ...]]
    # Accepted for old configs; unused since the agent watches instead of polling.
    busy_resync_seconds: float = 0.5
    node_labels: Mapping[str, str] = field(default_factory=lambda: {"gpu": "on"})
    # Full LIST + level-triggered pass this often, whatever the watches say: the safety
    # net for a missed event. Also the length of one watch request.
    relist_seconds: float = 60.0
    # After a registration write, when to make kube-scheduler retry pods that HAMi rejected
    # with "node unregistered" meanwhile: HAMi reads registrations on a 15 s tick (+2 s
    # margin). 0 turns it off.
    requeue_after_register_seconds: float = 17.0


def _int(value: Any, where: str, minimum: int = 1) -> int:
    # bool is an int subclass: reject it explicitly so `true` is not read as 1.
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _seconds(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _delay(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{where}: expected a number of seconds >= 0, got {value!r}")
    return float(value)


def _unknown(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(raw) - allowed)
    if extra:  # a typo would otherwise be ignored silently
        raise ConfigError(f"{where}: unknown key(s) {extra}")


def _card(raw: Any, split: int, where: str) -> Card:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    _unknown(raw, _CARD_KEYS, where)
    ctype = raw.get("type")
    # HAMi's device plugin prefixes every model name with NVIDIA; the scheduler's
    # type filters and the lab's docs assume it.
    if not isinstance(ctype, str) or not ctype.startswith("NVIDIA"):
        raise ConfigError(f"{where}.type: must be a string starting with 'NVIDIA', got {ctype!r}")
    return Card(
        type=ctype,
        devmem=_int(raw.get("devmem"), f"{where}.devmem"),
        devcore=_int(raw.get("devcore", 100), f"{where}.devcore"),
        count=_int(raw.get("count", split), f"{where}.count"),
    )


def parse_config(raw: Any) -> Config:
    if not isinstance(raw, Mapping):
        raise ConfigError("config: expected a JSON object")
    _unknown(raw, _TOP_KEYS, "config")
    split = _int(raw.get("splitCount", 10), "splitCount")
    resync = _seconds(raw.get("resyncSeconds", 2), "resyncSeconds")
    busy = _seconds(raw.get("busyResyncSeconds", min(0.5, resync)), "busyResyncSeconds")
    relist = _seconds(raw.get("relistSeconds", 60), "relistSeconds")
    requeue = _delay(raw.get("requeueAfterRegisterSeconds", 17), "requeueAfterRegisterSeconds")
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, Mapping) or not nodes_raw:
        raise ConfigError("nodes: expected a non-empty object {nodeName: [card, ...]}")
    nodes: dict[str, tuple[Card, ...]] = {}
    for name, cards in nodes_raw.items():
        if not isinstance(cards, list) or not cards:
            raise ConfigError(f"nodes.{name}: expected a non-empty list of cards")
        nodes[name] = tuple(_card(c, split, f"nodes.{name}[{i}]") for i, c in enumerate(cards))
    labels = raw.get("nodeLabels", {"gpu": "on"})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ConfigError("nodeLabels: expected an object of string values")
    return Config(split, resync, nodes, busy, dict(labels), relist, requeue)


def load_config(environ: Mapping[str, str] = os.environ) -> Config:
    text = environ.get(CONFIG_ENV)
    if text is None:
        path = environ.get(CONFIG_FILE_ENV)
        if not path:
            raise ConfigError(f"set {CONFIG_ENV} (JSON) or {CONFIG_FILE_ENV} (path)")
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ConfigError(f"{CONFIG_FILE_ENV}={path}: {exc}") from exc
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config is not valid JSON: {exc}") from exc
    return parse_config(raw)
