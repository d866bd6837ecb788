"""Reading the host: docker, routes, /proc and /sys, the disk (preflight/host_facts.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from preflight.checks import kernel_findings
from preflight.host_facts import (
    DockerFacts,
    DockerNetwork,
    Route,
    docker_disk_path,
    error_text,
    online_cpus,
    parse_cpu_list,
    read_docker,
    read_host_facts,
    read_routes,
)
from tests.support.made_up_hosts import ANSWERS, DOCKER_INFO, FakeHost, write


def shutil_usage(free: int) -> SimpleNamespace:
    return SimpleNamespace(total=free * 2, used=free, free=free)  # what shutil.disk_usage gives


def test_reads_docker_info_and_networks():
    docker = read_docker(FakeHost(ANSWERS))
    assert docker.server_version == "28.2.2"
    assert docker.has_security_option("rootless") and not docker.has_security_option("userns")
    assert (docker.storage_driver, docker.backing_filesystem) == ("overlay2", "btrfs")
    assert docker.networks == (
        DockerNetwork("bridge", ("172.17.0.0/16",), "docker0"),
        DockerNetwork("kamaji-hami-lab", ("172.30.0.0/16",), "br-0123456789ab"),
        DockerNetwork("host", (), "br-dddddddddddd"),
    )


def test_a_daemon_that_refuses_keeps_docker_s_own_words():
    """m8: `docker version` exits 1 with the reason on stderr; that is the detail."""
    refused = subprocess.CalledProcessError(
        1, ["docker", "version"], output="", stderr="permission denied while trying to connect\n"
    )
    docker = read_docker(FakeHost({**ANSWERS, "docker version --format": refused}))
    assert docker == DockerFacts(
        server_version=None, error="permission denied while trying to connect"
    )
    missing = read_docker(
        FakeHost({**ANSWERS, "docker version --format": FileNotFoundError("docker")})
    )
    assert missing.error == "not on PATH"


def test_routes_unreadable_without_ip():
    assert read_routes(FakeHost({"ip -json -4": FileNotFoundError("ip")})) is None
    assert read_routes(FakeHost(ANSWERS)) == (
        Route("default", "eth0"),
        Route("172.30.0.0/16", "br-0123456789ab"),
    )


def test_reads_the_host_from_proc_and_sys(tmp_path: Path, monkeypatch):
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_instances", "1024\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_watches", "524288\n")
    write(tmp_path, "proc/sys/net/netfilter/nf_conntrack_max", "262144\n")
    write(tmp_path, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8192000 kB\n")
    write(tmp_path, "proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
    monkeypatch.setattr("shutil.which", lambda tool: f"/usr/bin/{tool}")
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.cgroup_v2 and facts.bridge_nf_call_iptables == 1
    assert (facts.inotify_instances, facts.inotify_watches) == (1024, 524288)
    assert facts.conntrack_max == 262144
    assert facts.mem_available_mb == 8000
    assert facts.tools == {
        "kind": "kind v0.33.0 go1.26.1 linux/amd64",
        "kubectl": "Client Version: v1.36.4",
        "curl": "curl 8.14.1 (x86_64-pc-linux-gnu) libcurl/8.14.1",
        "git": "git version 2.47.3",
        "helm": "v3.19.0+g3d8990f",
    }
    assert facts.docker.server_version == "28.2.2" and facts.routes is not None


V1_CONTROLLERS = ("cpu,cpuacct", "memory", "pids", "devices", "freezer", "systemd")


def cgroup_tree(root: Path, layout: str) -> None:
    """/sys/fs/cgroup as each boot mode leaves it. v1: a tmpfs of one hierarchy per
    controller; hybrid (systemd's default before v247, WSL2's kernel 5.15): the same plus a
    cgroup2 mount at unified/; unified: /sys/fs/cgroup itself is cgroup2."""
    cgroup = "sys/fs/cgroup"
    if layout in ("v1", "hybrid"):
        for controller in V1_CONTROLLERS:
            write(root, f"{cgroup}/{controller}/cgroup.procs", "1\n")
            write(root, f"{cgroup}/{controller}/tasks", "1\n")
    if layout == "hybrid":
        write(root, f"{cgroup}/unified/cgroup.controllers", "")  # v1 holds every controller
        write(root, f"{cgroup}/unified/cgroup.procs", "1\n")
    if layout == "unified":
        write(root, f"{cgroup}/cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma\n")
        write(root, f"{cgroup}/cgroup.procs", "1\n")


@pytest.mark.upstream("cgroup-v2-is-the-unified-root", "kubelet-fail-cgroupv1-flag")
@pytest.mark.parametrize(("layout", "v2"), [("v1", False), ("hybrid", False), ("unified", True)])
def test_cgroup_v2_is_only_a_unified_hierarchy_at_sys_fs_cgroup(
    tmp_path: Path, monkeypatch, layout: str, v2: bool
):
    """A hybrid host mounts cgroup2 too, but at /sys/fs/cgroup/unified with no controllers:
    runc and the kubelet judge /sys/fs/cgroup alone, so it is a cgroup v1 host to them."""
    monkeypatch.setattr("shutil.which", lambda tool: None)
    cgroup_tree(tmp_path, layout)
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.cgroup_v2 is v2
    (finding,) = [f for f in kernel_findings(facts) if f.check == "cgroup v2"]
    assert finding.ok is v2
    if not v2:
        assert finding.detail == "host runs cgroup v1"
        assert finding.fix[0].startswith("boot with systemd.unified_cgroup_hierarchy=1")


@pytest.mark.upstream("kube-proxy-counts-the-hosts-online-cpus")
def test_cpus_are_the_hosts_online_cpus_as_kube_proxy_counts_them(tmp_path: Path, monkeypatch):
    """B3/m9 (review 4, disputed): kube-proxy scales conntrack by cAdvisor's sysfs count of
    online CPUs, not by its affinity; a preflight pinned to one CPU (taskset) must still
    compute the target for the whole host."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    write(tmp_path, "sys/devices/system/cpu/online", "0-3,6,8-9\n")
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.cpus == 7
    assert (parse_cpu_list("0\n"), parse_cpu_list("0-15"), parse_cpu_list("0,2,4-5")) == (1, 16, 4)
    (tmp_path / "sys/devices/system/cpu/online").unlink()  # hotplug off: every CPU is online
    assert online_cpus(tmp_path) == 64


@pytest.mark.upstream("docker-info-root-dir")
def test_disk_is_measured_where_the_daemon_stores_images(tmp_path: Path, monkeypatch):
    """Review 4: rootless Docker (and a moved data-root) stores images under DockerRootDir,
    not /var/lib/docker; a root this host cannot see (Docker Desktop's VM) falls back to /."""
    data_root = tmp_path / "home/u/.local/share/docker"
    data_root.mkdir(parents=True)
    measured: list[str] = []
    monkeypatch.setattr(
        "shutil.disk_usage", lambda path: measured.append(str(path)) or shutil_usage(10**9)
    )
    info = {**DOCKER_INFO, "DockerRootDir": str(data_root)}
    read_host_facts(FakeHost({**ANSWERS, "docker info --format": json.dumps(info)}), tmp_path)
    assert measured == [str(data_root)]
    assert read_docker(FakeHost(ANSWERS)).root_dir == "/var/lib/docker"
    assert docker_disk_path(DockerFacts("28.2.2", root_dir=str(tmp_path / "vm-only"))) == "/"
    assert docker_disk_path(DockerFacts(None, error="not on PATH")) == "/"


def test_nf_conntrack_not_loaded_reads_as_none(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda tool: None)
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.conntrack_max is None
    assert facts.bridge_nf_call_iptables is None  # no /proc/sys/net/bridge: not loaded
    assert facts.tools == dict.fromkeys(("kind", "kubectl", "curl", "git", "helm"))


@pytest.mark.upstream("br-netfilter-is-its-sysctl")
@pytest.mark.parametrize(
    ("module_dir", "sysctl", "read"),
    [
        (False, "1\n", 1),  # CONFIG_BRIDGE_NETFILTER=y, as on the host: no /sys/module
        (True, "1\n", 1),  # loaded as a module
        (True, "0\n", 0),  # loaded, but bridged traffic bypasses iptables
        (True, None, None),  # a stale or unrelated /sys/module entry proves nothing
        (False, None, None),  # neither
    ],
)
def test_br_netfilter_is_read_from_its_sysctl_not_sys_module(
    tmp_path: Path, monkeypatch, module_dir: bool, sysctl: str | None, read: int | None
):
    """Issue 17 (1): a kernel with br_netfilter built in has bridge-nf-call-iptables = 1 and no
    /sys/module/br_netfilter; the preflight refused it. What counts is the sysctl, as kubeadm's
    own preflight judged it: it exists and reads 1."""
    monkeypatch.setattr("shutil.which", lambda tool: None)
    if module_dir:
        (tmp_path / "sys/module/br_netfilter").mkdir(parents=True)
    if sysctl is not None:
        write(tmp_path, "proc/sys/net/bridge/bridge-nf-call-iptables", sysctl)
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.bridge_nf_call_iptables == read


def test_a_missing_program_is_named():
    """Issue 17 (9): subprocess names the program it could not start; so does the detail."""
    try:
        subprocess.run(["kamaji-hami-lab-no-such-tool"], check=True)
    except FileNotFoundError as error:
        assert error_text(error) == "kamaji-hami-lab-no-such-tool is not on PATH"
    else:
        pytest.fail("the made-up program ran")
    assert error_text(FileNotFoundError("docker")) == "not on PATH"  # no filename: no name
