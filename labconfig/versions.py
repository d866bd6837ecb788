"""Kubernetes version strings, parsed once: `v1.35.0`, `1.35.2` and `1.35` name minor 1.35."""

from __future__ import annotations


def kubernetes_minor(version: str) -> tuple[int, int]:
    """(major, minor) of a Kubernetes version, with or without the leading `v`."""
    major, minor = version.strip().lstrip("v").split(".")[:2]
    return int(major), int(minor)


def minor_series(version: str) -> str:
    """`1.35`, as pkgs.k8s.io names its per-minor repositories."""
    return "{}.{}".format(*kubernetes_minor(version))
