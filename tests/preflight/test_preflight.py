"""Host preflight: each failing check says what to run; reading the host is kept apart."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from components.platform.host_preflight import (
    PROJECT_DIR,
    preflight_command,
    preflight_update_command,
    project_python,
)
from labconfig.parse import parse_config
from labconfig.versions import kubernetes_minor, minor_series
from planning.footprint import lab_footprint
from planning.host_plan import HostPlan, Sizing, host_plan
from preflight import checks as preflight
from preflight import cli
from preflight.checks import (
    check_host,
    conntrack_findings,
    kube_proxy_conntrack_max,
    report,
    subnet_clashes,
)
from preflight.host_facts import (
    DockerFacts,
    DockerNetwork,
    HostFacts,
    Route,
    docker_disk_path,
    online_cpus,
    parse_cpu_list,
    read_docker,
    read_host_facts,
    read_routes,
)
from tests.support.pulumi_harness import lab_stack_config, run_program

LAB_NETWORK = DockerNetwork("kamaji-hami-lab", ("172.30.0.0/16",), "br-0123456789ab")
DOCKER = DockerFacts(
    server_version="28.2.2",
    operating_system="Ubuntu 24.04.2 LTS",
    security_options=("name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"),
    storage_driver="overlay2",
    backing_filesystem="extfs",
    networks=(DockerNetwork("bridge", ("172.17.0.0/16",), "docker0"),),
)
GOOD = HostFacts(
    cgroup_v2=True,
    inotify_instances=8192,
    inotify_watches=524288,
    conntrack_max=131072,  # kube-proxy's target on 4 CPUs
    conntrack_hashsize=262144,
    br_netfilter=True,
    cpus=4,
    mem_available_mb=7000,
    disk_free_gb=60.0,
    docker=DOCKER,
    tools={
        "kind": "kind v0.31.0 go1.25.5 linux/amd64",
        "kubectl": "Client Version: v1.35.0",
        "curl": "curl 8.14.1 (x86_64-pc-linux-gnu)",
        "git": "git version 2.47.3",
        "helm": "v3.19.0+g3d8990f",
    },
    routes=(
        Route("default", "eth0"),
        Route("192.168.1.0/24", "eth0"),
        Route("172.17.0.0/16", "docker0"),
    ),
)
PLAN = HostPlan(
    sizing=Sizing(tenants=2, workers=2),
    kube_proxy_versions=("v1.35.0",),
    kind_cluster=True,
    network_name="kamaji-hami-lab",
    subnet="172.30.0.0/16",
)
IMAGE_136 = "kindest/node:v1.36.1@sha256:" + "3" * 64
SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nmade-up\n-----END OPENSSH PRIVATE KEY-----\n"


def failed(facts: HostFacts, plan: HostPlan = PLAN, previous: Sizing | None = None):
    return {f.check: f.fix for f in check_host(facts, plan, previous) if not f.ok}


def details(facts: HostFacts, plan: HostPlan = PLAN) -> dict[str, str]:
    return {f.check: f.detail for f in check_host(facts, plan)}


def test_a_good_host_passes_everything():
    assert failed(GOOD) == {}


@pytest.mark.parametrize(
    ("change", "check", "fix"),
    [
        ({"cgroup_v2": False}, "cgroup v2", "boot with systemd.unified_cgroup_hierarchy=1"),
        (
            {"inotify_instances": 128},
            "inotify instances",
            "sudo sysctl -w fs.inotify.max_user_instances=1024",
        ),
        (
            {"inotify_watches": 8192},
            "inotify watches",
            "sudo sysctl -w fs.inotify.max_user_watches=524288",
        ),
        ({"br_netfilter": False}, "br_netfilter", "sudo modprobe br_netfilter"),
        ({"mem_available_mb": 2000}, "memory", "free memory or configure fewer tenants/workers"),
        ({"cpus": 2, "conntrack_max": 131072}, "CPUs", "give the host more CPUs"),
        ({"disk_free_gb": 3.0}, "disk", "free space under Docker's data root"),
    ],
)
def test_each_failure_names_its_fix(change, check, fix):
    fixes = failed(replace(GOOD, **change))
    assert list(fixes) == [check]
    assert fixes[check][0].startswith(fix)


# --- conntrack: kube-proxy's own target, per tenant version (B3, T7, m9) --------------------


@pytest.mark.upstream("kube-proxy-conntrack-max-exact", "kube-proxy-conntrack-cap-v1-36")
@pytest.mark.parametrize(
    ("version", "cpus", "target"),
    [
        ("v1.35.0", 1, 131072),  # the floor (conntrack.min)
        ("v1.35.0", 4, 131072),
        ("v1.35.0", 8, 262144),
        ("v1.35.0", 16, 524288),
        ("v1.35.0", 40, 1310720),  # no cap before v1.36
        ("v1.31.0", 64, 2097152),
        ("v1.34.4", 48, 1572864),
        ("v1.36.0", 32, 1048576),
        ("v1.36.0", 40, 1048576),  # capped (kubernetes/kubernetes#137002)
        ("v1.36.3", 128, 1048576),
        ("v1.36.1", 8, 262144),
    ],
)
def test_kube_proxy_target_per_version_and_cpus(version, cpus, target):
    """B3: kube-proxy writes max(32768 x CPUs, 131072), capped at 1048576 from v1.36.0 on."""
    assert kube_proxy_conntrack_max(version, cpus) == target


@pytest.mark.upstream("kube-proxy-conntrack-max-exact")
@pytest.mark.parametrize("host_value", [65536, 131071, 131073, 262144, 1048576])
def test_conntrack_max_fails_when_it_differs_either_way(host_value):
    """B3: a value above kube-proxy's target crash-loops it as surely as one below; the
    kernel default 262144 is the README's old advice and is wrong on a 4-CPU host."""
    fixes = failed(replace(GOOD, conntrack_max=host_value))
    assert fixes == {
        "nf_conntrack_max": (
            "sudo sysctl -w net.netfilter.nf_conntrack_max=131072",
            "echo net.netfilter.nf_conntrack_max=131072 | "
            "sudo tee /etc/sysctl.d/90-kamaji-hami-lab-conntrack.conf",
        )
    }


@pytest.mark.upstream("kube-proxy-conntrack-hashsize")
def test_hashsize_below_a_quarter_of_the_target_fails_with_the_exact_value():
    """T7: on 40 CPUs v1.35 wants 1310720, so hashsize >= 327680; the >4 GB default 262144
    is too small, and kube-proxy's own write of it fails outside the initial netns."""
    host = replace(GOOD, cpus=40, conntrack_max=1310720, conntrack_hashsize=262144)
    assert failed(host) == {
        "conntrack hashsize": (
            "echo 327680 | sudo tee /sys/module/nf_conntrack/parameters/hashsize",
            "echo 'options nf_conntrack hashsize=327680' | "
            "sudo tee /etc/modprobe.d/kamaji-hami-lab.conf",
        )
    }
    assert failed(replace(host, conntrack_hashsize=327680)) == {}
    assert failed(replace(host, conntrack_hashsize=1048576)) == {}  # larger is never written


@pytest.mark.upstream("kube-proxy-conntrack-cap-v1-36")
def test_a_v1_36_tenant_on_a_big_host_wants_the_cap():
    """B3: from v1.36.0 kube-proxy caps at 1048576; its hashsize need is 262144, the default."""
    plan = replace(PLAN, kube_proxy_versions=("v1.36.0",))
    host = replace(GOOD, cpus=40, conntrack_max=1310720, conntrack_hashsize=262144)
    fixes = failed(host, plan)
    assert fixes["nf_conntrack_max"][0] == "sudo sysctl -w net.netfilter.nf_conntrack_max=1048576"
    assert list(fixes) == ["nf_conntrack_max"]
    assert failed(replace(host, conntrack_max=1048576), plan) == {}


@pytest.mark.upstream("kube-proxy-conntrack-cap-v1-36")
def test_tenants_on_both_sides_of_the_cap_conflict_on_a_big_host():
    """B3: v1.35 wants 32768 x 40, v1.36 the cap: no host value satisfies both."""
    (finding,) = conntrack_findings(1048576, 1048576, ["v1.35.0", "v1.36.0"], cpus=40)
    assert not finding.ok
    assert finding.detail == (
        "tenant kube-proxies want different values on 40 CPUs (v1.36.0 set 1048576; "
        "v1.35.0 set 1310720): one group crash-loops whatever the host holds"
    )
    assert "v1.36" in finding.fix[0] and "at most 32 CPUs" in finding.fix[0]
    # Up to 32 CPUs both want 32768 x CPUs: no conflict.
    same = conntrack_findings(262144, 262144, ["v1.35.0", "v1.36.0"], cpus=8)
    assert [(f.check, f.ok) for f in same] == [
        ("nf_conntrack_max", True),
        ("conntrack hashsize", True),
    ]


def test_conntrack_not_loaded_says_to_load_it_first():
    fixes = failed(replace(GOOD, conntrack_max=None, conntrack_hashsize=None))
    assert fixes["nf_conntrack_max"][:2] == (
        "sudo modprobe nf_conntrack",
        "echo nf_conntrack | sudo tee /etc/modules-load.d/kamaji-hami-lab.conf",
    )
    assert fixes["nf_conntrack_max"][2] == "sudo sysctl -w net.netfilter.nf_conntrack_max=131072"
    assert fixes["conntrack hashsize"][2].startswith("echo 32768 | sudo tee ")


def test_no_container_workers_means_no_conntrack_constraint():
    plan = replace(PLAN, kube_proxy_versions=(), sizing=Sizing(1, 0))
    assert failed(replace(GOOD, conntrack_max=65536), plan) == {}


def test_the_report_prints_every_fix_line():
    findings = check_host(replace(GOOD, conntrack_max=262144), PLAN)
    lines = report(findings).splitlines()
    at = lines.index(
        "FAIL nf_conntrack_max   262144 (need exactly 131072: kube-proxy v1.35.0 on 4 CPUs "
        "rewrites any other value and crash-loops)"
    )
    assert lines[at + 1 : at + 3] == [
        "     fix: sudo sysctl -w net.netfilter.nf_conntrack_max=131072",
        "          echo net.netfilter.nf_conntrack_max=131072 | "
        "sudo tee /etc/sysctl.d/90-kamaji-hami-lab-conntrack.conf",
    ]


# --- resizing a running lab (M2) -------------------------------------------------------------


def test_a_resize_of_a_running_lab_needs_room_only_for_what_it_adds():
    """M2: 2 tenants up on an 8 GB host leave ~3 GB; a third tenant adds 1728 MB, not 7232."""
    host = replace(GOOD, mem_available_mb=3000, cpus=8, conntrack_max=262144)
    grown = replace(PLAN, sizing=Sizing(tenants=3, workers=3))
    assert lab_footprint(3, 3).memory_mb > 3000
    assert failed(host, grown, previous=None).keys() == {"memory"}
    assert failed(host, grown, previous=Sizing(2, 2)) == {}
    memory = next(f for f in check_host(host, grown, Sizing(2, 2)) if f.check == "memory")
    assert memory.detail == (
        "3000 MB available, 1728 MB more needed "
        "(lab requests 7232 MB, 5504 MB of it already running)"
    )


def test_cpus_count_the_whole_lab_even_when_it_runs():
    """M2: a running lab does not reduce the CPU count, so CPUs are never a delta."""
    big = replace(PLAN, sizing=Sizing(tenants=6, workers=6))
    assert "CPUs" in failed(GOOD, big, previous=Sizing(5, 5))


def test_sizing_record_round_trips_and_ignores_noise():
    assert Sizing.from_record(Sizing(3, 4).record()) == Sizing(3, 4)
    assert Sizing.from_record("old output\n" + Sizing(2, 1).record()) == Sizing(2, 1)
    assert Sizing.from_record("") is None and Sizing.from_record("not json") is None


# --- Docker (M4, m8, T9) ---------------------------------------------------------------------


@pytest.mark.upstream("docker-desktop-no-host-routes", "rootless-docker-own-netns")
@pytest.mark.parametrize(
    ("docker", "detail"),
    [
        (replace(DOCKER, operating_system="Docker Desktop"), "Docker Desktop (Docker Desktop)"),
        (
            replace(DOCKER, security_options=("name=seccomp,profile=builtin", "name=rootless")),
            "rootless Docker (Ubuntu 24.04.2 LTS)",
        ),
    ],
)
def test_docker_desktop_and_rootless_fail_because_vips_are_unreachable(docker, detail):
    """M4: neither exposes container networks to the host: MetalLB VIPs cannot be reached."""
    host = replace(GOOD, docker=docker)
    assert list(failed(host)) == ["docker engine"]
    assert details(host)["docker engine"] == detail
    assert "rootful Docker Engine" in failed(host)["docker engine"][0]


@pytest.mark.upstream("docker-userns-remap-refuses-privileged")
def test_userns_remap_is_detected_with_what_to_do():
    """T9: Docker refuses privileged containers under userns-remap without --userns=host."""
    host = replace(GOOD, docker=replace(DOCKER, security_options=("name=userns", "name=seccomp")))
    (fix,) = failed(host)["userns-remap"]
    assert '"userns-remap" from /etc/docker/daemon.json' in fix


@pytest.mark.upstream("kind-dev-mapper-storage")
@pytest.mark.parametrize(
    ("driver", "backing", "bad"),
    [
        ("btrfs", "btrfs", True),
        ("zfs", "zfs", True),
        ("devicemapper", "xfs", True),
        ("overlay2", "btrfs", True),
        ("overlay2", "extfs", False),
        ("overlay2", "xfs", False),
    ],
)
def test_storage_that_kind_handles_with_dev_mapper_is_detected(driver, backing, bad):
    """T9: kind mounts /dev/mapper on btrfs/zfs/devicemapper; the lab's workers do not."""
    host = replace(GOOD, docker=replace(DOCKER, storage_driver=driver, backing_filesystem=backing))
    assert ("storage driver" in failed(host)) is bad


@pytest.mark.parametrize(
    ("error", "fix"),
    [
        ("not on PATH", "install Docker Engine (rootful)"),
        (
            "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
            "Is the docker daemon running?",
            "sudo systemctl start docker",
        ),
        (
            "permission denied while trying to connect to the Docker daemon socket at "
            "unix:///var/run/docker.sock",
            'sudo usermod -aG docker "$USER"',
        ),
    ],
)
def test_an_unreachable_daemon_reports_what_docker_said(error, fix):
    """m8: the detail is docker's own stderr, and the fix fits the cause."""
    host = replace(GOOD, docker=DockerFacts(server_version=None, error=error))
    fixes = failed(host)
    assert list(fixes) == ["docker"]
    assert fixes["docker"][0].startswith(fix)
    assert details(host)["docker"] == error


# --- tools and kind (m11) --------------------------------------------------------------------


@pytest.mark.upstream("kind-release-vouches-for-its-images")
@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("kind v0.31.0 go1.25.5 linux/amd64", True),
        ("kind v0.31.2 go1.25.5 linux/amd64", True),
        ("kind v0.32.0 go1.26.1 linux/amd64", False),
        ("kind v0.30.0 go1.24.6 linux/amd64", False),
    ],
)
def test_kind_is_pinned_to_the_release_of_the_node_image(line, ok):
    """m11: the pinned kindest/node v1.35.0 digest is kind v0.31.0's default image."""
    fixes = failed(replace(GOOD, tools={**GOOD.tools, "kind": line}))
    if ok:
        assert fixes == {}
    else:
        assert list(fixes) == ["kind version"]
        assert fixes["kind version"][0].startswith(
            "install kind v0.31.0: go install sigs.k8s.io/kind@v0.31.0"
        )


def test_missing_tools_and_kind_only_when_kind_runs_here():
    fixes = failed(replace(GOOD, tools={}))
    assert list(fixes) == ["kubectl", "curl", "kind", "git", "helm"]
    assert fixes["helm"] == ("install Helm 3: https://helm.sh/docs/intro/install/",)
    # Workers join another stack's cluster, whose platform is installed already.
    joined = replace(PLAN, kind_cluster=False, kamaji_charts=False)
    tools = {"kubectl": "v1.35.0", "curl": "curl 8.14.1"}
    assert list(failed(replace(GOOD, tools=tools), joined)) == []


def test_git_and_helm_are_needed_wherever_the_lab_installs_kamaji():
    """M3: Kamaji's charts are cloned from their git tag and built with helm on this host."""
    cfg = {"tenants": [{"name": "a"}]}
    assert host_plan(parse_config(cfg)).kamaji_charts
    existing = {**cfg, "managementMode": "existing", "managementStack": "org/p/lab"}
    assert host_plan(parse_config(existing)).kamaji_charts
    no_platform = host_plan(parse_config({**existing, "installPlatform": False}))
    assert not no_platform.kamaji_charts


# --- subnet clashes (m12) --------------------------------------------------------------------


@pytest.mark.upstream("kind-local-subnet-clashes")
def test_subnet_clashes_with_routes_and_other_docker_networks():
    """m12: a VPN route or another network on 172.30/16 makes `docker network create` fail."""
    networks = (*DOCKER.networks, DockerNetwork("other-lab", ("172.30.4.0/24",), "br-ffffffffffff"))
    routes = (*GOOD.routes, Route("172.16.0.0/12", "tun0"))
    host = replace(GOOD, docker=replace(DOCKER, networks=networks), routes=routes)
    assert details(host)["lab subnet"] == (
        "172.30.0.0/16 overlaps docker network other-lab (172.30.4.0/24); "
        "route 172.16.0.0/12 dev tun0"
    )
    (fix,) = failed(host)["lab subnet"]
    assert fix.startswith("pulumi config set subnet 10.213.0.0/16 ")


def test_the_lab_s_own_network_and_its_route_do_not_clash_on_a_second_run():
    """m12: the lab's own network (and the route of its bridge) exists after the first up."""
    host = replace(
        GOOD,
        docker=replace(DOCKER, networks=(*DOCKER.networks, LAB_NETWORK)),
        routes=(*GOOD.routes, Route("172.30.0.0/16", "br-0123456789ab")),
    )
    assert failed(host) == {}
    assert subnet_clashes("172.30.0.0/16", "someone-else", host.docker.networks, host.routes) == [
        "docker network kamaji-hami-lab (172.30.0.0/16)",
        "route 172.30.0.0/16 dev br-0123456789ab",
    ]


def test_the_suggested_subnet_is_free_on_this_host():
    taken = (*GOOD.routes, Route("10.213.0.0/16", "wg0"), Route("172.30.0.0/16", "tun0"))
    (fix,) = failed(replace(GOOD, routes=taken))["lab subnet"]
    assert fix.startswith("pulumi config set subnet 10.214.0.0/16 ")


# --- the plan from the stack config ----------------------------------------------------------


def test_host_plan_counts_only_what_runs_on_this_host():
    config = lab_stack_config()
    config["tenants"] = [
        {"name": "a", "kubernetesVersion": "v1.35.0", "workers": 2},
        {"name": "b", "kubernetesVersion": "v1.36.0", "workerImage": IMAGE_136, "workers": 1},
        {
            "name": "c",
            "kubernetesVersion": "v1.34.0",
            "workerMode": "remote",
            "remoteWorkers": [{"name": "gpu-c", "host": "192.0.2.3"}],
        },
    ]
    plan = host_plan(parse_config({**config, "sshPrivateKey": SSH_KEY}))
    assert plan == HostPlan(
        sizing=Sizing(tenants=3, workers=3),
        kube_proxy_versions=("v1.35.0", "v1.36.0"),  # the remote tenant's kube-proxy is not here
        kind_cluster=True,
        network_name="kamaji-hami-lab",
        subnet="172.30.0.0/16",
    )


def test_nothing_on_this_host_means_no_plan():
    cfg = parse_config(
        {
            "managementMode": "existing",
            "managementStack": "org/kamaji-hami-lab/lab",
            "sshPrivateKey": SSH_KEY,
            "tenants": [
                {
                    "name": "real",
                    "workerMode": "remote",
                    "remoteWorkers": [{"name": "gpu-1", "host": "192.0.2.10"}],
                }
            ],
        }
    )
    assert host_plan(cfg) is None


# --- reading the host ------------------------------------------------------------------------


class FakeHost:
    """Answers the commands the preflight runs, as the real tools print them."""

    def __init__(self, answers: dict[str, str | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        answer = self.answers[" ".join(args[:3])]
        if isinstance(answer, Exception):
            raise answer
        return answer


DOCKER_INFO = {
    "OperatingSystem": "Ubuntu 24.04.2 LTS",
    "DockerRootDir": "/var/lib/docker",
    "SecurityOptions": ["name=apparmor", "name=seccomp,profile=builtin", "name=rootless"],
    "Driver": "overlay2",
    "DriverStatus": [["Backing Filesystem", "btrfs"], ["Supports d_type", "true"]],
}
NETWORKS = [
    {
        "Name": "bridge",
        "Id": "a" * 64,
        "IPAM": {"Config": [{"Subnet": "172.17.0.0/16", "Gateway": "172.17.0.1"}]},
        "Options": {"com.docker.network.bridge.name": "docker0"},
    },
    {
        "Name": "kamaji-hami-lab",
        "Id": "0123456789ab" + "c" * 52,
        "IPAM": {"Config": [{"Subnet": "172.30.0.0/16"}]},
    },
    {"Name": "host", "Id": "d" * 64, "IPAM": {"Config": []}, "Options": {}},
]
ANSWERS: dict[str, str | Exception] = {
    "docker version --format": "28.2.2\n",
    "docker info --format": json.dumps(DOCKER_INFO),
    "docker network ls": "a" * 64 + "\n" + "0123456789ab" + "c" * 52 + "\n" + "d" * 64 + "\n",
    "docker network inspect": json.dumps(NETWORKS),
    "ip -json -4": json.dumps(
        [
            {"dst": "default", "gateway": "192.168.1.1", "dev": "eth0"},
            {"dst": "172.30.0.0/16", "dev": "br-0123456789ab"},
        ]
    ),
    "kind version": "kind v0.31.0 go1.25.5 linux/amd64\n",
    "kubectl version --client": "Client Version: v1.35.0\nKustomize Version: v5.7.1\n",
    "curl --version": "curl 8.14.1 (x86_64-pc-linux-gnu) libcurl/8.14.1\n",
    "git --version": "git version 2.47.3\n",
    "helm version --short": "v3.19.0+g3d8990f\n",
}


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


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_reads_the_host_from_proc_and_sys(tmp_path: Path, monkeypatch):
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_instances", "1024\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_watches", "524288\n")
    write(tmp_path, "proc/sys/net/netfilter/nf_conntrack_max", "262144\n")
    write(tmp_path, "sys/module/nf_conntrack/parameters/hashsize", "65536\n")
    write(tmp_path, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8192000 kB\n")
    (tmp_path / "sys/module/br_netfilter").mkdir(parents=True)
    monkeypatch.setattr("shutil.which", lambda tool: f"/usr/bin/{tool}")
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert facts.cgroup_v2 and facts.br_netfilter
    assert (facts.inotify_instances, facts.inotify_watches) == (1024, 524288)
    assert (facts.conntrack_max, facts.conntrack_hashsize) == (262144, 65536)
    assert facts.mem_available_mb == 8000
    assert facts.tools == {
        "kind": "kind v0.31.0 go1.25.5 linux/amd64",
        "kubectl": "Client Version: v1.35.0",
        "curl": "curl 8.14.1 (x86_64-pc-linux-gnu) libcurl/8.14.1",
        "git": "git version 2.47.3",
        "helm": "v3.19.0+g3d8990f",
    }
    assert facts.docker.server_version == "28.2.2" and facts.routes is not None


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


def shutil_usage(free: int) -> SimpleNamespace:
    return SimpleNamespace(total=free * 2, used=free, free=free)  # what shutil.disk_usage gives


def test_nf_conntrack_not_loaded_reads_as_none(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda tool: None)
    facts = read_host_facts(FakeHost(ANSWERS), tmp_path, disk_path=str(tmp_path))
    assert (facts.conntrack_max, facts.conntrack_hashsize) == (None, None)
    assert facts.tools == dict.fromkeys(("kind", "kubectl", "curl", "git", "helm"))


# --- the entry points: `make up` (--stack) and the program's command ------------------------


def stack_answers(config: dict, export: dict) -> dict[str, str | Exception]:
    return {
        **ANSWERS,
        "pulumi config --stack": json.dumps(config),
        "pulumi stack export": json.dumps(export),
    }


LAB_CONFIG_JSON = {
    "kamaji-hami-lab:subnet": {"value": "172.30.0.0/16", "secret": False},
    "kamaji-hami-lab:tenants": {
        "value": json.dumps(
            [{"name": "tenant-a", "workers": 1}, {"name": "tenant-b", "workers": 2}]
        ),
        "objectValue": [{"name": "tenant-a", "workers": 1}, {"name": "tenant-b", "workers": 2}],
        "secret": False,
    },
    "kamaji-hami-lab:sshPrivateKey": {"secret": True},
}
EXPORT = {
    "version": 3,
    "deployment": {
        "resources": [
            {
                "urn": "urn:pulumi:lab::kamaji-hami-lab::pulumi:pulumi:Stack::kamaji-hami-lab-lab",
                "type": "pulumi:pulumi:Stack",
            },
            {
                "urn": "urn:pulumi:lab::kamaji-hami-lab::kamaji-hami-lab:index:HostPreflight"
                "$command:local:Command::preflight-checks",
                "type": "command:local:Command",
                "outputs": {"stdout": '{"tenants": 2, "workers": 2}', "stderr": "ok ..."},
            },
        ]
    },
}


@pytest.mark.upstream("pulumi-config-json-shape")
def test_plan_from_stack_reads_config_and_the_last_deployed_sizing():
    """m6: `make up` checks the stack's own plan against what its last update deployed."""
    host = FakeHost(stack_answers(LAB_CONFIG_JSON, EXPORT))
    plan, previous = cli.plan_from_stack("lab", host)
    assert plan == replace(PLAN, sizing=Sizing(2, 3))
    assert previous == Sizing(2, 2)
    assert host.calls == [
        ["pulumi", "config", "--stack", "lab", "--json"],
        ["pulumi", "stack", "export", "--stack", "lab"],
    ]
    fresh = FakeHost(stack_answers(LAB_CONFIG_JSON, {"version": 3, "deployment": {"manifest": {}}}))
    assert cli.plan_from_stack("lab", fresh)[1] is None


def test_main_with_a_stack_checks_and_prints_the_record(monkeypatch, capsys):
    monkeypatch.setattr(cli, "read_host_facts", lambda run: GOOD)
    host = FakeHost(stack_answers(LAB_CONFIG_JSON, EXPORT))
    assert cli.main(["--stack", "lab"], run=host) == 0
    out = capsys.readouterr()
    assert out.out == '{"tenants": 2, "workers": 3}\n'
    assert "ok   nf_conntrack_max   131072" in out.err


def test_main_skips_a_stack_that_disables_the_preflight(monkeypatch, capsys):
    monkeypatch.setattr(cli, "read_host_facts", lambda run: pytest.fail("read the host"))
    off = {**LAB_CONFIG_JSON, "kamaji-hami-lab:preflight": {"value": "false", "secret": False}}
    assert cli.main(["--stack", "lab"], run=FakeHost(stack_answers(off, EXPORT))) == 0
    assert "preflight: skipped" in capsys.readouterr().err


def test_main_names_a_bad_stack_config(capsys):
    bad = {"kamaji-hami-lab:tenants": {"value": "[]", "secret": False}}
    assert cli.main(["--stack", "lab"], run=FakeHost(stack_answers(bad, EXPORT))) == 1
    assert capsys.readouterr().err.startswith("preflight: invalid stack config: tenants")


def test_main_says_what_pulumi_said_when_it_cannot_read_the_stack(capsys):
    gone = subprocess.CalledProcessError(
        255, ["pulumi", "config"], output="", stderr="error: no stack named 'lab' found\n"
    )
    answers = {**stack_answers(LAB_CONFIG_JSON, EXPORT), "pulumi config --stack": gone}
    assert cli.main(["--stack", "lab"], run=FakeHost(answers)) == 1
    assert capsys.readouterr().err == (
        "preflight: cannot read stack lab: error: no stack named 'lab' found\n"
    )


def test_main_exits_non_zero_and_prints_fixes(monkeypatch, capsys):
    monkeypatch.setattr(cli, "read_host_facts", lambda run: replace(GOOD, br_netfilter=False))
    argv = ["--tenants", "2", "--workers", "2", "--kube-proxy-version", "v1.35.0"]
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    assert "FAIL br_netfilter" in out.err and "fix: sudo modprobe br_netfilter" in out.err
    assert (
        out.out == ""
    )  # a failed run leaves no record: the next update compares to the last good one


def test_the_command_line_carries_the_whole_plan():
    plan = replace(PLAN, kube_proxy_versions=("v1.35.0", "v1.36.0"))
    assert preflight_command(plan, python="/opt/lab venv/python") == (
        "'/opt/lab venv/python' -m preflight --tenants 2 --workers 2 "
        "--kube-proxy-version v1.35.0 --kube-proxy-version v1.36.0 "
        "--network kamaji-hami-lab --subnet 172.30.0.0/16 --kind-cluster --kamaji-charts"
    )
    argv = preflight_command(plan, python="py").split()[3:]
    parsed = cli._parser().parse_args(argv)
    assert (parsed.tenants, parsed.workers, parsed.kube_proxy_version) == (
        2,
        2,
        ["v1.35.0", "v1.36.0"],
    )


@pytest.mark.upstream("pulumi-command-update-previous-stdout")
def test_the_update_command_passes_the_previous_record(tmp_path: Path):
    """M2: pulumi-command runs `update` with the last stdout in PULUMI_COMMAND_STDOUT; the
    generated line, run by /bin/sh as the provider does, hands it to --previous."""
    python = tmp_path / "python"
    calls = tmp_path / "calls.json"
    python.write_text(
        textwrap.dedent(
            f"""\
            #!{os.path.realpath(os.sys.executable)}
            import json, sys
            json.dump(sys.argv[1:], open({str(calls)!r}, "w"))
            """
        )
    )
    python.chmod(0o755)
    line = preflight_update_command(PLAN, python=str(python))
    record = Sizing(2, 1).record()
    subprocess.run(["/bin/sh", "-c", line], check=True, env={"PULUMI_COMMAND_STDOUT": record})
    argv = json.loads(calls.read_text())
    assert argv[-2:] == ["--previous", record]
    assert Sizing.from_record(cli._parser().parse_args(argv[2:]).previous) == Sizing(2, 1)
    subprocess.run(["/bin/sh", "-c", line], check=True, env={})  # first update of an old state
    assert json.loads(calls.read_text())[-2:] == ["--previous", ""]


@pytest.mark.upstream("pulumi-command-update-previous-stdout")
def test_the_program_registers_an_update_path_and_no_replacing_triggers():
    """m6, M2: a resize updates the command in place (triggers would replace it)."""
    run = run_program(lab_stack_config())
    check = run.named("preflight-checks")
    assert check.inputs["update"].endswith('--previous "${PULUMI_COMMAND_STDOUT:-}"')
    assert check.inputs["create"].split(" -m ")[1] == (
        "preflight --tenants 2 --workers 2 --kube-proxy-version v1.35.0 "
        "--network kamaji-hami-lab --subnet 172.30.0.0/16 --kind-cluster --kamaji-charts"
    )
    assert "triggers" not in check.inputs


@pytest.mark.upstream("pulumi-command-dir-defaults-to-the-project-root")
def test_the_check_has_no_machine_specific_path(tmp_path: Path):
    """Review 4 (m6): another checkout or CI's preview plans no update of the check: the
    interpreter is relative to the project and no absolute `dir` is set; the provider runs
    the command in the project's root (Pulumi.yaml has no `main` that would move it)."""
    project = tmp_path / "lab"
    (project / ".venv/bin").mkdir(parents=True)
    assert project_python(str(project / ".venv/bin/python"), project) == ".venv/bin/python"
    assert project_python("/usr/bin/python3", project) == "/usr/bin/python3"
    assert project_python(str(project / "../other/python"), project) == str(
        tmp_path / "other/python"
    )
    link = tmp_path / "link"
    link.symlink_to(project)
    assert project_python(str(link / ".venv/bin/python"), project.resolve()) != ".venv/bin/python"
    assert project_python(str(project / ".venv/bin/python"), link) == ".venv/bin/python"

    check = run_program(lab_stack_config()).named("preflight-checks")
    assert "dir" not in check.inputs
    assert not check.inputs["create"].startswith("/")
    assert "main" not in yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())


@pytest.mark.parametrize(
    ("version", "minor", "series"),
    [("v1.35.0", (1, 35), "1.35"), ("1.36.3", (1, 36), "1.36"), ("v1.31", (1, 31), "1.31")],
)
def test_one_parser_names_a_kubernetes_minor(version: str, minor: tuple[int, int], series: str):
    """Review 6: config (worker image vs kubernetesVersion), the preflight (kube-proxy's cap
    from v1.36) and the remote scripts (pkgs.k8s.io/core:/stable:/v1.35) read the same minor."""
    assert kubernetes_minor(version) == minor and minor_series(version) == series
    from labconfig import model as config

    assert not hasattr(config, "_minor") and not hasattr(preflight, "_minor")
    assert kube_proxy_conntrack_max("1.36.0", 40) == kube_proxy_conntrack_max("v1.36.0", 40)
    assert preflight.CONNTRACK_CAP_VERSION == "v1.36"
