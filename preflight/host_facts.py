"""Reading the host for the preflight: /proc, /sys, `docker`, `ip`. No judgement here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

Run = Callable[[list[str]], str]  # runs a command, returns stdout, raises CalledProcessError


@dataclass(frozen=True)
class DockerNetwork:
    name: str
    subnets: tuple[str, ...]
    bridge: str  # the host interface of a bridge network


@dataclass(frozen=True)
class Route:
    dst: str  # "default" or a CIDR
    dev: str


@dataclass(frozen=True)
class DockerFacts:
    server_version: str | None  # None: `docker version` failed, `error` says why
    error: str = ""
    operating_system: str = ""
    security_options: tuple[str, ...] = ()  # e.g. "name=seccomp,profile=builtin", "name=rootless"
    storage_driver: str = ""
    backing_filesystem: str = ""
    networks: tuple[DockerNetwork, ...] = ()
    root_dir: str = ""  # DockerRootDir: where images and container layers are stored

    def has_security_option(self, name: str) -> bool:
        return any(f"name={name}" in option.split(",") for option in self.security_options)


@dataclass(frozen=True)
class HostFacts:
    cgroup_v2: bool
    inotify_instances: int
    inotify_watches: int
    conntrack_max: int | None  # None: nf_conntrack not loaded yet
    # net.bridge.bridge-nf-call-iptables; None: no such sysctl, br_netfilter neither loaded nor
    # built in. Read, not /sys/module/br_netfilter: built-in code without parameters has none.
    bridge_nf_call_iptables: int | None
    cpus: int
    mem_available_mb: int
    disk_free_gb: float
    docker: DockerFacts
    tools: dict[str, str | None] = field(default_factory=dict)  # tool -> version line or None
    routes: tuple[Route, ...] | None = ()  # None: `ip` could not be run


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _mem_available_mb(meminfo: Path) -> int:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def error_text(error: Exception) -> str:
    if isinstance(error, subprocess.CalledProcessError):
        text = (error.stderr or error.stdout or "").strip()
        return text or f"exit status {error.returncode}"
    if isinstance(error, FileNotFoundError):
        # subprocess sets the program it could not find as `filename`: say which one.
        return f"{error.filename} is not on PATH" if error.filename else "not on PATH"
    return str(error)


HOST_TOOLS = ("kind", "kubectl", "curl", "git", "helm")  # what the program runs on this host


def tool_version(tool: str, run: Run) -> str | None:
    args = {
        "kind": ["kind", "version"],
        "kubectl": ["kubectl", "version", "--client"],
        "curl": ["curl", "--version"],
        "git": ["git", "--version"],
        "helm": ["helm", "version", "--short"],
    }[tool]
    if shutil.which(tool) is None:
        return None
    try:
        return run(args).strip().splitlines()[0] or tool
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _backing_filesystem(driver_status: list | None) -> str:
    for item in driver_status or []:
        if len(item) == 2 and item[0] == "Backing Filesystem":
            return item[1]
    return ""


def parse_networks(inspect_json: str) -> tuple[DockerNetwork, ...]:
    networks = []
    for net in json.loads(inspect_json or "[]"):
        subnets = tuple(
            c["Subnet"] for c in (net.get("IPAM") or {}).get("Config") or [] if c.get("Subnet")
        )
        bridge = (net.get("Options") or {}).get(
            "com.docker.network.bridge.name"
        ) or f"br-{net['Id'][:12]}"
        networks.append(DockerNetwork(name=net["Name"], subnets=subnets, bridge=bridge))
    return tuple(networks)


def read_docker(run: Run) -> DockerFacts:
    try:
        version = run(["docker", "version", "--format", "{{.Server.Version}}"]).strip()
        info = json.loads(run(["docker", "info", "--format", "{{json .}}"]))
        ids = run(["docker", "network", "ls", "--quiet", "--no-trunc"]).split()
        inspect = run(["docker", "network", "inspect", *ids]) if ids else "[]"
    except (OSError, subprocess.SubprocessError, ValueError) as error:
        # The daemon is down or its socket is not ours: say what docker said, not "missing".
        return DockerFacts(server_version=None, error=error_text(error))
    return DockerFacts(
        server_version=version or "unknown",
        operating_system=info.get("OperatingSystem") or "",
        security_options=tuple(info.get("SecurityOptions") or ()),
        storage_driver=info.get("Driver") or "",
        backing_filesystem=_backing_filesystem(info.get("DriverStatus")),
        networks=parse_networks(inspect),
        root_dir=info.get("DockerRootDir") or "",
    )


def read_routes(run: Run) -> tuple[Route, ...] | None:
    try:
        routes = json.loads(run(["ip", "-json", "-4", "route", "show"]) or "[]")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return tuple(Route(dst=r.get("dst", ""), dev=r.get("dev", "")) for r in routes)


def parse_cpu_list(text: str) -> int:
    """The number of CPUs in a kernel CPU list such as `0-3,6,8-9`."""
    count = 0
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def online_cpus(root: Path) -> int:
    """The host's online CPUs, as kube-proxy counts them for its conntrack target: cAdvisor's
    sysfs topology (the online list), not this process's affinity; `os.cpu_count()`
    (sysconf _SC_NPROCESSORS_ONLN) when the list is absent, as when hotplug is off."""
    try:
        return parse_cpu_list((root / "sys/devices/system/cpu/online").read_text())
    except (OSError, ValueError):
        return os.cpu_count() or 1


def docker_disk_path(docker: DockerFacts) -> str:
    """Where the lab's images land: the daemon's root dir when this host can see it (rootless
    Docker keeps it under $HOME; Docker Desktop inside its VM, so `/` is the best guess)."""
    return docker.root_dir if docker.root_dir and os.path.isdir(docker.root_dir) else "/"


def read_host_facts(run: Run, root: Path = Path("/"), disk_path: str | None = None) -> HostFacts:
    proc_sys = root / "proc/sys"
    docker = read_docker(run)
    usage = shutil.disk_usage(disk_path or docker_disk_path(docker))
    return HostFacts(
        cgroup_v2=(root / "sys/fs/cgroup/cgroup.controllers").exists(),
        inotify_instances=_read_int(proc_sys / "fs/inotify/max_user_instances") or 0,
        inotify_watches=_read_int(proc_sys / "fs/inotify/max_user_watches") or 0,
        conntrack_max=_read_int(proc_sys / "net/netfilter/nf_conntrack_max"),
        bridge_nf_call_iptables=_read_int(proc_sys / "net/bridge/bridge-nf-call-iptables"),
        cpus=online_cpus(root),
        mem_available_mb=_mem_available_mb(root / "proc/meminfo"),
        disk_free_gb=usage.free / 1e9,
        docker=docker,
        tools={tool: tool_version(tool, run) for tool in HOST_TOOLS},
        routes=read_routes(run),
    )
