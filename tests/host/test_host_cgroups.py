"""host_cgroups.py: which cgroup v1 hierarchies a host lacks next to a systemd host, how the
tier mounts them, and that the session's host has them all once the daemon runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from docker_host import Docker
from host_cgroups import (
    Hierarchy,
    HostCgroupsUnfit,
    make_like_systemd,
    missing_hierarchies,
    mount_entries,
    thaw_frozen,
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
    changes = make_like_systemd(PROC_CGROUPS, MOUNTINFO, mount, tmp_path)
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
    assert make_like_systemd(PROC_CGROUPS, SYSTEMD_MOUNTINFO, mount, tmp_path) == []
    assert mount.calls == []


def test_a_refused_mount_stops_the_tier_with_mounts_reason(tmp_path: Path):
    with pytest.raises(HostCgroupsUnfit, match=r"-o hugetlb .*busy.*subtree_control"):
        make_like_systemd(PROC_CGROUPS, MOUNTINFO, RecordingMount(fail="hugetlb"), tmp_path)


@pytest.mark.upstream("systemd-mounts-every-cgroup-v1-controller")
def test_once_the_daemon_runs_the_host_has_every_hierarchy_systemd_mounts(docker: Docker):
    """The session's host, after the `docker` fixture: nothing is left to mount, so every
    container, node containers included, gets its own cgroup in each hierarchy."""
    mountinfo = Path("/proc/self/mountinfo").read_text()
    assert missing_hierarchies(Path("/proc/cgroups").read_text(), mountinfo) == []
    assert docker.run("info", "-f", "{{.CgroupVersion}}").stdout.strip() in ("1", "2")


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
