"""UpgradeGuard under the real Pulumi CLI (v3.274.1): the stack reads its own last outputs in
preview, and a downgrade or a skipped minor stops the preview with one error line.

pulumi-kubernetes previews an update as a server-side dry run but takes a 403 from admission
as "cannot tell", and Kamaji's webhook refuses with 403 (fact
pulumi-kubernetes-preview-ignores-forbidden): without the guard, `pulumi preview` would show a
refused version change as an ordinary update.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from binaries import bin_path
from pulumi_workspace import PulumiWorkspace, error_lines

from tests.support.pulumi_harness import PROJECT_DIR

PROGRAM = Path(__file__).parent / "programs" / "upgrade-guard"


@pytest.fixture
def guarded(tmp_path) -> PulumiWorkspace:
    """A stack of the guard's program, deployed once at v1.35.8."""
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    project = tmp_path / "project"
    shutil.copytree(PROGRAM, project)
    workspace = PulumiWorkspace(tmp_path, project=project)
    workspace.env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(PROJECT_DIR), os.environ.get("PYTHONPATH")])
    )
    workspace.pulumi("stack", "init", "lab")
    set_version(workspace, "v1.35.8")
    workspace.pulumi("up", "--yes", "--stack", "lab")
    return workspace


def set_version(workspace: PulumiWorkspace, version: str) -> None:
    workspace.pulumi("config", "set", "--stack", "lab", "version", version)


def preview(workspace: PulumiWorkspace, version: str) -> tuple[int, str]:
    set_version(workspace, version)
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    return result.returncode, result.stdout + result.stderr


@pytest.mark.upstream("pulumi-stack-reference-to-itself")
def test_an_upgrade_is_described_from_the_stacks_own_last_outputs(guarded):
    code, output = preview(guarded, "v1.36.4")
    assert code == 0, output
    assert "tenant tenant-a: v1.35.8 -> v1.36.4. Kamaji upgrades the control plane first" in output
    assert error_lines(output) == []


@pytest.mark.upstream(
    "pulumi-stack-reference-to-itself",
    "pulumi-python-run-error-no-traceback",
    "pulumi-kubernetes-preview-ignores-forbidden",
)
@pytest.mark.parametrize(
    ("version", "error"),
    [
        ("v1.34.11", "error: tenants[0].kubernetesVersion: v1.34.11 is older than v1.35.8"),
        ("v1.37.0", "error: tenants[0].kubernetesVersion: v1.37.0 skips a minor version"),
    ],
)
def test_a_refused_change_stops_the_preview_with_one_line(guarded, version, error):
    code, output = preview(guarded, version)
    assert code != 0, output
    errors = error_lines(output)
    assert errors and errors[0].startswith(error), output
    assert "Traceback" not in output


@pytest.mark.upstream("pulumi-stack-reference-to-itself")
def test_after_the_upgrade_the_record_moves_and_the_next_preview_is_quiet(guarded):
    set_version(guarded, "v1.36.4")
    guarded.pulumi("up", "--yes", "--stack", "lab")
    code, output = preview(guarded, "v1.36.4")
    assert code == 0, output
    assert "->" not in output
    code, output = preview(guarded, "v1.35.8")  # now a downgrade
    assert "is older than v1.36.4" in output and code != 0
