"""Every workflow in .github/workflows passes actionlint (built by tests/real/binaries.py), its
shellcheck integration on: expressions, action inputs, job graph, and each `run:` script.

actionlint skips shellcheck when there is none on PATH, which would check the scripts not at
all; so the tier installs Debian's `shellcheck` when it is missing (apt, as root or through
`sudo -n`, as the host tier installs docker.io) and hands actionlint its path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from binaries import ACTIONLINT_VERSION, bin_path

from tests.support.debian_packages import PackageUnavailable, install_if_missing

PROJECT_DIR = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((PROJECT_DIR / ".github" / "workflows").glob("*.y*ml"))


def installed(program: str, package: str) -> str:
    """The path of `program`, after installing Debian's `package` when it is not on PATH."""
    try:
        install_if_missing(program, package)
    except PackageUnavailable as error:
        pytest.fail(f"{program} is needed: {error}")
    found = shutil.which(program)
    assert found, f"apt installed {package}, but {program} is not on PATH"
    return found


@pytest.fixture(scope="module")
def shellcheck() -> str:
    return installed("shellcheck", "shellcheck")


def actionlint(*args: str, cwd: Path = PROJECT_DIR) -> subprocess.CompletedProcess[str]:
    actionlint = bin_path("actionlint")
    assert actionlint.exists(), "not built: run `make test-real`"
    return subprocess.run(
        [str(actionlint), "-no-color", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_actionlint_is_the_pinned_release():
    result = actionlint("-version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == ACTIONLINT_VERSION.removeprefix("v")


def test_there_are_workflows_to_lint():
    assert {path.name for path in WORKFLOWS} >= {"pull-request.yml", "real-host-e2e.yml"}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_actionlint_accepts_the_workflow(workflow, shellcheck):
    # pyflakes is off: no step runs a `shell: python` script.
    result = actionlint("-shellcheck", shellcheck, "-pyflakes=", str(workflow))
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_shellcheck_does_check_the_scripts(tmp_path, shellcheck):
    """The counter-check: the same flags report an unquoted variable in a `run:` script, so a
    clean result above means shellcheck read every script."""
    workflow = tmp_path / "unquoted.yml"
    workflow.write_text(
        "on: push\npermissions: {}\njobs:\n  a:\n    runs-on: ubuntu-24.04\n"
        "    timeout-minutes: 5\n    steps:\n      - run: echo $HOME\n"
    )
    result = actionlint("-shellcheck", shellcheck, "-pyflakes=", str(workflow), cwd=tmp_path)
    assert result.returncode == 1
    assert "SC2086" in result.stdout, result.stdout
