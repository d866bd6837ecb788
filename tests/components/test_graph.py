"""The whole program under Pulumi mocks: what it registers, in which order, what stays secret."""

from __future__ import annotations

import copy
import itertools
from collections import Counter

import pytest
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN

import components.tenant.control_plane
from components.tenant.control_plane import admin_kubeconfig_secret_name
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    MissingResource,
    ProgramRun,
    lab_stack_config,
    run_program,
)

LAB = lab_stack_config()
STACK_REFERENCE = "pulumi:pulumi:StackReference"

# What a first `up` that stopped right after the kind cluster (a MetalLB gate or Helm timeout)
# leaves in the state: the management cluster exists and its kubeconfig is known.
KIND_CLUSTER_ONLY = (
    "preflight-checks",
    "lab-network-bridge",
    "management-kind",
    "management-provider",
)


def three_tenants() -> dict:
    config = copy.deepcopy(LAB)
    config["tenants"].append({"name": "tenant-c", "workers": 2, "gpus": [{"model": "T4"}]})
    return config


def test_lab_registers_every_part_once_per_tenant(lab: ProgramRun):
    kinds = Counter(r.type for r in lab.resources)
    assert kinds["docker:index/network:Network"] == 1
    assert kinds["docker:index/container:Container"] == 2
    assert kinds["kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"] == 2
    assert kinds["kubernetes:metallb.io/v1beta1:IPAddressPool"] == 1
    assert kinds["kubernetes:metallb.io/v1beta1:L2Advertisement"] == 1
    assert kinds["pulumi:providers:kubernetes"] == 3  # management + one per tenant
    assert kinds["kamaji-hami-lab:index:SimulatedGpus"] == 2
    assert kinds["kamaji-hami-lab:index:Validation"] == 1
    releases = sorted(r.inputs["name"] for r in lab.of_type("kubernetes:helm.sh/v3:Release"))
    platform = ["cert-manager", "kamaji-crds", "kamaji", "metallb", "prometheus", "grafana"]
    assert releases == sorted([*platform, "flannel", "flannel", "hami", "hami"])
    assert kinds["kamaji-hami-lab:index:MetricsReader"] == 2
    assert kinds["kamaji-hami-lab:index:Monitoring"] == 1


def test_network_is_ipv4_only_with_the_configured_subnet(lab: ProgramRun):
    (network,) = lab.of_type("docker:index/network:Network")
    assert network.inputs["ipv6"] is False
    assert network.inputs["driver"] == "bridge"
    (ipam,) = network.inputs["ipamConfigs"]
    assert ipam == {"subnet": "172.30.0.0/16", "gateway": "172.30.0.1", "ipRange": "172.30.0.0/17"}


def test_kind_uses_the_lab_network_and_hides_its_kubeconfig(lab: ProgramRun):
    kind = lab.named("management-kind")
    env = kind.inputs["environment"]
    assert env["KIND_EXPERIMENTAL_DOCKER_NETWORK"] == "kamaji-hami-lab"
    assert "sha256:a1ed56cf" in env["KIND_CONFIG"]
    assert kind.secret_outputs == ["stdout"]
    assert kind.inputs["logging"] == "stderr"
    assert lab.named("lab-network-bridge").urn in lab.depends_on(kind.urn)
    provider = lab.named("management-provider")
    assert "kubeconfig" in provider.secret_inputs
    assert provider.inputs["clusterIdentifier"].startswith("kind-kamaji-hami-lab/")
    assert "deleteUnreachable" not in provider.inputs  # M5, see tests/components/test_platform.py


def test_pool_waits_for_the_metallb_webhook(lab: ProgramRun):
    pool = lab.named("metallb-ipaddresspool")
    wait = lab.named("metallb-webhook-ready")
    assert wait.urn in pool.dependencies
    assert lab.named("metallb-chart").urn in lab.depends_on(wait.urn)
    assert "environment.LAB_KUBECONFIG" in wait.secret_inputs


def test_dependency_chain_from_preflight_to_validation(lab: ProgramRun):
    chain = [
        "preflight-checks",
        "lab-network-bridge",
        "management-kind",
        "kamaji-cert-manager",
        "kamaji-chart",
        "tenant-a-control-plane",
        "tenant-a-worker-1-join",
        "tenant-a-cni-chart",
        "tenant-a-hami-chart",
        "tenant-a-simulated-gpus-agent",
        "validation-labcheck",
    ]
    for earlier, later in itertools.pairwise(chain):
        assert lab.named(earlier).urn in lab.depends_on(lab.named(later).urn), (earlier, later)
    tcp = lab.named("tenant-a-control-plane")
    assert lab.named("metallb-ipaddresspool").urn in lab.depends_on(tcp.urn)


def test_tenants_do_not_depend_on_each_other(lab: ProgramRun):
    a = {r.urn for r in lab.subtree("tenant-a")}
    b = {r.urn for r in lab.subtree("tenant-b")}
    assert a and b and not a & b
    for urn in a:
        assert not lab.depends_on(urn) & b
    for urn in b:
        assert not lab.depends_on(urn) & a


def test_tenant_subtree_holds_its_parts(lab: ProgramRun):
    names = {r.name for r in lab.subtree("tenant-b")}
    assert {
        "tenant-b-control-plane",
        "tenant-b-worker-1",
        "tenant-b-worker-1-join",
        "tenant-b-cni-chart",
        "tenant-b-hami-chart",
        "tenant-b-simulated-gpus-agent",
        "tenant-b-provider",
    } <= names
    tenant_provider = lab.named("tenant-b-provider").urn
    for name in ("tenant-b-cni-chart", "tenant-b-hami-chart", "tenant-b-simulated-gpus-agent"):
        assert lab.named(name).provider.startswith(tenant_provider)


def test_worker_container_and_join(lab: ProgramRun):
    worker = lab.named("tenant-a-worker-1")
    assert worker.inputs["privileged"] is True
    assert worker.inputs["image"] == "sha256:" + "0" * 64  # the pinned RemoteImage's id
    image = lab.named("tenant-a-workers-image")
    assert image.inputs["name"].startswith("kindest/node:v1.36.4@sha256:")
    join = lab.named("tenant-a-worker-1-join")
    assert "environment.LAB_KUBECONFIG" in join.secret_inputs
    assert "kubeadm token create" in join.inputs["create"]
    assert "delete node" in join.inputs["delete"]


def test_hami_release_is_simulated(lab: ProgramRun):
    values = lab.named("tenant-a-hami-chart").inputs["values"]
    assert values["mockDevicePlugin"]["enabled"] is False
    assert values["devicePlugin"]["enabled"] is False


def test_kubeconfigs_are_secret_everywhere(lab: ProgramRun):
    for provider in lab.of_type("pulumi:providers:kubernetes"):
        assert "kubeconfig" in provider.secret_inputs, provider.name
    for command in lab.of_type("command:local:Command"):
        for key in ("LAB_KUBECONFIG", "LABCHECK_SPEC"):
            if key in command.inputs.get("environment", {}):
                assert f"environment.{key}" in command.secret_inputs, command.name
    assert {"managementKubeconfig", "tenantKubeconfigs", "labcheckSpec"} <= lab.secret_outputs
    assert "tenants" not in lab.secret_outputs


def test_outputs_a_user_needs(lab: ProgramRun):
    tenants = lab.outputs["tenants"]
    assert tenants["tenant-a"]["endpoint"] == "https://172.30.255.205:6443"
    assert tenants["tenant-b"]["nodes"] == ["tenant-b-worker-1"]
    assert (
        tenants["tenant-b"]["gpus"]["tenant-b-worker-1"]
        == ["NVIDIA L4 23034MB 100% x10 slices"] * 2
    )
    assert lab.outputs["poolRange"] == "172.30.255.205-172.30.255.254"
    assert set(lab.outputs["tenantKubeconfigs"]) == {"tenant-a", "tenant-b"}


def test_a_third_tenant_adds_exactly_one_tenant_subtree(lab: ProgramRun):
    """And, in the management cluster, the copy of its metrics reader's token for Prometheus."""
    bigger = run_program(three_tenants())
    added = Counter(r.type for r in bigger.resources) - Counter(r.type for r in lab.resources)
    subtree = Counter(r.type for r in bigger.subtree("tenant-c"))
    assert bigger.named("monitoring-tenant-tenant-c-metrics-reader").type == (
        "kubernetes:core/v1:Secret"
    )
    assert added == subtree + Counter({"kubernetes:core/v1:Secret": 1})
    assert subtree["docker:index/container:Container"] == 2  # tenant-c has two workers
    assert not Counter(r.type for r in lab.resources) - Counter(r.type for r in bigger.resources)
    assert {r.name for r in bigger.subtree("tenant-c")} >= {
        "tenant-c-worker-1",
        "tenant-c-worker-2",
        "tenant-c-control-plane",
    }


def test_preview_registers_the_same_graph(lab: ProgramRun):
    preview = run_program(LAB, preview=True)
    assert sorted(r.name for r in preview.resources) == sorted(r.name for r in lab.resources)


def test_bad_config_registers_nothing():
    config = copy.deepcopy(LAB)
    config["tenants"][1]["name"] = "tenant-a"
    with pytest.raises(SystemExit) as info:
        run_program(config)
    # The language host's "error already shown" code: the CLI prints our line alone.
    assert info.value.code == 32
    run = run_program(config, allow_exit=True)
    assert run.exit_code == 32
    assert run.resources == []


def test_switches_leave_out_preflight_and_validation():
    run = run_program({**LAB, "preflight": "false", "validate": "false"})
    names = {r.name for r in run.resources}
    assert "preflight-checks" not in names and "validation-labcheck" not in names
    assert run.outputs["validationReports"] is None


def not_in_tenants(name: str) -> bool:
    """The shared platform is up (MetalLB, Kamaji), no tenant yet (a failed TCP create)."""
    return not name.startswith(("tenant-", "validation"))


def kubeconfig_reads(run: ProgramRun) -> dict[str, str]:
    return {r.name: r.read_id for r in run.resources if r.read and r.type != STACK_REFERENCE}


PARTIAL_STATES = {
    "fresh stack": (),
    "kind cluster only": KIND_CLUSTER_ONLY,
    "platform": not_in_tenants,
}


@pytest.mark.upstream("pulumi-read-step-runs-in-preview")
@pytest.mark.parametrize("state", PARTIAL_STATES.values(), ids=list(PARTIAL_STATES))
def test_preview_before_the_control_planes_exist_skips_the_kubeconfig_reads(lab, state):
    """B2: a read with a known ID runs in preview and fails while Kamaji has not written the
    Secret; the program reads it by an ID known only once the control plane answers."""
    preview = run_program(LAB, preview=True, existing=state)
    assert kubeconfig_reads(preview) == {
        "tenant-a-admin-kubeconfig": UNKNOWN,
        "tenant-b-admin-kubeconfig": UNKNOWN,
    }
    assert sorted(r.name for r in preview.resources) == sorted(r.name for r in lab.resources)
    assert isinstance(preview.named("tenant-a-provider").inputs["kubeconfig"], Unknown)


@pytest.mark.upstream("pulumi-read-step-runs-in-preview")
def test_a_literal_secret_id_fails_that_preview_as_the_engine_does(monkeypatch):
    """B2, the harness side: the read the program used to make (a literal ID, only
    `depends_on` the control plane) fails with the engine's own message."""

    def literal_id(tenant_name: str, _gate_id):
        return f"{tenant_name}/{admin_kubeconfig_secret_name(tenant_name)}"

    monkeypatch.setattr(components.tenant.control_plane, "admin_kubeconfig_secret_id", literal_id)
    with pytest.raises(
        MissingResource,
        match=r"^resource 'tenant-[ab]/tenant-[ab]-admin-kubeconfig' does not exist$",
    ):
        run_program(LAB, preview=True, existing=KIND_CLUSTER_ONLY)


def test_preview_of_a_running_lab_reads_each_kubeconfig_fresh():
    """B2: once the control plane exists, every run reads the Secret Kamaji keeps current."""
    preview = run_program(LAB, preview=True)
    assert kubeconfig_reads(preview) == {
        "tenant-a-admin-kubeconfig": "tenant-a/tenant-a-admin-kubeconfig",
        "tenant-b-admin-kubeconfig": "tenant-b/tenant-b-admin-kubeconfig",
    }
    assert preview.named("tenant-a-provider").inputs["kubeconfig"] == FAKE_KUBECONFIG


def test_adding_a_tenant_to_a_running_lab_previews():
    """B2: the new tenant's read waits for its control plane; the others read theirs."""
    preview = run_program(
        three_tenants(), preview=True, existing=lambda name: not name.startswith("tenant-c")
    )
    reads = kubeconfig_reads(preview)
    assert reads["tenant-c-admin-kubeconfig"] == UNKNOWN
    assert reads["tenant-a-admin-kubeconfig"] == "tenant-a/tenant-a-admin-kubeconfig"


def test_control_plane_waits_for_kamajis_webhooks_then_for_its_address(lab: ProgramRun):
    """m5, m13: a server-side dry run of the very TCP before the create; the tenant provider
    only after the address answers from this host."""
    admission = lab.named("tenant-a-admission-ready")
    tcp = lab.named("tenant-a-control-plane")
    api = lab.named("tenant-a-api-ready")
    assert admission.urn in tcp.dependencies
    assert lab.named("kamaji-chart").urn in lab.depends_on(admission.urn)
    assert lab.named("tenant-a-namespace").urn in lab.depends_on(admission.urn)
    assert "kubectl apply --dry-run=server" in admission.inputs["create"]
    env = admission.inputs["environment"]
    assert "environment.LAB_KUBECONFIG" in admission.secret_inputs
    assert "kind: TenantControlPlane" in env["TCP_MANIFEST"]
    assert "172.30.255.205" in env["TCP_MANIFEST"]
    assert tcp.urn in api.dependencies
    assert api.inputs["environment"] == {"API_ENDPOINT": "https://172.30.255.205:6443"}
    provider = lab.named("tenant-a-provider")
    assert api.urn in lab.depends_on(provider.urn)
    assert api.urn in lab.depends_on(lab.named("tenant-a-worker-1-join").urn)


@pytest.mark.upstream("pulumi-k8s-delete-unreachable-drops-state")
def test_tenant_providers_keep_state_when_their_cluster_is_unreachable(lab: ProgramRun):
    """M5: no deleteUnreachable on a tenant provider, so a refresh during a reboot forgets
    nothing."""
    for name in ("tenant-a-provider", "tenant-b-provider"):
        provider = lab.named(name)
        assert "deleteUnreachable" not in provider.inputs, name
        assert provider.inputs["clusterIdentifier"].startswith(name.removesuffix("-provider"))
