"""Spec validation and loading (file, env, pulumi stack output via an injected runner)."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest
import yaml

from labcheck.spec import (
    SpecError,
    load_from_env,
    load_from_file,
    load_from_stack,
    parse_spec,
    pulumi_command,
)
from tests.support.labcheck_fakes import standard_lab


def lab_spec() -> dict:
    spec = copy.deepcopy(standard_lab().spec)
    # The lead's program sends kubeconfigs as YAML strings: exercise that path.
    spec["management"]["kubeconfig"] = yaml.safe_dump(spec["management"]["kubeconfig"])
    for t in spec["tenants"]:
        t["kubeconfig"] = yaml.safe_dump(t["kubeconfig"])
    return spec


def test_valid_spec_parses_with_camel_case_keys():
    spec = parse_spec(lab_spec())
    a, b = spec.tenants
    assert a.gpu_mode == "simulated" and a.endpoint == "172.30.255.200:6443"
    assert a.quota is not None and a.quota.gpumem_mb == 81920
    assert len(b.gpus["tenant-b-worker-1"]) == 2
    assert spec.timeouts.lock_burst_pods == 5 and spec.tools_image == "busybox:1.37.0"
    assert a.kubeconfig["users"][0]["user"]["token"] == "tenant-a-token"


def test_json_string_and_double_encoded_string_accepted():
    text = json.dumps(lab_spec())
    assert parse_spec(text).stack == "lab"
    assert parse_spec(json.dumps(text)).stack == "lab"  # Output.json_dumps + --json


def test_null_quota_and_missing_optional_images():
    spec = lab_spec()
    spec["tenants"][0]["quota"] = None
    del spec["testImage"], spec["toolsImage"], spec["timeouts"]
    parsed = parse_spec(spec)
    assert parsed.tenants[0].quota is None and parsed.timeouts.pod_seconds == 90


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda s: s["tenants"][0].update(gpuMode="fake"), "tenants[0].gpuMode"),
        (lambda s: s["tenants"][1].update(port=70000), "tenants[1].port"),
        (lambda s: s["tenants"][0].update(gpuMod="real"), "tenants[0].gpuMod"),
        (lambda s: s["tenants"][0].update(kubeconfig="::: not yaml"), "tenants[0].kubeconfig"),
        (lambda s: s["management"].pop("kubeconfig"), "management.kubeconfig"),
        (lambda s: s["timeouts"].update(podSeconds=0), "timeouts.podSeconds"),
        (
            lambda s: s["tenants"][0]["gpus"]["tenant-a-worker-1"][0].update(devmem="x"),
            "tenants[0].gpus.tenant-a-worker-1[0].devmem",
        ),
        (lambda s: s["tenants"][0]["quota"].pop("gpumemMB"), "tenants[0].quota.gpumemMB"),
    ],
)
def test_errors_name_the_bad_key(mutate, where):
    spec = lab_spec()
    mutate(spec)
    with pytest.raises(SpecError) as exc:
        parse_spec(spec)
    assert where in str(exc.value)


def test_errors_never_echo_secret_values():
    spec = lab_spec()
    spec["tenants"][0]["kubeconfig"] = "token: super-secret-value"
    with pytest.raises(SpecError) as exc:
        parse_spec(spec)
    assert "super-secret-value" not in str(exc.value)
    assert "tenants[0].kubeconfig" in str(exc.value)


def test_cross_field_rules():
    spec = lab_spec()
    spec["tenants"][0]["gpus"]["ghost"] = []
    with pytest.raises(SpecError, match="ghost"):
        parse_spec(spec)
    spec = lab_spec()
    spec["tenants"][1]["name"] = "tenant-a"
    with pytest.raises(SpecError, match="unique"):
        parse_spec(spec)
    spec = lab_spec()
    spec["tenants"][1]["nodes"] = ["tenant-a-worker-1"]
    spec["tenants"][1]["gpus"] = {}
    with pytest.raises(SpecError, match="tenant-a-worker-1"):
        parse_spec(spec)
    spec = lab_spec()
    spec["tenants"][0]["gpus"]["tenant-a-worker-1"][0]["type"] = "Tesla T4"
    with pytest.raises(SpecError, match="NVIDIA"):
        parse_spec(spec)


def test_not_json_and_not_object():
    with pytest.raises(SpecError, match="not JSON"):
        parse_spec("{oops")
    with pytest.raises(SpecError, match="JSON object"):
        parse_spec("[1]")


class Recorder:
    def __init__(self, returncode=0, stdout="", stderr="", exc=None):
        self.calls = []
        self.result = subprocess.CompletedProcess([], returncode, stdout, stderr)
        self.exc = exc

    def __call__(self, cmd, **kwargs):
        self.calls.append((cmd, kwargs))
        if self.exc:
            raise self.exc
        return self.result


def test_load_from_stack_runs_pulumi_with_bounded_timeout():
    run = Recorder(stdout=json.dumps(lab_spec()))
    spec = load_from_stack("lab", run=run, cwd="/proj")
    assert spec.stack == "lab"
    cmd, kwargs = run.calls[0]
    assert cmd == pulumi_command("lab")
    assert cmd == [
        "pulumi",
        "stack",
        "output",
        "labcheckSpec",
        "--show-secrets",
        "--json",
        "--stack",
        "lab",
    ]
    assert kwargs["timeout"] > 0 and kwargs["cwd"] == "/proj" and kwargs["capture_output"]


def test_load_from_stack_failures_are_spec_errors():
    run = Recorder(returncode=255, stderr="warning\nerror: no stack named 'lab' found\n")
    with pytest.raises(SpecError, match="no stack named 'lab' found"):
        load_from_stack("lab", run=run)
    with pytest.raises(SpecError, match="pulumi CLI not found"):
        load_from_stack("lab", run=Recorder(exc=FileNotFoundError()))
    with pytest.raises(SpecError, match="took more than"):
        load_from_stack("lab", run=Recorder(exc=subprocess.TimeoutExpired("pulumi", 1)))
    with pytest.raises(SpecError, match="stack lab output labcheckSpec"):
        load_from_stack("lab", run=Recorder(stdout="null"))


def test_load_from_file_and_env(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(lab_spec()))
    assert load_from_file(str(path)).stack == "lab"
    with pytest.raises(SpecError, match="cannot read"):
        load_from_file(str(tmp_path / "missing.json"))
    assert load_from_env("LABCHECK_SPEC", {"LABCHECK_SPEC": path.read_text()}).stack == "lab"
    with pytest.raises(SpecError, match="LABCHECK_SPEC"):
        load_from_env("LABCHECK_SPEC", {})


def test_hami_namespace_defaults_to_where_the_lab_installs_hami():
    """T11: labcheck looks for the webhook Service in the namespace the lab's release uses."""
    from components.tenant.hami import NAMESPACE

    spec = parse_spec(lab_spec())
    assert spec.tenants[0].hami_namespace == NAMESPACE == "kube-system"
    other = lab_spec()
    other["tenants"][0]["hamiNamespace"] = "hami-system"
    assert parse_spec(other).tenants[0].hami_namespace == "hami-system"
