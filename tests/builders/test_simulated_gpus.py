"""The simulated-GPU agent's config and objects (builders/simulated_gpus.py)."""

from __future__ import annotations

import json

from builders.simulated_gpus import agent_config, agent_manifests
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
