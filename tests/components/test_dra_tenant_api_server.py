"""A DRA tenant's API server gets none of what HAMi's admission policies need.

The policies (HAMi's lock wait, the simulated GPUs' registration) serve HAMi only: a DRA tenant
declares none, so its API server gets no MutatingAdmissionPolicy gate, no runtime-config of the
policy API and no wait for that API before anything (builders/admission_policy.py
`policy_api_version`). Only the gate DRA's shared devices need where they are still alpha.
"""

from __future__ import annotations

import pytest

from tests.support.pulumi_harness import ProgramRun, run_program, stack_config

COMMAND = "command:local:Command"
DRA_GATE = "--feature-gates=DRAConsumableCapacity=true"  # v1.35: alpha, off


def dra_stack(version: str) -> dict:
    """The dra stack with both tenants on ``version`` (a node image for v1.36 named by hand:
    the program pins only v1.35's)."""
    config = stack_config("dra")
    image = (
        {} if version == "v1.35.0" else {"workerImage": f"kindest/node:{version}@sha256:{64 * 'a'}"}
    )
    config["tenants"] = [
        {**tenant, "kubernetesVersion": version, **image} for tenant in config["tenants"]
    ]
    return config


@pytest.fixture(scope="module", params=["v1.35.0", "v1.36.0"])
def dra(request) -> ProgramRun:
    return run_program(dra_stack(request.param), stack="dra")


def apiserver_args(run: ProgramRun, tenant: str) -> list[str]:
    tcp = run.named(f"{tenant}-control-plane").inputs
    return tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]["apiServer"]


def waits(run: ProgramRun, tenant: str) -> list[str]:
    return sorted(r.name for r in run.subtree(tenant) if r.type == COMMAND)


def test_the_dra_tenants_api_server_gets_no_policy_flags(dra: ProgramRun):
    version = dra.named("tenant-dra-control-plane").inputs["spec"]["kubernetes"]["version"]
    assert apiserver_args(dra, "tenant-dra") == ([DRA_GATE] if version == "v1.35.0" else [])
    # The HAMi tenant beside it still gets them on v1.35 (beta, off): the test sees the flags.
    hami = apiserver_args(dra, "tenant-hami")
    assert any("MutatingAdmissionPolicy=true" in flag for flag in hami) == (version == "v1.35.0")


def test_nothing_in_the_dra_tenant_waits_for_the_policy_api(dra: ProgramRun):
    assert "tenant-hami-policy-api-ready" in waits(dra, "tenant-hami")
    assert not [name for name in waits(dra, "tenant-dra") if "policy" in name]
