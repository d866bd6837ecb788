"""A container's CPU and memory, read from its cgroup on the host.

`docker stats` is what a user would run, but on this host dockerd answers it with zeros for
node containers once their systemd mounted the cgroup v1 hierarchies the host leaves unmounted
(hugetlb, perf_event, net_cls: dockerd logs "collecting stats for <id>: no metrics received"), and
a zero passes any "below the model" check. The same numbers come from the cgroup itself:
memory as docker stats computes it (usage minus inactive file cache), CPU as the usage counter's
growth over an interval.
"""

from __future__ import annotations

import time
from pathlib import Path

from docker_host import Docker

CGROUP = Path("/sys/fs/cgroup")


def cgroup_dir(docker: Docker, container: str, controller: str) -> Path:
    """The container's cgroup for `controller` (v1) or its unified cgroup (v2)."""
    found = docker.run("inspect", "-f", "{{.Id}}", container).stdout.strip()
    driver = docker.run("info", "-f", "{{.CgroupDriver}}").stdout.strip()
    leaf = f"system.slice/docker-{found}.scope" if driver == "systemd" else f"docker/{found}"
    if (CGROUP / "cgroup.controllers").exists():
        return CGROUP / leaf
    return CGROUP / controller / leaf


def _stat(path: Path) -> dict[str, int]:
    pairs = (line.split() for line in path.read_text().splitlines())
    return {key: int(value) for key, value in pairs}


def memory_mib(docker: Docker, container: str) -> float:
    """docker stats' MemUsage: usage minus inactive file cache (cgroup v1 and v2)."""
    directory = cgroup_dir(docker, container, "memory")
    if (directory / "memory.current").exists():
        usage = int((directory / "memory.current").read_text())
        inactive = _stat(directory / "memory.stat")["inactive_file"]
    else:
        usage = int((directory / "memory.usage_in_bytes").read_text())
        inactive = _stat(directory / "memory.stat")["total_inactive_file"]
    return (usage - inactive) / 2**20


def cpu_seconds(docker: Docker, container: str) -> float:
    directory = cgroup_dir(docker, container, "cpuacct")
    if (directory / "cpu.stat").exists():
        return _stat(directory / "cpu.stat")["usage_usec"] / 1e6
    return int((directory / "cpuacct.usage").read_text()) / 1e9


def stats(docker: Docker, container: str, interval: float = 6.0) -> tuple[float, float]:
    """(CPUs used over `interval`, MiB at its end)."""
    started, used = time.monotonic(), cpu_seconds(docker, container)
    time.sleep(interval)
    cpus = (cpu_seconds(docker, container) - used) / (time.monotonic() - started)
    return cpus, memory_mib(docker, container)
