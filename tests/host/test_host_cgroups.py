"""host_cgroups.py: which cgroup v1 hierarchies a host lacks next to a systemd host, how the
tier mounts them, and that the session's host has them all once the daemon runs."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest
from docker_host import Docker
from host_cgroups import (
    MOUNT_FLAGS,
    Changes,
    Hierarchy,
    HostCgroupsUnfit,
    Release,
    cgroup_mounts,
    enabled_controllers,
    make_like_systemd,
    missing_hierarchies,
    mount_entries,
    mount_hierarchy,
    thaw_frozen,
    undo,
)

# /proc/cgroups and the cgroup lines of /proc/self/mountinfo of a machine of this project's kind
# (no systemd: hugetlb, perf_event, net_cls and net_prio enabled, never mounted).
PROC_CGROUPS = """\
#subsys_name\thierarchy\tnum_cgroups\tenabled
cpuset\t3\t1\t1
cpu\t1\t1\t1
cpuacct\t2\t1\t1
blkio\t7\t1\t1
memory\t4\t53\t1
devices\t5\t1\t1
freezer\t6\t1\t1
net_cls\t0\t1\t1
perf_event\t0\t1\t1
net_prio\t0\t1\t1
hugetlb\t0\t1\t1
pids\t8\t1\t1
"""
MOUNTINFO = """\
23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
# A systemd host in hybrid mode: every controller mounted, cpu and net_cls joined.
SYSTEMD_MOUNTINFO = """\
25 24 0:23 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
26 25 0:24 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
27 25 0:25 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,xattr,name=systemd
30 25 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
31 25 0:29 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid - cgroup cgroup rw,net_cls,net_prio
32 25 0:30 / /sys/fs/cgroup/hugetlb rw,nosuid - cgroup cgroup rw,hugetlb
33 25 0:31 / /sys/fs/cgroup/perf_event rw,nosuid - cgroup cgroup rw,perf_event
34 25 0:32 / /sys/fs/cgroup/cpuset rw,nosuid - cgroup cgroup rw,cpuset
35 25 0:33 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
36 25 0:34 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices
37 25 0:35 / /sys/fs/cgroup/freezer rw,nosuid - cgroup cgroup rw,freezer
38 25 0:36 / /sys/fs/cgroup/blkio rw,nosuid - cgroup cgroup rw,blkio
39 25 0:37 / /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids
"""
UNIFIED_MOUNTINFO = "25 24 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_mountinfo_gives_each_mount_its_point_type_and_super_options():
    entries = mount_entries(MOUNTINFO)
    hugetlb_free = {e.mount_point: e.super_options for e in entries if e.fs_type == "cgroup"}
    assert hugetlb_free["/sys/fs/cgroup/systemd"] == ("rw", "name=systemd")
    assert hugetlb_free["/sys/fs/cgroup/cpu"] == ("rw", "cpu")
    assert {e.fs_type for e in entries} == {"sysfs", "tmpfs", "cgroup", "cgroup2"}


@pytest.mark.upstream("systemd-mounts-every-cgroup-v1-controller")
def test_a_host_without_systemd_lacks_what_systemd_would_mount_joined_as_systemd_joins():
    """net_cls and net_prio are both missing: one joined hierarchy; cpu and cpuacct are mounted
    apart already and stay as they are."""
    assert missing_hierarchies(PROC_CGROUPS, MOUNTINFO) == [
        Hierarchy(("net_cls", "net_prio")),
        Hierarchy(("perf_event",)),
        Hierarchy(("hugetlb",)),
    ]
    assert Hierarchy(("net_cls", "net_prio")).aliases() == ("net_cls", "net_prio")
    assert Hierarchy(("hugetlb",)).aliases() == ()


def test_one_missing_half_of_a_joined_pair_is_mounted_alone():
    mounted_net_cls = MOUNTINFO + (
        "42 31 0:39 / /sys/fs/cgroup/net_cls rw,relatime - cgroup cgroup rw,net_cls\n"
    )
    assert Hierarchy(("net_prio",)) in missing_hierarchies(PROC_CGROUPS, mounted_net_cls)


def test_a_systemd_host_and_a_cgroup_v2_host_lack_nothing():
    assert missing_hierarchies(PROC_CGROUPS, SYSTEMD_MOUNTINFO) == []
    assert missing_hierarchies(PROC_CGROUPS, UNIFIED_MOUNTINFO) == []


def test_a_disabled_controller_is_not_mounted():
    disabled = PROC_CGROUPS.replace("hugetlb\t0\t1\t1", "hugetlb\t0\t1\t0")
    assert Hierarchy(("hugetlb",)) not in missing_hierarchies(disabled, MOUNTINFO)


class RecordingMount:
    def __init__(self, fail: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        failed = bool(self.fail) and self.fail in " ".join(argv)
        return subprocess.CompletedProcess(argv, 32 if failed else 0, "", "busy" if failed else "")


def test_the_tier_mounts_each_missing_hierarchy_with_systemds_flags_and_links(tmp_path: Path):
    mount = RecordingMount()
    changes = make_like_systemd(PROC_CGROUPS, MOUNTINFO, mount, tmp_path).lines
    assert mount.calls == [
        ["mount", "-t", "cgroup", "-o", f"rw,nosuid,nodev,noexec,relatime,{options}",
         "cgroup", str(tmp_path / options)]
        for options in ("net_cls,net_prio", "perf_event", "hugetlb")
    ]  # fmt: skip
    assert (tmp_path / "net_cls").readlink() == Path("net_cls,net_prio")
    assert (tmp_path / "net_prio").readlink() == Path("net_cls,net_prio")
    assert len(changes) == 3 and "hugetlb" in changes[2] and "as systemd does" in changes[2]


def test_nothing_is_mounted_or_said_where_the_host_has_every_hierarchy(tmp_path: Path):
    mount = RecordingMount()
    changes = make_like_systemd(PROC_CGROUPS, SYSTEMD_MOUNTINFO, mount, tmp_path)
    assert (changes.lines, changes.mounted, mount.calls) == ([], [], [])
    assert undo(changes, mount) == [] and mount.calls == []


def test_a_refused_mount_stops_the_tier_with_mounts_reason(tmp_path: Path):
    with pytest.raises(HostCgroupsUnfit, match=r"-o hugetlb .*busy.*subtree_control"):
        make_like_systemd(PROC_CGROUPS, MOUNTINFO, RecordingMount(fail="hugetlb"), tmp_path)


@pytest.mark.upstream("systemd-mounts-every-cgroup-v1-controller")
def test_a_container_of_the_sessions_daemon_has_its_cgroup_in_every_enabled_controller(
    docker: Docker, busybox: str
):
    """What the mounts are for: each container, node containers included, gets its own cgroup
    in the hierarchy of every controller the kernel enabled (a kubelet on cgroup v1 validates
    its root in each); on cgroup v2 it has the one unified line."""
    lines = docker.run(
        "run", "--rm", "--cgroupns", "host", busybox, "cat", "/proc/self/cgroup"
    ).stdout.splitlines()  # fmt: skip
    if lines == [line for line in lines if line.startswith("0::")]:
        pytest.skip("cgroup v2 only: one hierarchy holds every controller, nothing to mount")
    # a hierarchy runc did not find mounted still shows in the list, at its root "/"
    own = {c for line in lines for c in line.split(":")[1].split(",") if line.split(":")[2] != "/"}
    enabled = enabled_controllers(Path("/proc/cgroups").read_text())
    assert set(enabled) <= own, f"no cgroup of its own in {sorted(set(enabled) - own)}: {lines}"


def test_a_frozen_cgroup_under_a_container_is_thawed_and_nothing_else(tmp_path: Path):
    """runc's freeze while it sets a cgroup's limits, left behind by a runc killed meanwhile."""
    node = "c0a6f7559040"
    pod = tmp_path / "freezer/docker" / node / "kubelet.slice/pod-1.slice/cri-containerd-1.scope"
    pod.mkdir(parents=True)
    (pod / "freezer.state").write_text("FROZEN\n")
    (pod.parent / "freezer.state").write_text("THAWED\n")
    other = tmp_path / "freezer/docker/another-container"
    other.mkdir(parents=True)
    (other / "freezer.state").write_text("FROZEN\n")
    v2 = tmp_path / "docker" / node / "kubelet.slice"
    v2.mkdir(parents=True)
    (v2 / "cgroup.freeze").write_text("1\n")
    assert thaw_frozen(node, root=tmp_path) == [pod / "freezer.state", v2 / "cgroup.freeze"]
    assert (pod / "freezer.state").read_text() == "THAWED"
    assert (v2 / "cgroup.freeze").read_text() == "0"
    assert (other / "freezer.state").read_text() == "FROZEN\n"  # not this container's
    assert thaw_frozen("no-such-container", root=tmp_path) == []


# --- the session's end: the host left as found


FREED = Release(lambda: PROC_CGROUPS, lambda seconds: None)  # every hierarchy: its root alone


class FakeMounts:
    """mount(8) and umount(8) on a mountinfo kept in memory."""

    def __init__(self, mountinfo: str, busy: str = "") -> None:
        self.lines = mountinfo.splitlines()
        self.calls: list[list[str]] = []
        self.busy = busy

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if self.busy and self.busy in argv[-1]:
            return subprocess.CompletedProcess(argv, 32, "", "target is busy")
        if argv[:2] == ["mount", "-t"]:
            options = argv[4].removeprefix(MOUNT_FLAGS + ",")
            self.lines.append(f"90 31 0:90 / {argv[-1]} rw,relatime - cgroup cgroup rw,{options}")
        elif argv[0] == "umount":
            self.lines = [line for line in self.lines if line.split()[4] != argv[1]]
        return subprocess.CompletedProcess(argv, 0, "", "")

    def mountinfo(self) -> str:
        return "\n".join(self.lines) + "\n"


def test_the_sessions_end_unmounts_exactly_what_the_tier_mounted_in_reverse(tmp_path: Path):
    """Mounts after == mounts before; the cgroups docker left inside go first; the links and
    the mount points the tier made go with them; what was there before stays."""
    fake = FakeMounts(MOUNTINFO)
    (tmp_path / "perf_event").mkdir()  # an empty folder the host had: it stays
    changes = make_like_systemd(PROC_CGROUPS, MOUNTINFO, fake, tmp_path)
    assert len(cgroup_mounts(fake.mountinfo())) == len(cgroup_mounts(MOUNTINFO)) + 3
    (tmp_path / "hugetlb" / "docker" / "abc").mkdir(parents=True)  # the daemon's, emptied
    lines = undo(changes, fake, mountinfo=fake.mountinfo, release=FREED)
    assert cgroup_mounts(fake.mountinfo()) == cgroup_mounts(MOUNTINFO)
    unmounted = [argv[1] for argv in fake.calls if argv[0] == "umount"]
    assert unmounted == [str(tmp_path / o) for o in ("hugetlb", "perf_event", "net_cls,net_prio")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["perf_event"]
    assert len(lines) == 3 and lines[0].startswith("unmounted the cgroup v1 hierarchy hugetlb")


def test_a_hierarchy_whose_cgroups_hold_processes_stays_mounted_and_says_why(tmp_path: Path):
    fake = FakeMounts(MOUNTINFO)
    changes = make_like_systemd(PROC_CGROUPS, MOUNTINFO, fake, tmp_path)
    (tmp_path / "perf_event" / "docker" / "running").mkdir(parents=True)
    busy = tmp_path / "perf_event" / "docker" / "running"

    def rmdir(path: Path) -> None:
        if path == busy:
            raise OSError(16, "Device or resource busy")  # EBUSY: it has tasks
        path.rmdir()

    lines = undo(changes, fake, rmdir, fake.mountinfo, FREED)
    assert lines[1] == (
        f"left {tmp_path / 'perf_event'} mounted: its cgroups hold processes "
        f"({busy}: Device or resource busy)"
    )
    left = {e.mount_point for e in cgroup_mounts(fake.mountinfo())}
    assert left - {e.mount_point for e in cgroup_mounts(MOUNTINFO)} == {
        str(tmp_path / "perf_event")
    }


def test_a_refused_umount_is_said_and_one_unmounted_meanwhile_is_left_alone(tmp_path: Path):
    fake = FakeMounts(MOUNTINFO)
    changes = make_like_systemd(PROC_CGROUPS, MOUNTINFO, fake, tmp_path)
    fake.busy = "hugetlb"
    fake.lines = [line for line in fake.lines if "perf_event" not in line]  # by someone else
    lines = undo(changes, fake, mountinfo=fake.mountinfo, release=FREED)
    assert lines[0] == f"left {tmp_path / 'hugetlb'} mounted: umount said target is busy"
    assert lines[1].endswith("no longer mounted as the tier mounted it: left alone")
    assert lines[2].startswith("unmounted the cgroup v1 hierarchy net_cls,net_prio")


def test_the_umount_waits_until_the_removed_cgroups_are_freed(tmp_path: Path):
    """Unmounted before the kernel frees a removed cgroup, a hierarchy lives on unseen (its
    controller bound to it in /proc/cgroups): the umount comes once the count is the root's."""
    fake = FakeMounts(MOUNTINFO)
    hugetlb = Hierarchy(("hugetlb",))
    changes = Changes(root=tmp_path, mounted=[mount_hierarchy(hugetlb, fake, tmp_path)])
    (tmp_path / "hugetlb" / "docker").mkdir()
    dying = PROC_CGROUPS.replace("hugetlb\t0\t1\t1", "hugetlb\t12\t2\t1")
    counts = iter([dying, dying, PROC_CGROUPS])
    seen: list[str] = []

    def proc_cgroups() -> str:
        seen.append(str(fake.calls[-1][0]))  # what ran last when the count was read
        return next(counts)

    lines = undo(
        changes, fake, mountinfo=fake.mountinfo, release=Release(proc_cgroups, lambda s: None)
    )
    assert seen == ["mount", "mount", "mount"] and fake.calls[-1][0] == "umount"
    assert lines == [f"unmounted the cgroup v1 hierarchy hugetlb at {tmp_path / 'hugetlb'}"]
    fake = FakeMounts(MOUNTINFO)
    changes = Changes(root=tmp_path, mounted=[mount_hierarchy(hugetlb, fake, tmp_path)])
    (tmp_path / "hugetlb" / "docker").mkdir()
    never = Release(lambda: dying, lambda s: None, timeout=1)
    assert undo(changes, fake, mountinfo=fake.mountinfo, release=never) == [
        f"left {tmp_path / 'hugetlb'} mounted: the cgroups removed from it were not freed "
        "within 1 s (unmounted, the hierarchy would live on unseen)"
    ]
    assert fake.calls[-1][0] == "mount"


def test_a_failed_mount_takes_back_the_ones_made_before_it(tmp_path: Path):
    fake = FakeMounts(MOUNTINFO, busy="hugetlb")
    with pytest.raises(HostCgroupsUnfit, match="target is busy"):
        make_like_systemd(PROC_CGROUPS, MOUNTINFO, fake, tmp_path)
    assert cgroup_mounts(fake.mountinfo()) == cgroup_mounts(MOUNTINFO)
    assert list(tmp_path.iterdir()) == []


def test_a_real_hierarchy_mounted_and_taken_back_leaves_the_mounts_as_found(tmp_path: Path):
    """On this host's kernel: a named cgroup v1 hierarchy (no controller, so no daemon's
    cgroup moves) mounted as the tier mounts one, a cgroup made in it as docker makes its
    parent, then `undo`: /proc/self/mountinfo's cgroup mounts are as before (a named
    hierarchy outlives its mount while it has cgroups: the name is new each run)."""
    before = cgroup_mounts(Path("/proc/self/mountinfo").read_text())
    named = Hierarchy(("none", f"name=host-tier-{uuid.uuid4().hex[:12]}"))
    changes = Changes(root=tmp_path)
    changes.mounted.append(mount_hierarchy(named, root=tmp_path))
    try:
        assert len(cgroup_mounts(Path("/proc/self/mountinfo").read_text())) == len(before) + 1
        (named.where(tmp_path) / "docker" / "abc").mkdir(parents=True)
        assert undo(changes) == [
            f"unmounted the cgroup v1 hierarchy {named.options} at {named.where(tmp_path)}"
        ]
        assert cgroup_mounts(Path("/proc/self/mountinfo").read_text()) == before
        assert not named.where(tmp_path).exists()
        # gone from the kernel too (freed after the umount returns), not only from the mounts
        deadline = time.monotonic() + 5
        while named.controllers[1] in Path("/proc/self/cgroup").read_text():
            assert time.monotonic() < deadline, f"{named.options} lives on in the kernel"
            time.sleep(0.2)
    finally:
        if named.where(tmp_path).is_mount():
            for child in sorted(named.where(tmp_path).rglob("*"), reverse=True):
                child.rmdir() if child.is_dir() else None
            subprocess.run(["umount", str(named.where(tmp_path))], check=False)
