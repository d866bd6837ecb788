"""The admission policies the program declares in each tenant, through its own API server."""

from __future__ import annotations

import json

import pytest

from builders.admission_policy import cel_string
from gpu_agent import parse_config as parse_agent_config
from gpu_agent.hami import register_value
from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program, stack_config

API = "kubernetes:admissionregistration.k8s.io/v1"  # GA from v1.36, the default
POLICY, BINDING = f"{API}:MutatingAdmissionPolicy", f"{API}:MutatingAdmissionPolicyBinding"


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_each_tenant_gets_the_lock_wait_policy(lab: ProgramRun, tenant: str):
    policy = lab.named(f"{tenant}-hami-mutatingadmissionpolicy")
    binding = lab.named(f"{tenant}-hami-mutatingadmissionpolicybinding")
    assert (policy.type, binding.type) == (POLICY, BINDING)
    for resource in (policy, binding):
        assert f"::{tenant}-provider::" in resource.provider
        assert resource.parent.endswith(f"::{tenant}-hami")
    assert binding.inputs["spec"]["policyName"] == policy.inputs["metadata"]["name"]
    # After the tenant's nodes and CNI, like HAMi's chart: the API server is up by then.
    assert any(
        "index:Flannel$" in urn and f"::{tenant}-cni" in urn for urn in lab.depends_on(policy.urn)
    )


@pytest.mark.parametrize("tenant", ["tenant-a", "tenant-b"])
def test_a_simulated_tenant_registers_its_nodes_at_creation(lab: ProgramRun, tenant: str):
    name = f"{tenant}-simulated-gpus-registration"
    policy = lab.named(f"{name}-mutatingadmissionpolicy")
    binding = lab.named(f"{name}-mutatingadmissionpolicybinding")
    assert (policy.type, binding.type) == (POLICY, BINDING)
    assert policy.parent.endswith(f"::{tenant}-simulated-gpus")
    assert f"::{tenant}-provider::" in policy.provider
    assert policy.inputs["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["nodes"]


def test_tenants_without_simulated_gpus_register_no_nodes():
    nvml = run_program(stack_config("nvml"), stack="nvml")
    names = [r.name for r in nvml.of_type(POLICY)]
    registering = [n for n in names if n.endswith("-registration-mutatingadmissionpolicy")]
    assert registering == []
    assert nvml.of_type(POLICY)  # the lock-wait policy still: HAMi places their pods too


def test_the_registration_follows_the_configured_split_count():
    """A node registered at its creation with the split count of the config, the one the agent
    in the same tenant writes: with another count, HAMi would share each card among as many pods
    as the policy says until the agent rewrote the annotation."""
    run = run_program({**lab_stack_config(), "hamiSplitCount": 4})
    name = "tenant-b-simulated-gpus"
    agent = json.loads(run.named(f"{name}-config").inputs["data"]["config.json"])
    assert agent["splitCount"] == 4
    policy = run.named(f"{name}-registration-mutatingadmissionpolicy")
    expression = policy.inputs["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    for node, cards in parse_agent_config(agent).nodes.items():
        value = register_value(node, cards)
        assert [card["count"] for card in json.loads(value)] == [4] * len(cards)
        assert f"{cel_string(node)}: {cel_string(value)}" in expression
