"""Every tenant version with a pinned worker image, through the whole program: what the version
brings follows it (labconfig/node_images.py `WORKER_IMAGES` is the one list).

The dra stack runs a HAMi tenant and a DRA tenant; both go on each version with no
`workerImage`, so the program takes the pinned one. What each minor must bring is written out
here from the upstream facts, not computed by the builders under test: a newly pinned minor
without its row fails `test_every_pinned_minor_has_its_expectations`.
"""

from __future__ import annotations

import pytest

from labconfig.node_images import WORKER_IMAGES
from labconfig.versions import kubernetes_minor
from tests.support.pulumi_harness import ProgramRun, run_program, stack_config

BETA_POLICY = "admissionregistration.k8s.io/v1beta1"
GA_POLICY = "admissionregistration.k8s.io/v1"


# minor -> (policy API of the HAMi tenant's admission policies, its MutatingAdmissionPolicy gate
# switched on, the DRA tenant's DRAConsumableCapacity gate switched on).
# Facts `kube-mutating-admission-policy-stages` (beta and off in v1.34-v1.35, GA from v1.36),
# `dra-consumable-capacity-gate` (alpha in v1.34-v1.35, beta and on from v1.36).
EXPECTED: dict[int, tuple[str, bool, bool]] = {
    34: (BETA_POLICY, True, True),
    35: (BETA_POLICY, True, True),
    36: (GA_POLICY, False, False),
}


def test_every_pinned_minor_has_its_expectations():
    assert {kubernetes_minor(v)[1] for v in WORKER_IMAGES} <= set(EXPECTED)


@pytest.fixture(scope="module", params=sorted(WORKER_IMAGES))
def run(request) -> ProgramRun:
    config = stack_config("dra")
    config["tenants"] = [
        {**tenant, "kubernetesVersion": request.param} for tenant in config["tenants"]
    ]
    return run_program(config, stack="dra")


def version_of(run: ProgramRun) -> str:
    return run.named("tenant-hami-control-plane").inputs["spec"]["kubernetes"]["version"]


def apiserver_args(run: ProgramRun, tenant: str) -> list[str]:
    tcp = run.named(f"{tenant}-control-plane").inputs
    return tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]["apiServer"]


def test_the_control_planes_and_the_workers_run_the_version(run: ProgramRun):
    version = version_of(run)
    assert run.named("tenant-dra-control-plane").inputs["spec"]["kubernetes"]["version"] == version
    for tenant in ("tenant-hami", "tenant-dra"):
        assert run.named(f"{tenant}-workers-image").inputs["name"] == WORKER_IMAGES[version]


def test_the_workers_join_with_kubeadm_v1beta4(run: ProgramRun):
    join = run.named("tenant-hami-worker-1-join").inputs["create"]
    assert "apiVersion: kubeadm.k8s.io/v1beta4" in join
    assert "kubeadm.k8s.io/v1beta3" not in join


def test_the_feature_gates_and_the_policy_api_follow_the_version(run: ProgramRun):
    policy_api, policy_gate, dra_gate = EXPECTED[kubernetes_minor(version_of(run))[1]]
    hami = apiserver_args(run, "tenant-hami")
    assert any("MutatingAdmissionPolicy=true" in flag for flag in hami) == policy_gate
    assert ("--feature-gates=DRAConsumableCapacity=true" in apiserver_args(run, "tenant-dra")) == (
        dra_gate
    )
    policy = run.named("tenant-hami-hami-mutatingadmissionpolicy")
    assert policy.type == f"kubernetes:{policy_api}:MutatingAdmissionPolicy"
