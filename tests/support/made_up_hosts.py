"""Made-up hosts for the preflight tests: facts, a plan, and a fake `run` with canned answers."""

from __future__ import annotations

import json
from pathlib import Path

from planning.host_plan import HostPlan, Sizing
from preflight.checks import check_host
from preflight.host_facts import DockerFacts, DockerNetwork, HostFacts, Route

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
    conntrack_max=262144,  # the kernel's default on 8 CPUs: the host's own, left as it is
    bridge_nf_call_iptables=1,
    cpus=4,
    mem_available_mb=7000,
    disk_free_gb=60.0,
    docker=DOCKER,
    tools={
        "kind": "kind v0.33.0 go1.26.1 linux/amd64",
        "kubectl": "Client Version: v1.36.4",
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
    kube_proxy_versions=("v1.36.4",),
    kind_cluster=True,
    network_name="kamaji-hami-lab",
    subnet="172.30.0.0/16",
    tenant_versions=(("tenant-a", "v1.36.4"), ("tenant-b", "v1.36.4")),
    management_version="v1.37.0",
)


def failed(facts: HostFacts, plan: HostPlan = PLAN, previous: Sizing | None = None):
    return {f.check: f.fix for f in check_host(facts, plan, previous) if not f.ok}


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
    "kind version": "kind v0.33.0 go1.26.1 linux/amd64\n",
    "kubectl version --client": "Client Version: v1.36.4\nKustomize Version: v5.7.1\n",
    "curl --version": "curl 8.14.1 (x86_64-pc-linux-gnu) libcurl/8.14.1\n",
    "git --version": "git version 2.47.3\n",
    "helm version --short": "v3.19.0+g3d8990f\n",
}


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
