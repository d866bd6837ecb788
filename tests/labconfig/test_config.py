"""The stack config model: defaults, the lab stack, and bad input named by its key."""

from __future__ import annotations

import copy
import os
from collections.abc import Collection
from typing import Any

import pulumi
import pytest
import yaml
from pydantic import SecretStr

from labconfig.mirrors import RegistryMirror
from labconfig.model import ConfigError, LabConfig, ProxyConfig
from labconfig.monitoring import MonitoringConfig
from labconfig.parse import parse_config
from labconfig.stack import SECRET_KEYS, read_stack_config
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    PROJECT,
    PROJECT_DIR,
    lab_stack_config,
    pass_config,
    run_program,
    stack_config,
)

LAB = lab_stack_config()


def with_tenants(*tenants: dict, **top: object) -> dict:
    return {"tenants": list(tenants), **top}


def error_for(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value


def test_lab_stack_has_the_promised_gpus():
    cfg = parse_config(LAB)
    a, b = cfg.tenants
    assert (a.name, [c.product for c in a.cards]) == ("tenant-a", ["NVIDIA A100-SXM4-80GB"])
    assert [c.memory_mb for c in a.cards] == [81920]
    assert (b.name, [c.product for c in b.cards]) == ("tenant-b", ["NVIDIA L4", "NVIDIA L4"])
    assert all(t.gpu_mode == "simulated" for t in cfg.tenants)


def test_pulumi_yaml_declares_every_key_with_the_model_default():
    declared = {
        key.split(":", 1)[1]: spec
        for key, spec in yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"].items()
    }
    defaults = LabConfig.model_validate({"tenants": [{"name": "x"}]}).model_dump(
        mode="json", by_alias=True
    )
    assert set(declared) == set(defaults)
    # Required in both: Pulumi reports a stack without it as missing, the model too.
    assert "default" not in declared.pop("tenants")
    assert LabConfig.model_fields["tenants"].is_required()
    for name, spec in declared.items():
        assert spec["description"]
        assert spec["default"] == defaults[name], name


def test_pulumi_yaml_declares_each_key_with_the_type_the_model_reads():
    """What the CLI type-checks a stack against is what the program reads the key as."""
    declared = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]
    pulumi_type = {
        bool: "boolean", int: "integer", str: "string", SecretStr: "string", ProxyConfig: "object",
        dict[str, str]: "object", tuple[RegistryMirror, ...]: "array", MonitoringConfig: "object",
    }  # fmt: skip
    for name, field in LabConfig.model_fields.items():
        spec = declared[f"{PROJECT}:{field.alias or name}"]
        if name in ("tenants", "registry_mirrors"):
            assert (spec["type"], spec["items"]) == ("array", {"type": "object"})
        else:
            assert spec["type"] == pulumi_type.get(field.annotation, "string"), name


def test_pulumi_yaml_tells_how_to_set_each_secret_key():
    config = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())["config"]
    assert SECRET_KEYS == (
        "managementKubeconfig",
        "sshPrivateKey",
        "registryMirrorAuth",
        "grafanaAdminPassword",
    )
    for key in SECRET_KEYS:
        assert f"pulumi config set --secret {key}" in config[f"{PROJECT}:{key}"]["description"]


def read_as_program(
    config: dict[str, Any], secret_keys: Collection[str] | None = None, *, automation: bool
) -> dict[str, Any]:
    """What the program reads when Pulumi hands it this config (see pulumi_harness.pass_config)."""
    saved = pass_config(config, secret_keys, automation)
    try:
        return read_stack_config(pulumi.Config(PROJECT))
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.update({name: value})
        pulumi.runtime.set_all_config({}, [])


SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nfake\n-----END OPENSSH PRIVATE KEY-----\n"
GPU = {**stack_config("gpu"), "sshPrivateKey": SSH_KEY, "managementKubeconfig": FAKE_KUBECONFIG}
VIA = pytest.mark.parametrize("automation", [False, True], ids=["cli", "automation-api"])


@pytest.mark.upstream("pulumi-python-config-runtime")
def test_cli_and_automation_api_hand_the_program_the_same_config():
    """m10: an inline program gets no PULUMI_CONFIG, only set_all_config; both read the same."""
    cli = read_as_program(GPU, automation=False)
    inline = read_as_program(GPU, automation=True)
    assert cli == inline
    assert cli["tenants"] == GPU["tenants"]
    assert cli["installPlatform"] is True  # "true" in the stack file, read with get_bool
    assert cli["sshPrivateKey"] == SecretStr(SSH_KEY)
    assert parse_config(cli) == parse_config(inline)


@pytest.mark.upstream("pulumi-python-config-runtime")
def test_the_program_runs_as_an_automation_api_inline_program():
    """m10: before, the program read PULUMI_CONFIG only and saw {} here ("tenants: required")."""
    run = run_program(LAB, automation=True)
    tcps = run.of_type("kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane")
    assert sorted(r.name for r in tcps) == ["tenant-a-control-plane", "tenant-b-control-plane"]


@VIA
def test_an_unknown_key_is_kept_so_the_typo_is_named(automation: bool):
    raw = read_as_program({**LAB, "subnett": "x"}, automation=automation)
    assert raw["subnett"] == "x"
    assert error_for(raw).key == "subnett"


@VIA
@pytest.mark.upstream("pulumi-python-config-runtime")
@pytest.mark.parametrize("key", ["sshPrivateKey", "managementKubeconfig"])
def test_a_secret_key_set_in_plain_text_is_refused(automation: bool, key: str):
    others = [other for other in ("sshPrivateKey", "managementKubeconfig") if other != key]
    with pytest.raises(ConfigError, match=rf"^{key}: is a secret: set it with pulumi config set "):
        read_as_program(GPU, others, automation=automation)


@VIA
@pytest.mark.upstream("pulumi-python-config-runtime")
def test_a_plain_key_set_as_a_secret_is_refused_rather_than_leaked(automation: bool):
    with pytest.raises(ConfigError, match=r"^tenants: is set as a secret, but the lab uses it in"):
        read_as_program(LAB, secret_keys=["tenants"], automation=automation)


def test_an_unknown_secret_key_is_named_without_its_value():
    raw = read_as_program({**LAB, "sshPrivatKey": SSH_KEY}, ["sshPrivatKey"], automation=True)
    error = error_for(raw)
    assert error.key == "sshPrivatKey"
    assert "Extra inputs" in str(error) and "**********" in str(error)
    assert "PRIVATE KEY" not in str(error)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("preflight", "yes", "preflight: must be true or false (got 'yes')"),
        ("hamiSplitCount", "ten", "hamiSplitCount: must be an integer (got 'ten')"),
        ("tenants", "[{name: a", "tenants: is not valid structured config (JSON): '[{name: a'"),
    ],
)
def test_a_value_pulumi_cannot_read_as_its_type_names_the_key(key: str, value: str, message: str):
    with pytest.raises(ConfigError) as info:
        read_as_program({**LAB, key: value}, automation=True)
    assert str(info.value) == message


@VIA
@pytest.mark.upstream("pulumi-python-config-runtime")
def test_secret_keys_stay_secret_to_the_end(automation: bool):
    """Every input or output that carries a secret key's value is a secret, wherever it lands."""
    run = run_program(GPU, stack="gpu", automation=automation)
    secrets = (SSH_KEY.strip(), "fake-token")  # the key, the token in the fake kubeconfig
    for registration in run.resources:
        for path, text in _strings(registration.inputs):
            if any(secret in text for secret in secrets):
                assert registration.is_secret(path), f"{registration.name}: {path}"
    for name, value in run.outputs.items():
        if any(secret in text for _, text in _strings(value) for secret in secrets):
            assert name in run.secret_outputs, name


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(v, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [s for i, v in enumerate(value) for s in _strings(v, f"{path}[{i}]")]
    return [(path, value)] if isinstance(value, str) else []


@pytest.mark.parametrize(
    ("raw", "key", "fragment"),
    [
        (
            with_tenants({"name": "a", "gpus": [{"model": "A200"}]}),
            "tenants[0].gpus[0].model",
            "unknown GPU model 'A200'",
        ),
        (with_tenants({"name": "a"}, {"name": "a"}), "tenants[1].name", "duplicate tenant name"),
        (with_tenants({"name": "a"}, subnet="172.30.0.0/30"), "subnet", "use a larger subnet"),
        (with_tenants({"name": "Tenant_A"}), "tenants[0].name", "DNS label"),
        (with_tenants({"name": "a", "workrs": 2}), "tenants[0].workrs", "Extra inputs"),
        (
            with_tenants({"name": "a", "gpus": [{"model": "L4", "cores": 150}]}),
            "tenants[0].gpus[0].cores",
            "less than or equal to 100",
        ),
        (
            with_tenants({"name": "a", "kubernetesVersion": "v1.29.0"}),
            "tenants[0].kubernetesVersion",
            "must be v1.31.0 or newer",
        ),
        (
            with_tenants({"name": "a", "kubernetesVersion": "v1.34.2"}),
            "tenants[0].workerImage",
            "no pinned kindest/node image",
        ),
        (
            with_tenants({"name": "a", "workerImage": "kindest/node:v1.35.0"}),
            "tenants[0].workerImage",
            "pinned by digest",
        ),
        (
            with_tenants({"name": "a"}, managementNodeImage="kindest/node:latest"),
            "managementNodeImage",
            "pinned by digest",
        ),
        ({}, "tenants", "Field required"),
        (
            with_tenants({"name": "a", "controlPlaneCpuRequests": {"apiServer": "250 m"}}),
            "tenants[0].controlPlaneCpuRequests.apiServer",
            "must be a CPU quantity of at least 1m in whole millicores, such as 100m, 0.5 or 1 "
            '(got "250 m")',
        ),
        (
            with_tenants({"name": "a", "controlPlaneCpuRequests": {"scheduler": "0.0005"}}),
            "tenants[0].controlPlaneCpuRequests.scheduler",
            "in whole millicores",
        ),
        (
            with_tenants({"name": "a", "controlPlaneCpuRequests": {"konnectivityServer": 0}}),
            "tenants[0].controlPlaneCpuRequests.konnectivityServer",
            "at least 1m",
        ),
        (
            with_tenants({"name": "a", "controlPlaneCpuRequests": {"controllerManager": "1Gi"}}),
            "tenants[0].controlPlaneCpuRequests.controllerManager",
            "CPU quantity",
        ),
        (
            with_tenants({"name": "a", "controlPlaneCpuRequests": {"etcd": "100m"}}),
            "tenants[0].controlPlaneCpuRequests.etcd",
            "Extra inputs",
        ),
        (with_tenants({"name": "a"}, hamiSplitCount="0"), "hamiSplitCount", "greater than"),
    ],
)
def test_bad_values_stop_with_the_key(raw: dict, key: str, fragment: str):
    error = error_for(raw)
    assert error.key == key
    assert fragment in str(error)
    assert str(error).startswith(f"{key}: ")


def test_custom_gpu_model_needs_memory_and_then_works():
    cfg = parse_config(
        with_tenants(
            {"name": "a", "gpus": [{"model": "RTX", "memoryMb": 97887, "product": "NVIDIA RTX"}]}
        )
    )
    (card,) = cfg.tenants[0].cards
    assert (card.product, card.memory_mb, card.cores) == ("NVIDIA RTX", 97887, 100)


def test_model_names_ignore_case_and_overrides_apply():
    cfg = parse_config(with_tenants({"name": "a", "gpus": [{"model": "l4", "memoryMb": 24576}]}))
    assert cfg.tenants[0].cards[0].memory_mb == 24576
    assert cfg.tenants[0].cards[0].product == "NVIDIA L4"


def test_config_is_not_mutated_and_is_frozen():
    raw = copy.deepcopy(LAB)
    cfg = parse_config(raw)
    assert raw == LAB
    with pytest.raises(Exception, match="frozen"):
        cfg.tenants[0].workers = 3  # type: ignore[misc]


def test_worker_image_must_match_tenant_minor():
    image = "kindest/node:v1.34.0@sha256:" + "a" * 64
    error = error_for(with_tenants({"name": "a", "workerImage": image}))
    assert error.key == "tenants[0].workerImage"
    assert "does not match kubernetesVersion v1.36.4" in str(error)
