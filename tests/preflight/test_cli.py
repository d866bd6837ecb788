"""`python -m preflight`: a stack's plan from its config and state, exit codes and output."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest

from planning.host_plan import Sizing
from preflight import cli
from tests.support.made_up_hosts import ANSWERS, GOOD, PLAN, FakeHost


def stack_answers(config: dict, export: dict) -> dict[str, str | Exception]:
    return {
        **ANSWERS,
        "pulumi config --stack": json.dumps(config),
        "pulumi stack export": json.dumps(export),
    }


LAB_CONFIG_JSON = {
    "kamaji-hami-lab:subnet": {"value": "172.30.0.0/16", "secret": False},
    "kamaji-hami-lab:tenants": {
        "value": json.dumps(
            [{"name": "tenant-a", "workers": 1}, {"name": "tenant-b", "workers": 2}]
        ),
        "objectValue": [{"name": "tenant-a", "workers": 1}, {"name": "tenant-b", "workers": 2}],
        "secret": False,
    },
    "kamaji-hami-lab:sshPrivateKey": {"secret": True},
}


EXPORT = {
    "version": 3,
    "deployment": {
        "resources": [
            {
                "urn": "urn:pulumi:lab::kamaji-hami-lab::pulumi:pulumi:Stack::kamaji-hami-lab-lab",
                "type": "pulumi:pulumi:Stack",
            },
            {
                "urn": "urn:pulumi:lab::kamaji-hami-lab::kamaji-hami-lab:index:HostPreflight"
                "$command:local:Command::preflight-checks",
                "type": "command:local:Command",
                "outputs": {"stdout": '{"tenants": 2, "workers": 2}', "stderr": "ok ..."},
            },
        ]
    },
}


@pytest.mark.upstream("pulumi-config-json-shape")
def test_plan_from_stack_reads_config_and_the_last_deployed_sizing():
    """m6: `make up` checks the stack's own plan against what its last update deployed."""
    host = FakeHost(stack_answers(LAB_CONFIG_JSON, EXPORT))
    plan, previous = cli.plan_from_stack("lab", host)
    assert plan == replace(PLAN, sizing=Sizing(2, 3))
    assert previous == Sizing(2, 2)
    assert host.calls == [
        ["pulumi", "config", "--stack", "lab", "--json"],
        ["pulumi", "stack", "export", "--stack", "lab"],
    ]
    fresh = FakeHost(stack_answers(LAB_CONFIG_JSON, {"version": 3, "deployment": {"manifest": {}}}))
    assert cli.plan_from_stack("lab", fresh)[1] is None


def test_main_with_a_stack_checks_and_prints_the_record(monkeypatch, capsys):
    monkeypatch.setattr(cli, "read_host_facts", lambda run: GOOD)
    host = FakeHost(stack_answers(LAB_CONFIG_JSON, EXPORT))
    assert cli.main(["--stack", "lab"], run=host) == 0
    out = capsys.readouterr()
    assert out.out == '{"tenants": 2, "workers": 3}\n'
    assert "ok   nf_conntrack       loaded (nf_conntrack_max 262144" in out.err


def test_main_skips_a_stack_that_disables_the_preflight(monkeypatch, capsys):
    monkeypatch.setattr(cli, "read_host_facts", lambda run: pytest.fail("read the host"))
    off = {**LAB_CONFIG_JSON, "kamaji-hami-lab:preflight": {"value": "false", "secret": False}}
    assert cli.main(["--stack", "lab"], run=FakeHost(stack_answers(off, EXPORT))) == 0
    assert "preflight: skipped" in capsys.readouterr().err


def test_main_names_a_bad_stack_config(capsys):
    bad = {"kamaji-hami-lab:tenants": {"value": "[]", "secret": False}}
    assert cli.main(["--stack", "lab"], run=FakeHost(stack_answers(bad, EXPORT))) == 1
    assert capsys.readouterr().err.startswith("preflight: invalid stack config: tenants")


def test_main_says_what_pulumi_said_when_it_cannot_read_the_stack(capsys):
    gone = subprocess.CalledProcessError(
        255, ["pulumi", "config"], output="", stderr="error: no stack named 'lab' found\n"
    )
    answers = {**stack_answers(LAB_CONFIG_JSON, EXPORT), "pulumi config --stack": gone}
    assert cli.main(["--stack", "lab"], run=FakeHost(answers)) == 1
    assert capsys.readouterr().err == (
        "preflight: cannot read stack lab: error: no stack named 'lab' found\n"
    )


def test_main_names_the_missing_pulumi_and_how_to_install_it(tmp_path, monkeypatch, capsys):
    """Issue 17 (9): without pulumi on PATH it said `cannot read stack lab: not on PATH`. The
    real subprocess call, on a PATH that holds no pulumi, names it and its installer."""
    monkeypatch.setattr(cli, "read_host_facts", lambda run: pytest.fail("read the host"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["--stack", "lab"]) == 1
    assert capsys.readouterr().err == (
        "preflight: cannot read stack lab: pulumi is not on PATH; "
        "install the Pulumi CLI v3.274.1: curl -fsSL https://get.pulumi.com | sh -s -- "
        "--version 3.274.1\n"
    )


def test_main_exits_non_zero_and_prints_fixes(monkeypatch, capsys):
    monkeypatch.setattr(
        cli, "read_host_facts", lambda run: replace(GOOD, bridge_nf_call_iptables=None)
    )
    argv = ["--tenants", "2", "--workers", "2", "--kube-proxy-version", "v1.35.0"]
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    assert "FAIL br_netfilter" in out.err and "fix: sudo modprobe br_netfilter" in out.err
    assert (
        out.out == ""
    )  # a failed run leaves no record: the next update compares to the last good one


def test_main_checks_kubectl_against_the_versions_on_its_command_line(monkeypatch, capsys):
    """Issue 17 (9): the HostPreflight command passes every API server's version."""
    old = {**GOOD.tools, "kubectl": "Client Version: v1.32.4-dispatcher"}
    monkeypatch.setattr(cli, "read_host_facts", lambda run: replace(GOOD, tools=old))
    argv = ["--tenants", "1", "--workers", "1", "--kube-proxy-version", "v1.35.0"]
    argv += ["--tenant-version", "tenant-a=v1.35.0", "--management-version", "v1.33.1"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "FAIL kubectl version    v1.32.4 is more than one minor from tenant tenant-a v1.35.0 ("
    ) in err
    assert "install kubectl v1.34.0 (only v1.34 fits every API server)" in err
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["--tenant-version", "v1.35.0"])  # no NAME=


def test_an_accepted_check_still_runs_and_warns_with_why_instead_of_failing(monkeypatch, capsys):
    monkeypatch.setattr(
        cli, "read_host_facts", lambda run: replace(GOOD, bridge_nf_call_iptables=None)
    )
    argv = ["--tenants", "2", "--workers", "2", "--kube-proxy-version", "v1.35.0"]
    argv += ["--accept", "br_netfilter=the node image loads it itself"]
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    assert "WARN br_netfilter" in out.err
    assert "     accepted: the node image loads it itself" in out.err
    assert "fix: sudo modprobe br_netfilter" not in out.err
    assert out.out == '{"tenants": 2, "workers": 2}\n'  # a passing run: its record for the next


def test_accepting_one_check_leaves_the_others_failing(monkeypatch, capsys):
    bad = replace(GOOD, bridge_nf_call_iptables=None, inotify_instances=128)
    monkeypatch.setattr(cli, "read_host_facts", lambda run: bad)
    argv = ["--tenants", "1", "--workers", "1", "--accept", "br_netfilter=known"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "WARN br_netfilter" in err and "FAIL inotify instances" in err
    assert "preflight: 1 check(s) failed" in err


@pytest.mark.parametrize("value", ["cgroupv2=old kernel", "cgroup v2", "cgroup v2= "])
def test_an_accept_flag_names_a_known_check_and_why(value, capsys):
    with pytest.raises(SystemExit):
        cli.main(["--tenants", "1", "--workers", "1", "--accept", value])
    assert "expected CHECK=WHY with CHECK one of cgroup v2," in capsys.readouterr().err


def test_a_stacks_accepted_checks_reach_the_plan(monkeypatch):
    config = {
        **LAB_CONFIG_JSON,
        "kamaji-hami-lab:preflightAccept": {
            "value": json.dumps({"cgroup v2": "node image built for cgroup v1"}),
            "objectValue": {"cgroup v2": "node image built for cgroup v1"},
            "secret": False,
        },
    }
    plan, _ = cli.plan_from_stack("lab", FakeHost(stack_answers(config, EXPORT)))
    assert plan.accepted == (("cgroup v2", "node image built for cgroup v1"),)


def test_control_plane_cpus_are_given_once_per_tenant_or_not_at_all(capsys):
    flags = ["--tenants", "2", "--workers", "2", "--control-plane-cpus", "0.2"]
    with pytest.raises(SystemExit):
        cli.main(flags)
    assert "give --control-plane-cpus once per tenant, or not at all" in capsys.readouterr().err
