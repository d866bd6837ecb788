"""`python -m preflight --help`: named as it is run, and every flag of a plan given by flags
says what it is."""

from __future__ import annotations

import re

import pytest

from preflight import cli


def help_text(capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps to the terminal's width


def test_help_names_the_command_as_it_is_run(capsys):
    assert help_text(capsys).startswith("usage: python -m preflight ")


@pytest.mark.parametrize(
    ("flag", "says"),
    [
        ("--tenants TENANTS", "tenants in the lab"),
        ("--subnet SUBNET", "the lab network's subnet"),
        ("--kind-cluster, --no-kind-cluster", "the management cluster is kind on this host"),
    ],
)
def test_help_says_what_each_plan_flag_is(flag: str, says: str, capsys):
    text = help_text(capsys)
    options = text[text.index("options:") :]
    assert re.search(re.escape(flag) + r" " + re.escape(says), options)


def test_every_option_has_help(capsys):
    parser = cli._parser()
    assert [a.dest for a in parser._actions if not a.help] == []
