"""Golden snapshot of what each stack declares: every registration under the mocks harness.

Type, name, parent, dependencies, provider, options and inputs (secrets masked) of every
resource of `lab`, `gpu` and `nvml`, sorted by URN, in `tests/snapshots/<stack>.json`. A
change to the graph shows in review as a diff of these files; a refactor must leave them
unchanged. Refresh after an intended change, then read the diff:

    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/components/test_snapshot.py
"""

from __future__ import annotations

import difflib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    PROJECT_DIR,
    ProgramRun,
    Registration,
    run_program,
    stack_config,
)

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
MASK = "[secret]"
# The secrets a user sets on the gpu stack (Pulumi.gpu.yaml says how); fixed fake values.
GPU_SECRETS = {"sshPrivateKey": "fake-ssh-key", "managementKubeconfig": FAKE_KUBECONFIG}
STACKS = {
    "lab": stack_config("lab"),
    "gpu": {**stack_config("gpu"), **GPU_SECRETS},
    "nvml": stack_config("nvml"),
    "dra": stack_config("dra"),
}


def _masked(value: Any, secret_paths: set[str], path: str = "") -> Any:
    if path in secret_paths:
        return MASK
    if isinstance(value, dict):
        return {
            key: _masked(item, secret_paths, f"{path}.{key}" if path else key)
            for key, item in sorted(value.items())
        }
    if isinstance(value, list):
        return [_masked(item, secret_paths, f"{path}[{i}]") for i, item in enumerate(value)]
    return value


def _portable(text: str, chart_cache: Path) -> str:
    """Paths of this checkout, interpreter and chart cache vary by run; the graph does not."""
    for path, mark in ((chart_cache, "<chart-cache>"), (PROJECT_DIR, "<project>")):
        text = text.replace(str(path), mark)
    return text.replace(sys.executable, "<python>")


def _entry(registration: Registration) -> dict[str, Any]:
    return {
        "type": registration.type,
        "name": registration.name,
        "parent": registration.parent,
        "custom": registration.custom,
        "read": registration.read,
        "readId": registration.read_id,
        "provider": registration.provider.rsplit("::", 1)[0],
        "dependencies": sorted(registration.dependencies),
        "propertyDependencies": {
            key: sorted(urns) for key, urns in sorted(registration.property_dependencies.items())
        },
        "deleteBeforeReplace": registration.delete_before_replace,
        "ignoreChanges": sorted(registration.ignore_changes),
        "additionalSecretOutputs": sorted(registration.secret_outputs),
        "inputs": _masked(registration.inputs, registration.secret_inputs),
    }


def snapshot(run: ProgramRun, chart_cache: Path) -> str:
    """The run as stable, reviewable JSON text: one object per URN, keys sorted."""
    entries = {r.urn: _entry(r) for r in sorted(run.resources, key=lambda r: r.urn)}
    assert len(entries) == len(run.resources), "two registrations share a URN"
    return _portable(json.dumps(entries, indent=1, sort_keys=True), chart_cache) + "\n"


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_the_stack_declares_what_its_golden_file_says(stack: str, kamaji_charts_already_cached):
    actual = snapshot(run_program(STACKS[stack], stack=stack), kamaji_charts_already_cached)
    golden = SNAPSHOTS / f"{stack}.json"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        golden.write_text(actual)
    assert golden.exists(), f"no {golden.name}: run with UPDATE_SNAPSHOTS=1 to write it"
    expected = golden.read_text()
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), actual.splitlines(), golden.name, "this run", lineterm="", n=2
        )
        lines = list(diff)
        shown = "\n".join(lines[:120]) + ("\n..." if len(lines) > 120 else "")
        pytest.fail(
            f"{stack}: the program declares something else than {golden.name} "
            f"(UPDATE_SNAPSHOTS=1 refreshes it after an intended change):\n{shown}"
        )


def test_secrets_are_masked_in_the_snapshot(kamaji_charts_already_cached):
    run = run_program(STACKS["gpu"], stack="gpu")
    text = snapshot(run, kamaji_charts_already_cached)
    assert "fake-ssh-key" not in text
    assert MASK in text
    assert any(r.secret_inputs for r in run.resources)


def test_the_snapshot_shows_a_change_to_an_input(kamaji_charts_already_cached):
    base = run_program(STACKS["lab"], stack="lab")
    other = run_program({**STACKS["lab"], "poolRange": "172.30.255.200-172.30.255.210"})
    cache = kamaji_charts_already_cached
    assert snapshot(base, cache) != snapshot(other, cache)
