"""Worker names, and what each GPU mode can really show a node.

Names: one docker container / node name each, never kind's own node container. GPUs: no cap on a
simulated worker's card memory, and the cards nvml-mock's profiles report (T4).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from labconfig.model import ConfigError, TenantConfig, kind_node_container, nvml_mock_profile
from labconfig.parse import parse_config
from planning.gpu_inventory import hami_card_type
from tests.support.pulumi_harness import run_program, stack_config

SSH = {"sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n"}


def remote(name: str, *hosts: str) -> dict:
    workers = [{"name": host, "host": f"{host}.example"} for host in hosts]
    return {"name": name, "workerMode": "remote", "gpuMode": "real", "remoteWorkers": workers}


def error_for(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value


def test_remote_worker_names_are_unique_across_tenants():
    error = error_for({"tenants": [remote("a", "gpu-1"), remote("b", "gpu-2", "gpu-1")], **SSH})
    assert error.key == "tenants[1].name"
    assert str(error) == "tenants[1].name: worker 'gpu-1' is also a worker of tenants[0]"


def test_a_remote_worker_cannot_take_a_container_workers_name():
    error = error_for({"tenants": [{"name": "a", "workers": 2}, remote("b", "a-worker-2")], **SSH})
    assert error.key == "tenants[1].name"
    assert "'a-worker-2' is also a worker of tenants[0]" in str(error)


def test_worker_cannot_be_named_like_kinds_node_container(monkeypatch: pytest.MonkeyPatch):
    # The current naming (<tenant>-worker-<n>) cannot collide; this guards a change of it.
    monkeypatch.setattr(
        TenantConfig, "worker_names", property(lambda self: [f"{self.name}-control-plane"])
    )
    error = error_for({"tenants": [{"name": "lab"}], "managementClusterName": "lab"})
    assert error.key == "tenants[0].name"
    assert "'lab-control-plane' would take the name of kind's node container" in str(error)
    assert kind_node_container("lab") == "lab-control-plane"


def test_distinct_names_pass_even_when_they_look_alike():
    cfg = parse_config(
        {
            "tenants": [
                {"name": "a", "workers": 11},
                {"name": "a-worker-1"},
                {"name": "kamaji-hami-lab"},
                remote("r", "a-worker-12"),
            ],
            **SSH,
        }
    )
    names = [n for t in cfg.tenants for n in t.worker_names]
    assert len(names) == len(set(names)) == 14


# --- simulated cards: nothing caps a worker's card memory ------------------------------------


def simulated(*gpus: dict) -> dict:
    return {"tenants": [{"name": "a", "gpus": list(gpus)}]}


@pytest.mark.upstream("hami-v2.10-mock-device-plugin-rejects-chart-config")
def test_a_simulated_worker_is_not_capped_by_a_device_plugin_message():
    """No device plugin advertises simulated cards (gpu_agent registers them): the mock plugin's
    one-device-per-MB ListAndWatch message, which held a worker to 123011 MB (T3), is gone."""
    tenant = parse_config(simulated({"model": "A100-80GB", "count": 16})).tenants[0]
    assert sum(card.memory_mb for card in tenant.cards) == 16 * 81920
    lab = parse_config(stack_config("lab"))
    assert [sum(c.memory_mb for c in t.cards) for t in lab.tenants] == [81920, 46068]
    gpu = copy.deepcopy(stack_config("gpu"))
    gpu["tenants"][0]["gpus"] = [{"model": "A100-80GB", "count": 8}]
    assert len(parse_config({**gpu, **SSH, "managementKubeconfig": "k"}).tenants[0].cards) == 8


# --- T4: nvml-mock's profiles -----------------------------------------------------------------

# NVIDIA/k8s-test-infra v0.3.0 (204019fb), deployments/nvml-mock/helm/nvml-mock/profiles/
# <name>.yaml: device_defaults.name and device_defaults.memory.total_bytes.
NVML_MOCK_V030_PROFILES = {
    "A100-40GB": ("a100", "NVIDIA A100-SXM4-40GB", 42949672960),
    "H100-80GB": ("h100", "NVIDIA H100 80GB HBM3", 85899345920),
    "L40S": ("l40s", "NVIDIA L40S", 51539607552),
    "T4": ("t4", "NVIDIA T4", 17179869184),
}


def nvml_tenant(**gpu: Any) -> dict:
    return {"tenants": [{"name": "n", "gpuMode": "nvml-mock", "gpus": [{"count": 2, **gpu}]}]}


@pytest.mark.upstream("nvml-mock-profile-cards")
@pytest.mark.parametrize("model", sorted(NVML_MOCK_V030_PROFILES))
def test_an_nvml_mock_card_is_what_hami_registers_from_its_profile(model: str):
    """T4: HAMi registers NVML's GetName() and total / 2**20 (register.go:142-185)."""
    profile, nvml_name, total_bytes = NVML_MOCK_V030_PROFILES[model]
    tenant = parse_config(nvml_tenant(model=model.lower())).tenants[0]
    assert nvml_mock_profile(tenant) == profile
    assert [(hami_card_type(c.product), c.memory_mb, c.cores) for c in tenant.cards] == [
        (nvml_name, total_bytes // 1024 // 1024, 100)
    ] * 2


@pytest.mark.upstream("nvml-mock-profile-cards")
def test_an_nvml_mock_tenants_inventory_and_labcheck_spec_use_the_profile():
    """T4: before, an H100 nvml stack expected 81559 MB and its `gpu.inventory` check failed."""
    config = copy.deepcopy(stack_config("nvml"))
    config["tenants"][0]["gpus"] = [{"model": "H100-80GB", "count": 1}]
    run = run_program(config, stack="nvml")
    node = "tenant-nvml-worker-1"
    assert run.outputs["tenants"]["tenant-nvml"]["gpus"] == {
        node: ["NVIDIA H100 80GB HBM3 81920MB 100% x10 slices"]
    }
    (tenant,) = json.loads(run.outputs["labcheckSpec"])["tenants"]
    assert tenant["gpus"] == {
        node: [{"type": "NVIDIA H100 80GB HBM3", "devmem": 81920, "devcore": 100, "count": 10}]
    }


def test_simulated_cards_keep_what_real_cards_report():
    tenant = parse_config(simulated({"model": "T4"})).tenants[0]
    assert [(c.product, c.memory_mb) for c in tenant.cards] == [("Tesla T4", 15360)]


@pytest.mark.upstream("nvml-mock-profile-cards")
@pytest.mark.parametrize(
    ("override", "key"),
    [({"memoryMb": 48000}, "memoryMb"), ({"product": "L40S"}, "product"), ({"cores": 50}, "cores")],
)
def test_nvml_mock_refuses_describing_its_card_differently(override: dict, key: str):
    error = error_for(nvml_tenant(model="L40S", **override))
    assert str(error) == (
        f"tenants[0].gpus[0].{key}: nvml-mock reports its profile's card "
        f"(NVIDIA L40S, 49152 MiB, 100%): remove {key}"
    )
