"""Preview one stack on a throwaway local backend, the preview's output in the job summary.

    .venv/bin/python .github/scripts/preview_stack.py STACK

Run by .github/workflows/pull-request.yml with PULUMI_BACKEND_URL (file://, a fresh directory)
and PULUMI_CONFIG_PASSPHRASE (made up in the job) set, and `pulumi` on PATH. No secret of the
repository is needed, so a pull request from a fork gets its previews too. The stacks that
need what a user would have set get stand-ins, as the real tier gives them
(tests/real/pulumi_workspace.py):

- gpu: its two secrets, set with `pulumi config set --secret` as Pulumi.gpu.yaml says;
- nvml and dra: a `lab` stack whose state holds the `managementKubeconfig` output they read
  through their StackReference (Pulumi.nvml.yaml, Pulumi.dra.yaml: "bring up `lab` first").

The stand-in kubeconfig points at a closed loopback port: the Kubernetes provider then previews
against an unreachable cluster, as before a first `make up`. The exit code is the preview's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
PROJECT = "kamaji-hami-lab"
STACKS = ("lab", "nvml", "gpu", "dra")
ON_THE_LAB = ("nvml", "dra")  # the stacks whose tenants run on the lab stack's platform
# What one step may add to $GITHUB_STEP_SUMMARY is 1 MiB: the rest stays in the log.
SUMMARY_LIMIT = 900_000
FENCE = "````"


def fake_kubeconfig() -> str:
    """The real tier's stand-in kubeconfig (https://127.0.0.1:6443, a made-up token)."""
    sys.path.insert(0, str(PROJECT_DIR))
    from tests.support.pulumi_harness import FAKE_KUBECONFIG

    return FAKE_KUBECONFIG


def lab_state(kubeconfig: str) -> dict:
    """A `lab` stack's state with only the stack resource and its `managementKubeconfig`."""
    return {
        "version": 3,
        "deployment": {
            "manifest": {"time": "2026-01-01T00:00:00Z", "magic": "", "version": ""},
            "resources": [
                {
                    "urn": f"urn:pulumi:lab::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-lab",
                    "custom": False,
                    "type": "pulumi:pulumi:Stack",
                    "outputs": {"managementKubeconfig": kubeconfig},
                }
            ],
        },
    }


def stand_ins(stack: str, kubeconfig: str, workdir: Path) -> list[tuple[list[str], str | None]]:
    """The pulumi commands (arguments, standard input) that make `stack` previewable."""
    commands: list[tuple[list[str], str | None]] = []
    if stack in ON_THE_LAB:
        state = workdir / "lab-state.json"
        state.write_text(json.dumps(lab_state(kubeconfig)))
        commands += [
            (["stack", "select", "--create", "lab"], None),
            (["stack", "import", "--stack", "lab", "--file", str(state)], None),
        ]
    commands.append((["stack", "select", "--create", stack], None))
    if stack == "gpu":
        for key, value in (("managementKubeconfig", kubeconfig), ("sshPrivateKey", "stand-in")):
            commands.append((["config", "set", "--secret", "--stack", "gpu", key], value))
    return commands


def preview_args(stack: str) -> list[str]:
    return ["preview", "--stack", stack, "--diff", "--color", "never"]


def summary(stack: str, returncode: int, output: str) -> str:
    verdict = "planned" if returncode == 0 else f"failed (exit {returncode})"
    if len(output) > SUMMARY_LIMIT:
        output = output[:SUMMARY_LIMIT] + "\n... (cut here: the job log has the whole preview)"
    # A fence longer than any backtick run Pulumi prints.
    return (
        f"### `pulumi preview --stack {stack} --diff`: {verdict}\n\n"
        f"Throwaway local backend, stand-in secrets and state (fork pull requests too).\n\n"
        f"<details open><summary>output</summary>\n\n{FENCE}text\n{output.rstrip()}\n{FENCE}\n\n"
        "</details>\n"
    )


def pulumi(args: Sequence[str], stdin: str | None = None) -> tuple[int, str]:
    """Runs the CLI in the project, its output shown as it comes and returned."""
    process = subprocess.Popen(
        ["pulumi", *args, "--non-interactive"],
        cwd=PROJECT_DIR,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    if stdin is not None:
        assert process.stdin is not None
        process.stdin.write(stdin)
        process.stdin.close()
    lines = []
    for line in process.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    return process.wait(), "".join(lines)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1 or argv[0] not in STACKS:
        raise SystemExit(f"usage: preview_stack.py {{{'|'.join(STACKS)}}}")
    stack = argv[0]
    for variable in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"):
        if not os.environ.get(variable):
            raise SystemExit(f"set {variable}: the previews use a throwaway backend")
    if not os.environ["PULUMI_BACKEND_URL"].startswith("file://"):
        raise SystemExit("PULUMI_BACKEND_URL must be a file:// backend made for this job")
    workdir = Path(os.environ.get("RUNNER_TEMP") or PROJECT_DIR)
    for args, stdin in stand_ins(stack, fake_kubeconfig(), workdir):
        returncode, _ = pulumi(args, stdin)
        if returncode != 0:
            raise SystemExit(f"pulumi {' '.join(args)} failed ({returncode})")
    returncode, output = pulumi(preview_args(stack))
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a", encoding="utf-8") as handle:
            handle.write(summary(stack, returncode, output))
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
