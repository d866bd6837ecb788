"""The simulated-GPU agent's config and objects (builders/simulated_gpus.py)."""

from __future__ import annotations

import json

from builders.admission_policy import cel_string
from builders.simulated_gpus import (
    agent_config,
    agent_manifests,
    registration_policy_manifests,
    registrations,
)
from gpu_agent import parse_config as parse_agent_config
from gpu_agent.hami import register_value
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

CFG = parse_config(lab_stack_config())
TENANT_A, TENANT_B = CFG.tenants


def test_agent_config_lists_every_worker_with_its_cards():
    config = agent_config(TENANT_B, 10)
    assert config["splitCount"] == 10
    assert config["nodes"] == {
        "tenant-b-worker-1": [{"type": "NVIDIA L4", "devmem": 23034, "devcore": 100}] * 2
    }


def test_agent_manifests_are_least_privilege_and_pinned():
    m = agent_manifests(agent_config(TENANT_A, 10), "python:3@sha256:" + "f" * 64)
    for rule in m["cluster_role"]["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    pod = m["deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].endswith("f" * 64)
    assert container["command"] == ["python", "-m", "gpu_agent"]
    assert container["resources"]["limits"]["memory"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == m["service_account"]["metadata"]["name"]
    assert "__main__.py" in m["code"]["data"] and "agent.py" in m["code"]["data"]
    config = json.loads(m["config"]["data"]["config.json"])
    assert list(config["nodes"]) == ["tenant-a-worker-1"]


def test_agent_pod_rolls_when_code_or_config_changes():
    def checksum(split: int) -> str:
        m = agent_manifests(agent_config(TENANT_A, split), "img")
        return m["deployment"]["spec"]["template"]["metadata"]["annotations"]["checksum/agent"]

    assert checksum(10) == checksum(10)
    assert checksum(10) != checksum(5)


def test_each_node_is_registered_at_creation_as_the_agent_would_register_it():
    """The policy's value per node is the agent's own (gpu_agent.hami.register_value), so the
    agent finds nothing to rewrite; only the tenant's simulated nodes are named."""
    tenant = CFG.tenants[1]
    values = registrations(tenant, 10)
    config = parse_agent_config(agent_config(tenant, 10))
    assert values == {n: register_value(n, cards) for n, cards in config.nodes.items()}
    policy, binding = registration_policy_manifests(tenant, 10)
    spec = policy["spec"]
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["nodes"]
    assert spec["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert conditions["a-simulated-gpu-node"] == "object.metadata.name in ['tenant-b-worker-1']"
    expression = spec["mutations"][0]["applyConfiguration"]["expression"]
    assert f"'tenant-b-worker-1': '{values['tenant-b-worker-1']}'" in expression
    assert binding["spec"] == {"policyName": policy["metadata"]["name"]}


def test_no_registration_policy_where_the_tenant_serves_none():
    old = CFG.tenants[0].model_copy(update={"kubernetes_version": "v1.33.4"})
    assert registration_policy_manifests(old, 10) == []


def test_a_quote_in_a_value_cannot_end_the_cel_string():
    assert cel_string("a'b\\c") == "'a\\'b\\\\c'"
