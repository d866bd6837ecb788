"""The host's cgroup v1 hierarchies, made as a systemd host has them before the tier's dockerd runs.

On a cgroup v1 (or hybrid) host systemd mounts every controller the kernel has enabled, one
hierarchy each at /sys/fs/cgroup/<controller>, with cpu+cpuacct and net_cls+net_prio joined
(their single names as symlinks). Docker then gives each container its own cgroup in every
mounted hierarchy, and kind's entrypoint makes the kubelet's cgroup root in each of them.

Machines of this project's kind boot without systemd and mount only some controllers (seen: no
hugetlb, perf_event, net_cls or net_prio hierarchy). A kubelet on cgroup v1 validates its root
in hugetlb too, once a node's own systemd has mounted that hierarchy, at a root that every node
container then shares and that can be read-only inside the node; the kubelet never starts. So
the tier mounts what is missing, as systemd would, once, before its dockerd starts, and says so;
at the session's end, once the daemon has stopped, it unmounts exactly those, in reverse order
(`undo`), or says why one stays. A user's systemd host already has them all; the program and its
node image are unchanged.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The pairs systemd mounts as one hierarchy (systemd `src/shared/mount-setup.c`, join_with).
JOINED = (("cpu", "cpuacct"), ("net_cls", "net_prio"))
# What systemd passes to mount(2) for each hierarchy: MS_NOSUID|MS_NOEXEC|MS_NODEV.
MOUNT_FLAGS = "rw,nosuid,nodev,noexec,relatime"
# A removed cgroup is freed after rmdir returns; a hierarchy unmounted before that lives on in
# the kernel, out of sight (its controllers stay bound to it: /proc/cgroups). Seen on this
# project's machines: an immediate umount after rmdir left the hierarchy behind each time.
RELEASE_TIMEOUT_SECONDS = 10
NAMED_RELEASE_SECONDS = 1  # a named hierarchy has no /proc/cgroups row to watch


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


@dataclass
class Mounted:
    """One hierarchy the tier mounted, and what it made for it: what `undo` takes back."""

    hierarchy: Hierarchy
    made_dir: bool  # the mount point did not exist before
    links: list[Path] = field(default_factory=list)  # the aliases it linked


@dataclass
class Changes:
    """What `make_like_systemd` did: the lines the session's end shows, the mounts in order."""

    lines: list[str] = field(default_factory=list)
    mounted: list[Mounted] = field(default_factory=list)
    root: Path = CGROUP_ROOT


def mount_hierarchy(hierarchy: Hierarchy, run: Runner = _run, root: Path = CGROUP_ROOT) -> Mounted:
    where = hierarchy.where(root)
    mounted = Mounted(hierarchy, made_dir=not where.exists())
    where.mkdir(exist_ok=True)
    done = run(["mount", "-t", "cgroup", "-o", f"{MOUNT_FLAGS},{hierarchy.options}",
                "cgroup", str(where)])  # fmt: skip
    if done.returncode != 0:
        if mounted.made_dir:
            where.rmdir()
        raise HostCgroupsUnfit(
            f"mount -t cgroup -o {hierarchy.options} cgroup {where}: {done.stderr.strip()} "
            "(a controller still in use by the cgroup v2 hierarchy cannot move to v1: "
            "see cgroup.subtree_control under the cgroup2 mount)"
        )
    for alias in hierarchy.aliases():
        link = root / alias
        if not link.exists() and not link.is_symlink():
            link.symlink_to(hierarchy.options)
            mounted.links.append(link)
    return mounted


def make_like_systemd(
    proc_cgroups: str | None = None,
    mountinfo: str | None = None,
    run: Runner = _run,
    root: Path = CGROUP_ROOT,
) -> Changes:
    """Mounts the missing hierarchies; one line per change, none when the host had them all.
    Needs root. /sys/fs/cgroup is made writable for the mkdirs when it is read-only. A mount
    that fails takes back the ones made before it."""
    proc_cgroups = proc_cgroups if proc_cgroups is not None else Path("/proc/cgroups").read_text()
    mountinfo = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    hierarchies = missing_hierarchies(proc_cgroups, mountinfo)
    changes = Changes(root=root)
    if not hierarchies:
        return changes
    with _writable(root, run):
        for hierarchy in hierarchies:
            try:
                changes.mounted.append(mount_hierarchy(hierarchy, run, root))
            except (OSError, HostCgroupsUnfit) as error:
                _undo_mounts(changes, run, os.rmdir, None)
                if isinstance(error, OSError) and error.errno in (
                    errno.EROFS, errno.EACCES, errno.EPERM,
                ):  # fmt: skip
                    raise HostCgroupsUnfit(
                        f"cannot make {hierarchy.where(root)}: {error}"
                    ) from None
                raise
    changes.lines = [
        f"mounted the cgroup v1 hierarchy {h.options} at {h.where(root)}, as systemd does "
        "(this host had not; kubelets on cgroup v1 validate their root in it)"
        for h in hierarchies
    ]
    return changes


@contextmanager
def _writable(root: Path, run: Runner) -> Iterator[None]:
    """/sys/fs/cgroup writable for the block (a systemd host mounts it read-only)."""
    read_only = not os.access(root, os.W_OK) or _is_read_only(root)
    if read_only:
        _remount(False, run, root)
    try:
        yield
    finally:
        if read_only:
            _remount(True, run, root)


def _empty_children(where: Path, rmdir: Callable[[Path], None]) -> tuple[int, list[str]]:
    """Removes the cgroups under a hierarchy's root, deepest first (docker leaves its empty
    `docker` parent behind): how many went, and one line for each that holds processes."""
    held: dict[Path, str] = {}
    removed = 0
    for directory in sorted((p for p in where.rglob("*") if p.is_dir() and not p.is_symlink()),
                            key=lambda p: len(p.parts), reverse=True):  # fmt: skip
        if any(path.is_relative_to(directory) for path in held):
            continue  # a parent of a cgroup that stays
        try:
            rmdir(directory)
            removed += 1
        except OSError as error:
            if error.errno != errno.ENOENT:
                held[directory] = error.strerror or str(error)
    return removed, [f"{path}: {why}" for path, why in held.items()]


def read_proc_cgroups() -> str:
    return Path("/proc/cgroups").read_text()


def cgroup_counts(proc_cgroups: str) -> dict[str, tuple[int, int]]:
    """controller -> (hierarchy ID, cgroups in it, the removed but not yet freed included)."""
    counts = {}
    for line in proc_cgroups.splitlines():
        if line.strip() and not line.startswith("#"):
            name, hierarchy, cgroups, _enabled = line.split()
            counts[name] = (int(hierarchy), int(cgroups))
    return counts


@dataclass
class Release:
    """How `undo` waits for the cgroups it removed to be freed (the tests give fakes)."""

    proc_cgroups: Callable[[], str] = read_proc_cgroups
    sleep: Callable[[float], None] = time.sleep
    timeout: float = RELEASE_TIMEOUT_SECONDS

    def wait(self, hierarchy: Hierarchy) -> bool:
        """True once the hierarchy holds its root cgroup alone."""
        waited = 0.0
        while True:
            counts = cgroup_counts(self.proc_cgroups())
            listed = [counts[c][1] for c in hierarchy.controllers if c in counts]
            if not listed:
                self.sleep(NAMED_RELEASE_SECONDS)
                return True
            if all(n <= 1 for n in listed):
                return True
            if waited >= self.timeout:
                return False
            self.sleep(0.1)
            waited += 0.1


def read_mountinfo() -> str:
    return Path("/proc/self/mountinfo").read_text()


def cgroup_mounts(mountinfo: str) -> list[MountEntry]:
    """The cgroup mounts of a mountinfo, in its order: what a session must leave as it found."""
    return [e for e in mount_entries(mountinfo) if e.fs_type in ("cgroup", "cgroup2")]


def _still_ours(mounted: Mounted, where: Path, mountinfo: str) -> bool:
    wanted = set(mounted.hierarchy.controllers) - {"none"}  # a named hierarchy's mount option
    return any(
        e.mount_point == str(where) and e.fs_type == "cgroup" and wanted <= set(e.super_options)
        for e in mount_entries(mountinfo)
    )


def _undo_mounts(
    changes: Changes,
    run: Runner,
    rmdir: Callable[[Path], None],
    mountinfo: Callable[[], str] | None,
    release: Release | None = None,
) -> list[str]:
    """`mountinfo` None: the mounts were made a moment ago (a later one failed)."""
    release = release or Release()
    lines = []
    for mounted in reversed(changes.mounted):
        where = mounted.hierarchy.where(changes.root)
        if mountinfo is not None and not _still_ours(
            mounted, where, mountinfo()
        ):  # someone unmounted it meanwhile
            lines.append(f"{where} was no longer mounted as the tier mounted it: left alone")
            continue
        removed, held = _empty_children(where, rmdir)
        if held:  # unmounted, the hierarchy would live on in the kernel, out of sight
            lines.append(f"left {where} mounted: its cgroups hold processes ({'; '.join(held)})")
            continue
        if removed and not release.wait(mounted.hierarchy):
            lines.append(
                f"left {where} mounted: the cgroups removed from it were not freed within "
                f"{release.timeout:.0f} s (unmounted, the hierarchy would live on unseen)"
            )
            continue
        done = run(["umount", str(where)])
        if done.returncode != 0:
            lines.append(f"left {where} mounted: umount said {done.stderr.strip()}")
            continue
        for link in mounted.links:
            link.unlink(missing_ok=True)
        if mounted.made_dir:
            rmdir(where)
        lines.append(f"unmounted the cgroup v1 hierarchy {mounted.hierarchy.options} at {where}")
    return lines


def undo(
    changes: Changes,
    run: Runner = _run,
    rmdir: Callable[[Path], None] = os.rmdir,
    mountinfo: Callable[[], str] = read_mountinfo,
    release: Release | None = None,
) -> list[str]:
    """Takes back what `make_like_systemd` did, in reverse order, once no daemon of the tier's
    runs: each hierarchy's own cgroups emptied (rmdir), unmounted, its links and mount point
    removed. One line per hierarchy: unmounted, or why it stays."""
    if not changes.mounted:
        return []
    with _writable(changes.root, run):
        return _undo_mounts(changes, run, rmdir, mountinfo, release)


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
