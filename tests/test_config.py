"""The stack config model: defaults, the lab stack, and bad input named by its key."""

from __future__ import annotations

import copy

import pytest
import yaml
from pulumi_harness import PROJECT_DIR, lab_stack_config

from components.config import ConfigError, LabConfig, parse_config, raw_stack_config

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


def test_raw_config_keeps_unknown_keys_so_typos_fail():
    raw = raw_stack_config(
        {
            "kamaji-hami-lab:tenants": '[{"name": "a"}]',
            "kamaji-hami-lab:subnett": "x",
            "other:key": "ignored",
        }
    )
    assert raw == {"tenants": [{"name": "a"}], "subnett": "x"}
    assert error_for(raw).key == "subnett"


def test_structured_key_that_is_not_json_names_the_key():
    with pytest.raises(ConfigError, match=r"^tenants: is not valid structured config"):
        raw_stack_config({"kamaji-hami-lab:tenants": "[{name: a"})


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
            "Kamaji supports",
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
            {"name": "a", "gpus": [{"model": "B200", "memoryMb": 183359, "product": "NVIDIA B200"}]}
        )
    )
    (card,) = cfg.tenants[0].cards
    assert (card.product, card.memory_mb, card.cores) == ("NVIDIA B200", 183359, 100)


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
    assert "does not match kubernetesVersion v1.35.0" in str(error)
