"""The Makefile's user targets, run by real `make` against fake tools in a temporary HOME.

Nothing here touches the project's venv, the real Pulumi state or the host: PATH holds only
the fakes a test puts there, HOME and VENV point into tmp_path.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from preflight.checks import PULUMI_CLI, TOOL_INSTALL
from tests.support.pulumi_harness import PROJECT_DIR

MAKE = shutil.which("make") or "make"  # the project's own entry point: no make, no lab

# The same commands as the preflight gives (one hint per tool, the Pulumi CLI pinned).
INSTALL_HINTS = {
    "pulumi": "missing pulumi: " + TOOL_INSTALL["pulumi"].split(": ", 1)[1],
    "kind": "missing kind: " + TOOL_INSTALL["kind"].split(": ", 1)[1],
    "docker": "missing docker: Docker Engine, rootful: https://docs.docker.com/engine/install/",
    "kubectl": "missing kubectl: https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/",
    "curl": "missing curl: e.g. sudo apt-get install curl",
    "git": "missing git: e.g. sudo apt-get install git",
    "helm": "missing helm: Helm 3: https://helm.sh/docs/intro/install/",
    "python3": (
        "missing python3: Python >= 3.11 with venv, e.g. sudo apt-get install python3 python3-venv"
    ),
}


def fake(bin_dir: Path, name: str, log: Path, exit_code: int = 0) -> None:
    """A tool that records its arguments (and the env var destroy must set) and exits."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(
        "#!/bin/sh\n"
        f'echo "{name} $* [unreachable=${{PULUMI_K8S_DELETE_UNREACHABLE:-unset}}]" >> {log}\n'
        f"exit {exit_code}\n"
    )
    path.chmod(0o755)


def make(
    target: str, tmp_path: Path, bin_dir: Path, *flags: str, **env: str
) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    return subprocess.run(
        [MAKE, "--no-print-directory", *flags, "-C", str(PROJECT_DIR), target, f"VENV={venv}"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path / "home"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def messages(done: subprocess.CompletedProcess) -> list[str]:
    """What the recipes wrote to stderr, without make's own `make: *** [...] Error` line."""
    return [line for line in done.stderr.splitlines() if not line.startswith("make: ")]


def ready_venv(tmp_path: Path, log: Path, preflight_exit: int = 0) -> None:
    """A venv make considers installed, whose python records the preflight's arguments."""
    fake(tmp_path / "venv" / "bin", "python", log, preflight_exit)
    (tmp_path / "venv" / ".installed").touch()  # newer than requirements*.txt


def test_up_without_any_tool_prints_one_line_per_tool_and_does_nothing(tmp_path: Path):
    """Issue 9 item 3: before anything else, one line per missing tool with how to install it."""
    empty = tmp_path / "bin"
    empty.mkdir()
    done = make("up", tmp_path, empty, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 2
    assert messages(done) == [
        INSTALL_HINTS[t]
        for t in ("pulumi", "kind", "docker", "kubectl", "curl", "git", "helm", "python3")
    ]
    assert not (tmp_path / "venv").exists() and not (tmp_path / "home").exists()


def test_up_names_only_the_tools_that_are_missing(tmp_path: Path):
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    for tool in ("pulumi", "kind", "curl", "git", "helm", "python3"):
        fake(bin_dir, tool, log)
    done = make("up", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 2
    assert messages(done) == [INSTALL_HINTS["docker"], INSTALL_HINTS["kubectl"]]
    assert not log.exists()  # no tool ran


def tools_on_path(tmp_path: Path, log: Path) -> Path:
    bin_dir = tmp_path / "bin"
    for tool in ("pulumi", "kind", "docker", "kubectl", "curl", "git", "helm", "python3"):
        fake(bin_dir, tool, log)
    for tool in ("mkdir",):  # what the recipes themselves run
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return bin_dir


@pytest.mark.parametrize("target", ["up", "preview"])
def test_up_and_preview_ask_for_the_passphrase_before_they_create_anything(
    target: str, tmp_path: Path
):
    """Both open the stack (and create it on a fresh backend), which the CLI refuses without
    the passphrase (`could not create secrets manager for new stack`)."""
    log = tmp_path / "calls.log"
    done = make(target, tmp_path, tools_on_path(tmp_path, log))
    assert done.returncode == 2
    assert "set PULUMI_CONFIG_PASSPHRASE (it encrypts the stack's secrets)" in done.stderr
    assert not log.exists() and not (tmp_path / "venv").exists()


@pytest.mark.parametrize(
    ("target", "then"),
    [
        # m6: every `make up` re-checks the host, against the stack, before `pulumi up`.
        ("up", ["python -m preflight --stack lab", "pulumi up --stack lab"]),
        # Issue 17 item 4: `make preview` stopped with `error: no stack named 'lab' found`.
        ("preview", ["pulumi preview --stack lab --diff"]),
    ],
)
def test_up_and_preview_select_or_create_the_stack_first(
    target: str, then: list[str], tmp_path: Path
):
    log = tmp_path / "calls.log"
    bin_dir = tools_on_path(tmp_path, log)
    ready_venv(tmp_path, log)
    done = make(target, tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        f"{call} [unreachable=unset]" for call in ["pulumi stack select --create lab", *then]
    ]
    assert (tmp_path / "home" / ".pulumi-kamaji-hami-lab").is_dir()


def test_a_failed_preflight_stops_make_up_before_pulumi_up(tmp_path: Path):
    log = tmp_path / "calls.log"
    bin_dir = tools_on_path(tmp_path, log)
    ready_venv(tmp_path, log, preflight_exit=1)
    done = make("up", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 2
    assert log.read_text().splitlines()[-1].startswith("python -m preflight")


@pytest.mark.upstream(
    "pulumi-k8s-delete-unreachable-env", "pulumi-k8s-helm-release-delete-needs-the-cluster"
)
def test_destroy_lets_the_provider_drop_unreachable_objects(tmp_path: Path):
    """M5: only `make destroy` sets PULUMI_K8S_DELETE_UNREACHABLE, which the provider reads
    when its own deleteUnreachable input is unset, and refreshes first: a Helm release is
    dropped by Read, never by Delete, on an unreachable cluster. No venv or kind needed."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "pulumi", log)
    done = make("destroy", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == [
        "pulumi destroy --refresh --stack lab [unreachable=true]"
    ]
    assert not (tmp_path / "venv").exists()


def test_destroy_without_pulumi_says_how_to_install_it(tmp_path: Path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = make("destroy", tmp_path, empty, PULUMI_CONFIG_PASSPHRASE="x")
    assert (done.returncode, messages(done)) == (2, [INSTALL_HINTS["pulumi"]])


def test_preview_without_any_tool_names_git_and_helm_too(tmp_path: Path):
    """Issue 17 item 4: the program fetches Kamaji's charts with git and helm in a preview too;
    without them it used to end in a Python traceback instead of one line per tool."""
    empty = tmp_path / "bin"
    empty.mkdir()
    done = make("preview", tmp_path, empty, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 2
    assert messages(done) == [INSTALL_HINTS[t] for t in ("pulumi", "git", "helm", "python3")]
    assert not (tmp_path / "venv").exists() and not (tmp_path / "home").exists()


def test_preview_names_only_the_tools_that_are_missing(tmp_path: Path):
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    for tool in ("pulumi", "python3"):
        fake(bin_dir, tool, log)
    done = make("preview", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert done.returncode == 2
    assert messages(done) == [INSTALL_HINTS["git"], INSTALL_HINTS["helm"]]
    assert not log.exists()


def test_capacity_needs_a_mix(tmp_path: Path):
    log = tmp_path / "calls.log"
    ready_venv(tmp_path, log)
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "pulumi", log)
    without = make("capacity", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert without.returncode == 2
    assert "set MIX=<mix file>" in without.stderr
    assert not log.exists()


@pytest.mark.parametrize(
    ("target", "variables", "then"),
    [
        ("kubeconfig", {}, "python -m labcheck.kubeconfigs --stack lab --dir kubeconfigs/lab"),
        (
            "kubeconfig",
            {"TENANT": "tenant-a", "STACK": "dev"},
            "python -m labcheck.kubeconfigs --stack dev --dir kubeconfigs/dev --tenant tenant-a",
        ),
        ("sharing", {}, "python -m labcheck.sharing --stack lab --report-dir reports/lab"),
        ("check", {}, "python -m labcheck --stack lab"),
        (
            "ledger",
            {"SINCE": "2h"},
            "python -m capacity --stack lab --ledger --last 2h --report-dir reports/lab",
        ),
        (
            "capacity",
            {"MIX": "capacity/mixes/inference-heavy.yaml"},
            "python -m capacity --stack lab --mix capacity/mixes/inference-heavy.yaml "
            "--report-dir reports/lab/capacity",
        ),
    ],
)
def test_the_targets_that_read_the_stack_outputs_ask_for_pulumi_and_the_passphrase(
    target: str, variables: dict[str, str], then: str, tmp_path: Path
):
    """Each reads secret outputs (kubeconfigs, labcheckSpec), which the CLI cannot decrypt
    without the passphrase: asked for first, as `make up` does, and pulumi named when it is
    missing."""
    log = tmp_path / "calls.log"
    ready_venv(tmp_path, log)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    no_pulumi = make(target, tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x")
    assert (no_pulumi.returncode, messages(no_pulumi)) == (2, [INSTALL_HINTS["pulumi"]])
    fake(bin_dir, "pulumi", log)
    no_passphrase = make(target, tmp_path, bin_dir)
    assert no_passphrase.returncode == 2
    assert "set PULUMI_CONFIG_PASSPHRASE (it encrypts the stack's secrets)" in no_passphrase.stderr
    assert not log.exists()
    # Make takes the environment's TENANT and STACK as its variables, as from the command line.
    done = make(target, tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x", **variables)
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().split(" [")[0] == then
    if target == "kubeconfig":  # only the tool's export lines: `eval "$(make -s kubeconfig)"`
        assert done.stdout == ""


@pytest.mark.parametrize("target", ["kubeconfig", "sharing", "check", "stack"])
def test_the_missing_tool_and_passphrase_messages_go_to_stderr(target: str, tmp_path: Path):
    """`eval "$(make -s kubeconfig TENANT=...)"` runs what make prints on stdout: a message
    there would be run as a command. Without pulumi, then without the passphrase, stdout stays
    empty and the message is on stderr."""
    log = tmp_path / "calls.log"
    ready_venv(tmp_path, log)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    no_pulumi = make(target, tmp_path, bin_dir, "-s", TENANT="tenant-a")
    assert (no_pulumi.returncode, no_pulumi.stdout) == (2, "")
    assert messages(no_pulumi) == [INSTALL_HINTS["pulumi"]]
    fake(bin_dir, "pulumi", log)
    no_passphrase = make(target, tmp_path, bin_dir, "-s", TENANT="tenant-a")
    assert (no_passphrase.returncode, no_passphrase.stdout) == (2, "")
    assert messages(no_passphrase) == [
        "set PULUMI_CONFIG_PASSPHRASE (it encrypts the stack's secrets)"
    ]
    assert not log.exists()


@pytest.mark.parametrize("stack", ["lab", "nvml"])
def test_stack_selects_or_creates_the_stack_for_pulumi_config_set(stack: str, tmp_path: Path):
    """`pulumi config set --stack lab` before the first `make up` fails on a fresh checkout: no
    stack yet, and the local backend's directory missing. `make stack` makes both, as `make up`
    does first, with nothing else (no venv, no preflight)."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    fake(bin_dir, "pulumi", log)
    (bin_dir / "mkdir").symlink_to(shutil.which("mkdir"))
    done = make("stack", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x", STACK=stack)
    assert done.returncode == 0, done.stdout + done.stderr
    assert log.read_text().splitlines() == [
        f"pulumi stack select --create {stack} [unreachable=unset]"
    ]
    assert (tmp_path / "home" / ".pulumi-kamaji-hami-lab").is_dir()
    assert not (tmp_path / "venv").exists()


def test_make_alone_lists_the_user_targets_and_installs_nothing(tmp_path: Path):
    """`make` with no target used to run the pip install; it prints what each target does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "awk").symlink_to(shutil.which("awk") or "/usr/bin/awk")
    done = subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(PROJECT_DIR), f"VENV={tmp_path / 'venv'}"],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines()[1:]}
    user = {"up", "preview", "destroy", "check", "kubeconfig", "sharing", "capacity", "pulls"}
    user |= {"ledger", "dashboard"}
    assert user | {"stack", "test", "test-real", "test-host"} == listed
    assert "preflight, plan, deploy after you confirm" in done.stdout
    assert not (tmp_path / "venv").exists()


def test_every_install_hint_pins_the_pulumi_cli_the_lab_was_tested_with():
    """The Makefile, the preflight, the workflows and the real tier name one CLI version."""
    from tests.real.binaries import PULUMI_VERSION

    makefile = (PROJECT_DIR / "Makefile").read_text()
    assert f"PULUMI_CLI := {PULUMI_CLI}\n" in makefile
    assert f"v{PULUMI_CLI}" == PULUMI_VERSION
    assert TOOL_INSTALL["pulumi"].endswith(f"sh -s -- --version {PULUMI_CLI}")
    # One complete kind hint: downloaded, made executable and moved onto PATH.
    assert TOOL_INSTALL["kind"].endswith("chmod +x ./kind && sudo mv ./kind /usr/local/bin/kind")


@pytest.mark.parametrize(
    ("output", "code", "says"),
    [
        ("http://172.30.255.254/d/kamaji-hami-lab-sharing", 0, "open http://172.30.255.254/d/"),
        ("null", 1, "has no dashboard: monitoring.enabled and monitoring.grafana are off"),
    ],
)
def test_dashboard_says_where_it_opens_or_that_the_stack_has_none(
    output: str, code: int, says: str, tmp_path: Path
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "echo", "test", "[", "base64"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    pulumi = bin_dir / "pulumi"
    pulumi.write_text(f'#!/bin/sh\necho "$*" > {tmp_path / "args"}\necho {output}\n')
    pulumi.chmod(0o755)
    done = make("dashboard", tmp_path, bin_dir, PULUMI_CONFIG_PASSPHRASE="x", STACK="lab")
    assert done.returncode == (2 if code else 0), done.stdout + done.stderr
    assert says in done.stdout + done.stderr
    assert (tmp_path / "args").read_text().split() == [
        "stack", "output", "dashboardUrl", "--stack", "lab"
    ]  # fmt: skip
