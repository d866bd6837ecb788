"""A tenant's version change: refused or ordered as kubeadm upgrades, before anything changes."""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from labconfig.model import DEFAULT_TENANT_VERSION
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    ProgramRun,
    lab_stack_config,
    run_program,
    stack_config,
)

SELF = "upgrades-last-deployment"
GPU_SECRETS = {"sshPrivateKey": "fake-ssh-key", "managementKubeconfig": FAKE_KUBECONFIG}


def two_workers() -> dict[str, Any]:
    config = lab_stack_config()
    config["tenants"] = [dict(t) for t in config["tenants"]]
    config["tenants"][1]["workers"] = 2
    return config


def last(**versions: str) -> dict[str, Any]:
    return {
        "tenants": {
            name.replace("_", "-"): {"kubernetesVersion": v} for name, v in versions.items()
        }
    }


def dependencies(run: ProgramRun, name: str) -> set[str]:
    index = run.by_urn()
    return {index[urn].name for urn in run.named(name).dependencies if urn in index}


def test_the_stack_records_each_tenants_version_for_the_next_run():
    run = run_program(lab_stack_config())
    assert {name: t["kubernetesVersion"] for name, t in run.outputs["tenants"].items()} == {
        "tenant-a": DEFAULT_TENANT_VERSION,
        "tenant-b": DEFAULT_TENANT_VERSION,
    }
    assert run.named(SELF).inputs["name"] == "organization/kamaji-hami-lab/lab"


def test_the_control_plane_takes_its_version_through_the_guard():
    """A refused change never reaches the TenantControlPlane: its spec waits for the guard's
    judgement of the stack's own last outputs."""
    run = run_program(lab_stack_config(), last_outputs=last(tenant_a="v1.36.1"))
    tcp = run.named("tenant-a-control-plane")
    assert tcp.inputs["spec"]["kubernetes"]["version"] == DEFAULT_TENANT_VERSION
    guard = run.named(SELF).urn
    assert guard in run.depends_on(tcp.urn)


@pytest.mark.parametrize(
    ("recorded", "message"),
    [
        ("v1.37.0", r"^tenants\[0\]\.kubernetesVersion: v1\.36\.4 is older than v1\.37\.0"),
        ("v1.34.11", r"^tenants\[0\]\.kubernetesVersion: v1\.36\.4 skips a minor version"),
    ],
)
def test_a_downgrade_or_a_skipped_minor_stops_the_program(recorded, message):
    with pytest.raises(pulumi.RunError, match=message):
        run_program(lab_stack_config(), preview=True, last_outputs=last(tenant_a=recorded))


def test_an_accepted_upgrade_is_described_in_the_preview(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(pulumi.log, "info", lambda message, *args, **kwargs: said.append(message))
    run_program(
        two_workers(),
        preview=True,
        last_outputs=last(tenant_a=DEFAULT_TENANT_VERSION, tenant_b="v1.35.8"),
    )
    upgrades = [line for line in said if "->" in line]
    assert upgrades == [
        f"tenant tenant-b: v1.35.8 -> {DEFAULT_TENANT_VERSION}. Kamaji upgrades the control"
        " plane first; then one worker at a time (tenant-b-worker-1, then tenant-b-worker-2) is"
        " drained, replaced by a node of the new image and joined again. Pods a controller owns"
        " come back on another node or the new one, asking for the same GPU slices; pods"
        " nothing owns are not re-created (the drain lists them)"
    ]


@pytest.mark.upstream("pulumi-engine-delete-before-replace-deletes-dependents-first")
def test_workers_follow_the_control_plane_one_after_the_other():
    """kubeadm's order: no worker is replaced before the control plane runs the version, and
    each only after the one before it joined again; its join's delete (the drain) runs before
    the container goes, as the join takes the container's ID."""
    run = run_program(two_workers())
    first = dependencies(run, "tenant-b-worker-1")
    second = dependencies(run, "tenant-b-worker-2")
    assert "tenant-b-version-ready" in first
    assert "tenant-b-worker-1-join" not in first
    assert {"tenant-b-version-ready", "tenant-b-worker-1-join"} <= second
    join = run.named("tenant-b-worker-1-join")
    container = run.named("tenant-b-worker-1").urn
    assert container in join.property_dependencies["triggers"]
    assert join.delete_before_replace and run.named("tenant-b-worker-1").delete_before_replace


def test_the_version_gate_runs_again_for_a_new_version_and_kube_proxy_waits_for_it():
    run = run_program(lab_stack_config())
    gate = run.named("tenant-a-version-ready")
    assert DEFAULT_TENANT_VERSION in gate.inputs["triggers"]
    assert gate.inputs["environment"]["VERSION"] == DEFAULT_TENANT_VERSION
    assert gate.is_secret("environment.LAB_KUBECONFIG")
    assert gate.is_secret("environment.MANAGEMENT_KUBECONFIG")
    daemon_set = run.named("tenant-a-kube-proxy-daemonset")
    assert gate.urn in run.depends_on(daemon_set.urn)


def two_gpu_hosts() -> dict[str, Any]:
    config = {**stack_config("gpu"), **GPU_SECRETS}
    config["tenants"] = [dict(t) for t in config["tenants"]]
    team_a = config["tenants"][0]
    team_a["remoteWorkers"] = [
        *team_a["remoteWorkers"],
        {"name": "gpu-host-3", "host": "192.0.2.13", "user": "ubuntu"},
    ]
    return config


def test_remote_hosts_upgrade_in_kubeadms_order_one_after_the_other():
    """Per host: drain, the version's packages, `kubeadm upgrade node` and a kubelet restart,
    the join (a first run only), the kubelet at the version and uncordoned; the next host only
    after that, and the first only once the control plane runs the version."""
    run = run_program(two_gpu_hosts(), stack="gpu")
    order = ["drain-for-version", "prepare", "upgrade-node", "join", "registered", "at-version"]
    for before, after in itertools.pairwise(order):
        assert f"gpu-host-1-{before}" in dependencies(run, f"gpu-host-1-{after}"), after
    assert "team-a-version-ready" in dependencies(run, "gpu-host-1-drain-for-version")
    assert "gpu-host-1-at-version" in dependencies(run, "gpu-host-3-drain-for-version")
    for step in ("drain-for-version", "prepare", "upgrade-node", "at-version"):
        registration = run.named(f"gpu-host-3-{step}")
        assert DEFAULT_TENANT_VERSION in registration.inputs["triggers"], step
    drain = run.named("gpu-host-3-drain-for-version")
    assert drain.inputs["environment"]["VERSION"] == DEFAULT_TENANT_VERSION
    assert drain.is_secret("environment.LAB_KUBECONFIG")
    assert "kubeadm upgrade node" in run.named("gpu-host-3-upgrade-node").inputs["create"]


@pytest.mark.upstream("pulumi-kubernetes-api-versions-are-aliases")
@pytest.mark.parametrize("kind", ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"])
def test_the_policies_keep_their_resource_when_the_upgrade_moves_them_to_v1(kind: str):
    """v1.35 tenants get the policies as v1beta1, v1.36 ones as v1 (the same names): the SDK
    must alias the two types, or the upgrade would create the v1 object and then delete it
    through the old v1beta1 resource."""
    source = inspect.getsource(getattr(k8s.admissionregistration.v1, kind))
    assert f'type_="kubernetes:admissionregistration.k8s.io/v1beta1:{kind}"' in source
