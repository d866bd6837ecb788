"""Host preflight checks: each failing check says what to run (preflight/checks.py)."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from labconfig.parse import parse_config
from labconfig.preflight_checks import PREFLIGHT_CHECKS
from labconfig.versions import kubernetes_minor, minor_series
from planning.host_plan import HostPlan, Sizing, host_plan
from preflight import checks as preflight
from preflight.checks import (
    check_host,
    conntrack_findings,
    kubectl_skew_findings,
    report,
    subnet_clashes,
)
from preflight.host_facts import DockerFacts, DockerNetwork, HostFacts, Route
from tests.support.made_up_hosts import DOCKER, GOOD, PLAN, failed

LAB_NETWORK = DockerNetwork("kamaji-hami-lab", ("172.30.0.0/16",), "br-0123456789ab")


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
        ({"bridge_nf_call_iptables": None}, "br_netfilter", "sudo modprobe br_netfilter"),
        (
            {"bridge_nf_call_iptables": 0},
            "br_netfilter",
            "sudo sysctl -w net.bridge.bridge-nf-call-iptables=1",
        ),
        ({"mem_available_mb": 2000}, "memory", "free memory or configure fewer tenants/workers"),
        ({"cpus": 2}, "CPUs", "give the host more CPUs"),
        ({"disk_free_gb": 3.0}, "disk", "free space under Docker's data root"),
    ],
)
def test_each_failure_names_its_fix(change, check, fix):
    fixes = failed(replace(GOOD, **change))
    assert list(fixes) == [check]
    assert fixes[check][0].startswith(fix)


@pytest.mark.upstream("kube-proxy-max-per-core-zero-skips-the-conntrack-table")
@pytest.mark.parametrize("host_value", [65536, 131071, 262144, 1048576, 4194304])
@pytest.mark.parametrize("versions", [("v1.35.0",), ("v1.36.0",), ("v1.31.0", "v1.36.3")])
def test_the_hosts_conntrack_table_is_the_hosts_own(host_value, versions):
    """The program's kube-proxy leaves the host's conntrack table alone (`maxPerCore: 0`), so
    any nf_conntrack_max passes, for tenants on both sides of v1.36 too. The old rule asked
    for exactly kube-proxy's target (131072 on these 4 CPUs) and failed every value here but
    none; with tenants on both sides of v1.36 above 32 CPUs it failed every value."""
    plan = replace(PLAN, kube_proxy_versions=versions)
    assert failed(replace(GOOD, conntrack_max=host_value), plan) == {}
    assert failed(replace(GOOD, cpus=40, conntrack_max=host_value), plan) == {}
    (finding,) = [f for f in check_host(replace(GOOD, conntrack_max=host_value), plan)
                  if "conntrack" in f.check]  # fmt: skip
    assert (finding.check, finding.ok) == ("nf_conntrack", True)
    assert f"nf_conntrack_max {host_value}, the host's own" in finding.detail


def test_nf_conntrack_not_loaded_says_to_load_it():
    """kube-proxy still sets its worker netns's conntrack timeouts at start; those entries
    exist only while nf_conntrack is loaded."""
    assert failed(replace(GOOD, conntrack_max=None)) == {
        "nf_conntrack": (
            "sudo modprobe nf_conntrack",
            "echo nf_conntrack | sudo tee /etc/modules-load.d/kamaji-hami-lab.conf",
        )
    }
    assert conntrack_findings(None, ["v1.35.0"])[0].detail.startswith("not loaded")


def test_no_container_workers_means_no_conntrack_check():
    plan = replace(PLAN, kube_proxy_versions=(), sizing=Sizing(1, 0))
    assert failed(replace(GOOD, conntrack_max=None), plan) == {}
    assert conntrack_findings(None, []) == []


def test_the_preflight_writes_no_conntrack_setting():
    """No fix the preflight can print sets nf_conntrack_max or the hash size."""
    worst = replace(GOOD, conntrack_max=None, cpus=64)
    plan = replace(PLAN, kube_proxy_versions=("v1.35.0", "v1.36.0"))
    lines = [line for fix in failed(worst, plan).values() for line in fix]
    assert lines and not [line for line in lines if "conntrack_max" in line or "hash" in line]
    assert "nf_conntrack_max" not in PREFLIGHT_CHECKS
    assert "conntrack hashsize" not in PREFLIGHT_CHECKS


def test_the_report_prints_every_fix_line():
    findings = check_host(replace(GOOD, conntrack_max=None), PLAN)
    lines = report(findings).splitlines()
    at = lines.index(
        "FAIL nf_conntrack       not loaded (kube-proxy sets its conntrack timeouts at start "
        "and exits without them)"
    )
    assert lines[at + 1 : at + 3] == [
        "     fix: sudo modprobe nf_conntrack",
        "          echo nf_conntrack | sudo tee /etc/modules-load.d/kamaji-hami-lab.conf",
    ]


def test_a_resize_of_a_running_lab_needs_room_only_for_what_it_adds():
    """M2: 2 tenants up on an 8 GB host leave ~3 GB; a third tenant adds 1728 MB, not 7232."""
    host = replace(GOOD, mem_available_mb=3000, cpus=8, conntrack_max=262144)
    grown = replace(PLAN, sizing=Sizing(tenants=3, workers=3))
    assert grown.sizing.footprint.memory_mb > 3000
    assert failed(host, grown, previous=None).keys() == {"memory"}
    assert failed(host, grown, previous=Sizing(2, 2)) == {}
    memory = next(f for f in check_host(host, grown, Sizing(2, 2)) if f.check == "memory")
    assert memory.detail == (
        "3000 MB available for the 1728 MB the lab still needs "
        "(it requests 7616 MB, 5888 MB of it already running)"
    )


def test_a_passing_memory_or_disk_line_does_not_read_as_a_shortfall():
    """A user read `ok memory 23219 MB available, 5504 MB more needed` as a failure."""
    lines = {
        f.check: f.detail for f in check_host(GOOD, PLAN, None) if f.check in ("memory", "disk")
    }
    assert all(f.ok for f in check_host(GOOD, PLAN, None) if f.check in ("memory", "disk"))
    for detail in lines.values():
        assert "more needed" not in detail and "still" in detail, detail


def test_cpus_count_the_whole_lab_even_when_it_runs():
    """M2: a running lab does not reduce the CPU count, so CPUs are never a delta."""
    big = replace(PLAN, sizing=Sizing(tenants=6, workers=6))
    assert "CPUs" in failed(GOOD, big, previous=Sizing(5, 5))


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


@pytest.mark.upstream("kind-release-vouches-for-its-images")
@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("kind v0.33.0 go1.26.1 linux/amd64", True),
        ("kind v0.33.2 go1.26.1 linux/amd64", True),
        ("kind v0.34.0 go1.26.1 linux/amd64", False),
        ("kind v0.32.0 go1.26.1 linux/amd64", False),
        ("kind v0.31.0 go1.25.5 linux/amd64", False),
    ],
)
def test_kind_is_pinned_to_the_release_of_the_node_image(line, ok):
    """m11: the pinned kindest/node v1.37.0 digest is kind v0.33.0's default image."""
    fixes = failed(replace(GOOD, tools={**GOOD.tools, "kind": line}))
    if ok:
        assert fixes == {}
    else:
        assert list(fixes) == ["kind version"]
        assert fixes["kind version"][0].startswith(
            "install kind v0.33.0: go install sigs.k8s.io/kind@v0.33.0"
        )


def test_missing_tools_and_kind_only_when_kind_runs_here():
    fixes = failed(replace(GOOD, tools={}))
    assert list(fixes) == ["kubectl", "curl", "kind", "git", "helm"]
    assert fixes["helm"] == ("install Helm 3: https://helm.sh/docs/intro/install/",)
    # Workers join another stack's cluster, whose platform is installed already.
    joined = replace(PLAN, kind_cluster=False, kamaji_charts=False)
    tools = {"kubectl": "v1.36.4", "curl": "curl 8.14.1"}
    assert list(failed(replace(GOOD, tools=tools), joined)) == []


def test_git_and_helm_are_needed_wherever_the_lab_installs_kamaji():
    """M3: Kamaji's charts are cloned from their git tag and built with helm on this host."""
    cfg = {"tenants": [{"name": "a"}]}
    assert host_plan(parse_config(cfg)).kamaji_charts
    existing = {**cfg, "managementMode": "existing", "managementStack": "org/p/lab"}
    assert host_plan(parse_config(existing)).kamaji_charts
    no_platform = host_plan(parse_config({**existing, "installPlatform": False}))
    assert not no_platform.kamaji_charts


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


@pytest.mark.parametrize(
    ("version", "minor", "series"),
    [("v1.35.0", (1, 35), "1.35"), ("1.36.3", (1, 36), "1.36"), ("v1.31", (1, 31), "1.31")],
)
def test_one_parser_names_a_kubernetes_minor(version: str, minor: tuple[int, int], series: str):
    """Review 6: config (worker image vs kubernetesVersion), the preflight (kubectl's skew)
    and the remote scripts (pkgs.k8s.io/core:/stable:/v1.35) read the same minor."""
    assert kubernetes_minor(version) == minor and minor_series(version) == series
    from labconfig import model as config

    assert not hasattr(config, "_minor") and not hasattr(preflight, "_minor")


@pytest.mark.upstream("kubeadm-judged-br-netfilter-by-its-sysctl", "br-netfilter-is-its-sysctl")
def test_br_netfilter_passes_when_its_sysctl_reads_1_and_says_how_otherwise():
    """Issue 17 (1): built in or a module, what counts is bridge-nf-call-iptables = 1 (kubeadm's
    FileContentCheck). Missing: load the module, now and at boot; 0: set it, now and at boot."""
    assert "br_netfilter" not in failed(replace(GOOD, bridge_nf_call_iptables=1))
    assert details(GOOD)["br_netfilter"] == "bridge-nf-call-iptables = 1"
    assert failed(replace(GOOD, bridge_nf_call_iptables=None)) == {
        "br_netfilter": (
            "sudo modprobe br_netfilter",
            "echo br_netfilter | sudo tee /etc/modules-load.d/kamaji-hami-lab-br_netfilter.conf",
        )
    }
    assert failed(replace(GOOD, bridge_nf_call_iptables=0)) == {
        "br_netfilter": (
            "sudo sysctl -w net.bridge.bridge-nf-call-iptables=1",
            "echo net.bridge.bridge-nf-call-iptables=1 | "
            "sudo tee /etc/sysctl.d/90-kamaji-hami-lab-bridge-nf.conf",
        )
    }
    missing = details(replace(GOOD, bridge_nf_call_iptables=None))["br_netfilter"]
    assert missing.startswith("/proc/sys/net/bridge/bridge-nf-call-iptables missing")


SYSCTL_W = re.compile(r"sudo sysctl -w (\S+)=(\S+)")
MODPROBE = re.compile(r"sudo modprobe (\S+)")
MODULE_PARAMETER = re.compile(r"/sys/module/(\w+)/parameters/(\w+)")
TEE = re.compile(r"echo '?(.+?)'? \| sudo tee (\S+)")


def test_every_sysctl_and_module_fix_is_persisted():
    """Issue 17 (9): `sysctl -w` and `modprobe` are lost at reboot. Every such fix line comes
    with the same setting written under /etc/sysctl.d (modules: /etc/modules-load.d), and no
    two fixes write different lines to one file (a later `tee` would erase the earlier one)."""
    worst = replace(
        GOOD,
        inotify_instances=128,
        inotify_watches=8192,
        conntrack_max=65536,
        bridge_nf_call_iptables=0,
    )
    unloaded = replace(worst, conntrack_max=None, bridge_nf_call_iptables=None)
    written: dict[str, set[str]] = {}
    # systemd-sysctl, systemd-modules-load and modprobe read only *.conf files there.
    persisted = re.compile(r"/etc/(sysctl|modules-load|modprobe)\.d/[^/]+\.conf")
    settings, modules = set(), set()
    fixes = [
        fix
        for host in (worst, unloaded)
        for plan in (PLAN, replace(PLAN, kube_proxy_versions=("v1.36.0",)))
        for fix in failed(host, plan).values()
    ]
    for fix in fixes:
        tees = [m.groups() for line in fix if (m := TEE.fullmatch(line))]
        for text, path in tees:
            written.setdefault(path, set()).add(text)
        for text, path in tees:
            if m := MODULE_PARAMETER.fullmatch(path):  # a module parameter set at runtime
                assert any(
                    t == f"options {m[1]} {m[2]}={text}" and p.startswith("/etc/modprobe.d/")
                    for t, p in tees
                ), path
        for line in fix:
            if m := SYSCTL_W.fullmatch(line):
                settings.add(m[1])
                assert any(
                    t == f"{m[1]}={m[2]}" and p.startswith("/etc/sysctl.d/") for t, p in tees
                ), line
            if m := MODPROBE.fullmatch(line):
                modules.add(m[1])
                assert any(t == m[1] and p.startswith("/etc/modules-load.d/") for t, p in tees), (
                    line
                )
    assert settings == {
        "fs.inotify.max_user_instances",
        "fs.inotify.max_user_watches",
        "net.bridge.bridge-nf-call-iptables",
    }
    assert modules == {"nf_conntrack", "br_netfilter"}
    assert {path: texts for path, texts in written.items() if len(texts) > 1} == {}
    runtime = [p for p in written if MODULE_PARAMETER.fullmatch(p)]
    assert runtime == []
    assert [p for p in written if not persisted.fullmatch(p) and p not in runtime] == []


KUBECTL_FIX = (
    "install kubectl v1.35.0 (v1.34 to v1.36 fit every API server): curl -LO "
    "https://dl.k8s.io/release/v1.35.0/bin/linux/amd64/kubectl && sudo install -m 0755 kubectl "
    "/usr/local/bin/kubectl (other platforms: https://kubernetes.io/docs/tasks/tools/)"
)


@pytest.mark.upstream("kubectl-skew-one-minor", "kubectl-version-client-line")
@pytest.mark.parametrize(
    ("line", "ok"),
    [
        ("Client Version: v1.35.0", True),
        ("Client Version: v1.34.7", True),
        ("Client Version: v1.36.1", True),
        ("Client Version: v1.32.4-dispatcher", False),  # the host, against v1.35
        ("Client Version: v1.33.9", False),
        ("Client Version: v1.37.0", False),
        (
            'Client Version: version.Info{Major:"1", Minor:"34", GitVersion:"v1.34.2", '
            'GoVersion:"go1.24.9"}',
            True,
        ),  # kubectl < v1.28 printed the struct
        (
            'Client Version: version.Info{Major:"1", Minor:"27", GitVersion:"v1.27.3", '
            'GoVersion:"go1.20.5"}',
            False,
        ),
    ],
)
def test_kubectl_must_be_within_one_minor_of_every_api_server(line, ok):
    """Issue 17 (9): kubectl is supported within one minor of kube-apiserver; here two v1.35.0
    tenants and a v1.35.0 kind cluster."""
    plan = replace(
        PLAN,
        kube_proxy_versions=("v1.35.0",),
        tenant_versions=(("tenant-a", "v1.35.0"), ("tenant-b", "v1.35.0")),
        management_version="v1.35.0",
    )
    fixes = failed(replace(GOOD, tools={**GOOD.tools, "kubectl": line}), plan)
    assert fixes == ({} if ok else {"kubectl version": (KUBECTL_FIX,)})


@pytest.mark.upstream("kubectl-skew-one-minor")
def test_the_kubectl_finding_names_every_api_server_out_of_skew():
    """Each tenant and the kind cluster is checked on its own: one old tenant is enough."""
    servers = [
        ("kind management cluster", "v1.35.0"),
        ("tenant a", "v1.35.0"),
        ("tenant b", "v1.33.2"),
    ]
    (finding,) = kubectl_skew_findings("Client Version: v1.35.4", servers)
    assert not finding.ok
    assert finding.detail == (
        "v1.35.4 is more than one minor from tenant b v1.33.2 "
        "(kubectl is supported within one minor of kube-apiserver)"
    )
    assert finding.fix[0].startswith("install kubectl v1.34.0 (only v1.34 fits every API server)")
    (old,) = kubectl_skew_findings("Client Version: v1.32.4-dispatcher", servers)
    assert "from kind management cluster v1.35.0, tenant a v1.35.0 (" in old.detail
    assert "tenant b" not in old.detail  # v1.33 is within one minor of v1.32
    # The newest server version that fits them all, so the release exists.
    (newer,) = kubectl_skew_findings(
        "Client Version: v1.31.0", [("t", "v1.36.2"), ("u", "v1.35.1")]
    )
    assert newer.fix[0].startswith("install kubectl v1.36.2 (v1.35 to v1.36 fit every API server)")
    (apart,) = kubectl_skew_findings(
        "Client Version: v1.35.0", [("t", "v1.31.0"), ("u", "v1.35.0")]
    )
    assert apart.fix == (
        "no kubectl is within one minor of every API server (v1.31.0, v1.35.0): give the tenants "
        "(and the kind node image) versions at most 2 minors apart",
    )
    assert kubectl_skew_findings(None, servers) == []  # missing: the tools check says so
    (unreadable,) = kubectl_skew_findings("kubectl", servers)
    assert not unreadable.ok and unreadable.detail == "no version in 'kubectl'"


def test_without_kind_the_management_cluster_is_not_checked():
    """An existing management cluster's version is unknown; the tenants still are checked."""
    joined = replace(PLAN, kind_cluster=False, management_version=None)
    tools = {**GOOD.tools, "kubectl": "Client Version: v1.36.0"}
    host = replace(GOOD, tools=tools)
    assert failed(host, joined) == {}
    assert (
        "kind management cluster"
        in details(replace(host, tools={**tools, "kubectl": "Client Version: v1.33.0"}))[
            "kubectl version"
        ]
    )


def test_every_check_the_preflight_runs_can_be_accepted_by_its_name():
    """The names in labconfig/preflight_checks.py are the names the checks report."""
    tree = ast.parse(Path(preflight.__file__).read_text())
    named = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "Finding"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    tools = {"kubectl", "curl", "kind", "git", "helm"}  # tool_findings names them by tool
    assert named | tools == set(PREFLIGHT_CHECKS)
