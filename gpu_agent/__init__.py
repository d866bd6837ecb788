"""Simulated-GPU agent for HAMi v2.10 on GPU-less nodes.

Registers configured cards on nodes, finishes HAMi allocations the way the real device
plugin does, and frees node locks whose owner is done. Standard library only: it runs on
a bare python image with these files mounted from a ConfigMap.
"""

from .agent import Agent, PassSummary, reconcile_once, run
from .config import Card, Config, ConfigError, load_config, parse_config
from .kube import (
    ApiError,
    AuthError,
    Conflict,
    Gone,
    HttpKubeApi,
    KubeApi,
    NotFound,
    ObjList,
    TransientError,
    Unprocessable,
    required_rbac_rules,
)

# Every file the ConfigMap must carry (flat, mounted as one package directory).
RUNTIME_FILES = ("__init__.py", "__main__.py", "agent.py", "config.py", "hami.py", "kube.py")

__all__ = [
    "RUNTIME_FILES",
    "Agent",
    "ApiError",
    "AuthError",
    "Card",
    "Config",
    "ConfigError",
    "Conflict",
    "Gone",
    "HttpKubeApi",
    "KubeApi",
    "NotFound",
    "ObjList",
    "PassSummary",
    "TransientError",
    "Unprocessable",
    "load_config",
    "parse_config",
    "reconcile_once",
    "required_rbac_rules",
    "run",
]
