"""The workflows (.github/workflows, docs/workflows.md) cannot run here; their structure is checked
against what the program, the preflight and the test tiers demand. actionlint judges them in the
real tier (tests/real/test_workflows_lint.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from labconfig.model import DEFAULT_TENANT_VERSION, KIND_NODE_IMAGE
from labconfig.versions import kubernetes_minor
from preflight.checks import KIND_RELEASE
from tests.support.modules import load_module
from tests.support.pulumi_harness import FAKE_KUBECONFIG, PROJECT_DIR

WORKFLOWS_DIR = PROJECT_DIR / ".github" / "workflows"
E2E = WORKFLOWS_DIR / "real-host-e2e.yml"
PULL_REQUEST = WORKFLOWS_DIR / "pull-request.yml"
PREVIEW_SCRIPT = PROJECT_DIR / ".github" / "scripts" / "preview_stack.py"
DOCS = PROJECT_DIR / "docs" / "workflows.md"
STACKS = sorted(path.name.split(".")[1] for path in PROJECT_DIR.glob("Pulumi.*.yaml"))
# `uses: owner/repo[/path]@<40 hex>  # vX.Y.Z`
PINNED_USE = re.compile(
    r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w./-]+)@([0-9a-f]{40})\s+#\s+v\d+\.\d+\.\d+\s*$"
)


# `uses: ./.github/actions/<name>`: an action of this repository
LOCAL_USE = re.compile(r"^\s*(?:-\s+)?uses:\s+\./(\.github/actions/[\w-]+)\s*$")
FREE_DISK = "./.github/actions/free-disk"


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
    """But this repository's own (`./.github/actions/...`), which change with the commit."""
    lines = [line for line in path.read_text().splitlines() if re.match(r"^\s*(-\s+)?uses:", line)]
    assert lines
    assert [
        line for line in lines if not PINNED_USE.match(line) and not LOCAL_USE.match(line)
    ] == []


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_local_action_exists(path):
    for line in path.read_text().splitlines():
        if match := LOCAL_USE.match(line):
            assert (PROJECT_DIR / match.group(1) / "action.yml").is_file(), line


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
def test_the_token_can_only_read_the_contents_but_where_the_diffs_are_commented(path):
    assert workflow(path)["permissions"] == {"contents": "read"}
    writers = {name: job["permissions"] for name, job in jobs(path).items() if "permissions" in job}
    if path == PULL_REQUEST:
        assert writers == {"preview-diff": {"contents": "read", "pull-requests": "write"}}
    else:
        assert writers == {}


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


def test_the_jobs_kubectl_is_within_one_minor_of_the_kind_node_image_and_the_tenants():
    kubectl = re.search(r"dl\.k8s\.io/release/v1\.(\d+)\.\d+/bin/linux/amd64/kubectl", script())
    node = re.search(r"kindest/node:v1\.(\d+)\.", KIND_NODE_IMAGE)
    assert kubectl and node
    assert abs(int(kubectl.group(1)) - int(node.group(1))) <= 1
    # the lab stack's tenants run the default version (the preflight checks every API server)
    assert abs(int(kubectl.group(1)) - kubernetes_minor(DEFAULT_TENANT_VERSION)[1]) <= 1


def test_the_job_leaves_the_hosts_conntrack_table_alone():
    """The tenants' kube-proxies leave nf_conntrack_max and the hash size to the host
    (builders/kube_proxy.py); the job only loads nf_conntrack, as the preflight asks."""
    assert "nf_conntrack_max" not in script() and "hashsize" not in script()
    assert ["-a", "br_netfilter", "nf_conntrack"] in modprobe_calls(script())


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


def free_disk_index(path: Path = E2E, job: str = "lab") -> int:
    return next(i for i, step in enumerate(steps(path, job)) if step.get("uses") == FREE_DISK)


def test_the_free_disk_action_removes_the_big_preinstalled_toolchains():
    action = yaml.safe_load((PROJECT_DIR / FREE_DISK / "action.yml").read_text())
    (step,) = action["runs"]["steps"]
    removed = set(step["run"].split())
    assert {"/usr/share/dotnet", "/usr/local/lib/android", "/opt/ghc"} <= removed
    assert "df" in removed  # the room before and after, in the log


def test_the_job_frees_disk_before_the_preflight():
    """`make up` runs the preflight, which wants the lab's footprint free for Docker."""
    assert free_disk_index() < index_running("make up")


@pytest.mark.parametrize(("job", "first_build"), [
    ("real", "tests/real/binaries.py"), ("host", "make test-host"),
])  # fmt: skip
def test_the_tier_jobs_free_disk_before_the_go_builds(job, first_build):
    """A cold build fills the Go module and build caches (about 9.5 GB, docs/testing.md); a
    hosted runner guarantees 14 GB."""
    assert free_disk_index(PULL_REQUEST, job) < index_running(first_build, PULL_REQUEST, job)


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


def test_only_the_diff_previews_read_secrets_and_the_mode_job_only_whether_they_are_set():
    """Everything else runs the same on a fork's pull request, which gets no secret."""
    readers = {
        name for name, job in jobs(PULL_REQUEST).items() if "secrets." in yaml.safe_dump(job)
    }
    assert readers == {"preview-mode", "preview-diff"}
    (mode_step,) = [step for step in steps(PULL_REQUEST, "preview-mode") if "env" in step]
    for value in mode_step["env"].values():
        if "secrets." in value:
            assert re.fullmatch(r"\$\{\{ secrets\.[A-Z_]+ != '' \}\}", value), value


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
    # A cache's version is its paths: saved under other paths, no restore would find it.
    assert cached_paths(saved) == cached_paths(steps(PULL_REQUEST, "real")[restore])
    assert saved["with"]["key"] == "${{ steps.real-cache.outputs.cache-primary-key }}"


def cached_paths(step: dict) -> list[Path]:
    text = step["with"]["path"].replace("${{ env.XDG_CACHE_HOME }}", "/home/runner/.cache")
    return [Path(line) for line in text.split()]


@pytest.mark.parametrize("job", ["real", "host"])
def test_the_cache_is_the_real_tiers_programs_keyed_on_its_pins(job):
    """The built programs, their stamps and wrappers: what `build_set` needs to skip a set; not
    Go's module and build caches (about 9 GB of the 9.5, near the 10 GB GitHub keeps per
    repository)."""
    restore = steps(PULL_REQUEST, job)[uses_index("actions/cache/restore", PULL_REQUEST, job)]
    root = BINARIES.cache_root({"XDG_CACHE_HOME": "/home/runner/.cache"})
    assert cached_paths(restore) == [root / "bin", root / "stamps", root / "src"]
    go_caches = BINARIES.go_environment(root)
    for cache in (go_caches["GOMODCACHE"], go_caches["GOCACHE"]):
        assert not [p for p in cached_paths(restore) if Path(cache).is_relative_to(p)], cache
    key = restore["with"]["key"]
    # The pins, and the sources of this repo's programs built with them (in their stamps too).
    assert "hashFiles('tests/real/binaries.py', 'tests/real/programs/**')" in key
    assert "${{ env.GO_VERSION }}" in key  # part of every build's stamp (spec_digest)
    assert restore["with"]["restore-keys"].splitlines()[0] == key.split("${{ hashFiles")[0]
    assert 'echo "XDG_CACHE_HOME=$HOME/.cache" >> "$GITHUB_ENV"' in script(PULL_REQUEST, job)


def test_the_host_tier_runs_nightly_or_with_its_label_only():
    condition = " ".join(jobs(PULL_REQUEST)["host"]["if"].split())
    assert condition == (
        "github.event_name == 'schedule' || "
        "contains(github.event.pull_request.labels.*.name, 'host-tier')"
    )
    assert [name for name, job in jobs(PULL_REQUEST).items() if "if" in job] == [
        "host",
        "preview-diff",
        "preview",
    ]


def test_the_host_tier_runs_as_root_on_the_runner_users_venv_and_gives_it_back():
    venv = index_running("make .venv/.installed", PULL_REQUEST, "host")
    host = step_running("make test-host", PULL_REQUEST, "host")
    assert host["run"].startswith('sudo -E env "PATH=$PATH" ')
    assert not steps(PULL_REQUEST, "host")[venv]["run"].startswith("sudo")
    assert venv < steps(PULL_REQUEST, "host").index(host)
    give_back = steps(PULL_REQUEST, "host")[-1]
    assert give_back["if"] == "always()" and "sudo chown -R" in give_back["run"]


@pytest.mark.parametrize("job", ["preview", "preview-diff"])
def test_every_stack_is_previewed_apart_from_the_tiers(job):
    preview = jobs(PULL_REQUEST)[job]
    assert sorted(preview["strategy"]["matrix"]["stack"]) == STACKS == sorted(PREVIEW.STACKS)
    # docs/workflows.md names the same stacks.
    text = " ".join((PROJECT_DIR / "docs/workflows.md").read_text().split())
    listed = re.search(r"Every pull request gets one preview per stack: ([^.]*)\.", text)
    assert listed and sorted(re.findall(r"`([a-z]+)`", listed.group(1))) == STACKS
    assert preview["strategy"]["fail-fast"] is False
    assert preview["needs"] == "preview-mode"


def test_one_kind_of_preview_runs_as_the_mode_job_decides():
    """The diffs where the mode job says so, the throwaway previews on every other run (forks,
    no backend, nightly); a mode job that fails (a backend named but unusable) runs neither."""
    mode = jobs(PULL_REQUEST)["preview-mode"]
    assert mode["outputs"] == {
        "diff": "${{ steps.mode.outputs.diff }}",
        "why": "${{ steps.mode.outputs.why }}",
    }
    assert step_running("preview_stack.py --mode", PULL_REQUEST, "preview-mode")["id"] == "mode"
    assert jobs(PULL_REQUEST)["preview-diff"]["if"] == "needs.preview-mode.outputs.diff == 'true'"
    assert jobs(PULL_REQUEST)["preview"]["if"] == "needs.preview-mode.outputs.diff != 'true'"
    throwaway = step_running('preview_stack.py "$STACK"', PULL_REQUEST, "preview")
    assert throwaway["env"]["NOT_A_DIFF_BECAUSE"] == "${{ needs.preview-mode.outputs.why }}"


def test_the_mode_job_sees_the_event_the_head_and_each_name_only_as_set():
    env = step_running("preview_stack.py --mode", PULL_REQUEST, "preview-mode")["env"]
    assert env["EVENT"] == "${{ github.event_name }}"
    assert env["HEAD_REPOSITORY"] == "${{ github.event.pull_request.head.repo.full_name }}"
    assert env["REPOSITORY"] == "${{ github.repository }}"
    assert env["ACTOR"] == "${{ github.actor }}"
    assert env["PULUMI_BACKEND_URL"] == "${{ vars.PULUMI_BACKEND_URL }}"
    assert env[PREVIEW.RUNNER] == f"${{{{ vars.{PREVIEW.RUNNER} }}}}"
    needed = {name for names in PREVIEW.BACKEND_NEEDS.values() for name in names}
    assert {key.removeprefix("SET_") for key in env if key.startswith("SET_")} == needed
    for name in needed:
        where = "vars" if name in PREVIEW.VARIABLES else "secrets"
        assert env[f"SET_{name}"] == f"${{{{ {where}.{name} != '' }}}}"


def test_the_diff_job_gets_what_the_backend_needs_by_value_where_the_mode_job_checked_it():
    env = jobs(PULL_REQUEST)["preview-diff"]["env"]
    needed = {name for names in PREVIEW.BACKEND_NEEDS.values() for name in names}
    for name in needed | {"PULUMI_BACKEND_URL", "AWS_REGION"}:
        where = "vars" if name in PREVIEW.VARIABLES else "secrets"
        assert env[name] == f"${{{{ {where}.{name} }}}}"
    assert set(env) == needed | {"PULUMI_BACKEND_URL", "AWS_REGION"}


@pytest.mark.upstream("pulumi-k8s-read-needs-the-cluster")
def test_the_diff_job_runs_where_the_lab_answers():
    """A deployed stack's preview reads each tenant's admin kubeconfig from the management
    cluster; GitHub's runners cannot reach a lab on a user's host."""
    job = jobs(PULL_REQUEST)["preview-diff"]
    assert job["runs-on"] == "${{ vars.PREVIEW_DIFF_RUNNER || 'ubuntu-24.04' }}"
    text = (PROJECT_DIR / "components" / "tenant" / "control_plane.py").read_text()
    assert "k8s.core.v1.Secret.get(" in text  # why: remove the runner when this goes


def pulumi_action() -> dict:
    (step,) = [
        step
        for step in steps(PULL_REQUEST, "preview-diff")
        if step.get("uses", "").startswith("pulumi/actions@")
    ]
    return step


# pulumi/actions v7.0.0 action.yml `inputs` (the same as v6.6.1's).
PULUMI_ACTION_INPUTS = {
    "command", "stack-name", "pulumi-version", "pulumi-version-file", "work-dir",
    "comment-on-pr", "comment-on-pr-number", "comment-on-summary", "github-token", "cloud-url",
    "secrets-provider", "parallel", "message", "config-map", "expect-no-changes", "diff",
    "replace", "exclude", "exclude-dependents", "target", "target-dependents", "policyPacks",
    "policyPackConfigs", "refresh", "upsert", "remove", "edit-pr-comment", "color",
    "exclude-protected", "plan", "suppress-outputs", "suppress-progress",
    "always-include-summary", "continue-on-error", "log-verbosity", "log-flow", "debug",
}  # fmt: skip


@pytest.mark.upstream("pulumi-actions-one-comment-per-stack", "pulumi-actions-login-and-cli")
def test_the_diff_is_one_comment_per_stack_edited_on_each_push():
    step = pulumi_action()
    assert re.search(
        r"uses: pulumi/actions@8e5e406f4007fca908480587cb9893c07090f58d  # v7\.0\.0$",
        PULL_REQUEST.read_text(),
        re.M,
    )
    inputs = step["with"]
    assert set(inputs) <= PULUMI_ACTION_INPUTS
    assert inputs["command"] == "preview"
    # The comment's heading names the stack: one comment per matrix entry, found again and
    # edited on the next push.
    assert inputs["stack-name"] == "${{ matrix.stack }}"
    assert inputs["comment-on-pr"] is True and inputs["edit-pr-comment"] is True
    assert "comment-on-pr-number" not in inputs
    assert inputs["diff"] is True
    assert inputs.get("expect-no-changes", False) is False  # a change is what it shows
    assert inputs["always-include-summary"] is True  # a long diff keeps its counts
    # The team's backend, logged into; never a stack made there, never the CLI replaced.
    assert inputs["cloud-url"] == "${{ vars.PULUMI_BACKEND_URL }}"
    assert inputs["work-dir"] == "."
    assert not {"upsert", "refresh", "pulumi-version", "pulumi-version-file"} & set(inputs)


def test_the_diff_runs_only_for_a_stack_the_backend_holds():
    checked = index_running('preview_stack.py --deployed "$STACK"', PULL_REQUEST, "preview-diff")
    check = steps(PULL_REQUEST, "preview-diff")[checked]
    assert check["id"] == "deployed"
    assert check["env"]["STACK"] == "${{ matrix.stack }}"
    assert steps(PULL_REQUEST, "preview-diff").index(pulumi_action()) > checked
    assert pulumi_action()["if"] == "steps.deployed.outputs.deployed == 'true'"
    assert index_running("make .venv/.installed", PULL_REQUEST, "preview-diff") < checked


def test_the_docs_name_every_variable_and_secret_the_workflow_reads():
    text = PULL_REQUEST.read_text()
    read = set(re.findall(r"\b(?:vars|secrets)\.([A-Z][A-Z0-9_]*)", text))
    assert read >= {"PULUMI_BACKEND_URL", "PREVIEW_DIFF_RUNNER", "PULUMI_CONFIG_PASSPHRASE"}
    docs = DOCS.read_text()
    assert sorted(name for name in read if f"`{name}`" not in docs) == []
    # ... each as what GitHub keeps it as: a variable or a secret.
    for name in read:
        kind = "variable" if name in PREVIEW.VARIABLES else "secret"
        assert re.search(rf"\| `{name}`[^|\n]*\| {kind} \|", docs), (name, kind)
        assert f"vars.{name}" not in text or kind == "variable"
        assert f"secrets.{name}" not in text or kind == "secret"


def test_the_docs_have_the_section_the_previews_point_to_and_name_every_stack():
    docs = DOCS.read_text()
    assert '"Diffs against the deployed stacks"' in PREVIEW.HOW_TO_DIFF
    assert "\n### Diffs against the deployed stacks\n" in docs
    section = docs.split("\n### Previews", 1)[1].split("\n## ", 1)[0]
    assert [stack for stack in STACKS if f"`{stack}`" not in section] == []


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


def base_checkout() -> tuple[int, dict]:
    (found,) = [
        (i, step)
        for i, step in enumerate(steps(PULL_REQUEST, "preview"))
        if step.get("uses", "").startswith("actions/checkout@") and "ref" in step.get("with", {})
    ]
    return found


PULL_REQUEST_ONLY = "github.event_name == 'pull_request'"


def test_a_pull_requests_base_is_checked_out_beside_the_head_at_the_base_commit():
    """The head is what GitHub checks out for a pull request (the pull request merged into its
    base); the base is the commit it is merged into, so their difference is the change."""
    at, base = base_checkout()
    head = uses_index("actions/checkout", PULL_REQUEST, "preview")
    assert head < at
    assert steps(PULL_REQUEST, "preview")[head]["with"] == {"persist-credentials": False}
    assert base["if"] == PULL_REQUEST_ONLY
    assert base["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert base["with"]["persist-credentials"] is False
    # Same action, same commit as every checkout (checked for all by the pin tests).
    assert base["uses"] == steps(PULL_REQUEST, "preview")[head]["uses"]


def test_the_base_gets_its_own_venv_and_the_preview_step_its_directory():
    _, base = base_checkout()
    directory = base["with"]["path"]
    venv = step_running(f"make -C {directory} .venv/.installed", PULL_REQUEST, "preview")
    assert venv["if"] == PULL_REQUEST_ONLY and isinstance(venv["timeout-minutes"], int)
    preview = step_running('preview_stack.py "$STACK"', PULL_REQUEST, "preview")
    assert preview["env"]["BASE_DIR"] == f"${{{{ {PULL_REQUEST_ONLY} && '{directory}' || '' }}}}"
    order = [
        index_running(f"make -C {directory}", PULL_REQUEST, "preview"),
        index_running('preview_stack.py "$STACK"', PULL_REQUEST, "preview"),
    ]
    assert base_checkout()[0] < order[0] < order[1]
    assert uses_index("actions/setup-python", PULL_REQUEST, "preview") < order[0]


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
    monkeypatch.setenv("NOT_A_DIFF_BECAUSE", "a `schedule` run has no pull request to comment on.")
    assert PREVIEW.main(["gpu"]) == exit_code
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[-1] == "preview --stack gpu --diff --color never --non-interactive"
    text = summary.read_text()
    verdict = "planned" if exit_code == 0 else f"failed (exit {exit_code})"
    assert text.startswith(f"### `pulumi preview --stack gpu --diff`: {verdict}\n")
    assert "````text\nPreviewing update (gpu):\n  + 3 to create ```\n````\n" in text
    # Said before the output: this is no diff, and why; and no comparison either.
    assert "\n**Not a diff against what is deployed.** " in text
    assert "every resource in it is a create" in text
    assert (
        "No diff against the deployed stack because a `schedule` run has no pull request to "
        "comment on.\n\nNo base to compare with either: only a pull request's run has one."
    ) in text


def test_the_previews_refuse_a_backend_that_is_not_a_throwaway_file_one(monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://shared/state")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "x")
    with pytest.raises(SystemExit, match="file://"):
        PREVIEW.main(["lab"])


def test_a_long_preview_is_cut_to_what_a_step_summary_takes():
    text = PREVIEW.summary("lab", 0, "x" * 2_000_000, "no backend.")
    assert len(text.encode()) < 1024 * 1024
    assert "the job log has the whole preview" in text


def test_a_throwaway_preview_outside_the_workflow_says_how_to_get_a_diff(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_A_DIFF_BECAUSE", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI)
    (bin_dir / "pulumi").chmod(0o755)
    for name, value in {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "PREVIEW_EXIT": "0",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path),
        "PULUMI_BACKEND_URL": f"file://{tmp_path}/backend",
        "PULUMI_CONFIG_PASSPHRASE": "x",
    }.items():
        monkeypatch.setenv(name, value)
    assert PREVIEW.main(["lab"]) == 0
    assert PREVIEW.HOW_TO_DIFF in (tmp_path / "summary.md").read_text()


FAKE_PULUMI_JSON = """#!/bin/sh
printf '%s|%s|%s\\n' "$PWD" "$PULUMI_BACKEND_URL" "$*" >> "$CALLS"
[ "$1" = config ] && cat > /dev/null
[ "$1" = preview ] || exit 0
if [ "$PWD" = "$BASE_DIR" ]; then cat "$BASE_JSON"; exit "$BASE_EXIT"; fi
cat "$HEAD_JSON"
exit "$HEAD_EXIT"
"""
PREVIEWS = PROJECT_DIR / "tests" / "previews"
WHY = "this pull request comes from the fork `someone/kamaji-hami-lab`: no secrets."


def run_base_and_head(
    tmp_path, monkeypatch, base: str, head: str, stack: str = "lab", base_exit=0, head_exit=0
) -> tuple[int, str, list[list[str]]]:
    """The preview step of a pull request's run, on a fake CLI that prints `base` in the base's
    directory and `head` in the head's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text(FAKE_PULUMI_JSON)
    (bin_dir / "pulumi").chmod(0o755)
    base_dir = tmp_path / "pr-base"
    base_dir.mkdir()
    (base_dir / "Pulumi.yaml").write_text("name: kamaji-hami-lab\n")
    (tmp_path / "base.json").write_text(base)
    (tmp_path / "head.json").write_text(head)
    for name, value in {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "BASE_DIR": str(base_dir),
        "BASE_JSON": str(tmp_path / "base.json"),
        "HEAD_JSON": str(tmp_path / "head.json"),
        "BASE_EXIT": str(base_exit),
        "HEAD_EXIT": str(head_exit),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path),
        "PULUMI_BACKEND_URL": f"file://{tmp_path}/pulumi-backend",
        "PULUMI_CONFIG_PASSPHRASE": "made-in-the-job",
        "NOT_A_DIFF_BECAUSE": WHY,
    }.items():
        monkeypatch.setenv(name, value)
    code = PREVIEW.main([stack])
    calls = [line.split("|") for line in (tmp_path / "calls").read_text().splitlines()]
    return code, (tmp_path / "summary.md").read_text(), calls


def fixture(name: str) -> str:
    return (PREVIEWS / f"{name}-lab.json").read_text()


def test_a_pull_request_shows_what_its_change_adds_removes_and_changes(tmp_path, monkeypatch):
    code, text, calls = run_base_and_head(
        tmp_path, monkeypatch, fixture("abcf10e"), fixture("0393e00")
    )
    assert code == 0
    assert text.startswith(
        "### `lab`: head against base, both previewed from scratch: what the change adds, "
        "removes and changes\n\nHead `"
    )
    assert "against base `?`, each previewed with `pulumi preview --stack lab --json`." in text
    # The note it keeps: not what is deployed, and why.
    assert "\n**Not a diff against what is deployed.** Each side was previewed" in text
    assert f"No diff against the deployed stack because {WHY}\n" in text
    assert (
        "**1 changed, 0 added, 0 removed**, 81 unchanged.\n\n"
        "Changed, input by input (base -> head):\n\n"
        "- `validation-labcheck` (`command:local:Command`)\n"
        "  - `triggers[4]`: `(none)` -> `(unknown until up)`\n"
    ) in text
    assert "`(unknown until up)`, an output of a resource not yet created" in text
    # Each side in its own directory, on its own throwaway backend, base first.
    backend = f"file://{tmp_path}/pulumi-backend"
    previews = [(cwd, url) for cwd, url, args in calls if args.startswith("preview")]
    assert previews == [
        (str(tmp_path / "pr-base"), backend + "-base"),
        (str(PROJECT_DIR), backend),
    ]
    assert [args for *_, args in calls if args.startswith("preview")] == [
        "preview --stack lab --json --non-interactive"
    ] * 2
    assert (tmp_path / "pulumi-backend-base").is_dir()
    kept = tmp_path / "previews"
    assert (kept / "base" / "preview-lab.json").read_text() == fixture("abcf10e")


def test_both_sides_get_the_stand_ins(tmp_path, monkeypatch):
    _, _, calls = run_base_and_head(
        tmp_path, monkeypatch, fixture("0393e00"), fixture("0393e00"), "nvml"
    )
    for cwd, backend in ((str(tmp_path / "pr-base"), "-base"), (str(PROJECT_DIR), "backend")):
        side = [args for where, url, args in calls if where == cwd and url.endswith(backend)]
        assert side[:2] == ["stack select --create lab --non-interactive", side[1]]
        assert side[1].startswith("stack import --stack lab --file ")
        assert side[2:] == [
            "stack select --create nvml --non-interactive",
            "preview --stack nvml --json --non-interactive",
        ]


def test_one_config_key_in_the_summary(tmp_path, monkeypatch):
    _, text, _ = run_base_and_head(
        tmp_path, monkeypatch, fixture("0393e00"), fixture("0393e00-hamiSplitCount-8")
    )
    assert "**9 changed, 0 added, 0 removed**, 73 unchanged; 1 config key changed." in text
    assert '- `kamaji-hami-lab:hamiSplitCount`: `"10"` -> `"8"`\n' in text


def failed(message: str) -> str:
    return json.dumps(
        {
            "config": {},
            "steps": [],
            "diagnostics": [
                {"message": "Traceback (most recent call last):\n", "severity": "info#err"},
                {"message": message + "\n", "severity": "error"},
            ],
        }
    )


def test_a_head_that_does_not_preview_fails_the_job_with_its_errors(tmp_path, monkeypatch):
    code, text, _ = run_base_and_head(
        tmp_path, monkeypatch, fixture("0393e00"), failed("error: boom"), head_exit=255
    )
    assert code == 255
    assert "**The head's preview failed (exit 255)**, so there is no comparison." in text
    assert "````text\nTraceback (most recent call last):\nerror: boom\n````\n" in text
    assert "changed, " not in text


def test_a_base_that_does_not_preview_is_said_and_the_head_decides(tmp_path, monkeypatch, capsys):
    code, text, _ = run_base_and_head(
        tmp_path, monkeypatch, failed("error: old"), fixture("0393e00"), base_exit=1
    )
    assert code == 0
    assert "**The base's preview failed (exit 1)**, so there is nothing to compare with; " in text
    assert "the head's planned 80 to create. The base's errors:" in text
    assert "error: old" in text
    assert (
        "::warning title=No comparison for lab::the base's preview failed"
        in capsys.readouterr().out
    )


def test_a_head_that_prints_no_json_fails(tmp_path, monkeypatch):
    code, text, _ = run_base_and_head(tmp_path, monkeypatch, fixture("0393e00"), "oops")
    assert code == 1
    assert "**The head's preview failed (no JSON printed)**" in text


def test_warnings_only_the_head_gives_are_shown(tmp_path, monkeypatch):
    head = json.loads(fixture("0393e00"))
    head["diagnostics"] = [{"message": "warning: deprecated thing\n", "severity": "warning"}]
    _, text, _ = run_base_and_head(tmp_path, monkeypatch, fixture("0393e00"), json.dumps(head))
    assert "**No difference**: both plan the same 82 resources" in text
    assert (
        "Warnings only the head's preview gives:\n\n````text\nwarning: deprecated thing\n" in text
    )


def test_a_base_directory_without_a_project_stops_the_step(tmp_path, monkeypatch):
    monkeypatch.setenv("BASE_DIR", str(tmp_path))
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}/b")
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "x")
    with pytest.raises(SystemExit, match="holds no Pulumi project"):
        PREVIEW.main(["lab"])


# -- .github/scripts/preview_stack.py --mode -----------------------------------------------------

SAME_REPOSITORY = {
    "EVENT": "pull_request",
    "HEAD_REPOSITORY": "team/kamaji-hami-lab",
    "REPOSITORY": "team/kamaji-hami-lab",
    "ACTOR": "alice",
}


def all_set(url: str) -> dict[str, str]:
    scheme = url.split("://")[0]
    names = PREVIEW.BACKEND_NEEDS[scheme]
    return {
        **SAME_REPOSITORY,
        "PULUMI_BACKEND_URL": url,
        "PREVIEW_DIFF_RUNNER": "lab-host",
        **{f"SET_{name}": "true" for name in names},
    }


BACKENDS = [
    "file:///home/lab/.pulumi-kamaji-hami-lab",
    "s3://team-state/kamaji-hami-lab?region=eu-west-1",
    "gs://team-state/kamaji-hami-lab",
    "azblob://state/kamaji-hami-lab",
    "https://api.pulumi.com",
]


def test_every_backend_scheme_is_one_the_docs_give_an_example_of():
    assert sorted(url.split("://")[0] for url in BACKENDS) == sorted(PREVIEW.BACKEND_NEEDS)
    docs = DOCS.read_text()
    assert [s for s in PREVIEW.BACKEND_NEEDS if f"`{s}://" not in docs] == []


@pytest.mark.upstream("pulumi-diy-bucket-credentials-from-env")
@pytest.mark.parametrize("url", BACKENDS)
def test_a_pull_request_of_the_repository_gets_diffs_when_its_backend_has_all_it_needs(url):
    mode = PREVIEW.preview_mode(all_set(url))
    assert mode.diff and not mode.failed
    assert f"`{url}`" in mode.why and "`lab-host`" in mode.why


@pytest.mark.parametrize("url", BACKENDS)
def test_a_backend_missing_a_secret_or_variable_fails_naming_it(url):
    for name in PREVIEW.BACKEND_NEEDS[url.split("://")[0]]:
        env = all_set(url)
        del env[f"SET_{name}"]
        mode = PREVIEW.preview_mode(env)
        assert mode.failed and not mode.diff
        kind = "variable" if name in PREVIEW.VARIABLES else "secret"
        assert f"the {kind} `{name}`" in mode.why


def test_the_bucket_backends_need_the_passphrase_pulumi_cloud_its_token():
    needs = PREVIEW.BACKEND_NEEDS
    assert all("PULUMI_CONFIG_PASSPHRASE" in needs[s] for s in ("file", "s3", "gs", "azblob"))
    assert needs["https"] == ("PULUMI_ACCESS_TOKEN",)


def test_a_backend_without_a_runner_that_reaches_the_lab_fails_saying_why():
    env = all_set("s3://team-state")
    del env["PREVIEW_DIFF_RUNNER"]
    mode = PREVIEW.preview_mode(env)
    assert mode.failed and "`PREVIEW_DIFF_RUNNER`" in mode.why
    assert "management cluster" in mode.why and "self-hosted runner" in mode.why


def test_an_unknown_backend_fails():
    mode = PREVIEW.preview_mode(all_set("s3://x") | {"PULUMI_BACKEND_URL": "ftp://x"})
    assert mode.failed and "`ftp://x`" in mode.why


def test_no_backend_means_throwaway_previews_and_how_to_set_one_up():
    mode = PREVIEW.preview_mode(SAME_REPOSITORY)
    assert not mode.diff and not mode.failed
    assert "`PULUMI_BACKEND_URL` is not set" in mode.why and mode.hint == PREVIEW.HOW_TO_DIFF


@pytest.mark.upstream("github-fork-pull-requests-get-no-secrets")
def test_a_fork_gets_throwaway_previews_and_is_told_why_whatever_it_was_given():
    """A fork's run sees no variable or secret: it cannot tell whether the repository has a
    backend, so it says it comes from a fork, never that no backend is set."""
    for given in ({}, {"PULUMI_BACKEND_URL": "", "SET_PULUMI_CONFIG_PASSPHRASE": "false"}):
        env = SAME_REPOSITORY | {"HEAD_REPOSITORY": "someone/kamaji-hami-lab", **given}
        mode = PREVIEW.preview_mode(env)
        assert not mode.diff and not mode.failed
        assert "fork `someone/kamaji-hami-lab`" in mode.why
        assert "PULUMI_BACKEND_URL" not in mode.note


@pytest.mark.upstream("github-fork-pull-requests-get-no-secrets")
def test_dependabot_is_a_fork_and_so_is_a_pull_request_whose_fork_is_gone():
    dependabot = PREVIEW.preview_mode(all_set("s3://x") | {"ACTOR": "dependabot[bot]"})
    assert not dependabot.diff and not dependabot.failed and "Dependabot" in dependabot.why
    gone = PREVIEW.preview_mode(all_set("s3://x") | {"HEAD_REPOSITORY": ""})
    assert not gone.diff and not gone.failed and "fork `deleted`" in gone.why


def test_the_nightly_run_has_throwaway_previews():
    mode = PREVIEW.preview_mode(all_set("s3://x") | {"EVENT": "schedule"})
    assert not mode.diff and not mode.failed and "`schedule`" in mode.why


def run_mode(tmp_path, monkeypatch, env: dict[str, str], capsys) -> tuple[int, dict, str, str]:
    for name in list(os.environ):
        if name.startswith("SET_") or name in {"PULUMI_BACKEND_URL", "PREVIEW_DIFF_RUNNER"}:
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    code = PREVIEW.main(["--mode"])
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    return code, outputs, (tmp_path / "summary.md").read_text(), capsys.readouterr().out


def test_the_mode_step_hands_on_its_verdict_and_says_it_in_the_summary(
    tmp_path, monkeypatch, capsys
):
    code, outputs, summary, log = run_mode(tmp_path, monkeypatch, all_set("gs://x"), capsys)
    assert code == 0 and outputs["diff"] == "true"
    assert summary.startswith("### Previews: diffs against the deployed stacks\n")
    assert "one per stack, updated on each push" in summary and log == ""


def test_a_fork_passes_with_a_note_in_the_summary_and_a_notice(tmp_path, monkeypatch, capsys):
    fork = SAME_REPOSITORY | {"HEAD_REPOSITORY": "someone/kamaji-hami-lab"}
    code, outputs, summary, log = run_mode(tmp_path, monkeypatch, fork, capsys)
    assert code == 0 and outputs["diff"] == "false"
    assert outputs["why"].startswith("this pull request comes from the fork")
    assert summary.startswith("### Previews: throwaway, not diffs\n")
    assert "every resource shows as a create" in summary
    assert log.startswith("::notice title=No diff previews::this pull request comes from")


def test_an_unusable_backend_fails_the_step_with_an_error(tmp_path, monkeypatch, capsys):
    env = all_set("s3://x") | {"SET_AWS_SECRET_ACCESS_KEY": "false"}
    code, outputs, summary, log = run_mode(tmp_path, monkeypatch, env, capsys)
    assert code == 1 and outputs["diff"] == "false"
    assert summary.startswith("### Previews: the backend cannot be used\n")
    assert log.startswith("::error title=Diff previews::the backend `s3://x` also needs")
    assert "`AWS_SECRET_ACCESS_KEY`" in log


def test_a_step_output_stays_on_one_line():
    mode = PREVIEW.Mode(False, "a\nb", "c")
    assert PREVIEW.annotation("notice", "t", mode.note) == "::notice title=t::a%0Ab. c"


# -- .github/scripts/preview_stack.py --deployed -------------------------------------------------

FAKE_STACK_LS = """#!/bin/sh
printf '%s\\n' "$*" >> "$CALLS"
[ "$1 $2 $3" = "stack ls --json" ] || exit 2
echo 'warning: a line on stderr' >&2
[ -n "$LS_FAILS" ] && { echo 'error: could not read the bucket' >&2; exit 255; }
echo '[{"name": "lab", "current": false}, {"name": "organization/kamaji-hami-lab/dra"}]'
"""


def run_deployed(tmp_path, monkeypatch, stack: str, fails: bool = False) -> tuple[int, dict, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool, body in (("pulumi", FAKE_STACK_LS), ("helm", "#!/bin/sh\n"), ("git", "#!/bin/sh\n")):
        (bin_dir / tool).write_text(body)
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    if fails:
        monkeypatch.setenv("LS_FAILS", "1")
    code = PREVIEW.main(["--deployed", stack])
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    summary = tmp_path / "summary.md"
    return code, outputs, summary.read_text() if summary.exists() else ""


@pytest.mark.parametrize("stack", ["lab", "dra"])
def test_a_stack_in_the_backend_is_diffed(tmp_path, monkeypatch, stack):
    code, outputs, summary = run_deployed(tmp_path, monkeypatch, stack)
    assert (code, outputs, summary) == (0, {"deployed": "true"}, "")
    assert (tmp_path / "calls").read_text() == "stack ls --json --non-interactive\n"


def test_a_stack_not_in_the_backend_is_skipped_with_a_note(tmp_path, monkeypatch, capsys):
    code, outputs, summary = run_deployed(tmp_path, monkeypatch, "gpu")
    assert (code, outputs) == (0, {"deployed": "false"})
    assert summary.startswith("### `gpu`: not deployed, no diff\n")
    assert "(it holds: `dra`, `lab`)" in summary and "`make up STACK=gpu`" in summary
    assert capsys.readouterr().out.startswith("::notice title=No diff for gpu::")


def test_a_backend_that_cannot_be_read_fails_the_step(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="check the backend's credentials"):
        run_deployed(tmp_path, monkeypatch, "lab", fails=True)


def test_a_runner_without_the_lab_hosts_tools_fails_naming_them(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SystemExit, match="missing on the runner: pulumi, helm, git"):
        PREVIEW.main(["--deployed", "lab"])
