"""What a new user meets first, with the real Pulumi CLI (issue 17 items 4, 5, 9).

- a preview on a machine without helm: one `error:` line that says what to do, no traceback;
- `make preview` on a fresh backend: it creates the stack (it used to stop with `no stack
  named 'lab' found`);
- `python -m labcheck --stack lab` before any `up`: it says to run `make up` first;
- the backend order the README states: `PULUMI_BACKEND_URL`, then `Pulumi.yaml`'s
  `backend.url`, and a `pulumi login` elsewhere moves nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from binaries import bin_path
from pulumi_workspace import PulumiWorkspace, error_lines
from test_pulumi_cli import PLUGIN_ERROR

from labconfig.kamaji_sources import KAMAJI_SOURCES
from tests.support.pulumi_harness import PROJECT

LAB_SOURCE = KAMAJI_SOURCES["26.8.2-edge"]


def path_without(root: Path, *missing: str) -> str:
    """This machine's PATH as one directory of links, minus `missing`: a tool that is
    installed here cannot hide behind another PATH entry."""
    shadow = root / f"path-without-{'-'.join(missing)}"
    shadow.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = shadow / entry.name
            if entry.name in missing or link.exists() or not os.access(entry.path, os.X_OK):
                continue
            link.symlink_to(entry.path)
    return str(shadow)


@pytest.fixture
def workspace(tmp_path: Path) -> PulumiWorkspace:
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    return PulumiWorkspace(tmp_path)  # with the charts, as fetched before


def with_path(ws: PulumiWorkspace, directory: str) -> None:
    """The workspace's own PATH (pulumi, the venv) in front of `directory`."""
    venv = Path(ws.env["VIRTUAL_ENV"])
    ws.env["PATH"] = os.pathsep.join([str(bin_path("")), str(venv / "bin"), directory])


@pytest.mark.upstream("pulumi-python-run-error-no-traceback")
def test_a_preview_without_helm_stops_with_one_error_line(workspace, tmp_path):
    """Item 4: the charts' fetch ended in `Program failed with an unhandled exception:` and a
    Python traceback, naming a README section that does not exist, after half a plan (or
    behind the first provider plugin that could not be had). Now the program stops before it
    registers anything, and the CLI shows that one line."""
    shutil.rmtree(workspace.project / ".cache")  # a fresh checkout: no charts yet
    with_path(workspace, path_without(tmp_path, "helm"))
    workspace.init_stack("lab")
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    charts = workspace.project / ".cache" / "kamaji-charts"
    assert error_lines(output) == [
        f"error: Kamaji's charts ({LAB_SOURCE.tag}) are not in {charts} yet, and fetching them "
        "needs helm on PATH (install: see README, Host prerequisites)."
    ], output
    assert "Traceback" not in output and "unhandled" not in output, output
    assert "kamaji-hami-lab:index:" not in output, output  # no component registered
    assert not charts.exists() or not any(charts.iterdir())


def make(ws: PulumiWorkspace, target: str, home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", target, f"VENV={ws.env['VIRTUAL_ENV']}"],
        cwd=ws.project,
        env={**ws.env, "HOME": str(home), "PULUMI_SKIP_CONFIRMATIONS": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.upstream("pulumi-missing-plugin-fails-at-first-use")
def test_make_preview_creates_the_stack_on_a_fresh_backend(workspace, tmp_path):
    """Item 4: `make preview` on a fresh checkout stopped with `error: no stack named 'lab'
    found`. Now it selects or creates the stack, and the program runs up to the first
    provider download (the only error offline). helm is a stub: the charts are cached."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "helm").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "helm").chmod(0o755)
    with_path(workspace, os.pathsep.join([path_without(tmp_path, "helm"), str(stubs)]))
    done = make(workspace, "preview", tmp_path / "home")
    output = done.stdout + done.stderr
    assert "pulumi stack select --create lab\n" in output, output
    assert "Created stack 'lab'" in output and "no stack named" not in output, output
    assert "kamaji-hami-lab:index:HostPreflight::preflight" in output, output  # the program ran
    errors = error_lines(output)
    assert errors and all(PLUGIN_ERROR.match(line) for line in errors), output
    listed = workspace.pulumi("stack", "ls", "--json").stdout
    assert '"name": "lab"' in listed, listed


def labcheck(ws: PulumiWorkspace) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(ws.env["VIRTUAL_ENV"]) / "bin" / "python"), "-m", "labcheck", "--stack", "lab"],
        cwd=ws.project,
        env=ws.env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.upstream("pulumi-stack-output-not-up-yet")
def test_labcheck_before_any_up_says_to_bring_the_lab_up(workspace):
    """Item 9: before any `up` labcheck only relayed the CLI's `current stack does not have
    output property 'labcheckSpec'`; it now says what to do, for a stack that does not exist
    yet as well."""
    hint = (
        "The spec is an output of the stack's `pulumi up`: bring the lab up first "
        "(make up STACK=lab), or give a saved spec with --spec FILE."
    )
    for pulumi_says, prepare in (
        ("error: no stack named 'lab' found", lambda: None),
        (
            "error: current stack does not have output property 'labcheckSpec'",
            lambda: workspace.init_stack("lab"),
        ),
    ):
        prepare()
        done = labcheck(workspace)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.splitlines() == [
            "labcheck: 'pulumi stack output labcheckSpec --stack lab' failed: " + pulumi_says,
            hint,
        ]


@pytest.mark.upstream("pulumi-backend-url-env-first")
def test_pulumi_login_elsewhere_does_not_move_the_project(workspace, tmp_path):
    """Item 5: the README said a `pulumi login` elsewhere overrides Pulumi.yaml's backend, and
    that the project's backend wins over PULUMI_BACKEND_URL. Both the other way round.
    (Pulumi.yaml's `~` is the passwd home, not $HOME: the copy names a directory here.)"""
    pulumi_yaml = workspace.project / "Pulumi.yaml"
    declared = "  url: file://~/.pulumi-kamaji-hami-lab\n"
    assert declared in pulumi_yaml.read_text()
    project_backend, elsewhere = tmp_path / "project-backend", tmp_path / "elsewhere"
    project_backend.mkdir()
    elsewhere.mkdir()
    pulumi_yaml.write_text(
        pulumi_yaml.read_text().replace(declared, f"  url: file://{project_backend}\n")
    )
    env_backend = Path(workspace.env.pop("PULUMI_BACKEND_URL").removeprefix("file://"))
    workspace.pulumi("login", f"file://{elsewhere}")
    workspace.pulumi("stack", "init", "lab")
    stacks = Path(".pulumi") / "stacks" / PROJECT
    assert (project_backend / stacks / "lab.json").is_file()
    assert not (elsewhere / stacks / "lab.json").exists()

    workspace.env["PULUMI_BACKEND_URL"] = f"file://{env_backend}"
    workspace.pulumi("stack", "init", "nvml")
    assert (env_backend / stacks / "nvml.json").is_file()
    assert not (project_backend / stacks / "nvml.json").exists()


@pytest.mark.upstream("pulumi-python-run-error-no-traceback")
def test_an_invalid_config_stops_with_one_error_line(workspace):
    """The config is parsed before anything is registered; its error is the user's, so the
    CLI shows that one line, with the key that is wrong, and nothing else."""
    workspace.init_stack("lab")
    workspace.pulumi("config", "set", "--stack", "lab", "subnet", "not-a-cidr")
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    errors = error_lines(output)
    assert len(errors) == 1, output
    assert errors[0].startswith("error: invalid stack config: subnet"), output
    assert "Traceback" not in output and "kamaji-hami-lab:index:" not in output, output
