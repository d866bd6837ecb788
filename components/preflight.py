"""Host preflight: the kernel settings and tools the lab needs, each with the command that fixes it.

Run by the program on `pulumi up` (never during preview) before anything touches Docker, and by
hand: `python -m components.preflight --tenants 2 --workers 2`. Reading the host and judging it
are separate so the judgement is tested with made-up hosts.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from components.footprint import Footprint, lab_footprint

MIN_INOTIFY_INSTANCES = 1024
MIN_INOTIFY_WATCHES = 524288
MIN_KIND_VERSION = (0, 31, 0)
REQUIRED_TOOLS = ("docker", "kind", "kubectl")


@dataclass(frozen=True)
class HostFacts:
    cgroup_v2: bool
    inotify_instances: int
    inotify_watches: int
    conntrack_max: int | None  # None: nf_conntrack not loaded yet
    br_netfilter: bool
    cpus: int
    mem_available_mb: int
    disk_free_gb: float
    tools: dict[str, str | None] = field(default_factory=dict)  # tool -> version line or None


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str
    fix: str = ""


def required_conntrack_max(cpus: int) -> int:
    # kube-proxy in a worker container tries to raise nf_conntrack_max to this and crash-loops
    # when it cannot (the setting is the host's); Kamaji reverts any edit of its ConfigMap.
    return max(32768 * cpus, 131072)


def _kind_version(line: str | None) -> tuple[int, int, int] | None:
    match = re.search(r"v(\d+)\.(\d+)\.(\d+)", line or "")
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def check_host(facts: HostFacts, need: Footprint) -> list[Finding]:
    conntrack = required_conntrack_max(facts.cpus)
    findings = [
        Finding(
            "cgroup v2",
            facts.cgroup_v2,
            "unified cgroup hierarchy" if facts.cgroup_v2 else "host runs cgroup v1",
            "boot with systemd.unified_cgroup_hierarchy=1 (kindest/node >= v1.35 needs v2)",
        ),
        Finding(
            "inotify instances",
            facts.inotify_instances >= MIN_INOTIFY_INSTANCES,
            f"{facts.inotify_instances} (need >= {MIN_INOTIFY_INSTANCES})",
            f"sudo sysctl -w fs.inotify.max_user_instances={MIN_INOTIFY_INSTANCES}",
        ),
        Finding(
            "inotify watches",
            facts.inotify_watches >= MIN_INOTIFY_WATCHES,
            f"{facts.inotify_watches} (need >= {MIN_INOTIFY_WATCHES})",
            f"sudo sysctl -w fs.inotify.max_user_watches={MIN_INOTIFY_WATCHES}",
        ),
        Finding(
            "nf_conntrack_max",
            facts.conntrack_max is not None and facts.conntrack_max >= conntrack,
            f"{facts.conntrack_max} (need >= {conntrack})",
            "sudo modprobe nf_conntrack && "
            f"sudo sysctl -w net.netfilter.nf_conntrack_max={conntrack}",
        ),
        Finding(
            "br_netfilter",
            facts.br_netfilter,
            "loaded" if facts.br_netfilter else "module not loaded",
            "sudo modprobe br_netfilter",
        ),
        Finding(
            "CPUs",
            facts.cpus >= need.cpus,
            f"{facts.cpus} (lab requests {need.cpus:g})",
            "give the host more CPUs or configure fewer tenants/workers",
        ),
        Finding(
            "memory",
            facts.mem_available_mb >= need.memory_mb,
            f"{facts.mem_available_mb} MB available (lab requests {need.memory_mb} MB)",
            "free memory or configure fewer tenants/workers",
        ),
        Finding(
            "disk",
            facts.disk_free_gb >= need.disk_gb,
            f"{facts.disk_free_gb:.1f} GB free (lab needs {need.disk_gb} GB for images)",
            "free space under Docker's data root",
        ),
    ]
    for tool in REQUIRED_TOOLS:
        version = facts.tools.get(tool)
        findings.append(
            Finding(tool, version is not None, version or "not on PATH", f"install {tool}")
        )
    kind = _kind_version(facts.tools.get("kind"))
    if kind is not None:
        wanted = ".".join(map(str, MIN_KIND_VERSION))
        findings.append(
            Finding(
                "kind version",
                kind >= MIN_KIND_VERSION,
                f"v{'.'.join(map(str, kind))} (need >= v{wanted})",
                f"install kind v{wanted} or newer",
            )
        )
    return findings


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


def _tool_version(tool: str, run: Callable[[list[str]], str]) -> str | None:
    if shutil.which(tool) is None:
        return None
    args = {
        "docker": ["docker", "version", "--format", "{{.Server.Version}}"],
        "kind": ["kind", "version"],
        "kubectl": ["kubectl", "version", "--client"],
    }[tool]
    try:
        return run(args).strip().splitlines()[0] or tool
    except (OSError, subprocess.SubprocessError, IndexError):
        # docker without a reachable daemon lands here: the lab cannot run without it.
        return None


def _run(args: list[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=20).stdout


def read_host_facts(root: Path = Path("/"), disk_path: str = "/var/lib/docker") -> HostFacts:
    proc_sys = root / "proc/sys"
    usage = shutil.disk_usage(disk_path if os.path.exists(disk_path) else "/")
    return HostFacts(
        cgroup_v2=(root / "sys/fs/cgroup/cgroup.controllers").exists(),
        inotify_instances=_read_int(proc_sys / "fs/inotify/max_user_instances") or 0,
        inotify_watches=_read_int(proc_sys / "fs/inotify/max_user_watches") or 0,
        conntrack_max=_read_int(proc_sys / "net/netfilter/nf_conntrack_max"),
        br_netfilter=(root / "sys/module/br_netfilter").exists(),
        cpus=os.cpu_count() or 1,
        mem_available_mb=_mem_available_mb(root / "proc/meminfo"),
        disk_free_gb=usage.free / 1e9,
        tools={tool: _tool_version(tool, _run) for tool in REQUIRED_TOOLS},
    )


def report(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        mark = "ok  " if f.ok else "FAIL"
        lines.append(f"{mark} {f.check:<18} {f.detail}")
        if not f.ok:
            lines.append(f"     fix: {f.fix}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check this host for the kamaji-hami-lab.")
    parser.add_argument("--tenants", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True, help="workers in all tenants")
    args = parser.parse_args(argv)
    findings = check_host(read_host_facts(), lab_footprint(args.tenants, args.workers))
    print(report(findings), file=sys.stderr)
    failed = [f for f in findings if not f.ok]
    if failed:
        print(f"preflight: {len(failed)} check(s) failed; run the fixes above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
