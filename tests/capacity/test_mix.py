"""The workload mix file: what it accepts, and errors that name the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from capacity.mix import GpuMem, MixError, check_tenants, load_mix, parse_duration, parse_mix
from capacity.plan import CONTAINER, limits, namespace_name, plan_pods, pod_manifest
from labcheck.dra import webhook_claim_name
from labcheck.spec import parse_spec
from tests.capacity.hami_fake import capacity_lab

MIXES = Path(__file__).resolve().parents[2] / "capacity" / "mixes"


def entry(**over):
    return {"tenant": "tenant-b", "name": "infer", "count": 2, "gpumem": 4000, **over}


def error_of(data) -> str:
    with pytest.raises(MixError) as exc:
        parse_mix(data)
    return str(exc.value)


@pytest.mark.parametrize(
    ("name", "pods", "whole"),
    [("inference-heavy", 14, 14), ("notebook-heavy", 19, 19), ("cannot-fit", 7, 8)],
)
def test_the_example_mixes_load(name, pods, whole):
    mix = load_mix(str(MIXES / f"{name}.yaml"))
    assert (mix.name, mix.pod_count(), mix.whole_gpus()) == (name, pods, whole)
    check_tenants(mix, parse_spec(capacity_lab().spec))  # only the lab stack's tenants


def test_gpumem_is_mb_or_a_percentage_of_a_card():
    mix = parse_mix({"entries": [entry(), entry(name="nb", gpumem="15%", gpus=2, gpucores=20)]})
    mb, pct = mix.entries
    assert (mb.gpumem.mb, mb.gpumem.percent, str(mb.gpumem)) == (4000, None, "4000 MB")
    assert (pct.gpumem.mb, pct.gpumem.percent, str(pct.gpumem)) == (None, 15, "15%")
    assert (mb.gpus, mb.gpucores, mb.duration) == (1, 0, None)
    assert mix.whole_gpus() == 2 + 2 * 2


@pytest.mark.parametrize(
    ("bad", "field", "says"),
    [
        ({"gpumem": "6000"}, "gpumem", "must be MB as an integer (6000) or a percentage"),
        ({"gpumem": "150%"}, "gpumem", "1% to 100%"),
        ({"gpumem": "0%"}, "gpumem", "1% to 100%"),
        ({"gpumem": 0}, "gpumem", "positive"),
        ({"gpumem": True}, "gpumem", "must be MB"),
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": "3"}, "count", "valid integer"),
        ({"gpucores": 101}, "gpucores", "less than or equal to 100"),
        ({"gpus": 0}, "gpus", "greater than or equal to 1"),
        ({"name": "Infer_1"}, "name", "lowercase letters"),
        ({"duration": "8 hours"}, "duration", "such as '8h'"),
        ({"duration": "0h"}, "duration", "longer than 0"),
        ({"gpumemory": 1}, "gpumemory", "Extra inputs are not permitted"),
    ],
)
def test_an_invalid_entry_names_its_field(bad, field, says):
    text = error_of({"entries": [entry(name="a"), entry(name="b"), entry(**bad)]})
    line = next(line for line in text.splitlines() if line.startswith("  mix."))
    assert line.startswith(f"  mix.entries[2].{field}: "), text
    assert says in line, text


def test_missing_fields_duplicates_and_the_whole_file():
    assert "  mix.entries[0].tenant: Field required" in error_of({"entries": [{"name": "x"}]})
    assert "  mix.entries: List should have at least 1 item" in error_of({"entries": []})
    assert "entry names must be unique: infer" in error_of({"entries": [entry(), entry()]})
    assert "expected a mapping with 'entries'" in error_of(["not", "a", "mix"])


def test_a_file_that_is_not_yaml_or_missing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("entries: [\n")
    with pytest.raises(MixError, match="not YAML"):
        load_mix(str(bad))
    with pytest.raises(MixError, match="cannot read mix file"):
        load_mix(str(tmp_path / "none.yaml"))


@pytest.mark.parametrize(
    ("text", "seconds"), [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("2d", 172800), (60, 60)]
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_tenants_must_be_the_stack_s_and_have_gpus():
    lab = capacity_lab()
    lab.spec["tenants"][1]["gpus"] = {}
    spec = parse_spec(lab.spec)
    mix = parse_mix({"entries": [entry(tenant="tenant-c"), entry(name="b")]})
    with pytest.raises(MixError) as exc:
        check_tenants(mix, spec)
    assert str(exc.value).splitlines()[1:] == [
        "  mix.entries[0].tenant: no tenant 'tenant-c' in stack lab (tenants: tenant-a, tenant-b)",
        "  mix.entries[1].tenant: tenant tenant-b has no GPU node",
    ]


@pytest.mark.upstream("hami-gpumem-percentage")
def test_a_percentage_asks_hami_s_percentage_resource_and_no_mb():
    mix = parse_mix({"entries": [entry(), entry(name="nb", gpumem="15%", gpucores=20, gpus=2)]})
    assert limits(mix.entries[0]) == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    assert limits(mix.entries[1]) == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem-percentage": "15",
        "nvidia.com/gpucores": "20",
    }


def test_the_plan_names_every_pod_in_file_order():
    mix = parse_mix({"entries": [entry(count=2), entry(name="nb", count=1, duration="1h")]})
    plan = plan_pods(mix, "1a2b3c4d")
    assert [(p.name, p.duration) for p in plan] == [
        ("infer-0", None),
        ("infer-1", None),
        ("nb-0", 3600),
    ]
    body = pod_manifest(mix.entries[0], plan[0].name, "1a2b3c4d", "registry.k8s.io/pause:3.10")
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "capacity",
        "capacity.lab/run-id": "1a2b3c4d",
        "capacity.lab/entry": "infer",
        "scheduling.x-k8s.io/pod-group": "capacity-1a2b3c4d",
    }
    assert body["spec"]["terminationGracePeriodSeconds"] == 0
    # The longest entry name still makes a valid pod name (<= 63 characters).
    assert len(plan_pods(parse_mix({"entries": [entry(name="a" * 30)]}), "1a2b3c4d")[0].name) < 64


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_a_runs_pods_form_one_pod_group_so_hamis_bind_waits_for_the_lock():
    """Without the label every Bind that meets a held lock fails and backs off (the last pod of
    a 20-pod burst after 30-50 s); tests/real/test_placement_burst.py measures both."""
    mix = parse_mix({"entries": [entry(count=2)]})
    bodies = [
        pod_manifest(mix.entries[0], p.name, "1a2b3c4d", "pause")
        for p in plan_pods(mix, "1a2b3c4d")
    ]
    groups = {body["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for body in bodies}
    assert groups == {"capacity-1a2b3c4d"}


# The documented limits (docs/capacity.md, "The workload mix"): the last value each key takes
# and the first it refuses, with what the error says. (key, last valid, parsed as, first invalid)
LIMITS = [
    ("name", "a" * 30, "a" * 30, "a" * 31, "must be 1-30 lowercase letters"),
    ("name", "a", "a", "", "must be 1-30 lowercase letters"),
    ("name", "a-b", "a-b", "a-", "starting and ending with a letter or digit"),
    ("name", "0-b", "0-b", "-b", "starting and ending with a letter or digit"),
    ("tenant", "t", "t", "", "at least 1 character"),
    ("count", 1, 1, 0, "greater than or equal to 1"),
    ("count", 500, 500, 501, "less than or equal to 500"),
    ("gpumem", 1, GpuMem(mb=1), 0, "MB must be a positive integer"),
    ("gpumem", "1%", GpuMem(percent=1), "0%", "1% to 100%"),
    ("gpumem", "100%", GpuMem(percent=100), "101%", "1% to 100%"),
    ("gpucores", 0, 0, -1, "greater than or equal to 0"),
    ("gpucores", 100, 100, 101, "less than or equal to 100"),
    ("gpus", 1, 1, 0, "greater than or equal to 1"),
    ("gpus", 16, 16, 17, "less than or equal to 16"),
    ("duration", 1, 1, 0, "longer than 0"),
    ("duration", "1m", 60, "0m", "longer than 0"),
]


@pytest.mark.parametrize(("key", "last", "parsed", "first_bad", "says"), LIMITS)
def test_each_limit_takes_its_last_value_and_names_the_key_past_it(
    key, last, parsed, first_bad, says
):
    mix = parse_mix({"entries": [entry(**{key: last})]})
    assert getattr(mix.entries[0], key) == parsed
    lines = error_of({"entries": [entry(**{key: first_bad})]}).splitlines()[1:]
    assert len(lines) == 1 and lines[0].startswith(f"  mix.entries[0].{key}: "), lines
    assert says in lines[0], lines


def test_at_most_500_pods_in_all_and_the_error_names_the_entries():
    """Each count may be 500, but the run's pods together too: the sum is a limit of its own."""
    split = {"entries": [entry(name="a", count=250), entry(name="b", count=250)]}
    assert parse_mix(split).pod_count() == 500
    split["entries"][1]["count"] = 251
    assert error_of(split).splitlines()[1:] == [
        "  mix.entries: 501 pods in all (count summed): at most 500 per run"
    ]


def test_entries_at_least_one_each_name_once_and_the_errors_name_the_entries():
    assert len(parse_mix({"entries": [entry(name="a")]}).entries) == 1
    assert error_of({"entries": []}).splitlines()[1:] == [
        "  mix.entries: List should have at least 1 item after validation, not 0"
    ]
    assert parse_mix({"entries": [entry(name="a"), entry(name="b")]}).pod_count() == 4
    assert error_of({"entries": [entry(name="a"), entry(name="a")]}).splitlines()[1:] == [
        "  mix.entries: entry names must be unique: a"
    ]


def test_the_longest_name_at_the_highest_count_still_makes_valid_pod_and_claim_names():
    """Why names stop at 30: in the run's own namespace <name>-<index up to 499>, and in a DRA
    tenant its claim capacity-<run>-<pod>-slice, stay DNS labels (<= 63); with --namespace the
    pod cap-<run, 8>-<name>-<index> does too."""
    mix = parse_mix({"entries": [entry(name="a" * 30, count=500)]})
    label = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
    last = plan_pods(mix, "1a2b3c4d")[-1].name
    assert last == f"{'a' * 30}-499"
    claim = webhook_claim_name(namespace_name("1a2b3c4d"), last, CONTAINER)
    assert len(claim) == 58 and label.fullmatch(claim)
    shared = plan_pods(mix, "1a2b3c4d", shared=True)[-1].name
    assert shared == f"cap-1a2b3c4d-{'a' * 30}-499"
    assert len(shared) <= 63 and label.fullmatch(shared)
