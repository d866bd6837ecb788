"""Pulumi.yaml and every Pulumi.<stack>.yaml, checked as the Pulumi CLI checks them (B1).

The CLI validates the project file when it loads it and the stack config before every up,
preview, refresh, import and destroy, before the program starts. The oracle below encodes those
rules from pulumi/pulumi's own source (commit 1b5949891b, SDK 3.260-dev; the lab's CLI is
v3.274.1, whose error B1 quotes):

- ``sdk/go/common/workspace/project.go``: ``(*Project).Validate`` (a key namespaced by the
  project may declare a type; an ``array`` needs ``items``; a default must be of the declared
  type; ``default`` and ``value`` exclude each other; a key of another namespace has a
  ``value`` and neither type nor default) and ``ValidateConfigValue`` (what each type accepts);
- ``sdk/go/common/workspace/project.json``: ``configTypeDeclaration`` (the attributes allowed,
  the five type names) and ``configItemsType``;
- ``pkg/workspace/config.go`` (moved from ``sdk/go/common/workspace/config.go`` in #23978):
  ``mergeConfig`` (a key the stack does not set is filled from its default as a *plaintext*
  value; a project key with neither is reported missing) and ``validateStackConfigValue``
  (a ``secret: true`` key must be encrypted; then the type check);
- ``sdk/go/common/resource/config/object.go`` ``MarshalString``: a stack file's scalar reaches
  the type check as text (``true``, ``1``), a list or map as JSON.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pulumi_harness import PROJECT_DIR

PROJECT_FILE = PROJECT_DIR / "Pulumi.yaml"
STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))
TYPE_NAMES = ("string", "integer", "boolean", "array", "object")  # project.json simpleConfigType
DECLARATION_ATTRIBUTES = {"type", "items", "description", "secret", "default", "value"}
SECURE = "secure"  # a stack file's encrypted value: {secure: <ciphertext>}


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


# --- the oracle: the CLI's rules ----------------------------------------------------------


def is_valid_value(type_name: str, items: dict[str, Any] | None, value: Any) -> bool:
    """``ValidateConfigValue``: does ``value`` (as Go decoded it) have the declared type?"""
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        if isinstance(value, bool):  # Go's bool is no int; Python's is
            return False
        if isinstance(value, int):
            return True
        if isinstance(value, float):
            return value == int(value)
        return isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value) is not None  # Atoi
    if type_name == "boolean":
        return value in ("true", "false") or isinstance(value, bool)
    if type_name == "object":
        return isinstance(value, dict)
    if not isinstance(value, list) or items is None:
        return False
    return all(is_valid_value(items["type"], items.get("items"), item) for item in value)


def full_type_name(type_name: str, items: dict[str, Any] | None) -> str:
    """``InferFullTypeName``: ``array<object>`` and so on."""
    if items is not None:
        return f"array<{full_type_name(items['type'], items.get('items'))}>"
    return type_name


def items_errors(key: str, items: Any) -> list[str]:
    """project.json ``configItemsType``: a ``type``; an array's items declare theirs."""
    if not isinstance(items, dict) or set(items) - {"type", "items"}:
        return [f"{key}: items allows only 'type' and 'items'"]
    if items.get("type") not in TYPE_NAMES:
        return [f"{key}: items.type must be one of {TYPE_NAMES}"]
    if items["type"] == "array":
        return items_errors(key, items.get("items"))
    return []


def project_errors(project: dict[str, Any]) -> list[str]:
    """What loading the project file reports: the JSON schema, then ``Project.Validate``."""
    errors: list[str] = []
    name = project["name"]
    for key, spec in project.get("config", {}).items():
        if isinstance(spec, str | int | bool | list):  # shorthand: the value itself
            continue
        if not isinstance(spec, dict) or set(spec) - DECLARATION_ATTRIBUTES:
            errors.append(f"{key}: a declaration allows only {sorted(DECLARATION_ATTRIBUTES)}")
            continue
        type_name = spec.get("type")
        if type_name is not None and type_name not in TYPE_NAMES:
            errors.append(f"{key}: type must be one of {TYPE_NAMES}")
            continue
        if "items" in spec:
            errors += items_errors(key, spec["items"])
        if "default" in spec and "value" in spec:
            errors.append(
                f"project config '{key}' cannot have both a 'default' and 'value' attribute"
            )
        if ":" not in key or key.startswith(f"{name}:"):
            if type_name == "array" and "items" not in spec:
                errors.append(
                    f"The configuration key '{key}' declares an array but does not specify "
                    "the underlying type via the 'items' attribute"
                )
            elif (
                type_name is not None
                and spec.get("default") is not None
                and not is_valid_value(type_name, spec.get("items"), spec["default"])
            ):
                errors.append(
                    f"The default value specified for configuration key '{key}' is not of the "
                    f"expected type '{full_type_name(type_name, spec.get('items'))}'"
                )
        elif type_name is not None or "default" in spec or "value" not in spec:
            errors.append(f"Configuration key '{key}' is not namespaced by the project")
    return errors


def stack_value(raw: Any) -> tuple[Any, bool]:
    """A stack file's value as ``validateStackConfigValue`` sees it: (content, secure)."""
    if isinstance(raw, dict) and set(raw) == {SECURE}:
        return "<decrypted text>", True
    if isinstance(raw, float) and raw.is_integer():
        return str(int(raw)), False  # Go's JSON encoding of 2.0 is 2
    if isinstance(raw, bool | int | float):
        return json.dumps(raw), False  # MarshalString: JSON text of the scalar
    if isinstance(raw, str):
        return raw, False
    return json.loads(json.dumps(raw)), False  # an object value: its JSON, decoded


def default_value(default: Any) -> tuple[Any, bool]:
    """``createConfigValue``: a default is merged in as a plaintext (never secure) value."""
    if isinstance(default, str | int | bool):
        return (json.dumps(default) if isinstance(default, bool) else str(default)), False
    return json.loads(json.dumps(default)), False


def full_key(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def stack_errors(stack: str, project: dict[str, Any], stack_config: dict[str, Any]) -> list[str]:
    """``mergeConfig`` with validation, as up/preview/refresh/destroy run it."""
    name = project["name"]
    declared = {full_key(name, k): v for k, v in project.get("config", {}).items()}
    given = {full_key(name, k): v for k, v in (stack_config or {}).items()}
    missing, merged = [], {}
    for key in sorted(declared):
        spec = declared[key] if isinstance(declared[key], dict) else {"value": declared[key]}
        if key in given:
            merged[key] = stack_value(given[key])
        elif spec.get("default") is not None or spec.get("value") is not None:
            merged[key] = default_value(spec.get("default", spec.get("value")))
        elif key.startswith(f"{name}:"):
            missing.append(key)
    if missing:
        keys = " and ".join(f"'{k}'" for k in missing)
        value_s = "values" if len(missing) > 1 else "value"
        return [f"Stack '{stack}' is missing configuration {value_s} {keys}"]
    errors = []
    for key in sorted(declared):
        spec = declared[key]
        if not isinstance(spec, dict) or spec.get("type") is None:
            continue  # validateStackConfigValues checks explicitly typed keys only
        content, secure = merged[key]
        if spec.get("secret") and not secure:
            errors.append(
                f"Stack '{stack}' with configuration key '{key}' must be encrypted as it's secret"
            )
        elif not is_valid_value(spec["type"], spec.get("items"), content):
            type_name = full_type_name(spec["type"], spec.get("items"))
            errors.append(
                f"Stack '{stack}' with configuration key '{key}' must be of type '{type_name}'"
            )
    return errors


# --- the project's files --------------------------------------------------------------------

pytestmark = pytest.mark.upstream("pulumi-project-config-rules")


def test_project_config_declarations_follow_the_clis_rules():
    project = load(PROJECT_FILE)
    assert project_errors(project) == []
    for key, spec in project["config"].items():
        # The lab's own convention on top: every key is the project's, typed and described.
        assert key.startswith("kamaji-hami-lab:"), key
        assert spec["type"] in TYPE_NAMES and spec["description"], key


@pytest.mark.upstream("pulumi-secret-key-no-plaintext-default")
def test_no_secret_key_has_a_plaintext_default():
    """B1: the CLI merges the default in as plaintext, then refuses it as an unencrypted secret."""
    for key, spec in load(PROJECT_FILE)["config"].items():
        assert not (spec.get("secret") and "default" in spec), key


@pytest.mark.upstream("pulumi-secret-key-no-plaintext-default")
@pytest.mark.parametrize("stack_file", STACK_FILES, ids=lambda p: p.name)
def test_every_stack_passes_the_clis_config_validation(stack_file: Path):
    """B1: `lab` and `nvml` set neither secret key, so a `secret: true` declaration stops them."""
    stack = stack_file.name.split(".")[1]
    assert stack_errors(stack, load(PROJECT_FILE), load(stack_file)["config"]) == []


def test_stack_files_hold_values_both_yaml_readers_agree_on():
    """PyYAML reads YAML 1.1 (`yes`, `on` are booleans); the CLI's yaml.v3 reads them as text."""
    for path in [PROJECT_FILE, *STACK_FILES]:
        for node in _plain_scalars(yaml.compose(path.read_text())):
            if node.tag == "tag:yaml.org,2002:bool":
                assert node.value in ("true", "false"), f"{path.name}: {node.value!r}"


def _plain_scalars(node: yaml.Node) -> list[yaml.ScalarNode]:
    if isinstance(node, yaml.ScalarNode):
        return [node] if node.style is None else []
    children = node.value if isinstance(node, yaml.SequenceNode) else []
    if isinstance(node, yaml.MappingNode):
        children = [item for pair in node.value for item in pair]
    return [scalar for child in children for scalar in _plain_scalars(child)]


# --- the oracle catches what the CLI catches -------------------------------------------------


@pytest.mark.upstream("pulumi-secret-key-no-plaintext-default")
def test_the_pre_fix_declaration_fails_exactly_as_the_cli_did():
    """B1: the message Pulumi CLI v3.274.1 printed for `pulumi preview --stack lab`."""
    project = copy.deepcopy(load(PROJECT_FILE))
    project["config"]["kamaji-hami-lab:managementKubeconfig"]["secret"] = True
    lab = load(PROJECT_DIR / "Pulumi.lab.yaml")["config"]
    assert stack_errors("lab", project, lab) == [
        "Stack 'lab' with configuration key 'kamaji-hami-lab:managementKubeconfig' "
        "must be encrypted as it's secret"
    ]
    encrypted = {**lab, "kamaji-hami-lab:managementKubeconfig": {SECURE: "v1:abc"}}
    assert stack_errors("lab", project, encrypted) == []


@pytest.mark.parametrize(
    ("key", "value", "type_name"),
    [
        ("kamaji-hami-lab:preflight", "yes", "boolean"),
        ("kamaji-hami-lab:kamajiEtcdReplicas", "1.5", "integer"),
        ("kamaji-hami-lab:subnet", ["172.30.0.0/16"], "string"),
        ("kamaji-hami-lab:tenants", '[{"name": "a"}]', "array<object>"),
        ("kamaji-hami-lab:tenants", ["tenant-a"], "array<object>"),
    ],
)
def test_a_stack_value_of_the_wrong_type_is_refused(key: str, value: Any, type_name: str):
    config = {**load(PROJECT_DIR / "Pulumi.lab.yaml")["config"], key: value}
    assert stack_errors("lab", load(PROJECT_FILE), config) == [
        f"Stack 'lab' with configuration key '{key}' must be of type '{type_name}'"
    ]


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("validate", True, True),
        ("validate", "false", True),
        ("validate", "False", False),
        ("hamiSplitCount", 3, True),
        ("hamiSplitCount", "3", True),
        ("hamiSplitCount", 2.0, True),
        ("hamiSplitCount", 2.5, False),
    ],
)
def test_stack_scalars_reach_the_check_as_text(key: str, value: Any, accepted: bool):
    config = {**load(PROJECT_DIR / "Pulumi.lab.yaml")["config"], f"kamaji-hami-lab:{key}": value}
    assert (stack_errors("lab", load(PROJECT_FILE), config) == []) is accepted


def test_a_stack_without_tenants_is_missing_a_value():
    assert stack_errors("lab", load(PROJECT_FILE), {}) == [
        "Stack 'lab' is missing configuration value 'kamaji-hami-lab:tenants'"
    ]


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"type": "integer", "default": "ten"},
            "The default value specified for configuration key 'kamaji-hami-lab:hamiSplitCount' "
            "is not of the expected type 'integer'",
        ),
        (
            {"type": "array", "default": []},
            "The configuration key 'kamaji-hami-lab:hamiSplitCount' declares an array but does "
            "not specify the underlying type via the 'items' attribute",
        ),
        (
            {"type": "integer", "default": 1, "value": 2},
            "project config 'kamaji-hami-lab:hamiSplitCount' cannot have both a 'default' and "
            "'value' attribute",
        ),
        (
            {"type": "int", "default": 1},
            f"kamaji-hami-lab:hamiSplitCount: type must be one of {TYPE_NAMES}",
        ),
    ],
)
def test_the_oracle_rejects_bad_declarations(change: dict[str, Any], error: str):
    project = copy.deepcopy(load(PROJECT_FILE))
    project["config"]["kamaji-hami-lab:hamiSplitCount"] = change
    assert project_errors(project) == [error]


# --- how the program reads its config through the SDK -------------------------------------------


def _pinned_sdk_version() -> str:
    pins = (PROJECT_DIR / "requirements.txt").read_text()
    match = re.search(r"^pulumi==(\S+)$", pins, re.MULTILINE)
    assert match, "requirements.txt pins no pulumi SDK"
    return match.group(1)


def test_the_sdk_internal_that_lists_config_keys_is_the_pinned_ones():
    """Review 5: `_keys_set` reads pulumi.runtime.config.CONFIG, an SDK internal (no public
    call lists keys). This pins what it relies on to the SDK of requirements.txt."""
    import contextvars
    from importlib.metadata import version

    import pulumi
    from pulumi.runtime import config as runtime_config

    from labconfig.model import PROJECT
    from labconfig.stack import _keys_set

    pinned = _pinned_sdk_version()
    hint = (
        f"labconfig/model.py:_keys_set relies on pulumi {pinned}'s internal "
        "pulumi.runtime.config.CONFIG (a ContextVar of the map set_all_config sets); "
        "re-check it against the installed SDK, then update this test's pin"
    )
    assert version("pulumi") == pinned, hint
    assert isinstance(runtime_config.CONFIG, contextvars.ContextVar), hint

    def keys_after_set_all_config() -> set[str]:
        pulumi.runtime.set_all_config({f"{PROJECT}:subnet": "10.0.0.0/16", "other:key": "x"})
        assert runtime_config.CONFIG.get() == {
            f"{PROJECT}:subnet": "10.0.0.0/16",
            "other:key": "x",
        }, hint
        return _keys_set(pulumi.Config(PROJECT))

    assert contextvars.copy_context().run(keys_after_set_all_config) == {"subnet"}, hint


def test_reading_a_config_map_leaves_the_callers_config_alone():
    """Review 5: raw_stack_config (the preflight's `--stack` path, the config tests) reads a
    map without replacing this process's runtime config or its secret keys."""
    import contextvars

    import pulumi
    from pulumi.runtime import config as runtime_config

    from labconfig.model import PROJECT
    from labconfig.stack import raw_stack_config

    def caller() -> None:
        mine = {f"{PROJECT}:subnet": "10.9.0.0/16"}
        pulumi.runtime.set_all_config(dict(mine), [f"{PROJECT}:subnet"])
        read = raw_stack_config({f"{PROJECT}:networkName": "other-lab"})
        assert read == {"networkName": "other-lab"}
        assert runtime_config.CONFIG.get() == mine
        assert pulumi.runtime.is_config_secret(f"{PROJECT}:subnet")

    contextvars.copy_context().run(caller)
