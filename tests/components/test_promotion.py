"""Promotion from simulated to real GPUs: same program, one stack per stage, only config differs."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import yaml
from pulumi.runtime.rpc import UNKNOWN

from builders.remote_scripts import prepare_script, remote_join_script
from labcheck.spec import parse_spec
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from planning.pulls import stack_pulls, unique_images
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    PROJECT_DIR,
    ProgramRun,
    run_program,
    stack_config,
)

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nfake\n-----END OPENSSH PRIVATE KEY-----\n"
SECRETS = {"sshPrivateKey": SSH_KEY, "managementKubeconfig": FAKE_KUBECONFIG}

REMOTE = "command:remote:Command"
CONTAINER = "docker:index/container:Container"
AGENT = "kamaji-hami-lab:index:SimulatedGpus"


@pytest.fixture(scope="module")
def gpu() -> ProgramRun:
    return run_program({**stack_config("gpu"), **SECRETS}, stack="gpu")


@pytest.fixture(scope="module")
def nvml() -> ProgramRun:
    return run_program(stack_config("nvml"), stack="nvml")


SELF_REFERENCE = "upgrades-last-deployment"


def hami_values(run: ProgramRun) -> list[dict]:
    return [r.inputs["values"] for r in run.resources if r.name.endswith("-hami-chart")]


def test_real_gpu_stack_prepares_and_joins_remote_hosts(gpu: ProgramRun):
    names = {r.name for r in gpu.of_type(REMOTE)}
    assert names == {
        f"{host}-{step}"
        for host in ("gpu-host-1", "gpu-host-2")
        for step in ("prepare", "upgrade-node", "join")
    }
    join = gpu.named("gpu-host-1-join")
    assert gpu.named("gpu-host-1-prepare").urn in gpu.depends_on(join.urn)
    assert gpu.named("team-a-control-plane").urn in gpu.depends_on(join.urn)
    assert join.inputs["connection"]["host"] == "192.0.2.11"
    assert join.inputs["connection"]["user"] == "ubuntu"
    assert "kubeadm reset -f" in join.inputs["delete"]
    assert join.is_secret("stdin")  # the tenant admin kubeconfig
    prepare = gpu.named("gpu-host-2-prepare").inputs["create"]
    assert "nvidia-smi" in prepare and "nvidia-ctk" in prepare
    assert "kubeadm=1.36.4-*" in prepare


def test_real_gpu_stack_runs_the_real_device_plugin_only(gpu: ProgramRun):
    for values in hami_values(gpu):
        assert values["devicePlugin"]["enabled"] is True
        assert values["devicePlugin"]["runtimeClassName"] == "nvidia"
        assert values["mockDevicePlugin"]["enabled"] is False
    kinds = Counter(r.type for r in gpu.resources)
    assert kinds[CONTAINER] == 0 and kinds[AGENT] == 0
    # The kubelet registers each host labelled gpu=on (T6); no NodePatch that a re-join loses.
    assert kinds["kubernetes:core/v1:NodePatch"] == 0
    for host in ("gpu-host-1", "gpu-host-2"):
        join = gpu.named(f"{host}-join").inputs
        assert "  kubeletExtraArgs:\n  - name: node-labels\n    value: gpu=on\n" in join["create"]
        assert "gpu=on" in join["triggers"]  # a label change re-joins the host


@pytest.mark.upstream("hami-v2.10-mock-device-plugin-rejects-chart-config")
def test_no_tenant_runs_hamis_mock_device_plugin(
    lab: ProgramRun, gpu: ProgramRun, nvml: ProgramRun
):
    """mock-device-plugin 1.0.1 exits on chart 2.10.0's device config: no simulated tenant runs
    it, gpu_agent registers its cards; nvml-mock and real tenants keep HAMi's device plugin."""
    dra = run_program(stack_config("dra"), stack="dra")
    simulated = {"tenant-a": lab, "tenant-b": lab, "tenant-hami": dra}
    for tenant, run in simulated.items():
        values = run.named(f"{tenant}-hami-chart").inputs["values"]
        assert values["mockDevicePlugin"] == {"enabled": False}
        assert values["devicePlugin"]["enabled"] is False
        assert run.named(f"{tenant}-simulated-gpus").type == AGENT
    for run, stack in ((lab, "lab"), (dra, "dra")):
        assert not [v for v in hami_values(run) if v["mockDevicePlugin"]["enabled"]]
        images = unique_images(stack_pulls(parse_config(stack_config(stack))))
        assert not [i for i in images if "mock-device-plugin" in i]
    for run, count in ((nvml, 1), (gpu, 2)):
        plugins = [v["devicePlugin"]["enabled"] for v in hami_values(run)]
        mocks = [v["mockDevicePlugin"]["enabled"] for v in hami_values(run)]
        assert (plugins, mocks) == ([True] * count, [False] * count)


def test_real_gpu_stack_uses_the_given_cluster_and_installs_the_platform(gpu: ProgramRun):
    names = {r.name for r in gpu.resources}
    assert not names & {"management-kind", "lab-network-bridge", "preflight-checks"}
    assert {"kamaji-chart", "metallb-chart", "kamaji-cert-manager"} <= names
    assert "kubeconfig" in gpu.named("management-provider").secret_inputs
    pool = gpu.named("metallb-ipaddresspool").inputs["spec"]["addresses"]
    assert pool == ["192.0.2.200-192.0.2.220"]


def test_lab_stack_registers_none_of_the_real_parts(lab: ProgramRun):
    kinds = Counter(r.type for r in lab.resources)
    assert kinds[REMOTE] == 0
    assert kinds["kubernetes:core/v1:NodePatch"] == 0
    # Only its own last deployment (UpgradeGuard), no other stack.
    references = lab.of_type("pulumi:pulumi:StackReference")
    assert [r.inputs["name"] for r in references] == ["organization/kamaji-hami-lab/lab"]
    for values in hami_values(lab):
        assert values["devicePlugin"]["enabled"] is False
        assert "runtimeClassName" not in values["devicePlugin"]


def test_nvml_stack_reuses_the_lab_cluster_through_a_stack_reference(nvml: ProgramRun):
    (reference,) = [
        r for r in nvml.of_type("pulumi:pulumi:StackReference") if r.name != SELF_REFERENCE
    ]
    assert reference.inputs["name"] == "organization/kamaji-hami-lab/lab"
    names = {r.name for r in nvml.resources}
    assert not names & {"management-kind", "lab-network-bridge", "kamaji-chart", "metallb-chart"}
    worker = nvml.named("tenant-nvml-worker-1")
    assert [n["name"] for n in worker.inputs["networksAdvanced"]] == ["kamaji-hami-lab"]
    tcp = nvml.named("tenant-nvml-control-plane")
    assert tcp.inputs["spec"]["networkProfile"]["address"] == "172.30.255.230"
    assert "kubeconfig" in nvml.named("management-provider").secret_inputs


def test_nvml_stack_runs_the_real_plugin_on_fake_nvml(nvml: ProgramRun):
    (values,) = hami_values(nvml)
    assert values["devicePlugin"]["enabled"] is True
    assert values["devicePlugin"]["nvidiaDriverRoot"] == "/var/lib/nvml-mock/driver"
    assert values["mockDevicePlugin"]["enabled"] is False
    release = nvml.named("tenant-nvml-gpu-nodes-nvml-mock")
    assert release.inputs["chart"] == "oci://ghcr.io/nvidia/k8s-test-infra/chart/nvml-mock"
    assert release.inputs["values"]["gpu"] == {"profile": "a100", "count": 2}
    assert release.inputs["values"]["image"] == {
        "repository": "ghcr.io/nvidia/nvml-mock",
        "tag": "0.3.0",
    }
    hami = nvml.named("tenant-nvml-hami-chart")
    assert release.urn in nvml.depends_on(hami.urn)
    assert not nvml.of_type(AGENT)


def test_switching_one_tenant_to_real_gpus_changes_only_its_subtree(lab: ProgramRun):
    config = copy.deepcopy(stack_config("lab"))
    config["tenants"][1].update(
        workerMode="remote",
        remoteWorkers=[{"name": "gpu-host-b", "host": "192.0.2.20"}],
        gpuMode="real",
    )
    switched = run_program({**config, "sshPrivateKey": SSH_KEY})

    # Lab-wide steps legitimately follow: the host preflight sizes for one container fewer,
    # validation re-runs on any change, and Prometheus reads tenant-b's vGPU monitor now.
    # Nothing else outside tenant-b may change.
    lab_wide = ("preflight", "validation", "monitoring-prometheus")

    def outside_b(run: ProgramRun) -> dict[str, tuple]:
        inside = {r.urn for r in run.subtree("tenant-b")}
        return {
            r.urn: (r.type, r.inputs)
            for r in run.resources
            if r.urn not in inside and not r.name.startswith(lab_wide)
        }

    assert outside_b(switched) == outside_b(lab)
    assert " --tenants 2 --workers 1 " in switched.named("preflight-checks").inputs["create"]
    before, after = (
        set(run.named("monitoring-prometheus").inputs["values"]["scrapeConfigs"])
        for run in (lab, switched)
    )
    assert after - before == {"tenant-tenant-b-vgpu-monitor"} and before <= after
    inside = {r.name for r in switched.subtree("tenant-b")}
    assert {"gpu-host-b-prepare", "gpu-host-b-join", "gpu-host-b-registered"} <= inside
    assert "tenant-b-worker-1" not in inside


@pytest.mark.parametrize("stack", ["lab", "nvml", "gpu"])
def test_secrets_stay_secret_in_every_stack(stack: str):
    run = run_program({**stack_config(stack), **(SECRETS if stack == "gpu" else {})}, stack=stack)
    for command in run.of_type(REMOTE):
        assert command.is_secret("connection.privateKey"), command.name
        assert SSH_KEY not in repr(command.inputs.get("create"))
    for provider in run.of_type("pulumi:providers:kubernetes"):
        assert "kubeconfig" in provider.secret_inputs
    for command in run.of_type("command:local:Command"):
        env = command.inputs.get("environment", {})
        for key in ("LAB_KUBECONFIG", "LABCHECK_SPEC"):
            if key in env:
                assert f"environment.{key}" in command.secret_inputs
    assert {"managementKubeconfig", "tenantKubeconfigs", "labcheckSpec"} <= run.secret_outputs
    assert SSH_KEY not in repr(run.outputs)


def test_remote_scripts_bake_in_only_quoted_names():
    join = remote_join_script("gpu-host-1")
    assert "nodeRegistration:\n  name: gpu-host-1\n" in join
    assert "lab-admin.conf" in join and "rm -f /etc/kubernetes/lab-admin.conf" in join
    simulated = prepare_script("h", "v1.35.0", "nvml-mock")
    assert "nvidia-smi" not in simulated  # driver checks only where real GPUs are promised
    assert "pkgs.k8s.io/core:/stable:/v1.35/deb/" in simulated


def test_every_stack_is_previewed_on_pull_requests():
    workflow = yaml.safe_load((PROJECT_DIR / ".github/workflows/pull-request.yml").read_text())
    stacks = sorted(p.name.split(".")[1] for p in PROJECT_DIR.glob("Pulumi.*.yaml"))
    assert sorted(workflow["jobs"]["preview"]["strategy"]["matrix"]["stack"]) == stacks
    steps = workflow["jobs"]["preview"]["steps"]
    preview = next(s for s in steps if "preview_stack.py" in s.get("run", ""))
    assert preview["env"]["STACK"] == "${{ matrix.stack }}" and "$STACK" in preview["run"]
    assert any(s.get("run") == "make test" for s in workflow["jobs"]["test"]["steps"])


def test_real_gpu_stack_says_which_secret_is_missing():
    with pytest.raises(ConfigError) as info:
        parse_config(stack_config("gpu"))
    assert info.value.key == "managementMode"  # neither managementKubeconfig nor managementStack
    with pytest.raises(ConfigError) as info:
        parse_config({**stack_config("gpu"), "managementKubeconfig": FAKE_KUBECONFIG})
    assert info.value.key == "sshPrivateKey"
    assert "pulumi config set --secret sshPrivateKey" in str(info.value)


@pytest.mark.parametrize("stack", ["lab", "nvml", "gpu"])
def test_every_stacks_validation_spec_is_accepted_by_labcheck(stack: str):
    run = run_program({**stack_config(stack), **(SECRETS if stack == "gpu" else {})}, stack=stack)
    spec = parse_spec(run.outputs["labcheckSpec"])
    modes = {t.name: t.gpu_mode for t in spec.tenants}
    expected = {t["name"]: t.get("gpuMode", "simulated") for t in stack_config(stack)["tenants"]}
    assert modes == expected
    for tenant in spec.tenants:
        assert tenant.nodes and set(tenant.gpus) <= set(tenant.nodes)


@pytest.mark.upstream("pulumi-read-step-runs-in-preview")
@pytest.mark.parametrize("stack", ["lab", "nvml", "gpu"])
def test_first_preview_of_every_stack_reads_nothing_that_is_not_there_yet(stack: str):
    """B2: in `nvml` and `gpu` the management kubeconfig is known before anything exists (a
    stack reference, a secret), so a read by a known ID would run and fail on a fresh stack."""
    config = {**stack_config(stack), **(SECRETS if stack == "gpu" else {})}
    preview = run_program(config, stack=stack, preview=True, existing=())
    reads = {r.name: r.read_id for r in preview.resources if r.read}
    secrets = {r.name for r in preview.of_type("kubernetes:core/v1:Secret") if r.read}
    assert secrets and {reads.pop(name) for name in secrets} == {UNKNOWN}
    # What is left: the stack's own last outputs (none before its first deployment, which
    # the reference reads as such: fact pulumi-stack-reference-to-itself), and the other stack
    # the nvml stack builds on, there by precondition.
    own = {SELF_REFERENCE: f"organization/kamaji-hami-lab/{stack}"}
    assert reads == (
        {**own, "management-stack": "organization/kamaji-hami-lab/lab"} if stack == "nvml" else own
    )


@pytest.mark.upstream("hami-chart-runtime-class-is-a-hook")
def test_real_gpu_stack_owns_the_nvidia_runtime_class_so_destroy_removes_it(gpu: ProgramRun):
    """T14: one RuntimeClass per real-GPU tenant, on its provider, before the HAMi release."""
    classes = gpu.of_type("kubernetes:node.k8s.io/v1:RuntimeClass")
    assert sorted(r.name for r in classes) == [
        "team-a-hami-runtime-class",
        "team-b-hami-runtime-class",
    ]
    for runtime_class in classes:
        tenant = runtime_class.name.removesuffix("-hami-runtime-class")
        assert runtime_class.inputs["handler"] == "nvidia"
        assert runtime_class.inputs["metadata"]["name"] == "nvidia"
        assert runtime_class.provider.startswith(gpu.named(f"{tenant}-provider").urn)
        assert runtime_class.urn in gpu.named(f"{tenant}-hami-chart").dependencies
    for values in hami_values(gpu):
        assert values["devicePlugin"]["createRuntimeClass"] is False
