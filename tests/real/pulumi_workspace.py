"""A Pulumi project run by the real CLI (tests/real/binaries.py) on a fresh file backend.

``PulumiWorkspace(root)`` copies this repository's program; ``PulumiWorkspace(root,
project=dir, venv=venv)`` runs a project a test wrote itself, with another virtualenv. Each
workspace has its own backend, PULUMI_HOME and passphrase, and plugin downloads go to a closed
loopback port, so a run never depends on the network or on the user's Pulumi state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from binaries import bin_path

from components.platform.kamaji_chart import CACHE_IN_PROJECT, COMPLETE_MARK
from labconfig.kamaji_sources import KAMAJI_SOURCES
from tests.support.pulumi_harness import FAKE_KUBECONFIG, PROJECT, PROJECT_DIR, stack_config

PASSPHRASE = "real-tier-passphrase"
# What `pulumi preview` must not need: the tests, docs and tools of this repository.
NOT_PART_OF_THE_PROGRAM = (".git", ".venv", "tests", "docs", "benchmarks", "reports")
PROJECT_VENV = PROJECT_DIR / ".venv"


def copy_of_the_program(target: Path) -> Path:
    shutil.copytree(
        PROJECT_DIR,
        target,
        ignore=shutil.ignore_patterns(*NOT_PART_OF_THE_PROGRAM, "__pycache__", ".*_cache"),
    )
    # Pulumi.yaml names `.venv`; the language host v3.68.0 ignores that option (it predates
    # it), so the venv is also activated below, as `source .venv/bin/activate` would.
    (target / ".venv").symlink_to(PROJECT_VENV)
    seed_kamaji_charts(target)
    return target


def seed_kamaji_charts(project: Path) -> None:
    """The pinned Kamaji charts as on a machine that fetched them before. The program fetches
    them (git, helm, GitHub) before it registers anything, and stops when it cannot; this
    tier has neither helm nor the network. Only the completion mark is read before a
    provider would load a chart. tests/real/test_preview_errors.py removes them."""
    for source in KAMAJI_SOURCES.values():
        charts = project / CACHE_IN_PROJECT / source.commit
        for chart in ("kamaji", "kamaji-crds"):
            (charts / chart).mkdir(parents=True, exist_ok=True)
        (charts / COMPLETE_MARK).touch()


class PulumiWorkspace:
    """A project with a fresh file backend and PULUMI_HOME, run by the real CLI."""

    def __init__(self, root: Path, *, project: Path | None = None, venv: Path = PROJECT_VENV):
        self.project = project or copy_of_the_program(root / "project")
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
        if stack in ("nvml", "dra"):  # they read the lab stack's management cluster
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
