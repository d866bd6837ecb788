"""The names of the host checks `python -m preflight` runs, as a stack config may accept them
(`preflightAccept`), kubeadm's `--ignore-preflight-errors` way: still run, reported as warnings."""

from __future__ import annotations

PREFLIGHT_CHECKS: tuple[str, ...] = (
    # the kernel
    "cgroup v2",
    "inotify instances",
    "inotify watches",
    "br_netfilter",
    "nf_conntrack",
    # the host's size
    "CPUs",
    "memory",
    "disk",
    # Docker
    "docker",
    "docker engine",
    "storage driver",
    "userns-remap",
    # the tools the program runs
    "kubectl",
    "kubectl version",
    "curl",
    "kind",
    "kind version",
    "git",
    "helm",
    # the network
    "lab subnet",
)
