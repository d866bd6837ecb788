"""What a pull request changes in a stack, from two throwaway previews (.github/scripts/
preview_diff.py, docs/workflows.md): tested on previews of commits of this repository whose
difference is known.

tests/previews/ holds `pulumi preview --stack lab --json` of the `lab` stack on an empty
throwaway backend (CLI v3.274.1, the stand-ins of tests/real/pulumi_workspace.py), trimmed by
tests/previews/trim.py (the providers of the whole-lab run, docs/whole-lab-run.md: command
v1.2.1, kubernetes at 94977969, docker at 237b7899):

- abcf10e-lab.json: commit abcf10e;
- 0393e00-lab.json: its child 0393e00, which gave the validation step one more trigger (a hash
  of the tenants' Helm releases, components/lab.py `release_fingerprint`) and nothing else
  that a preview sees (its other changes are labcheck's and the tests');
- 0393e00-hamiSplitCount-8-lab.json: 0393e00 with one config key set in Pulumi.lab.yaml,
  `kamaji-hami-lab:hamiSplitCount: 8` (the default is 10).

Each was a preview of its own, so the IDs pulumi-command makes up in a preview differ between
them as they do between the base's and the head's previews in the job.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.modules import load_module
from tests.support.pulumi_harness import PROJECT_DIR

PREVIEWS = Path(__file__).parent / "previews"


D = load_module("preview_diff", PROJECT_DIR / ".github" / "scripts" / "preview_diff.py")
TRIM = load_module("trim_previews", PREVIEWS / "trim.py")


@cache
def preview(name: str) -> dict:
    return json.loads((PREVIEWS / f"{name}-lab.json").read_text())


def names(resources) -> list[str]:
    return [resource.name for resource in resources]


def by_name(diff) -> dict[str, list]:
    return {entry.resource.name: list(entry.changes) for entry in diff.changed}


# -- two commits of this repository --------------------------------------------------------------


def test_0393e00_changes_one_input_of_the_validation_step_and_nothing_else():
    diff = D.diff_previews(preview("abcf10e"), preview("0393e00"))
    assert (diff.added, diff.removed, diff.config) == ((), (), ())
    assert by_name(diff) == {
        # The new trigger: a hash of the releases' outputs, unknown before they exist.
        "validation-labcheck": [D.Change("triggers[4]", D.ABSENT, D.UNKNOWN)]
    }
    (entry,) = diff.changed
    assert entry.resource.type == "command:local:Command"
    assert diff.unchanged == len(preview("0393e00")["steps"]) - 1 == 81


def test_what_a_reviewer_sees_for_0393e00():
    text = D.render(D.diff_previews(preview("abcf10e"), preview("0393e00")))
    assert text == (
        "**1 changed, 0 added, 0 removed**, 81 unchanged.\n"
        "\n"
        "Changed, input by input (base -> head):\n"
        "\n"
        "- `validation-labcheck` (`command:local:Command`)\n"
        "  - `triggers[4]`: `(none)` -> `(unknown until up)`\n"
    )


@pytest.mark.upstream("pulumi-command-preview-id-random")
def test_the_ids_a_preview_makes_up_are_no_change():
    """Between the two commits 13 resources' inputs differ in the IDs pulumi-command made up
    for the Commands they depend on (`management-kind8d3bfefd` against `...84996b76`)."""
    base = {s["urn"]: s["newState"]["inputs"] for s in preview("abcf10e")["steps"]}
    head = {s["urn"]: s["newState"]["inputs"] for s in preview("0393e00")["steps"]}
    raw = sorted(urn.rsplit("::", 1)[1] for urn in head if base[urn] != head[urn])
    assert len(raw) == 13 and "management-provider" in raw and "tenant-a-worker-1" in raw
    made_up = re.compile(r"management-kind[0-9a-f]{8}\b")
    ids = {made_up.search(json.dumps(side)).group(0) for side in (base, head)}
    assert len(ids) == 2  # one per preview
    assert by_name(D.diff_previews(preview("abcf10e"), preview("0393e00"))).keys() == {
        "validation-labcheck"
    }
    # What a changed trigger that carries one shows.
    shown = D.normalise(f"kind-x/{ids.pop()}", D.preview_id_pattern(["management-kind"]))
    assert shown == "kind-x/management-kind[preview id]"


def test_one_config_key_shows_as_itself_and_as_each_input_it_reaches():
    diff = D.diff_previews(preview("0393e00"), preview("0393e00-hamiSplitCount-8"))
    assert diff.config == (D.Change("kamaji-hami-lab:hamiSplitCount", "10", "8"),)
    assert (diff.added, diff.removed) == ((), ())
    changed = by_name(diff)
    for tenant in ("tenant-a", "tenant-b"):
        # HAMi's device plugin and the simulated GPUs' agent, each told the new count.
        assert changed[f"{tenant}-hami-chart"] == [
            D.Change("values.devicePlugin.deviceSplitCount", 10, 8)
        ]
        assert changed[f"{tenant}-simulated-gpus-config"] == [
            D.Change('data["config.json"](json).splitCount', 10, 8)
        ]
        (registration,) = changed[f"{tenant}-simulated-gpus-registration-mutatingadmissionpolicy"]
        assert registration.path == "spec.mutations[0].applyConfiguration.expression"
        assert '"count":10,' in registration.base and '"count":8,' in registration.head
        assert registration.base.replace('"count":10,', '"count":8,') == registration.head
        # The agent's Deployment rolls: its config's checksum.
        (checksum,) = changed[f"{tenant}-simulated-gpus-agent"]
        assert checksum.path == 'spec.template.metadata.annotations["checksum/agent"]'
    # labcheck re-runs on any config change: the config's fingerprint.
    (fingerprint,) = changed["validation-labcheck"]
    assert fingerprint.path == "triggers[0]"
    assert len(changed) == 9 and diff.unchanged == 73


def test_what_a_reviewer_sees_for_one_config_key():
    text = D.render(D.diff_previews(preview("0393e00"), preview("0393e00-hamiSplitCount-8")))
    assert text.startswith(
        "**9 changed, 0 added, 0 removed**, 73 unchanged; 1 config key changed.\n"
        "\n"
        "Config:\n"
        "\n"
        '- `kamaji-hami-lab:hamiSplitCount`: `"10"` -> `"8"`\n'
        "\n"
        "Changed, input by input (base -> head):\n"
        "\n"
        "- `tenant-a-hami-chart` (`kubernetes:helm.sh/v3:Release`)\n"
        "  - `values.devicePlugin.deviceSplitCount`: `10` -> `8`\n"
    )
    assert (
        "- `tenant-b-simulated-gpus-config` (`kubernetes:core/v1:ConfigMap`)\n"
        '  - `data["config.json"](json).splitCount`: `10` -> `8`\n'
    ) in text
    # The long CEL expression: cut to where it differs.
    line = next(line for line in text.splitlines() if "applyConfiguration.expression" in line)
    assert '"index":0,"count":10,"devmem":81920' in line and "…" in line
    assert len(line) < 3 * D.WIDTH


def test_the_docs_show_what_the_summary_says():
    """docs/workflows.md's two examples are the renderer's lines for the two fixtures' pairs,
    in order; the one-key example cut where it says `...`."""
    text = (PROJECT_DIR / "docs" / "workflows.md").read_text()
    key, commit = re.findall(r"```markdown\n(.*?)```", text, re.S)
    rendered = D.render(D.diff_previews(preview("0393e00"), preview("0393e00-hamiSplitCount-8")))
    remaining = iter(rendered.splitlines())
    shown = [line for line in key.splitlines() if line != "..."]
    assert all(line in remaining for line in shown)  # a subsequence
    assert len(shown) < len(rendered.splitlines())
    assert commit == D.render(D.diff_previews(preview("abcf10e"), preview("0393e00")))


def test_a_preview_against_itself_is_no_difference():
    diff = D.diff_previews(preview("0393e00"), json.dumps(preview("0393e00")))
    assert diff.empty and diff.unchanged == 82
    assert D.render(diff).startswith("**No difference**: both plan the same 82 resources")


def test_the_fixtures_are_what_trim_makes_of_them():
    """Trimming again changes nothing: the fixtures are trim.py's output."""
    for path in PREVIEWS.glob("*-lab.json"):
        digest = json.loads(path.read_text())
        assert TRIM.trimmed(digest) == digest, path.name
        assert set(digest) == {"config", "steps", "changeSummary"}
        assert digest["changeSummary"] == {"create": 80}


@pytest.mark.upstream("pulumi-preview-json-digest")
def test_the_fixtures_have_the_shape_the_cli_prints():
    for path in PREVIEWS.glob("*-lab.json"):
        digest = json.loads(path.read_text())
        assert {step["op"] for step in digest["steps"]} == {"create", "read"}
        secrets = [
            step["urn"]
            for step in digest["steps"]
            if D.SECRET in json.dumps(step["newState"]["inputs"])
        ]
        assert any(urn.endswith("::validation-labcheck") for urn in secrets)  # LABCHECK_SPEC
        assert D.UNKNOWN in json.dumps(digest)
        assert all(isinstance(value, str) for value in digest["config"].values())


# -- the comparison, piece by piece --------------------------------------------------------------


def digest(*resources: tuple[str, str, dict], config: dict | None = None, op: str = "create"):
    steps = [
        {
            "op": op,
            "urn": f"urn:pulumi:lab::kamaji-hami-lab::{kind}::{name}",
            "newState": {"type": kind, "inputs": inputs},
        }
        for name, kind, inputs in resources
    ]
    return {"config": config or {}, "steps": steps}


def test_a_resource_only_in_head_is_added_only_in_base_removed():
    base = digest(("a", "t:m:A", {}), ("gone", "t:m:G", {"x": 1}))
    head = digest(("a", "t:m:A", {}), ("new", "t:m:N", {"y": 2}))
    diff = D.diff_previews(base, head)
    assert names(diff.added) == ["new"] and names(diff.removed) == ["gone"]
    assert diff.added[0].type == "t:m:N" and diff.unchanged == 1
    text = D.render(diff)
    assert "Added:\n\n- `new` (`t:m:N`)\n" in text and "Removed:\n\n- `gone` (`t:m:G`)\n" in text


def test_a_deleted_step_leaves_no_resource():
    base = digest(("a", "t:m:A", {}))
    base["steps"].append({"op": "delete", "urn": base["steps"][0]["urn"]})
    assert names(D.diff_previews(base, digest(("a", "t:m:A", {}))).added) == ["a"]


def test_each_changed_input_has_its_path_and_both_values():
    base = digest(("r", "t:m:R", {"spec": {"n": 1, "keep": "k", "gone": True}, "l": [1, 2]}))
    head = digest(("r", "t:m:R", {"spec": {"n": 2, "keep": "k", "new": None}, "l": [1, 3, 4]}))
    assert by_name(D.diff_previews(base, head))["r"] == [
        D.Change("l[1]", 2, 3),
        D.Change("l[2]", D.ABSENT, 4),
        D.Change("spec.gone", True, D.ABSENT),
        D.Change("spec.n", 1, 2),
        D.Change("spec.new", D.ABSENT, None),
    ]


def test_keys_that_are_not_names_are_quoted():
    base = digest(("r", "t:m:R", {"metadata": {"labels": {"app.kubernetes.io/name": "a"}}}))
    head = digest(("r", "t:m:R", {"metadata": {"labels": {"app.kubernetes.io/name": "b"}}}))
    (change,) = by_name(D.diff_previews(base, head))["r"]
    assert change.path == 'metadata.labels["app.kubernetes.io/name"]'


def test_a_string_of_json_is_compared_as_json_and_any_other_string_whole():
    base = digest(("r", "t:m:R", {"c": '{"a": 1, "b": [1]}', "s": "{not json", "t": "[1]"}))
    head = digest(("r", "t:m:R", {"c": '{"b": [1],\n "a": 2}', "s": "{not json!", "t": "x"}))
    assert by_name(D.diff_previews(base, head))["r"] == [
        D.Change("c(json).a", 1, 2),
        D.Change("s", "{not json", "{not json!"),
        D.Change("t", "[1]", "x"),
    ]


def test_secrets_are_masked_whichever_form_they_come_in():
    """The CLI prints a secret as `[secret]`; one still in its envelope is masked here."""
    envelope = {D.SECRET_SIG: "1b47061264138c4ac30d75fd1eb44270", "plaintext": '"hunter2"'}
    base = digest(("r", "t:m:R", {"password": envelope, "token": "[secret]", "n": 1}))
    head = digest(("r", "t:m:R", {"password": "[secret]", "token": envelope, "n": 2}))
    assert by_name(D.diff_previews(base, head))["r"] == [D.Change("n", 1, 2)]
    made_plain = D.diff_previews(base, digest(("r", "t:m:R", {"password": "p", "token": "t"})))
    text = D.render(made_plain)
    assert "hunter2" not in text
    assert '- `password`: `[secret]` -> `"p"`' in text


def test_the_providers_bookkeeping_is_not_an_input():
    base = digest(("r", "t:m:R", {"__defaults": ["a"], "a": "x"}))
    head = digest(("r", "t:m:R", {"__defaults": [], "a": "x"}))
    assert D.diff_previews(base, head).empty


def test_a_step_that_changes_kind_is_a_change():
    head = digest(("r", "t:m:R", {}))
    base = digest(("r", "t:m:R", {}), op="read")
    assert by_name(D.diff_previews(base, head))["r"] == [D.Change("(step)", "read", "create")]


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("tenant-a-join", "tenant-a-join0123abcd", "tenant-a-join[preview id]"),
        ("web", "web-0123abcd", "web[preview id]"),  # a Kubernetes auto-name
        ("join", "x/join0123abcd:6443", "x/join[preview id]:6443"),
        ("join", "join0123abcde", "join0123abcde"),  # 9 hex digits: not an ID
        ("join", "rejoin0123abcd", "rejoin0123abcd"),  # another name
        ("join", "join0123ABCD", "join0123ABCD"),
    ],
)
def test_a_preview_id_is_a_resource_name_and_8_hex_digits(name, value, shown):
    assert D.normalise({"v": [value]}, D.preview_id_pattern([name])) == {"v": [shown]}


def test_config_keys_are_named_as_in_the_stack_file():
    base = digest(config={"p:k": "1", "p:list": '[{"a": 1}]', "p:gone": "x", "p:pw": "[secret]"})
    head = digest(config={"p:k": "2", "p:list": '[{"a": 2}]', "p:new": "y", "p:pw": "[secret]"})
    assert D.diff_previews(base, head).config == (
        D.Change("p:gone", "x", D.ABSENT),
        D.Change("p:k", "1", "2"),
        D.Change("p:list(json)[0].a", 1, 2),
        D.Change("p:new", D.ABSENT, "y"),
    )


# -- the markdown --------------------------------------------------------------------------------


def test_a_long_value_is_cut_around_what_differs():
    base = "x" * 500 + "OLD" + "y" * 500
    head = "x" * 500 + "NEW" + "y" * 500
    short_base, short_head = D.shortened(base, head)
    assert short_base == "…" + "x" * D.CONTEXT + "OLD" + "y" * D.CONTEXT + "…"
    assert short_head == "…" + "x" * D.CONTEXT + "NEW" + "y" * D.CONTEXT + "…"
    assert D.shortened("short", "also short") == ("short", "also short")
    long_base, long_head = D.shortened("a" * 300, "b" * 300)
    assert "…(200 more)…" in long_base and len(long_head) < D.WIDTH + 20


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (D.ABSENT, "(none)"),
        (D.UNKNOWN, "(unknown until up)"),
        ("[secret]", "[secret]"),
        ('say "hi"\n\tnow', '"say "hi"\\n\\tnow"'),
        (8, "8"),
        ({"b": 1, "a": [True, None]}, '{"a": [true, null], "b": 1}'),
    ],
)
def test_values_show_on_one_line(value, shown):
    assert D.shown(value) == shown


@pytest.mark.parametrize(
    ("text", "span"),
    [("a", "`a`"), ("a`b", "``a`b``"), ("`a", "`` `a ``"), ("x``y`", "``` x``y` ```")],
)
def test_a_code_span_holds_any_backticks(text, span):
    assert D.code(text) == span


def test_a_resource_with_many_changed_inputs_lists_the_first_and_counts_the_rest():
    many = D.MOST_INPUTS + 3
    base = digest(("r", "t:m:R", {f"k{i:02}": 0 for i in range(many)}))
    head = digest(("r", "t:m:R", {f"k{i:02}": 1 for i in range(many)}))
    text = D.render(D.diff_previews(base, head))
    assert text.count("\n  - `k") == D.MOST_INPUTS
    assert "  - … and 3 more inputs\n" in text
