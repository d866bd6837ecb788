"""Host preflight: the kernel settings, Docker setup and tools the lab needs, each with its fix.

Run by `make up` before `pulumi up` (`python -m preflight --stack lab`), and by the
program's HostPreflight command on create and on every change of what it checks. Judging the
host is pure (facts in, findings out) and tested with made-up hosts; reading the host lives in
`preflight/host_facts.py`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from labconfig.node_images import KIND_RELEASE
from labconfig.versions import kubernetes_minor
from planning.footprint import Footprint
from planning.host_plan import HostPlan, Sizing
from preflight.host_facts import (
    DockerFacts,
    DockerNetwork,
    HostFacts,
    Route,
)

MIN_INOTIFY_INSTANCES = 1024
MIN_INOTIFY_WATCHES = 524288
# kind vouches only for the node images listed for its own release; the pinned management
# node image is KIND_RELEASE's default (labconfig/node_images.py).
KIND_MINOR = kubernetes_minor(KIND_RELEASE)

SYSCTL_D = "/etc/sysctl.d/90-kamaji-hami-lab"
BRIDGE_NF = "/proc/sys/net/bridge/bridge-nf-call-iptables"
# kubectl is supported within one minor version (older or newer) of each API server it talks to.
KUBECTL_SKEW = 1
SUBNET_CANDIDATES = ("10.213.0.0/16", "10.214.0.0/16", "192.168.213.0/24")

# The Pulumi CLI the lab was run and tested with (the workflows and the real tier pin it too).
PULUMI_CLI = "3.274.1"

TOOL_INSTALL = {
    "docker": "install Docker Engine (rootful): https://docs.docker.com/engine/install/",
    "kind": (
        f"install kind {KIND_RELEASE}: go install sigs.k8s.io/kind@{KIND_RELEASE}, or curl -Lo "
        f"./kind https://kind.sigs.k8s.io/dl/{KIND_RELEASE}/kind-linux-amd64 && chmod +x ./kind "
        "&& sudo mv ./kind /usr/local/bin/kind"
    ),
    "kubectl": "install kubectl: https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/",
    "pulumi": (
        f"install the Pulumi CLI v{PULUMI_CLI}: curl -fsSL https://get.pulumi.com | sh -s -- "
        f"--version {PULUMI_CLI}"
    ),
    "curl": "install curl, e.g. sudo apt-get install curl",
    "git": "install git, e.g. sudo apt-get install git",
    "helm": "install Helm 3: https://helm.sh/docs/intro/install/",
}


# --- judging the host ----------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str
    fix: tuple[str, ...] = ()


def sysctl_fix(key: str, value: int, name: str) -> tuple[str, str]:
    """Set now and persist: a `sysctl -w` alone is lost at the next boot. One file per setting,
    so two fixes never overwrite each other's file."""
    return (
        f"sudo sysctl -w {key}={value}",
        f"echo {key}={value} | sudo tee {SYSCTL_D}-{name}.conf",
    )


def module_fix(module: str, conf: str) -> tuple[str, str]:
    """Load now and at every boot (systemd-modules-load runs before systemd-sysctl)."""
    return (f"sudo modprobe {module}", f"echo {module} | sudo tee {conf}")


def conntrack_findings(conntrack_max: int | None, versions: Sequence[str]) -> list[Finding]:
    """nf_conntrack loaded, for the tenants whose kube-proxy runs in a worker container here.

    Their kube-proxy is the program's own, told to leave the host's conntrack table alone
    (builders/kube_proxy.py: `maxPerCore: 0`): the host's nf_conntrack_max and hashsize are
    the host's to choose. At start it still sets the per-netns TCP timeouts of its worker's
    netns, entries that exist only while the module is loaded: without them it exits.
    """
    if not versions:
        return []  # no tenant kube-proxy in a container on this host
    loaded = conntrack_max is not None
    return [
        Finding(
            "nf_conntrack",
            loaded,
            f"loaded (nf_conntrack_max {conntrack_max}, the host's own: the tenants' "
            "kube-proxies leave it as it is)"
            if loaded
            else "not loaded (kube-proxy sets its conntrack timeouts at start and exits "
            "without them)",
            module_fix("nf_conntrack", "/etc/modules-load.d/kamaji-hami-lab.conf"),
        )
    ]


def size_findings(facts: HostFacts, sizing: Sizing, previous: Sizing | None) -> list[Finding]:
    """CPUs against the whole lab; memory and disk against what a running lab adds.

    A deployed lab already uses the memory and disk it asked for, so a resize (or a re-run)
    only needs room for the difference. The CPU count does not shrink when the lab runs.
    """
    need = sizing.footprint
    already = previous.footprint if previous else Footprint(0, 0, 0)
    more_memory = max(need.memory_mb - already.memory_mb, 0)
    more_disk = max(need.disk_gb - already.disk_gb, 0)
    running = f", {already.memory_mb} MB of it already running" if previous else ""
    return [
        Finding(
            "CPUs",
            facts.cpus >= need.cpus,
            f"{facts.cpus} (lab requests {need.cpus:g})",
            (
                "give the host more CPUs, configure fewer tenants/workers, or lower the "
                "tenants' controlPlaneCpuRequests",
            ),
        ),
        Finding(
            "memory",
            facts.mem_available_mb >= more_memory,
            f"{facts.mem_available_mb} MB available for the {more_memory} MB the lab still "
            f"needs (it requests {need.memory_mb} MB{running})",
            ("free memory or configure fewer tenants/workers",),
        ),
        Finding(
            "disk",
            facts.disk_free_gb >= more_disk,
            f"{facts.disk_free_gb:.1f} GB free for the {more_disk} GB of images still to pull",
            ("free space under Docker's data root",),
        ),
    ]


def _docker_daemon_fix(error: str) -> tuple[str, ...]:
    if error.endswith("not on PATH"):
        return (TOOL_INSTALL["docker"],)
    if "permission denied" in error.lower():
        return (
            'sudo usermod -aG docker "$USER" and log in again (or run as a docker group member)',
        )
    if "cannot connect" in error.lower() or "is the docker daemon running" in error.lower():
        return ("sudo systemctl start docker",)
    return ("make `docker version` reach the daemon (see its error above)",)


def docker_findings(docker: DockerFacts) -> list[Finding]:
    if docker.server_version is None:
        return [Finding("docker", False, docker.error, _docker_daemon_fix(docker.error))]
    desktop = "docker desktop" in docker.operating_system.lower()
    rootless = docker.has_security_option("rootless")
    engine = (
        "Docker Desktop" if desktop else "rootless Docker" if rootless else "rootful Docker Engine"
    )
    storage = docker.storage_driver.lower()
    backing = docker.backing_filesystem.lower()
    dev_mapper = storage in ("btrfs", "zfs", "devicemapper") or backing in ("btrfs", "zfs")
    return [
        Finding("docker", True, f"server {docker.server_version}"),
        Finding(
            "docker engine",
            not desktop and not rootless,
            f"{engine} ({docker.operating_system})",
            (
                "Docker Desktop does not expose container networks to the host and rootless "
                "Docker keeps them in its own network namespace: MetalLB VIPs and tenant API "
                "addresses are unreachable. Use rootful Docker Engine on Linux "
                "(docker context use default; sudo systemctl start docker)",
            ),
        ),
        Finding(
            "userns-remap",
            not docker.has_security_option("userns"),
            "enabled" if docker.has_security_option("userns") else "off",
            (
                "Docker refuses privileged containers under userns-remap unless they run with "
                "--userns=host, which kind passes and the lab's workers do not: remove "
                '"userns-remap" from /etc/docker/daemon.json and sudo systemctl restart docker',
            ),
        ),
        Finding(
            "storage driver",
            not dev_mapper,
            f"{docker.storage_driver or 'unknown'} on {docker.backing_filesystem or 'unknown'}",
            (
                "kind mounts /dev/mapper into its nodes on btrfs/zfs/devicemapper so the kubelet "
                "finds its disk; the lab's workers do not: use overlay2 on ext4 or xfs "
                '("storage-driver": "overlay2" in /etc/docker/daemon.json)',
            ),
        ),
    ]


def _version(line: str | None) -> tuple[int, int, int] | None:
    """The first `vX.Y.Z` of a version line; a suffix (`v1.32.4-dispatcher`) is ignored.
    kubectl < v1.28 prints `Client Version: version.Info{..., GitVersion:"v1.27.3", ...}`:
    its GitVersion is the first such match there too (GoVersion reads `go1.20.3`)."""
    match = re.search(r"v(\d+)\.(\d+)\.(\d+)", line or "")
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def tool_findings(
    tools: dict[str, str | None], kind_cluster: bool, kamaji_charts: bool = False
) -> list[Finding]:
    needed = [
        "kubectl",
        "curl",  # each tenant's API address is probed from the host (/healthz gate)
        *(["kind"] if kind_cluster else []),
        *(["git", "helm"] if kamaji_charts else []),
    ]
    findings = [
        Finding(
            tool,
            tools.get(tool) is not None,
            tools.get(tool) or "not on PATH",
            (TOOL_INSTALL[tool],),
        )
        for tool in needed
    ]
    kind = _version(tools.get("kind")) if kind_cluster else None
    if kind is not None:
        findings.append(
            Finding(
                "kind version",
                kind[:2] == KIND_MINOR,
                f"v{'.'.join(map(str, kind))} (need v{'.'.join(map(str, KIND_MINOR))}.x: the "
                "pinned node image is its release's default)",
                (TOOL_INSTALL["kind"],),
            )
        )
    return findings


def _kubectl_install(servers: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """A kubectl within one minor of every API server: the newest server version whose minor
    fits them all (a release that exists), else vX.Y.0 of the one minor between them."""
    minors = [kubernetes_minor(version) for _, version in servers]
    fitting = set.intersection(
        *(
            {(major, minor + d) for d in range(-KUBECTL_SKEW, KUBECTL_SKEW + 1)}
            for major, minor in minors
        )
    )
    if not fitting:
        span = ", ".join(sorted({version for _, version in servers}, key=kubernetes_minor))
        return (
            f"no kubectl is within one minor of every API server ({span}): give the tenants "
            f"(and the kind node image) versions at most {2 * KUBECTL_SKEW} minors apart",
        )
    exact = [v for _, v in servers if kubernetes_minor(v) in fitting]
    numbers = [(*(int(n) for n in re.findall(r"\d+", v)), 0, 0)[:3] for v in exact]
    version = "v{}.{}.{}".format(*max(numbers)) if numbers else "v{}.{}.0".format(*max(fitting))
    low, high = ("v{}.{}".format(*m) for m in (min(fitting), max(fitting)))
    fits = f"only {low} fits" if low == high else f"{low} to {high} fit"
    return (
        f"install kubectl {version} ({fits} every API server): curl -LO "
        f"https://dl.k8s.io/release/{version}/bin/linux/amd64/kubectl && "
        "sudo install -m 0755 kubectl /usr/local/bin/kubectl (other platforms: "
        "https://kubernetes.io/docs/tasks/tools/)",
    )


def kubectl_skew_findings(line: str | None, servers: Sequence[tuple[str, str]]) -> list[Finding]:
    """The host's kubectl against every API server the program's scripts point it at.

    `servers` are (who, Kubernetes version): each tenant, and the kind management cluster.
    A missing kubectl is the tools check's finding, not this one.
    """
    if line is None or not servers:
        return []
    client = _version(line)
    fix = _kubectl_install(servers)
    if client is None:
        return [Finding("kubectl version", False, f"no version in {line!r}", fix)]
    skewed = [
        f"{who} {version}"
        for who, version in servers
        if kubernetes_minor(version)[0] != client[0]
        or abs(kubernetes_minor(version)[1] - client[1]) > KUBECTL_SKEW
    ]
    shown = "v{}.{}.{}".format(*client)
    if skewed:
        detail = (
            f"{shown} is more than one minor from {', '.join(skewed)} (kubectl is supported "
            "within one minor of kube-apiserver)"
        )
    else:
        detail = f"{shown}, within one minor of every API server"
    return [Finding("kubectl version", not skewed, detail, fix)]


def subnet_clashes(
    subnet: str,
    own_network: str,
    networks: Iterable[DockerNetwork],
    routes: Iterable[Route] | None,
) -> list[str]:
    """What already uses addresses of `subnet`, except the lab's own network (a re-run)."""
    lab = ipaddress.ip_network(subnet)
    own_bridges = {n.bridge for n in networks if n.name == own_network}
    clashes = [
        f"docker network {n.name} ({s})"
        for n in networks
        if n.name != own_network
        for s in n.subnets
        if _overlaps(lab, s)
    ]
    clashes += [
        f"route {r.dst} dev {r.dev}"
        for r in routes or ()
        if r.dst != "default" and r.dev not in own_bridges and _overlaps(lab, r.dst)
    ]
    return clashes


def _overlaps(lab: ipaddress.IPv4Network | ipaddress.IPv6Network, other: str) -> bool:
    try:
        return lab.overlaps(ipaddress.ip_network(other, strict=False))
    except (ValueError, TypeError):
        return False


def free_subnet(taken: Iterable[str]) -> str:
    """The first candidate nothing on the host uses (the first one when all are used)."""
    used = [t for t in taken if t != "default"]
    for candidate in SUBNET_CANDIDATES:
        if not any(_overlaps(ipaddress.ip_network(candidate), t) for t in used):
            return candidate
    return SUBNET_CANDIDATES[0]


def subnet_findings(
    plan: HostPlan, docker: DockerFacts, routes: Sequence[Route] | None
) -> list[Finding]:
    if not plan.kind_cluster or docker.server_version is None:
        return []  # the network belongs to another stack, or Docker cannot be asked
    clashes = subnet_clashes(plan.subnet, plan.network_name, docker.networks, routes)
    if clashes:
        detail = f"{plan.subnet} overlaps {'; '.join(clashes)}"
    else:
        detail = f"{plan.subnet} is free" + (
            "" if routes is not None else " (no `ip`: routes unread)"
        )
    free = free_subnet(
        [s for n in docker.networks for s in n.subnets] + [r.dst for r in routes or ()]
    )
    fix = (
        f"pulumi config set subnet {free} (and drop any pinned gateway, containerRange, "
        "poolRange or tenant address), or remove what overlaps",
    )
    return [Finding("lab subnet", not clashes, detail, fix)]


def bridge_nf_finding(value: int | None) -> Finding:
    """br_netfilter as kubeadm's old preflight judged it: the sysctl exists and reads 1. A
    module shows under /sys/module, built-in code (CONFIG_BRIDGE_NETFILTER=y) does not."""
    if value is None:
        return Finding(
            "br_netfilter",
            False,
            f"{BRIDGE_NF} missing: br_netfilter neither loaded nor built in",
            module_fix("br_netfilter", "/etc/modules-load.d/kamaji-hami-lab-br_netfilter.conf"),
        )
    return Finding(
        "br_netfilter",
        value == 1,
        f"bridge-nf-call-iptables = {value}"
        + ("" if value == 1 else " (need 1: bridged pod traffic must pass iptables)"),
        sysctl_fix("net.bridge.bridge-nf-call-iptables", 1, "bridge-nf"),
    )


def kernel_findings(facts: HostFacts) -> list[Finding]:
    return [
        Finding(
            "cgroup v2",
            facts.cgroup_v2,
            "unified cgroup hierarchy" if facts.cgroup_v2 else "host runs cgroup v1",
            ("boot with systemd.unified_cgroup_hierarchy=1 (kindest/node >= v1.35 needs v2)",),
        ),
        Finding(
            "inotify instances",
            facts.inotify_instances >= MIN_INOTIFY_INSTANCES,
            f"{facts.inotify_instances} (need >= {MIN_INOTIFY_INSTANCES})",
            sysctl_fix("fs.inotify.max_user_instances", MIN_INOTIFY_INSTANCES, "inotify-instances"),
        ),
        Finding(
            "inotify watches",
            facts.inotify_watches >= MIN_INOTIFY_WATCHES,
            f"{facts.inotify_watches} (need >= {MIN_INOTIFY_WATCHES})",
            sysctl_fix("fs.inotify.max_user_watches", MIN_INOTIFY_WATCHES, "inotify-watches"),
        ),
        bridge_nf_finding(facts.bridge_nf_call_iptables),
    ]


def check_host(facts: HostFacts, plan: HostPlan, previous: Sizing | None = None) -> list[Finding]:
    return [
        *kernel_findings(facts),
        *conntrack_findings(facts.conntrack_max, plan.kube_proxy_versions),
        *size_findings(facts, plan.sizing, previous),
        *docker_findings(facts.docker),
        *tool_findings(facts.tools, plan.kind_cluster, plan.kamaji_charts),
        *kubectl_skew_findings(facts.tools.get("kubectl"), plan.api_servers),
        *subnet_findings(plan, facts.docker, facts.routes),
    ]


def report(findings: list[Finding], accepted: Mapping[str, str] | None = None) -> str:
    """One line a check; a failed one with its fix, or, when the stack config accepts it, as a
    warning that repeats why (kubeadm's ignored preflight errors)."""
    accepted = accepted or {}
    lines = []
    for f in findings:
        verdict = "ok  " if f.ok else "WARN" if f.check in accepted else "FAIL"
        lines.append(f"{verdict} {f.check:<18} {f.detail}")
        if not f.ok and f.check in accepted:
            lines.append(f"     accepted: {accepted[f.check]}")
        elif not f.ok:
            lines += [f"     {'fix:' if i == 0 else '    '} {step}" for i, step in enumerate(f.fix)]
    return "\n".join(lines)
