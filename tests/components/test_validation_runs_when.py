"""When the validation step runs: docs/validation.md's table against the step the program declares.

Issue 17 item 6: the docs said labcheck ran on every `pulumi up`. It is a Command: it runs when
created, replaced (a trigger changed) or updated (another input changed), so an `up` that
changes none of them validates nothing. The docs' table names each trigger and input; this
keeps it and the code in step.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from components.lab import config_fingerprint
from labconfig.parse import parse_config
from tests.support.pulumi_harness import PROJECT_DIR, ProgramRun, lab_stack_config, run_program

LAB = lab_stack_config()
STEP = "validation-labcheck"
COMMAND = "command:local:Command"
# What the docs' second column says, and which of the step's triggers or inputs that is.
DOCUMENTED_AS = {
    "trigger: a hash of the whole parsed config": "config",
    "trigger: the management cluster's identity": "management",
    "trigger: each worker join's id, new on every join": "joins",
    "trigger: a hash of the releases' chart, version and values": "releases",
    "input: its `LABCHECK_SPEC` environment (an update runs it again)": "environment",
    "input: its `create` command": "create",
}


def documented_rows() -> list[str]:
    text = (PROJECT_DIR / "docs/validation.md").read_text()
    section = text.split("\n## When it runs\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (?!what changed|---)[^|]+ \| (.+) \|$", section, re.M)
    assert rows, section
    return rows


TENANT_RELEASES = (
    "tenant-a-cni-chart",
    "tenant-a-hami-chart",
    "tenant-b-cni-chart",
    "tenant-b-hami-chart",
)


def release_fingerprint_of(run: ProgramRun) -> str:
    """The tenants' releases as the engine holds them (chart, version, values), hashed."""
    seen = [
        [r.inputs["chart"], r.inputs["version"], r.inputs["values"]]
        for r in (run.named(name) for name in TENANT_RELEASES)
    ]
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()


def trigger_kinds(run: ProgramRun) -> list[str]:
    """Each of the step's triggers, by where it comes from."""
    config_hash = config_fingerprint(parse_config(LAB))
    joins = {
        f"{r.name}-id" for r in run.of_type(COMMAND) if r.name.endswith("-join")
    }  # the mocks' ids
    management = run.named("management-kind").urn
    releases = release_fingerprint_of(run)
    kinds = []
    for trigger in run.named(STEP).inputs["triggers"]:
        if trigger == config_hash:
            kinds.append("config")
        elif trigger in joins:
            kinds.append("joins")
        elif trigger.endswith("/management-kind-id"):  # the identity names the kind Command
            kinds.append("management")
        elif trigger == releases:
            kinds.append("releases")
        else:
            pytest.fail(f"trigger {trigger!r} of {STEP} is not in docs/validation.md")
    assert management in run.named(STEP).property_dependencies["triggers"]
    return kinds


def test_the_docs_name_every_trigger_and_input_of_the_validation_step(lab: ProgramRun):
    step = lab.named(STEP)
    documented = [DOCUMENTED_AS[row] for row in documented_rows()]
    kinds = trigger_kinds(lab)
    # two tenants, a worker each
    assert kinds == ["config", "management", "joins", "joins", "releases"]
    inputs = set(step.inputs) - {"stdout", "stderr"}  # outputs the harness records
    assert inputs == {"create", "environment", "triggers"}
    assert set(step.inputs["environment"]) == {"LABCHECK_SPEC"}
    assert sorted(documented) == sorted({*kinds, "environment", "create"})


def test_an_up_with_no_changes_gives_the_step_nothing_new(lab: ProgramRun):
    """The same stack config evaluated again: every trigger and input is the same, so the
    engine plans no step for it and labcheck does not run (hence `make check`)."""
    again = run_program(LAB).named(STEP)
    assert again.inputs == lab.named(STEP).inputs


def test_a_config_change_replaces_the_step(lab: ProgramRun):
    changed = run_program({**LAB, "hamiNodeLockTimeout": "6m"}).named(STEP)
    before = lab.named(STEP).inputs["triggers"]
    assert changed.inputs["triggers"][0] != before[0]
    assert changed.inputs["triggers"][1:4] == before[1:4]  # the same cluster and joins


@pytest.mark.upstream("pulumi-k8s-release-outputs-chart-version-values")
def test_a_changed_chart_value_replaces_the_step_with_the_config_unchanged(lab: ProgramRun):
    """A program upgrade that changes what a tenant's chart deploys (the mock device plugin
    turned off in HAMi's values, say) validates again, though the stack config is the same."""
    import builders.hami

    original = builders.hami.hami_values

    def changed_values(*args, **kwargs):
        values = original(*args, **kwargs)
        return {**values, "scheduler": {**values["scheduler"], "nodeLockExpire": "7m"}}

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("components.tenant.hami.hami_values", changed_values)
        changed = run_program(LAB).named(STEP)
    before = lab.named(STEP).inputs["triggers"]
    assert changed.inputs["triggers"][:4] == before[:4]
    assert changed.inputs["triggers"][4] != before[4]


def test_the_fingerprint_of_a_stack_is_kept_until_it_sets_a_newer_key():
    """An upgrade of the program re-runs no stack's validation: keys added since (a mirrored
    site's, a tenant's controlPlaneCpuRequests) count once a stack sets them, and then change
    it."""
    plain = parse_config(LAB)
    newer = {
        "registry_mirrors",
        "registry_mirror_auth",
        "chart_sources",
        "kamaji_git_url",
        "monitoring",
        "grafana_admin_password",
    }
    newer_per_tenant = {"control_plane_cpu_requests"}
    exclude = {**dict.fromkeys(newer, True), "tenants": {0: newer_per_tenant, 1: newer_per_tenant}}
    legacy = hashlib.sha256(plain.model_dump_json(exclude=exclude).encode()).hexdigest()
    assert config_fingerprint(plain) == legacy
    mirrored = parse_config({**LAB, "chartSources": {"hami": "oci://harbor.example.com/charts"}})
    assert config_fingerprint(mirrored) != legacy
    assert config_fingerprint(parse_config({**LAB, "monitoring": {"retention": "30d"}})) != legacy
    tenants = [{**LAB["tenants"][0], "controlPlaneCpuRequests": {"apiServer": "100m"}}]
    smaller = parse_config({**LAB, "tenants": tenants + LAB["tenants"][1:]})
    assert config_fingerprint(smaller) != legacy
