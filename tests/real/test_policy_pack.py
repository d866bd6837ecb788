"""The policy pack (policy/) under the real Pulumi CLI v3.274.1: its verdict on the lab's graph.

What the CLI runs: `pulumi preview --policy-pack` on a fresh backend, with the pack in its own
virtualenv (policy/requirements.txt, created once in the tier's cache). What it judges: the
resources the lab's program registers (recorded under the harness's mocks, tests/policy/
lab_graph.py), registered again by a small program (replay_program.py), so the real engine marks
secrets, runs the remediation pass before the analysis, and hands the stack policies the real
parent and provider links. Their providers (docker, command, kubernetes: not installable here)
are one stand-in plugin that accepts inputs unchanged (stand_in_provider.py). Not shown here:
what the real providers' Check would add to the inputs (e.g. auto-names), which the pack does
not judge. The lab's program itself cannot get this far here: its preview needs those providers
and Kamaji's charts from GitHub.

How the pack is started: the CLI starts a pack directory through the language host's RunPlugin;
the host this tier can build (v3.68.0) predates the request the CLI sends and runs the wrong
program (test_the_tiers_language_host_cannot_start_a_pack_directory). The pack is therefore
given to the CLI as an executable that starts it exactly as the current host does:
`<venv>/bin/python -u -m pulumi.policy <engine address> <pack dir>`, in the pack directory.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from binaries import bin_path, cache_root
from pulumi_workspace import PulumiWorkspace, error_lines

from tests.policy.lab_graph import (
    drop_worker_label,
    mutated,
    not_secret,
    set_to,
    without,
)
from tests.support.pulumi_harness import (
    PROJECT,
    PROJECT_DIR,
    ProgramRun,
    lab_stack_config,
    run_program,
)

HERE = Path(__file__).parent
PACK = PROJECT_DIR / "policy"
sys.path.insert(0, str(PACK))  # the pack imports its modules top-level
import lab_policies  # noqa: E402

DESCRIPTION = {policy.name: policy.description for policy in lab_policies.POLICIES}
STAND_INS = ("docker", "command", "kubernetes")
# The pack's virtualenv, outside the repo: the tier's cache, keyed by the requirements.
VENV = cache_root() / "policy-venv"


def pack_venv() -> Path:
    """policy/requirements.txt installed with pip into the tier's cache, once per content."""
    requirements = PACK / "requirements.txt"
    key = hashlib.sha256(requirements.read_bytes() + sys.version.encode()).hexdigest()
    stamp = VENV / "requirements.sha256"
    if stamp.exists() and stamp.read_text() == key:
        return VENV
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin/python"), "-m", "pip", "install", "--quiet", "-r", str(requirements)]
    subprocess.run(pip, check=True, timeout=900)
    stamp.write_text(key)
    return VENV


def executable(path: Path, script: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return path


class ReplayWorkspace:
    """A project that registers a recorded graph, its stand-in providers, and the pack."""

    def __init__(self, root: Path, venv: Path, run: ProgramRun) -> None:
        python = venv / "bin/python"
        project = root / "replay"
        project.mkdir()
        shutil.copyfile(HERE / "replay_program.py", project / "__main__.py")
        graph = [{**asdict(r), "secret_inputs": sorted(r.secret_inputs)} for r in run.resources]
        (project / "graph.json").write_text(json.dumps(graph))
        stand_ins = root / "stand-in-providers"
        for name in STAND_INS:
            launch = f'#!/bin/sh\nexec "{python}" "{HERE / "stand_in_provider.py"}" "$@"\n'
            executable(stand_ins / f"pulumi-resource-{name}", launch)
        # Pulumi.yaml `plugins.providers`: the engine takes <path>/pulumi-resource-<name>.
        plugins = "".join(f"    - name: {name}\n      path: {stand_ins}\n" for name in STAND_INS)
        (project / "Pulumi.yaml").write_text(
            f"name: {PROJECT}\nruntime: python\nplugins:\n  providers:\n{plugins}"
        )
        self.pack = root / "policy"
        shutil.copytree(PACK, self.pack, ignore=shutil.ignore_patterns("venv", "__pycache__"))
        # What pulumi-language-python does for a pack (RunPlugin, kind analyzer): the pack's
        # interpreter runs `-u -m pulumi.policy <engine args> <pack dir>` in the pack dir.
        self.launcher = executable(
            root / "pack-launcher" / "kamaji-hami-lab-policy",
            f'#!/bin/sh\ncd "{self.pack}" && '
            f'exec "{python}" -u -m pulumi.policy "$@" "{self.pack}"\n',
        )
        self.workspace = PulumiWorkspace(root, project=project, venv=venv)
        self.workspace.pulumi("stack", "init", "lab")

    def preview(self) -> subprocess.CompletedProcess[str]:
        return self.workspace.pulumi(
            "preview", "--stack", "lab", "--policy-pack", str(self.launcher), check=False
        )


def policies_block(output: str) -> list[str]:
    """The lines of the CLI's `Policies:` section, stripped: the pack, then each violation's
    level, policy and resource, the policy's description and the message."""
    lines = output.splitlines()
    start = lines.index("Policies:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    block = [line.strip() for line in lines[start:end]]
    # The CLI shortens the pack's path (/tmp/.../pack-launcher/...): keep its last two parts.
    return [re.sub(r"\(local: .*/([^/]+/[^/]+)\)$", r"(local: \1)", block[0]), *block[1:]]


def pack_line(verdict: str) -> str:
    return f"{verdict} kamaji-hami-lab@v0.0.1 (local: pack-launcher/kamaji-hami-lab-policy)"


@pytest.fixture(scope="module")
def venv() -> Path:
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    return pack_venv()


@pytest.fixture(scope="module")
def lab() -> ProgramRun:
    return run_program(lab_stack_config())


@pytest.mark.upstream(
    "pulumi-policy-pack-executable-started-directly",
    "python-host-starts-a-pack-with-pulumi-policy-module",
    "pulumi-project-plugin-path",
    "pulumi-provider-without-preview-support",
    "pulumi-remediations-see-secrets-before-the-analysis",
)
def test_the_lab_graph_passes_every_policy(tmp_path, venv, lab):
    """The lab's own graph: every resource reaches the engine, the pack runs and passes.
    Secrets as the program marks them (nested ones in command environments too) and kind's
    additionalSecretOutputs must reach the pack through the real engine for this to pass."""
    workspace = ReplayWorkspace(tmp_path, venv, lab)
    result = workspace.preview()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert error_lines(output) == []
    assert policies_block(result.stdout) == [pack_line("✅")]
    registered = [r for r in lab.resources if not r.read]
    assert f"+ {len(registered) + 1} to create" in result.stdout  # and the stack


# One mutated graph per mandatory policy, so each verdict is that policy's alone; each judged
# where only the real engine puts it: a provider resource's inputs, stack policies that follow
# the parent and provider links the engine builds.
VIOLATIONS = [
    (
        "images-pinned",
        lambda run: mutated(run, "tenant-a-worker-1", set_to(["image"], "kindest/node:v1.35.0")),
        "docker:index:Container: tenant-a-worker-1",
        "image: image 'kindest/node:v1.35.0' is not pinned by digest (@sha256:…)",
    ),
    (
        "privileged-only-workers",
        lambda run: mutated(run, "tenant-b-worker-1", drop_worker_label),
        "docker:index:Container: tenant-b-worker-1",
        "privileged container without the kamaji-hami-lab/tenant label of a worker node",
    ),
    (
        "credentials-are-secrets",
        lambda run: mutated(run, "tenant-a-provider", not_secret("kubeconfig")),
        "pulumi:providers:kubernetes: tenant-a-provider",
        "kubeconfig holds a credential but is not a secret",
    ),
    (
        "gpu-tenants-have-quota",
        lambda run: without(run, "tenant-b-hami-gpu-quota"),
        f"pulumi:pulumi:Stack: {PROJECT}-lab",
        "tenant tenant-b runs GPUs (tenant-b-simulated-gpus) but has no ResourceQuota on "
        "limits.nvidia.com/gpumem: set gpuQuotaMb",
    ),
    (
        "metallb-pool-in-subnet",
        lambda run: mutated(
            run, "metallb-ipaddresspool", set_to(["spec", "addresses"], ["10.0.0.10-10.0.0.20"])
        ),
        f"pulumi:pulumi:Stack: {PROJECT}-lab",
        "metallb-ipaddresspool: 10.0.0.10-10.0.0.20 is not inside the lab subnet (172.30.0.0/16)",
    ),
]


@pytest.mark.upstream("pulumi-policy-pack-executable-started-directly")
@pytest.mark.parametrize(
    ("policy", "mutate", "resource", "message"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS]
)
def test_each_mandatory_policy_fails_the_preview(
    tmp_path, venv, lab, policy, mutate, resource, message
):
    workspace = ReplayWorkspace(tmp_path, venv, mutate(lab))
    result = workspace.preview()
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert policies_block(result.stdout) == [
        pack_line("❌"),
        f"- [mandatory]  {policy}  ({resource})",
        DESCRIPTION[policy],
        message,
    ], output
    assert error_lines(output) == ["error: preview failed"]


@pytest.mark.upstream("pulumi-python-host-v3.68-runs-the-cwd-main-as-a-pack")
def test_the_tiers_language_host_cannot_start_a_pack_directory(tmp_path):
    """Why the tests above hand the CLI an executable: the documented command, on a copy of
    the project, with this tier's language host v3.68.0, runs the project's __main__.py as the
    pack (issue 17, item 7). If the tier gets a current host, this fails: then give the CLI the
    pack directory above, as docs/policy.md does."""
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    workspace = PulumiWorkspace(tmp_path)
    workspace.init_stack("lab")
    result = workspace.pulumi("preview", "--stack", "lab", "--policy-pack", "policy", check=False)
    assert result.returncode == 1
    pack = workspace.project / "policy"
    # The exit status is the project program's own (1, or 32 after an error it reported).
    (error,) = error_lines(result.stderr)
    expected = f'error: policy pack "{pack}" failed to start: could not read plugin [policy]: '
    assert re.fullmatch(re.escape(expected) + r"exit status \d+", error), error
    # The program's own complaint: it ran without the stack's config, as a plugin.
    assert "error: invalid stack config: tenants: Field required" in error_lines(result.stdout)
