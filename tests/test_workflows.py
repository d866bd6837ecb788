"""The workflows (.github/workflows, docs/workflows.md) cannot run here; their structure is checked
against what the program, the preflight and the test tiers demand. actionlint judges them in the
real tier (tests/real/test_workflows_lint.py)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from labconfig.model import KIND_NODE_IMAGE
from preflight.checks import KIND_RELEASE, kube_proxy_conntrack_max
from tests.support.pulumi_harness import FAKE_KUBECONFIG, PROJECT_DIR

WORKFLOWS_DIR = PROJECT_DIR / ".github" / "workflows"
E2E = WORKFLOWS_DIR / "real-host-e2e.yml"
PULL_REQUEST = WORKFLOWS_DIR / "pull-request.yml"
PREVIEW_SCRIPT = PROJECT_DIR / ".github" / "scripts" / "preview_stack.py"
STACKS = sorted(path.name.split(".")[1] for path in PROJECT_DIR.glob("Pulumi.*.yaml"))
# `uses: owner/repo[/path]@<40 hex>  # vX.Y.Z`
PINNED_USE = re.compile(
    r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40})\s+#\s+v\d+\.\d+\.\d+\s*$"
)


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


BINARIES = load_module("real_tier_binaries", PROJECT_DIR / "tests" / "real" / "binaries.py")
PREVIEW = load_module("preview_stack", PREVIEW_SCRIPT)


def workflow(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def triggers(path: Path) -> dict:
    document = workflow(path)
    return document.get("on", document.get(True))  # YAML 1.1 reads a bare `on` as true


def jobs(path: Path) -> dict[str, dict]:
    return workflow(path)["jobs"]


def steps(path: Path = E2E, job: str = "lab") -> list[dict]:
    return jobs(path)[job]["steps"]


def script(path: Path = E2E, job: str = "lab") -> str:
    return "\n".join(step.get("run", "") for step in steps(path, job))


def step_running(needle: str, path: Path = E2E, job: str = "lab") -> dict:
    matching = [step for step in steps(path, job) if needle in step.get("run", "")]
    assert len(matching) == 1, f"{path.name} {job}: {len(matching)} steps run {needle!r}"
    return matching[0]


def index_running(needle: str, path: Path = E2E, job: str = "lab") -> int:
    return steps(path, job).index(step_running(needle, path, job))


def uses_index(action: str, path: Path, job: str, condition: str | None = None) -> int:
    return next(
        i
        for i, step in enumerate(steps(path, job))
        if step.get("uses", "").startswith(action + "@")
        and (condition is None or step.get("if") == condition)
    )


def pinned_go_version() -> str:
    """The Go the real tier names in its install hint (tests/real/binaries.py)."""
    found = re.search(r"go(\d+\.\d+\.\d+)\.linux-amd64", BINARIES.GO_MISSING)
    assert found
    return found.group(1)


ALL = (PULL_REQUEST, E2E)


# -- both workflows ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_version_in_a_comment(path):
    lines = [line for line in path.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert lines
    assert [line for line in lines if not PINNED_USE.match(line)] == []


def test_an_action_has_one_commit_across_the_workflows():
    seen: dict[str, set[str]] = {}
    for path in ALL:
        for line in path.read_text().splitlines():
            match = PINNED_USE.match(line)
            if match:
                repo = "/".join(match.group(1).split("/")[:2])
                seen.setdefault(repo, set()).add(match.group(2) + line.split("#")[1].strip())
    assert {repo: len(pins) for repo, pins in seen.items() if len(pins) > 1} == {}


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_the_token_can_only_read_the_contents(path):
    assert workflow(path)["permissions"] == {"contents": "read"}
    assert [name for name, job in jobs(path).items() if "permissions" in job] == []


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_job_has_a_timeout_and_so_has_every_long_step(path):
    long_step = re.compile(r"\bmake (up|destroy|test)|binaries\.py|labcheck|preview|go install")
    for name, job in jobs(path).items():
        assert isinstance(job.get("timeout-minutes"), int), name
        for step in job["steps"]:
            if long_step.search(step.get("run", "")):
                assert isinstance(step.get("timeout-minutes"), int), (name, step["run"])
                assert step["timeout-minutes"] < job["timeout-minutes"]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_checkouts_keep_no_credentials(path):
    checkouts = [
        step
        for job in jobs(path).values()
        for step in job["steps"]
        if step.get("uses", "").startswith("actions/checkout@")
    ]
    assert checkouts
    assert all(step.get("with", {}).get("persist-credentials") is False for step in checkouts)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_go_is_the_real_tiers(path):
    versions = {
        str(step["with"]["go-version"]).replace(
            "${{ env.GO_VERSION }}", workflow(path)["env"].get("GO_VERSION", "?")
        )
        for job in jobs(path).values()
        for step in job["steps"]
        if step.get("uses", "").startswith("actions/setup-go@")
    }
    assert versions == {pinned_go_version()}
    go = tuple(int(part) for part in pinned_go_version().split("."))
    assert go >= (1, 26, 6)  # what binaries.py says the builds need


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_the_pulumi_cli_is_the_one_the_real_tier_tests(path):
    installs = re.findall(r"get\.pulumi\.com \| sh -s -- --version (\S+)", path.read_text())
    assert installs
    assert set(installs) == {BINARIES.PULUMI_VERSION.removeprefix("v")}


# -- real-host-e2e.yml ---------------------------------------------------------------------------


def test_the_job_installs_the_kind_release_the_preflight_asks_for():
    assert f"go install sigs.k8s.io/kind@{KIND_RELEASE}" in script()


def test_the_jobs_kubectl_is_within_one_minor_of_the_kind_node_image():
    kubectl = re.search(r"dl\.k8s\.io/release/v1\.(\d+)\.\d+/bin/linux/amd64/kubectl", script())
    node = re.search(r"kindest/node:v1\.(\d+)\.", KIND_NODE_IMAGE)
    assert kubectl and node
    assert abs(int(kubectl.group(1)) - int(node.group(1))) <= 1


def test_the_jobs_conntrack_target_is_kube_proxys():
    """The job computes the preflight's target in shell: bash gives the same numbers."""
    formula = re.search(r"target=(\$\(\(.+\)\))", script())
    assert formula
    for cpus in (2, 4, 8):
        line = formula.group(1).replace("$(nproc)", str(cpus))
        shell = subprocess.run(["bash", "-c", f"echo {line}"], capture_output=True, text=True)
        assert int(shell.stdout) == kube_proxy_conntrack_max("v1.35.0", cpus)


def modprobe_calls(text: str) -> list[list[str]]:
    return [
        shlex.split(line.split("modprobe", 1)[1])
        for line in text.splitlines()
        if re.search(r"\bmodprobe\b", line)
    ]


def test_each_module_is_loaded_as_a_module():
    """modprobe reads every word after the first module name as a parameter of that module:
    `modprobe br_netfilter nf_conntrack` never loads nf_conntrack. `-a` loads each name."""
    calls = modprobe_calls(script())
    assert calls
    loaded = set()
    for args in calls:
        names = [arg for arg in args if not arg.startswith("-")]
        assert "-a" in args or all("=" in arg for arg in names[1:]), args
        loaded |= set(names) if "-a" in args else set(names[:1])
    assert loaded >= {"br_netfilter", "nf_conntrack"}


def test_the_modprobe_check_catches_the_parameter_form():
    args = modprobe_calls("sudo modprobe br_netfilter nf_conntrack")[0]
    assert "-a" not in args and "=" not in args[1]


def test_the_job_frees_disk_before_the_preflight():
    """`make up` runs the preflight, which wants the lab's footprint free for Docker."""
    free = step_running("/usr/share/dotnet")
    assert {"/usr/local/lib/android", "/opt/ghc"} <= set(free["run"].split())
    assert steps().index(free) < index_running("make up")


def test_the_job_brings_the_lab_up_checks_it_previews_no_change_and_always_destroys():
    order = [
        index_running(needle)
        for needle in ("make up", "-m labcheck --stack lab", "--expect-no-changes", "make destroy")
    ]
    assert order == sorted(order)
    assert steps()[order[-1]]["if"] == "always()"


def test_the_second_preview_shows_its_diff_and_fails_on_any_change():
    preview = shlex.split(step_running("--expect-no-changes")["run"])
    assert preview[:4] == ["pulumi", "preview", "--stack", "lab"]
    assert {"--diff", "--expect-no-changes", "--non-interactive"} <= set(preview)


def test_diagnostics_are_taken_after_a_failure_before_the_destroy_and_uploaded():
    diagnostics = step_running("kind export logs")
    at = steps().index(diagnostics)
    upload = uses_index("actions/upload-artifact", E2E, "lab", "failure()")
    destroy = index_running("make destroy")
    assert diagnostics["if"] == "failure()"
    assert at < upload < destroy
    assert steps()[upload]["with"]["path"].rstrip("/") == "diagnostics"


def test_diagnostics_cover_every_cluster_the_containers_and_the_stack():
    text = step_running("kind export logs")["run"]
    for needle in (
        'kind export logs "$out/kind" --name "$KIND_CLUSTER"',  # the management cluster
        "docker ps -a",
        "docker logs",  # each worker container
        "label=app.kubernetes.io/part-of=kamaji-hami-lab",
        "pulumi stack output --stack lab --json",
        "tenantKubeconfigs",  # each tenant's cluster
        '"${tenant_kubectl[@]}" get nodes',
    ):
        assert needle in text, needle
    # The job's cluster is the one Pulumi.yaml's default names.
    pulumi_yaml = yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    name = pulumi_yaml["config"]["kamaji-hami-lab:managementClusterName"]["default"]
    assert workflow(E2E)["env"]["KIND_CLUSTER"] == name
    # The kubeconfigs stay out of the artifact, and a failing command does not end the step.
    assert text.startswith("set +e\n")
    assert "secrets=$(mktemp -d)" in text and 'rm -rf "$secrets"' in text


def test_the_e2e_workflow_runs_by_hand_and_nightly():
    assert set(triggers(E2E)) == {"workflow_dispatch", "schedule"}


# -- pull-request.yml ----------------------------------------------------------------------------


def test_pull_requests_run_on_push_and_on_label_and_nightly():
    on = triggers(PULL_REQUEST)
    assert set(on) == {"pull_request", "schedule"}
    assert {"opened", "synchronize", "reopened", "labeled"} <= set(on["pull_request"]["types"])


def test_no_secret_is_used_so_fork_pull_requests_run_it_all():
    assert "secrets." not in PULL_REQUEST.read_text()


def test_the_test_job_runs_lint_and_the_hermetic_tier():
    assert step_running("make test", PULL_REQUEST, "test")["run"].strip() == "make test"


def test_the_real_job_builds_then_caches_then_tests():
    restore = uses_index("actions/cache/restore", PULL_REQUEST, "real")
    build = index_running("tests/real/binaries.py", PULL_REQUEST, "real")
    save = uses_index("actions/cache/save", PULL_REQUEST, "real")
    test = index_running("make test-real", PULL_REQUEST, "real")
    assert restore < build < save < test
    saved = steps(PULL_REQUEST, "real")[save]
    assert saved["if"] == "steps.real-cache.outputs.cache-hit != 'true'"
    assert saved["with"]["key"] == "${{ steps.real-cache.outputs.cache-primary-key }}"


@pytest.mark.parametrize("job", ["real", "host"])
def test_the_cache_is_the_real_tiers_root_keyed_on_its_pins(job):
    restore = steps(PULL_REQUEST, job)[uses_index("actions/cache/restore", PULL_REQUEST, job)]
    path = restore["with"]["path"].replace("${{ env.XDG_CACHE_HOME }}", "/home/runner/.cache")
    assert Path(path) == BINARIES.cache_root({"XDG_CACHE_HOME": "/home/runner/.cache"})
    key = restore["with"]["key"]
    assert "hashFiles('tests/real/binaries.py')" in key
    assert "${{ env.GO_VERSION }}" in key  # part of every build's stamp (spec_digest)
    assert restore["with"]["restore-keys"].splitlines()[0] == key.split("${{ hashFiles")[0]
    assert 'echo "XDG_CACHE_HOME=$HOME/.cache" >> "$GITHUB_ENV"' in script(PULL_REQUEST, job)


def test_the_host_tier_runs_nightly_or_with_its_label_only():
    condition = " ".join(jobs(PULL_REQUEST)["host"]["if"].split())
    assert condition == (
        "github.event_name == 'schedule' || "
        "contains(github.event.pull_request.labels.*.name, 'host-tier')"
    )
    assert [name for name, job in jobs(PULL_REQUEST).items() if "if" in job] == ["host"]


def test_the_host_tier_runs_as_root_on_the_runner_users_venv_and_gives_it_back():
    venv = index_running("make .venv/.installed", PULL_REQUEST, "host")
    host = step_running("make test-host", PULL_REQUEST, "host")
    assert host["run"].startswith('sudo -E env "PATH=$PATH" ')
    assert not steps(PULL_REQUEST, "host")[venv]["run"].startswith("sudo")
    assert venv < steps(PULL_REQUEST, "host").index(host)
    give_back = steps(PULL_REQUEST, "host")[-1]
    assert give_back["if"] == "always()" and "sudo chown -R" in give_back["run"]


def test_every_stack_is_previewed_apart_from_the_host_tier():
    preview = jobs(PULL_REQUEST)["preview"]
    assert sorted(preview["strategy"]["matrix"]["stack"]) == STACKS
    # docs/workflows.md names the same jobs.
    section = (PROJECT_DIR / "docs/workflows.md").read_text().split("### `preview`", 1)[1]
    listed = re.search(r"One job per stack \(([^)]*)\)", " ".join(section.split()))
    assert listed and sorted(re.findall(r"`([a-z]+)`", listed.group(1))) == STACKS
    assert preview["strategy"]["fail-fast"] is False
    assert "host" not in preview.get("needs", [])
    assert 'preview_stack.py "$STACK"' in script(PULL_REQUEST, "preview")


def test_the_preview_has_git_a_pinned_helm_and_the_pinned_cli_before_the_program_runs():
    """The program fetches Kamaji's charts with git and helm in a preview too."""
    checkout = uses_index("actions/checkout", PULL_REQUEST, "preview")
    helm = uses_index("azure/setup-helm", PULL_REQUEST, "preview")
    venv = index_running("make .venv/.installed", PULL_REQUEST, "preview")
    cli = index_running("get.pulumi.com", PULL_REQUEST, "preview")
    preview = index_running("preview_stack.py", PULL_REQUEST, "preview")
    assert max(checkout, helm, venv, cli) < preview
    assert re.fullmatch(r"v3\.\d+\.\d+", steps(PULL_REQUEST, "preview")[helm]["with"]["version"])


def test_the_previews_use_a_throwaway_backend_and_a_passphrase_made_in_the_job():
    backend = step_running("PULUMI_BACKEND_URL", PULL_REQUEST, "preview")["run"]
    assert 'echo "PULUMI_BACKEND_URL=file://$RUNNER_TEMP/pulumi-backend"' in backend
    assert "passphrase=$(openssl rand -hex 32)" in backend
    assert 'echo "::add-mask::$passphrase"' in backend
    assert index_running("PULUMI_BACKEND_URL", PULL_REQUEST, "preview") < index_running(
        "preview_stack.py", PULL_REQUEST, "preview"
    )


# -- .github/scripts/preview_stack.py ------------------------------------------------------------


def test_the_gpu_stack_gets_the_two_secrets_its_file_tells_the_user_to_set(tmp_path):
    told = re.findall(
        r"pulumi config set --secret --stack gpu (\w+)",
        (PROJECT_DIR / "Pulumi.gpu.yaml").read_text(),
    )
    commands = PREVIEW.stand_ins("gpu", FAKE_KUBECONFIG, tmp_path)
    assert commands[0] == (["stack", "select", "--create", "gpu"], None)
    secrets = {args[-1]: stdin for args, stdin in commands[1:]}
    assert sorted(secrets) == sorted(told) == ["managementKubeconfig", "sshPrivateKey"]
    assert secrets["managementKubeconfig"] == FAKE_KUBECONFIG
    assert all(args[:4] == ["config", "set", "--secret", "--stack"] for args, _ in commands[1:])


@pytest.mark.parametrize("stack", ["nvml", "dra"])
def test_a_stack_on_the_lab_reads_a_lab_state_with_the_management_kubeconfig(stack, tmp_path):
    commands = PREVIEW.stand_ins(stack, FAKE_KUBECONFIG, tmp_path)
    assert [args for args, _ in commands] == [
        ["stack", "select", "--create", "lab"],
        ["stack", "import", "--stack", "lab", "--file", str(tmp_path / "lab-state.json")],
        ["stack", "select", "--create", stack],
    ]
    config = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]
    assert config["kamaji-hami-lab:managementStack"] == "organization/kamaji-hami-lab/lab"
    (resource,) = json.loads((tmp_path / "lab-state.json").read_text())["deployment"]["resources"]
    assert (
        resource["urn"]
        == "urn:pulumi:lab::kamaji-hami-lab::pulumi:pulumi:Stack::kamaji-hami-lab-lab"
    )
    assert resource["outputs"] == {"managementKubeconfig": FAKE_KUBECONFIG}


def test_the_lab_stack_needs_no_stand_in(tmp_path):
    assert PREVIEW.stand_ins("lab", FAKE_KUBECONFIG, tmp_path) == [
        (["stack", "select", "--create", "lab"], None)
    ]


FAKE_PULUMI = """#!/bin/sh
printf '%s\\n' "$*" >> "$CALLS"
[ "$1" = config ] && cat > /dev/null
[ "$1" = preview ] || exit 0
echo "Previewing update ($3):"
echo '  + 3 to create ```'
exit "$PREVIEW_EXIT"
"""


@pytest.mark.parametrize("exit_code", [0, 255])
def test_the_preview_goes_to_the_step_summary_with_its_exit_code(tmp_path, monkeypatch, exit_code):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("PREVIEW_EXIT", str(exit_code))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("RUNNER_TEMP", str(tmp_path))
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}/backend")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "made-in-the-job")
    assert PREVIEW.main(["gpu"]) == exit_code
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[-1] == "preview --stack gpu --diff --color never --non-interactive"
    text = summary.read_text()
    verdict = "planned" if exit_code == 0 else f"failed (exit {exit_code})"
    assert text.startswith(f"### `pulumi preview --stack gpu --diff`: {verdict}\n")
    assert "````text\nPreviewing update (gpu):\n  + 3 to create ```\n````\n" in text


def test_the_previews_refuse_a_backend_that_is_not_a_throwaway_file_one(monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://shared/state")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "x")
    with pytest.raises(SystemExit, match="file://"):
        PREVIEW.main(["lab"])


def test_a_long_preview_is_cut_to_what_a_step_summary_takes():
    text = PREVIEW.summary("lab", 0, "x" * 2_000_000)
    assert len(text.encode()) < 1024 * 1024
    assert "the job log has the whole preview" in text
