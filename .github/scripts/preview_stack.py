"""The pull-request previews (docs/workflows.md): which kind this run can have, then each stack's.

    python3 .github/scripts/preview_stack.py --mode
    .venv/bin/python .github/scripts/preview_stack.py --deployed STACK
    .venv/bin/python .github/scripts/preview_stack.py STACK

Run by .github/workflows/pull-request.yml.

`--mode` (job `preview-mode`) decides whether this run's previews can be diffs against the
deployed stacks: a pull request from this repository, the repository variable
PULUMI_BACKEND_URL naming the stacks' backend, PREVIEW_DIFF_RUNNER naming a runner that reaches
the lab, and the variables and secrets the backend needs set. It is handed the secrets only as
set or not set (SET_<NAME>=true|false). Its step outputs are `diff` (true|false) and `why`; a
run that cannot have a diff (a fork, Dependabot, no backend, the nightly run) says why in the
job summary and a notice, and still passes. A backend named but not usable (an unknown scheme,
no runner, a secret missing on a pull request that would get it) fails the step.

`--deployed STACK` (job `preview-diff`, before pulumi/actions comments the diff) says whether the
backend holds STACK: one never brought up there has nothing to diff against, and is skipped
with a note rather than created.

`STACK` (job `preview`) previews one stack on a throwaway local backend. With BASE_DIR set (a
pull request's run: the base checked out there) it previews the base too, on a second
throwaway backend, both with `pulumi preview --json`, and the job summary shows what the head
adds, removes and changes against the base, input by input (preview_diff.py). Without it (the
nightly run: no base) the summary holds the head's `pulumi preview --diff` output. Either way
the summary says why this is not a diff against what is deployed. It runs with
PULUMI_BACKEND_URL (file://, a fresh directory; the base's is the same path + `-base`) and
PULUMI_CONFIG_PASSPHRASE (made up in the job) set, and `pulumi` on PATH. No secret of the
repository is needed, so a pull request from a fork gets its previews too. The stacks that need
what a user would have set get stand-ins, as the real tier gives them
(tests/real/pulumi_workspace.py):

- gpu: its two secrets, set with `pulumi config set --secret` as Pulumi.gpu.yaml says;
- nvml and dra: a `lab` stack whose state holds the `managementKubeconfig` output they read
  through their StackReference (Pulumi.nvml.yaml, Pulumi.dra.yaml: "bring up `lab` first").

The stand-in kubeconfig points at a closed loopback port: the Kubernetes provider then previews
against an unreachable cluster, as before a first `make up`. The exit code is the head's
preview's: a base that does not preview is said in the summary and a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from preview_diff import code, diff_previews, render

PROJECT_DIR = Path(__file__).resolve().parents[2]
PROJECT = "kamaji-hami-lab"
STACKS = ("lab", "nvml", "gpu", "dra")
ON_THE_LAB = ("nvml", "dra")  # the stacks whose tenants run on the lab stack's platform
# What one step may add to $GITHUB_STEP_SUMMARY is 1 MiB: the rest stays in the log.
SUMMARY_LIMIT = 900_000
FENCE = "````"

# What the backend of the deployed stacks needs besides its URL (the repository variable
# PULUMI_BACKEND_URL), by the URL's scheme: a bucket's credentials as Pulumi and gocloud.dev read
# them from the environment, and the passphrase of the stacks a bucket or a directory keeps (the
# default secrets provider there); Pulumi Cloud needs its token and keeps the stacks' secrets.
# file:// is a directory on the runner: the lab host's own state, read by a runner on that host.
BACKEND_NEEDS: dict[str, tuple[str, ...]] = {
    "file": ("PULUMI_CONFIG_PASSPHRASE",),
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PULUMI_CONFIG_PASSPHRASE"),
    "gs": ("GOOGLE_CREDENTIALS", "PULUMI_CONFIG_PASSPHRASE"),
    "azblob": ("AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "PULUMI_CONFIG_PASSPHRASE"),
    "https": ("PULUMI_ACCESS_TOKEN",),
}
# Where the diffs run: a preview of a deployed stack reads each tenant's admin kubeconfig from
# the management cluster (components/tenant/control_plane.py, Secret.get), and fails where that
# cluster does not answer: "failed to read resource state due to unreachable cluster". A
# GitHub-hosted runner reaches no lab on a user's host; a self-hosted runner there does.
RUNNER = "PREVIEW_DIFF_RUNNER"
# The repository variables (plain text) the previews read; every other name is a secret.
VARIABLES = ("PULUMI_BACKEND_URL", RUNNER, "AWS_REGION", "AZURE_STORAGE_ACCOUNT")
HOW_TO_DIFF = (
    "For a diff against the deployed stacks, commented on each pull request, set the repository "
    "variables `PULUMI_BACKEND_URL` and `PREVIEW_DIFF_RUNNER` and the secrets the backend needs "
    '(docs/workflows.md, "Diffs against the deployed stacks").'
)


@dataclass(frozen=True)
class Mode:
    """What this run's previews can be: `diff` against the deployed stacks or not, and why."""

    diff: bool
    why: str
    hint: str = ""  # what would give a diff
    failed: bool = False  # a backend is named but cannot be used: the run must say so and stop

    @property
    def note(self) -> str:
        return f"{self.why}. {self.hint}".strip()


def kind(name: str) -> str:
    return "variable" if name in VARIABLES else "secret"


def preview_mode(env: Mapping[str, str]) -> Mode:
    """From the run's event, the pull request's head and the names set (SET_<NAME>=true)."""
    event = env.get("EVENT", "")
    if event != "pull_request":
        return Mode(False, f"a `{event}` run has no pull request to comment on")
    by_a_maintainer = "A maintainer gets the diffs by pushing the branch to this repository."
    head, repository = env.get("HEAD_REPOSITORY", ""), env.get("REPOSITORY", "")
    if head != repository:
        return Mode(
            False,
            f"this pull request comes from the fork `{head or 'deleted'}`: GitHub gives a "
            "fork's run neither the repository's variables and secrets nor a token that may "
            "comment",
            by_a_maintainer,
        )
    if env.get("ACTOR") == "dependabot[bot]":
        return Mode(
            False,
            "Dependabot's pull requests run as a fork's do: without the repository's variables "
            "and secrets, with a read-only token",
            by_a_maintainer,
        )
    url = env.get("PULUMI_BACKEND_URL", "")
    if not url:
        return Mode(False, "the repository variable `PULUMI_BACKEND_URL` is not set", HOW_TO_DIFF)
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in BACKEND_NEEDS:
        return Mode(
            False,
            f"`PULUMI_BACKEND_URL` is `{url}`, not a backend the CLI opens: use file://, "
            "s3://, gs://, azblob:// or https:// (Pulumi Cloud)",
            HOW_TO_DIFF,
            failed=True,
        )
    if not env.get(RUNNER):
        return Mode(
            False,
            f"the variable `{RUNNER}` is not set: a preview of a deployed stack reads each "
            "tenant's admin kubeconfig from the management cluster, so it runs on a runner that "
            "reaches the lab (a self-hosted runner on the lab host), never on GitHub's",
            HOW_TO_DIFF,
            failed=True,
        )
    missing = [name for name in BACKEND_NEEDS[scheme] if env.get(f"SET_{name}") != "true"]
    if missing:
        named = ", ".join(f"the {kind(name)} `{name}`" for name in missing)
        return Mode(False, f"the backend `{url}` also needs {named}", HOW_TO_DIFF, failed=True)
    return Mode(True, f"its state in `{url}`, on the runner `{env[RUNNER]}`")


def mode_summary(mode: Mode) -> str:
    if mode.diff:
        return (
            "### Previews: diffs against the deployed stacks\n\n"
            f"Each stack is previewed against {mode.why}; its diff is a comment on this pull "
            "request, one per stack, updated on each push. A stack not brought up there is "
            "skipped with a note.\n"
        )
    if mode.failed:
        return f"### Previews: the backend cannot be used\n\n{mode.note}\n"
    return (
        "### Previews: throwaway, not diffs\n\n"
        f"No diff against the deployed stacks on this run: {mode.why}. Each stack is previewed "
        "on an empty throwaway backend instead, where every resource shows as a create. On a "
        "pull request its base is previewed the same way, and each `preview` job's summary "
        "shows what the change adds, removes and changes against it, input by input. "
        f"{mode.hint}".rstrip()
        + "\n"
    )


def annotation(level: str, title: str, message: str) -> str:
    """A workflow command: the message shows on the run's page and the pull request's checks."""
    escaped = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return f"::{level} title={title}::{escaped}"


def append(variable: str, text: str) -> None:
    """Appends to the file GitHub names in `variable` ($GITHUB_STEP_SUMMARY, $GITHUB_OUTPUT)."""
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def run_mode() -> int:
    mode = preview_mode(os.environ)
    # One line: a step output's `name=value` ends at the line's end.
    why = " ".join(mode.note.split())
    append("GITHUB_OUTPUT", f"diff={str(mode.diff).lower()}\nwhy={why}\n")
    append("GITHUB_STEP_SUMMARY", mode_summary(mode))
    if mode.failed:
        print(annotation("error", "Diff previews", mode.note))
        return 1
    if not mode.diff:
        print(annotation("notice", "No diff previews", f"{mode.why}; throwaway previews instead"))
    return 0


def stack_names(listing: str) -> set[str]:
    """The stacks of `pulumi stack ls --json`, without their organization and project."""
    return {entry["name"].rsplit("/", 1)[-1] for entry in json.loads(listing)}


def run_deployed(stack: str) -> int:
    missing = [tool for tool in ("pulumi", "helm", "git") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"missing on the runner: {', '.join(missing)}. The diff previews run on the lab "
            "host's tools, those `make up` needs (README)."
        )
    listing = subprocess.run(
        ["pulumi", "stack", "ls", "--json", "--non-interactive"],
        cwd=PROJECT_DIR,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    if listing.returncode != 0:
        print(listing.stderr, file=sys.stderr)
        raise SystemExit(
            f"pulumi stack ls failed ({listing.returncode}): check the backend's credentials"
        )
    names = stack_names(listing.stdout)
    deployed = stack in names
    append("GITHUB_OUTPUT", f"deployed={str(deployed).lower()}\n")
    if not deployed:
        held = ", ".join(f"`{name}`" for name in sorted(names)) or "none"
        why = f"the backend holds no stack `{stack}` (it holds: {held})"
        append(
            "GITHUB_STEP_SUMMARY",
            f"### `{stack}`: not deployed, no diff\n\nThe backend holds no stack "
            f"`{stack}` (it holds: {held}), so there is nothing to diff against and no comment "
            f"for it. `make up STACK={stack}` with `PULUMI_BACKEND_URL` set brings it up there.\n",
        )
        print(annotation("notice", f"No diff for {stack}", why))
    return 0


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


NOT_DEPLOYED = (
    "**Not a diff against what is deployed.** {what} on an empty throwaway backend with "
    "stand-in secrets and state, so every resource in {it} is a create. No diff against the "
    "deployed stack because {why}"
)


def summary(stack: str, returncode: int, output: str, why: str) -> str:
    """A run without a base (the nightly run): the head's `pulumi preview --diff` output."""
    verdict = "planned" if returncode == 0 else f"failed (exit {returncode})"
    if len(output) > SUMMARY_LIMIT:
        output = output[:SUMMARY_LIMIT] + "\n... (cut here: the job log has the whole preview)"
    note = NOT_DEPLOYED.format(what="This preview ran", it="it", why=why)
    # A fence longer than any backtick run Pulumi prints.
    return (
        f"### `pulumi preview --stack {stack} --diff`: {verdict}\n\n"
        f"{note}\n\nNo base to compare with either: only a pull request's run has one. This "
        "shows that the stack previews from scratch, not what a change changes.\n\n"
        f"<details open><summary>output</summary>\n\n{FENCE}text\n{output.rstrip()}\n{FENCE}\n\n"
        "</details>\n"
    )


@dataclass(frozen=True)
class Preview:
    """One side's `pulumi preview --json`: which checkout, its exit code, its digest."""

    rev: str
    returncode: int
    digest: dict[str, Any] | None  # None: the CLI printed no JSON

    @property
    def planned(self) -> bool:
        return self.returncode == 0 and self.digest is not None

    @property
    def failure(self) -> str:
        return f"exit {self.returncode}" if self.returncode else "no JSON printed"

    def diagnostics(self, *severities: str) -> list[str]:
        """The messages of these severities, in order (`info#err`: the program's stderr)."""
        entries = (self.digest or {}).get("diagnostics") or ()
        return [entry["message"].strip() for entry in entries if entry["severity"] in severities]

    def counts(self) -> str:
        found = (self.digest or {}).get("changeSummary") or {}
        return ", ".join(f"{count} to {op}" for op, count in sorted(found.items())) or "nothing"


def messages(lines: Sequence[str]) -> str:
    text = "\n".join(lines) or "(none: the job log has the CLI's output)"
    if len(text) > 20_000:
        text = text[:20_000] + "\n... (cut here: the job log has the rest)"
    return f"{FENCE}text\n{text}\n{FENCE}\n"


def base_head_summary(stack: str, base: Preview, head: Preview, why: str) -> str:
    """A pull request's run: what the head adds, removes and changes against the base."""
    note = NOT_DEPLOYED.format(what="Each side was previewed", it="either", why=why)
    text = (
        f"### `{stack}`: head against base, both previewed from scratch: what the change adds, "
        "removes and changes\n\n"
        f"Head {code(head.rev)} (the pull request merged into its base) against base "
        f"{code(base.rev)}, each previewed with `pulumi preview --stack {stack} --json`.\n\n"
        f"{note}\n\n"
    )
    if not head.planned:
        return text + (
            f"**The head's preview failed ({head.failure})**, so there is no "
            f"comparison. Its errors:\n\n{messages(head.diagnostics('info#err', 'error'))}"
        )
    if not base.planned:
        return text + (
            f"**The base's preview failed ({base.failure})**, so there is nothing to "
            f"compare with; the head's planned {head.counts()}. The base's errors:\n\n"
            f"{messages(base.diagnostics('info#err', 'error'))}"
        )
    assert base.digest is not None and head.digest is not None
    diff = diff_previews(base.digest, head.digest)
    text += render(diff)
    if not diff.empty:
        text += (
            "\nRead as: `(none)`, not there on that side; `(unknown until up)`, an output of a "
            "resource not yet created, so a change in it does not show; `[secret]`, a secret, "
            "whose change does not show either; `[preview id]`, an ID the preview makes up "
            "anew on each run.\n"
        )
    new = [line for line in head.diagnostics("warning") if line not in base.diagnostics("warning")]
    if new:
        text += f"\nWarnings only the head's preview gives:\n\n{messages(new)}"
    if len(text) > SUMMARY_LIMIT:
        text = text[:SUMMARY_LIMIT] + "\n\n... (cut here: the job log has the whole comparison)\n"
    return text


def pulumi(
    args: Sequence[str],
    stdin: str | None = None,
    cwd: Path = PROJECT_DIR,
    env: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Runs the CLI in a project, its output shown as it comes and returned."""
    process = subprocess.Popen(
        ["pulumi", *args, "--non-interactive"],
        cwd=cwd,
        env=env,
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


def make_previewable(stack: str, project: Path, env: Mapping[str, str] | None, workdir: Path):
    workdir.mkdir(parents=True, exist_ok=True)
    for args, stdin in stand_ins(stack, fake_kubeconfig(), workdir):
        returncode, _ = pulumi(args, stdin, project, env)
        if returncode != 0:
            raise SystemExit(f"pulumi {' '.join(args)} failed ({returncode})")


def revision(project: Path) -> str:
    found = subprocess.run(
        ["git", "-C", str(project), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else "?"


def preview_json(stack: str, project: Path, env: Mapping[str, str], workdir: Path) -> Preview:
    """One side's preview from scratch, its JSON kept in `workdir` and its stderr in the log."""
    make_previewable(stack, project, env, workdir)
    print(f"pulumi preview --stack {stack} --json in {project} ...", flush=True)
    result = subprocess.run(
        ["pulumi", "preview", "--stack", stack, "--json", "--non-interactive"],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    (workdir / f"preview-{stack}.json").write_text(result.stdout)
    try:
        digest = json.loads(result.stdout)
    except ValueError:
        print(result.stdout)
        digest = None
    return Preview(revision(project), result.returncode, digest)


def run_base_and_head(stack: str, base_dir: Path, workdir: Path, why: str) -> int:
    if not (base_dir / "Pulumi.yaml").is_file():
        raise SystemExit(f"BASE_DIR={base_dir} holds no Pulumi project: check the base out there")
    head_env = dict(os.environ)
    backend = head_env["PULUMI_BACKEND_URL"].rstrip("/") + "-base"
    Path(backend.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    base_env = head_env | {"PULUMI_BACKEND_URL": backend}
    base = preview_json(stack, base_dir.resolve(), base_env, workdir / "base")
    head = preview_json(stack, PROJECT_DIR, head_env, workdir / "head")
    text = base_head_summary(stack, base, head, why)
    print(text)
    append("GITHUB_STEP_SUMMARY", text)
    if head.planned and not base.planned:
        print(annotation("warning", f"No comparison for {stack}", "the base's preview failed"))
    return 0 if head.planned else (head.returncode or 1)


def main(argv: Sequence[str]) -> int:
    usage = f"usage: preview_stack.py --mode | --deployed STACK | STACK  ({'|'.join(STACKS)})"
    if list(argv) == ["--mode"]:
        return run_mode()
    if len(argv) == 2 and argv[0] == "--deployed" and argv[1] in STACKS:
        return run_deployed(argv[1])
    if len(argv) != 1 or argv[0] not in STACKS:
        raise SystemExit(usage)
    stack = argv[0]
    for variable in ("PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE"):
        if not os.environ.get(variable):
            raise SystemExit(f"set {variable}: the previews use a throwaway backend")
    if not os.environ["PULUMI_BACKEND_URL"].startswith("file://"):
        raise SystemExit("PULUMI_BACKEND_URL must be a file:// backend made for this job")
    workdir = Path(os.environ.get("RUNNER_TEMP") or PROJECT_DIR)
    why = os.environ.get("NOT_A_DIFF_BECAUSE") or f"this run knows no backend. {HOW_TO_DIFF}"
    if os.environ.get("BASE_DIR"):
        return run_base_and_head(stack, Path(os.environ["BASE_DIR"]), workdir / "previews", why)
    make_previewable(stack, PROJECT_DIR, None, workdir)
    returncode, output = pulumi(preview_args(stack))
    append("GITHUB_STEP_SUMMARY", summary(stack, returncode, output, why))
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
