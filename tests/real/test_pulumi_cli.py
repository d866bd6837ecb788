"""The real Pulumi CLI (v3.274.1) previews every stack on a fresh local backend.

It must accept the project (Pulumi.yaml) and the stack's config, and run the program: the
program's components show up in the plan. The run then stops where this machine has to stop:
at the first provider plugin download (docker, command, kubernetes; downloads are pointed at a
closed loopback port, so the result does not depend on the network). That must be the only
error.
B1 was the counter-example: the CLI refused the config before the program ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from binaries import bin_path

from tests.support.pulumi_harness import FAKE_KUBECONFIG, PROJECT, PROJECT_DIR, stack_config

STACKS = ("lab", "nvml", "gpu")
PASSPHRASE = "real-tier-passphrase"
# What `pulumi preview` must not need: the tests, docs and tools of this repository.
NOT_PART_OF_THE_PROGRAM = (".git", ".venv", "tests", "docs", "benchmarks", "reports")
PLUGIN_ERROR = re.compile(
    r"error: Could not automatically download and install resource plugin "
    r"'pulumi-resource-(docker|command|kubernetes)' at version v[\d.]+"
)
# The first component each stack's program registers, before any provider is needed: its
# presence in the plan shows the program ran (how far it gets depends on which provider the
# program needs first, which is no concern of this test).
FIRST_COMPONENT = {
    "lab": "HostPreflight preflight",
    "nvml": "ExistingManagementCluster management",
    "gpu": "ExistingManagementCluster management",
}


class PulumiWorkspace:
    """A copy of the project with a fresh file backend and PULUMI_HOME, run by the real CLI."""

    def __init__(self, root: Path) -> None:
        self.project = root / "project"
        shutil.copytree(
            PROJECT_DIR,
            self.project,
            ignore=shutil.ignore_patterns(*NOT_PART_OF_THE_PROGRAM, "__pycache__", ".*_cache"),
        )
        # Pulumi.yaml names `.venv`; the language host v3.68.0 ignores that option (it predates
        # it), so the venv is also activated below, as `source .venv/bin/activate` would.
        venv = PROJECT_DIR / ".venv"
        (self.project / ".venv").symlink_to(venv)
        (root / "backend").mkdir()
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join([str(bin_path("")), str(venv / "bin"), os.environ["PATH"]]),
            "VIRTUAL_ENV": str(venv),
            "PULUMI_HOME": str(root / "pulumi-home"),
            # Overrides Pulumi.yaml's backend (pkg/workspace/creds.go: the env var comes first).
            "PULUMI_BACKEND_URL": f"file://{root / 'backend'}",
            "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_PLUGIN_DOWNLOAD_URL_OVERRIDES": "^.*$=http://127.0.0.1:9",
        }

    def pulumi(self, *args: str, input: str | None = None, check: bool = True):
        result = subprocess.run(
            [str(bin_path("pulumi")), *args, "--non-interactive"],
            cwd=self.project,
            env=self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)}:\n{result.stdout}\n{result.stderr}")
        return result

    def init_stack(self, stack: str) -> None:
        self.pulumi("stack", "init", stack)
        if stack == "nvml":
            self.seed_lab_outputs()
        if stack == "gpu":
            # As Pulumi.gpu.yaml tells the user to.
            for key, value in (("managementKubeconfig", FAKE_KUBECONFIG), ("sshPrivateKey", "k")):
                self.pulumi("config", "set", "--secret", "--stack", "gpu", key, input=value)

    def seed_lab_outputs(self) -> None:
        """nvml reads the lab stack's `managementKubeconfig` output: "bring up `lab` first"
        (Pulumi.nvml.yaml). Here: a lab stack whose state holds that output."""
        assert stack_config("nvml")["managementStack"] == f"organization/{PROJECT}/lab"
        self.pulumi("stack", "init", "lab")
        state = self.project.parent / "lab-state.json"
        stack_urn = f"urn:pulumi:lab::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-lab"
        state.write_text(
            json.dumps(
                {
                    "version": 3,
                    "deployment": {
                        "manifest": {"time": "2026-01-01T00:00:00Z", "magic": "", "version": ""},
                        "resources": [
                            {
                                "urn": stack_urn,
                                "custom": False,
                                "type": "pulumi:pulumi:Stack",
                                "outputs": {"managementKubeconfig": FAKE_KUBECONFIG},
                            }
                        ],
                    },
                }
            )
        )
        self.pulumi("stack", "import", "--stack", "lab", "--file", str(state))


def error_lines(output: str) -> list[str]:
    return [line.strip() for line in output.splitlines() if line.strip().startswith("error:")]


@pytest.fixture
def workspace(tmp_path) -> PulumiWorkspace:
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    return PulumiWorkspace(tmp_path)


@pytest.mark.upstream(
    "pulumi-secret-config-validated-before-the-program",
    "pulumi-backend-url-env-first",
    "pulumi-missing-plugin-fails-at-first-use",
)
@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_preview_runs_the_program_up_to_the_first_plugin_download(stack, workspace):
    """B1: the CLI validates config before the program runs; a `secret: true` key with a
    plaintext default stopped every stack there ("must be encrypted as it's secret")."""
    workspace.init_stack(stack)
    result = workspace.pulumi("preview", "--stack", stack, check=False)
    output = result.stdout + result.stderr
    assert "validating stack config" not in output, output
    assert "must be encrypted as it's secret" not in output
    assert f"kamaji-hami-lab:index:{FIRST_COMPONENT[stack]} create" in output, output
    errors = error_lines(output)
    assert errors, output
    assert all(PLUGIN_ERROR.match(line) for line in errors), "\n".join(errors)
    assert result.returncode == 1, output


def test_the_cli_still_refuses_a_secret_key_with_a_plaintext_default(workspace):
    """B1, the other way round: the same CLI, the same backend, a project key made
    `secret: true` with a plaintext default again: the preview stops before the program."""
    pulumi_yaml = workspace.project / "Pulumi.yaml"
    text = pulumi_yaml.read_text()
    key = "  kamaji-hami-lab:sshPrivateKey:\n    type: string\n"
    assert key in text
    pulumi_yaml.write_text(text.replace(key, key + "    secret: true\n"))
    workspace.init_stack("lab")
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    assert result.returncode == 1
    assert error_lines(result.stdout + result.stderr) == [
        "error: validating stack config: Stack 'lab' with configuration key "
        "'kamaji-hami-lab:sshPrivateKey' must be encrypted as it's secret"
    ]
