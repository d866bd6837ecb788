"""The HostPreflight step: its command lines, update path and portable interpreter."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from components.platform.host_preflight import (
    PROJECT_DIR,
    preflight_command,
    preflight_update_command,
    project_python,
)
from labconfig.parse import parse_config
from planning.host_plan import Sizing, host_plan
from preflight import cli
from tests.support.made_up_hosts import PLAN
from tests.support.pulumi_harness import lab_stack_config, run_program


def test_the_command_line_carries_the_whole_plan():
    plan = replace(PLAN, kube_proxy_versions=("v1.35.0", "v1.36.0"))
    assert preflight_command(plan, python="/opt/lab venv/python") == (
        "'/opt/lab venv/python' -m preflight --tenants 2 --workers 2 "
        "--kube-proxy-version v1.35.0 --kube-proxy-version v1.36.0 "
        "--tenant-version tenant-a=v1.36.4 --tenant-version tenant-b=v1.36.4 "
        "--management-version v1.37.0 "
        "--network kamaji-hami-lab --subnet 172.30.0.0/16 --kind-cluster --kamaji-charts"
    )
    # What the command's run rebuilds from its flags is the plan itself, field by field.
    for each in (
        plan,
        replace(plan, management_version=None, kind_cluster=False, kamaji_charts=False),
        replace(plan, tenant_versions=(("a", "v1.34.0"), ("b", "v1.36.1"))),
        replace(plan, sizing=Sizing(2, 2, (0.2, 1.234))),
    ):
        argv = shlex.split(preflight_command(each, python="py"))[3:]
        assert cli._flags_plan(cli._parser().parse_args(argv))[0] == each


@pytest.mark.upstream("pulumi-command-update-previous-stdout")
def test_the_update_command_passes_the_previous_record(tmp_path: Path):
    """M2: pulumi-command runs `update` with the last stdout in PULUMI_COMMAND_STDOUT; the
    generated line, run by /bin/sh as the provider does, hands it to --previous."""
    python = tmp_path / "python"
    calls = tmp_path / "calls.json"
    python.write_text(
        textwrap.dedent(
            f"""\
            #!{os.path.realpath(os.sys.executable)}
            import json, sys
            json.dump(sys.argv[1:], open({str(calls)!r}, "w"))
            """
        )
    )
    python.chmod(0o755)
    line = preflight_update_command(PLAN, python=str(python))
    record = Sizing(2, 1).record()
    subprocess.run(["/bin/sh", "-c", line], check=True, env={"PULUMI_COMMAND_STDOUT": record})
    argv = json.loads(calls.read_text())
    assert argv[-2:] == ["--previous", record]
    assert Sizing.from_record(cli._parser().parse_args(argv[2:]).previous) == Sizing(2, 1)
    subprocess.run(["/bin/sh", "-c", line], check=True, env={})  # first update of an old state
    assert json.loads(calls.read_text())[-2:] == ["--previous", ""]


@pytest.mark.upstream("pulumi-command-update-previous-stdout")
def test_the_program_registers_an_update_path_and_no_replacing_triggers():
    """m6, M2: a resize updates the command in place (triggers would replace it)."""
    run = run_program(lab_stack_config())
    check = run.named("preflight-checks")
    assert check.inputs["update"].endswith('--previous "${PULUMI_COMMAND_STDOUT:-}"')
    assert check.inputs["create"].split(" -m ")[1] == (
        "preflight --tenants 2 --workers 2 --kube-proxy-version v1.36.4 "
        "--tenant-version tenant-a=v1.36.4 --tenant-version tenant-b=v1.36.4 "
        "--management-version v1.37.0 "
        "--network kamaji-hami-lab --subnet 172.30.0.0/16 --kind-cluster --kamaji-charts"
    )
    assert "triggers" not in check.inputs


@pytest.mark.upstream("pulumi-command-dir-defaults-to-the-project-root")
def test_the_check_has_no_machine_specific_path(tmp_path: Path):
    """Review 4 (m6): another checkout or CI's preview plans no update of the check: the
    interpreter is relative to the project and no absolute `dir` is set; the provider runs
    the command in the project's root (Pulumi.yaml has no `main` that would move it)."""
    project = tmp_path / "lab"
    (project / ".venv/bin").mkdir(parents=True)
    assert project_python(str(project / ".venv/bin/python"), project) == ".venv/bin/python"
    assert project_python("/usr/bin/python3", project) == "/usr/bin/python3"
    assert project_python(str(project / "../other/python"), project) == str(
        tmp_path / "other/python"
    )
    link = tmp_path / "link"
    link.symlink_to(project)
    assert project_python(str(link / ".venv/bin/python"), project.resolve()) != ".venv/bin/python"
    assert project_python(str(project / ".venv/bin/python"), link) == ".venv/bin/python"

    check = run_program(lab_stack_config()).named("preflight-checks")
    assert "dir" not in check.inputs
    assert not check.inputs["create"].startswith("/")
    assert "main" not in yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())


def test_the_checks_a_stack_accepts_reach_the_command_and_none_change_nothing():
    plain = host_plan(parse_config(lab_stack_config()))
    accepting = host_plan(
        parse_config({**lab_stack_config(), "preflightAccept": {"cgroup v2": "cgroup v1 image"}})
    )
    assert "--accept" not in shlex.split(preflight_command(plain, python="py"))
    argv = shlex.split(preflight_command(accepting, python="py"))
    assert argv[argv.index("--accept") + 1] == "cgroup v2=cgroup v1 image"


def test_a_tenant_s_control_plane_cpu_requests_reach_the_command_and_defaults_change_nothing():
    """The preflight run by `pulumi up` sizes the host for every tenant's control plane CPU;
    a stack that keeps the defaults keeps its command line (no update of the step)."""
    config = lab_stack_config()
    config["tenants"][1]["controlPlaneCpuRequests"] = {"apiServer": "1", "scheduler": "0.1"}
    argv = shlex.split(preflight_command(host_plan(parse_config(config)), python="py"))
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--control-plane-cpus"] == [
        "0.45",
        "1.25",
    ]
    plain = shlex.split(preflight_command(host_plan(parse_config(lab_stack_config())), "py"))
    assert "--control-plane-cpus" not in plain
