"""Worker containers: what Docker and its provider read back, proxy settings, node labels."""

from __future__ import annotations

import pytest

from components.tenant.workers import NODE_LABELS_LABEL, node_container_args, proxy_environment
from labconfig.model import ProxyConfig
from planning.node_labels import GPU_NODE_LABELS, kubelet_node_labels, registration_labels
from tests.support.docker_readback import daemon_security_opts, planned_replacements
from tests.support.pulumi_harness import ProgramRun, run_program, stack_config

IMAGE_ID = "sha256:" + "a" * 64
CIDRS = ("172.30.0.0/16", "10.244.0.0/16", "10.96.0.0/16")
NODES = ("tenant-a-worker-1", "tenant-a-worker-2")


def worker(**overrides) -> dict:
    return {**node_container_args(NODES[0], "tenant-a", IMAGE_ID, "kamaji-hami-lab"), **overrides}


@pytest.mark.upstream("docker-privileged-label-disable")
@pytest.mark.upstream("docker-provider-container-readback")
def test_a_second_up_reads_back_every_forcenew_input_as_declared():
    """T2: after the first `up` nothing a worker declares comes back different, so no replace."""
    assert planned_replacements(worker()) == set()
    with_env = node_container_args(
        NODES[0], "tenant-a", IMAGE_ID, "lab", GPU_NODE_LABELS, ["HTTP_PROXY=http://p:3128"]
    )
    assert planned_replacements(with_env) == set()


@pytest.mark.upstream("docker-privileged-label-disable")
def test_kinds_security_options_alone_would_replace_every_worker_on_each_up():
    """T2, the model bites: kind's two options, privileged, gain label=disable in Docker."""
    kinds_flags = worker(security_opts=["seccomp=unconfined", "apparmor=unconfined"])
    assert planned_replacements(kinds_flags) == {"security_opts"}
    assert daemon_security_opts(kinds_flags)[-1] == "label=disable"
    assert daemon_security_opts(worker()) == worker()["security_opts"]


# --------------------------------------------------------------------------- proxies


HOST_PROXY = {"HTTP_PROXY": "http://shell:8080", "https_proxy": "http://shell:8080"}
LAB_NO_PROXY = (
    "172.30.0.0/16,10.244.0.0/16,10.96.0.0/16,"
    "tenant-a-worker-1,tenant-a-worker-2,.svc,.svc.cluster,.svc.cluster.local"
)


@pytest.mark.upstream("kind-node-proxy-env")
def test_no_proxy_config_passes_nothing():
    assert proxy_environment(ProxyConfig(), CIDRS, NODES) == []
    assert worker()["envs"] is None


@pytest.mark.upstream("kind-node-proxy-env")
def test_the_configured_proxy_reaches_the_workers_as_kind_passes_it():
    """T9: both spellings; NO_PROXY keeps the configured list and adds the lab's networks."""
    proxy = ProxyConfig(https="http://proxy:3128", no_proxy="localhost,.corp")
    assert proxy_environment(proxy, CIDRS, NODES) == [
        "HTTPS_PROXY=http://proxy:3128",
        "https_proxy=http://proxy:3128",
        f"NO_PROXY=localhost,.corp,{LAB_NO_PROXY}",
        f"no_proxy=localhost,.corp,{LAB_NO_PROXY}",
    ]


def worker_envs(monkeypatch: pytest.MonkeyPatch, **config: object) -> list:
    """Each worker's `envs` in the lab stack, run from a shell with a proxy in its environment."""
    for name, value in HOST_PROXY.items():
        monkeypatch.setenv(name, value)
    run = run_program({**stack_config("lab"), **config})
    containers = run.of_type("docker:index/container:Container")
    assert len(containers) == 2  # one worker per tenant in Pulumi.lab.yaml
    return [(c.inputs.get("envs"), c.is_secret("envs")) for c in containers]


def test_the_shells_proxy_never_reaches_the_workers(monkeypatch: pytest.MonkeyPatch):
    """T9, reviewer item 2: the proxy of whoever runs `pulumi up` is not stack config; were it
    read, an `up` from another shell would replace every worker (envs is ForceNew)."""
    assert worker_envs(monkeypatch) == [(None, False), (None, False)]


def test_the_configured_proxy_reaches_every_worker_as_a_secret(monkeypatch: pytest.MonkeyPatch):
    """T9: exactly the configured proxy, not the shell's; a proxy URL may carry credentials."""
    envs = worker_envs(monkeypatch, proxy={"http": "http://user:pw@proxy:3128"})
    for env, secret in envs:
        assert secret
        assert env[:2] == [
            "HTTP_PROXY=http://user:pw@proxy:3128",
            "http_proxy=http://user:pw@proxy:3128",
        ]
        assert env[2].startswith("NO_PROXY=172.30.0.0/16,") and len(env) == 4
        assert env[2].removeprefix("NO_PROXY=") == env[3].removeprefix("no_proxy=")


# --------------------------------------------------------------------------- node labels


def kubelet_may_set(key: str) -> bool:
    """The rule NodeRestriction and the kubelet's --node-labels check apply (see the fact)."""
    namespace = key.split("/", 1)[0] if "/" in key else ""

    def within(domain: str) -> bool:
        return namespace == domain or namespace.endswith("." + domain)

    if within("node-restriction.kubernetes.io"):
        return False
    kubernetes = within("kubernetes.io") or within("k8s.io")
    allowed = within("kubelet.kubernetes.io") or within("node.kubernetes.io") or key in {
        "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
        "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
    }  # fmt: skip
    return not kubernetes or allowed


@pytest.mark.upstream("kubelet-may-set-unprefixed-labels")
def test_the_gpu_label_is_one_a_kubelet_may_register_itself():
    """T6: `gpu=on` is unprefixed; a kubernetes.io role label would be refused."""
    assert all(kubelet_may_set(key) for key in GPU_NODE_LABELS)
    assert not kubelet_may_set("node-role.kubernetes.io/gpu")


@pytest.mark.parametrize(
    ("gpu_mode", "labels"), [("simulated", ""), ("nvml-mock", "gpu=on"), ("real", "gpu=on")]
)
def test_nodes_register_as_gpu_nodes_outside_simulation(gpu_mode: str, labels: str):
    assert kubelet_node_labels(registration_labels(gpu_mode)) == labels


# --------------------------------------------------------------------------- the program


@pytest.fixture(scope="module")
def nvml() -> ProgramRun:
    return run_program(stack_config("nvml"), stack="nvml")


def test_worker_images_are_pulled_only_after_the_host_preflight(lab: ProgramRun):
    """m7: nothing touches Docker before the host checks."""
    preflight = lab.named("preflight-checks").urn  # the command that runs the checks
    for image in lab.of_type("docker:index/remoteImage:RemoteImage"):
        assert preflight in lab.depends_on(image.urn), image.name


def test_an_nvml_worker_registers_labelled_and_rejoins_when_the_labels_change(nvml: ProgramRun):
    """T6: the labels are on the container (a change replaces it) and reach the join script."""
    for container in nvml.of_type("docker:index/container:Container"):
        labels = {item["label"]: item["value"] for item in container.inputs["labels"]}
        assert labels[NODE_LABELS_LABEL] == "gpu=on"
        join = nvml.named(f"{container.name}-join")
        assert join.inputs["environment"]["NODE_LABELS"] == "gpu=on"
        assert join.delete_before_replace  # the old node's delete must not hit the new node


def test_simulated_workers_carry_no_registration_labels(lab: ProgramRun):
    for container in lab.of_type("docker:index/container:Container"):
        assert NODE_LABELS_LABEL not in {item["label"] for item in container.inputs["labels"]}
        assert lab.named(f"{container.name}-join").inputs["environment"]["NODE_LABELS"] == ""
