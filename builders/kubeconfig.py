"""The one check every kubeconfig passes before a Kubernetes provider is declared with it.

pulumi-kubernetes takes an empty (or absent) `kubeconfig` as "use the ambient one" (KUBECONFIG,
~/.kube/config: whatever cluster the user's kubectl points at), and a value naming an existing
file as a path to read (fact `pulumi-k8s-empty-kubeconfig-is-ambient`). A provider of this lab
gets the text of its own cluster's kubeconfig, or is never declared: anything else stops the
program first.
"""

from __future__ import annotations

from typing import Any

import pulumi
import yaml


class UnusableKubeconfig(pulumi.RunError):
    """A RunError, so the Pulumi CLI shows the message as one error, without a traceback."""


def _named(doc: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    """The body of the entry called `name` in `clusters` or `contexts` (section, singular)."""
    entries = doc.get(f"{section}s")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(section)
            return body if isinstance(body, dict) else None
    return None


def kubeconfig_problem(text: str | None) -> str | None:
    """What keeps `text` from naming one cluster by itself; None when it does.

    The cluster is the one a client (and the provider's DiffConfig) uses: current-context,
    its context's cluster, that cluster's server.
    """
    if text is None:
        return "is missing"
    if not text.strip():
        return "is empty"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as error:
        return f"is not YAML ({str(error).splitlines()[0]})"
    if not isinstance(doc, dict):
        return "is not a kubeconfig (a path or a scalar, not a YAML mapping)"
    current = doc.get("current-context")
    if not current:
        return "has no current-context"
    context = _named(doc, "context", current)
    if context is None:
        return f"has no context {current!r} (its current-context)"
    cluster_name = context.get("cluster")
    if not cluster_name:
        return f"has no cluster in context {current!r}"
    cluster = _named(doc, "cluster", cluster_name)
    if cluster is None:
        return f"has no cluster {cluster_name!r} (of context {current!r})"
    if not cluster.get("server"):
        return f"has no server for cluster {cluster_name!r}"
    return None


def checked_kubeconfig(text: str | None, what: str, fix: str = "") -> str:
    """`text` unchanged when it names its cluster; otherwise UnusableKubeconfig that says
    `what` it is, what is wrong, and `fix`, the way out if there is one."""
    problem = kubeconfig_problem(text)
    if problem is not None or text is None:
        raise UnusableKubeconfig(
            f"{what} {problem}; no Kubernetes provider is declared with it (given none, "
            "pulumi-kubernetes would use KUBECONFIG or ~/.kube/config: your kubectl's cluster)"
            + (f". {fix}" if fix else "")
        )
    return text
