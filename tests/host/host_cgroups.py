"""The host's cgroup v1 hierarchies, made as a systemd host has them before the tier's dockerd runs.

On a cgroup v1 (or hybrid) host systemd mounts every controller the kernel has enabled, one
hierarchy each at /sys/fs/cgroup/<controller>, with cpu+cpuacct and net_cls+net_prio joined
(their single names as symlinks). Docker then gives each container its own cgroup in every
mounted hierarchy, and kind's entrypoint makes the kubelet's cgroup root in each of them.

Machines of this project's kind boot without systemd and mount only some controllers (seen: no
hugetlb, perf_event, net_cls or net_prio hierarchy). A kubelet on cgroup v1 validates its root
in hugetlb too, once a node's own systemd has mounted that hierarchy, at a root that every node
container then shares and that can be read-only inside the node; the kubelet never starts. So
the tier mounts what is missing, as systemd would, once, before its dockerd starts, and says so.
A user's systemd host already has them all; the program and its node image are unchanged.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The pairs systemd mounts as one hierarchy (systemd `src/shared/mount-setup.c`, join_with).
JOINED = (("cpu", "cpuacct"), ("net_cls", "net_prio"))
# What systemd passes to mount(2) for each hierarchy: MS_NOSUID|MS_NOEXEC|MS_NODEV.
MOUNT_FLAGS = "rw,nosuid,nodev,noexec,relatime"


class HostCgroupsUnfit(Exception):
    """A controller the kubelet needs could not be mounted; the message says what mount said."""


@dataclass(frozen=True)
class Hierarchy:
    """One cgroup v1 mount to make: its controllers (the mount options and the folder's name)."""

    controllers: tuple[str, ...]

    @property
    def options(self) -> str:
        return ",".join(self.controllers)

    def where(self, root: Path = CGROUP_ROOT) -> Path:
        return root / self.options

    def aliases(self) -> tuple[str, ...]:
        """The single names systemd links to a joined hierarchy."""
        return self.controllers if len(self.controllers) > 1 else ()


def enabled_controllers(proc_cgroups: str) -> list[str]:
    """The controllers /proc/cgroups lists as enabled, in its order."""
    found = []
    for line in proc_cgroups.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _hierarchy, _cgroups, enabled = line.split()
        if enabled == "1":
            found.append(name)
    return found


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fs_type: str
    super_options: tuple[str, ...]


def mount_entries(mountinfo: str) -> list[MountEntry]:
    """/proc/self/mountinfo's lines: mount point (field 5), then after " - " the type and the
    super block options (proc(5))."""
    entries = []
    for line in mountinfo.splitlines():
        before, separator, after = line.partition(" - ")
        if not separator:
            continue
        fields, tail = before.split(), after.split()
        options = tuple(tail[2].split(",")) if len(tail) > 2 else ()
        entries.append(MountEntry(fields[4], tail[0], options))
    return entries


def unified_only(entries: list[MountEntry], root: Path = CGROUP_ROOT) -> bool:
    """cgroup v2 alone: /sys/fs/cgroup is the unified hierarchy, no v1 mount can be made there."""
    return any(e.mount_point == str(root) and e.fs_type == "cgroup2" for e in entries)


def missing_hierarchies(proc_cgroups: str, mountinfo: str) -> list[Hierarchy]:
    """The hierarchies systemd would have mounted that this host lacks (none on cgroup v2)."""
    entries = mount_entries(mountinfo)
    if unified_only(entries):
        return []
    mounted = {
        option for entry in entries if entry.fs_type == "cgroup" for option in entry.super_options
    }
    missing = [c for c in enabled_controllers(proc_cgroups) if c not in mounted]
    hierarchies = []
    for controller in missing:
        if any(controller in h.controllers for h in hierarchies):
            continue
        partner = next((b if a == controller else a for a, b in JOINED if controller in (a, b)), "")
        joined = (controller, partner) if partner in missing else (controller,)
        hierarchies.append(Hierarchy(tuple(sorted(joined))))
    return hierarchies


Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _remount(read_only: bool, run: Runner, root: Path) -> None:
    mode = "ro" if read_only else "rw"
    done = run(["mount", "-o", f"remount,{mode}", str(root)])
    if done.returncode != 0:
        raise HostCgroupsUnfit(f"mount -o remount,{mode} {root}: {done.stderr.strip()}")


def mount_hierarchy(hierarchy: Hierarchy, run: Runner = _run, root: Path = CGROUP_ROOT) -> None:
    where = hierarchy.where(root)
    where.mkdir(exist_ok=True)
    done = run(["mount", "-t", "cgroup", "-o", f"{MOUNT_FLAGS},{hierarchy.options}",
                "cgroup", str(where)])  # fmt: skip
    if done.returncode != 0:
        raise HostCgroupsUnfit(
            f"mount -t cgroup -o {hierarchy.options} cgroup {where}: {done.stderr.strip()} "
            "(a controller still in use by the cgroup v2 hierarchy cannot move to v1: "
            "see cgroup.subtree_control under the cgroup2 mount)"
        )
    for alias in hierarchy.aliases():
        link = root / alias
        if not link.exists():
            link.symlink_to(hierarchy.options)


def make_like_systemd(
    proc_cgroups: str | None = None,
    mountinfo: str | None = None,
    run: Runner = _run,
    root: Path = CGROUP_ROOT,
) -> list[str]:
    """Mounts the missing hierarchies; one line per change, empty when the host had them all.
    Needs root. /sys/fs/cgroup is made writable for the mkdirs when it is read-only."""
    proc_cgroups = proc_cgroups if proc_cgroups is not None else Path("/proc/cgroups").read_text()
    mountinfo = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    hierarchies = missing_hierarchies(proc_cgroups, mountinfo)
    if not hierarchies:
        return []
    read_only = not os.access(root, os.W_OK) or _is_read_only(root)
    if read_only:
        _remount(False, run, root)
    try:
        for hierarchy in hierarchies:
            try:
                mount_hierarchy(hierarchy, run, root)
            except OSError as error:
                if error.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                    raise HostCgroupsUnfit(
                        f"cannot make {hierarchy.where(root)}: {error}"
                    ) from None
                raise
    finally:
        if read_only:
            _remount(True, run, root)
    return [
        f"mounted the cgroup v1 hierarchy {h.options} at {h.where(root)}, as systemd does "
        "(this host had not; kubelets on cgroup v1 validate their root in it)"
        for h in hierarchies
    ]


def _is_read_only(path: Path) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


def thaw_frozen(container_id: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Thaw every frozen cgroup under a container's own: what a kill cannot get past.

    On cgroup v1 runc freezes a container's cgroup while it sets the cgroup's limits (its
    systemd driver, which the kubelet inside a node uses) and thaws it after; a runc killed
    in between leaves the cgroup FROZEN, and with it a process in uninterruptible sleep that no
    signal reaches (seen: `runc init` of a pod inside a node under load, and the node's
    container then refused every forced delete with "did not receive an exit event"). Covers
    the v1 freezer hierarchy and v2's cgroup.freeze under the daemon's `docker` parent; returns
    the files it thawed."""
    thawed = []
    for pattern, frozen, thaw in (
        (f"freezer/docker/{container_id}", "FROZEN", "THAWED"),
        (f"docker/{container_id}", "1", "0"),
    ):
        base = root / pattern
        name = "freezer.state" if thaw == "THAWED" else "cgroup.freeze"
        for path in sorted(base.rglob(name)) if base.is_dir() else []:
            try:
                if path.read_text().strip() == frozen:
                    path.write_text(thaw)
                    thawed.append(path)
            except OSError:  # gone meanwhile: nothing left to thaw
                continue
    return thawed
