"""The dra stack under Pulumi mocks: a HAMi tenant and a DRA tenant side by side."""

from __future__ import annotations

import pytest

from tests.support.pulumi_harness import ProgramRun, run_program, stack_config

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def dra() -> ProgramRun:
    return run_program(stack_config("dra"), stack="dra")


def releases_of(run: ProgramRun, tenant: str) -> list[str]:
    return sorted(r.inputs["name"] for r in run.subtree(tenant) if r.type == RELEASE)


@pytest.mark.upstream("hami-dra-one-mode-per-cluster")
def test_each_tenant_runs_one_mode_only(dra: ProgramRun):
    assert releases_of(dra, "tenant-hami") == ["flannel", "hami"]
    assert releases_of(dra, "tenant-dra") == ["cert-manager", "flannel", "hami-dra"]
    kinds = {r.type for r in dra.subtree("tenant-dra")}
    assert "kamaji-hami-lab:index:SimulatedGpus" not in kinds
    assert "kamaji-hami-lab:index:Hami" not in kinds
    assert "kamaji-hami-lab:index:HamiDra" not in {r.type for r in dra.subtree("tenant-hami")}


def test_hami_dra_comes_after_the_tenants_cni_and_its_cert_manager(dra: ProgramRun):
    chart = dra.named("tenant-dra-hami-dra-chart")
    waits_for = dra.depends_on(chart.urn)
    assert dra.named("tenant-dra-hami-dra-cert-manager").urn in waits_for
    assert dra.named("tenant-dra-cni-chart").urn in waits_for
    assert chart.inputs["namespace"] == "hami-dra"
    assert chart.inputs["version"] == "0.2.2"
    assert chart.inputs["repositoryOpts"]["repo"] == "https://project-hami.github.io/HAMi-DRA"


def test_the_dra_tenants_components_get_the_gate_its_version_lacks(dra: ProgramRun):
    """v1.35 lacks the gate (alpha, off): its scheduler gets it; v1.36, the default, has it on."""
    config = stack_config("dra")
    config["tenants"] = [{**t, "kubernetesVersion": "v1.35.8"} for t in config["tenants"]]
    on_135 = run_program(config, stack="dra")
    tcp = on_135.named("tenant-dra-control-plane").inputs
    extra = tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]
    assert extra["scheduler"] == ["--feature-gates=DRAConsumableCapacity=true"]
    hami_tcp = on_135.named("tenant-hami-control-plane").inputs
    assert "scheduler" not in hami_tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]
    default = dra.named("tenant-dra-control-plane").inputs
    assert "scheduler" not in default["spec"]["controlPlane"]["deployment"]["extraArgs"]
