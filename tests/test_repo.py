"""The README's two commands stay true: they exist, and CI runs the test one."""

from __future__ import annotations

import re

from pulumi_harness import PROJECT_DIR


def readme_commands() -> list[str]:
    text = (PROJECT_DIR / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < text.index("\n## "), "commands come first"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def make_targets() -> set[str]:
    makefile = (PROJECT_DIR / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))


def test_readme_starts_with_bring_up_and_test():
    up, test = readme_commands()
    assert up.endswith("make up") and "PULUMI_CONFIG_PASSPHRASE=" in up
    assert test == "make test"
    assert {"up", "test", "destroy", "preview", "check"} <= make_targets()


def test_ci_runs_the_readme_test_command():
    ci = (PROJECT_DIR / ".ci/run").read_text().splitlines()
    assert ci[-1] == readme_commands()[1]


def test_up_uses_the_local_backend_declared_in_pulumi_yaml():
    makefile = (PROJECT_DIR / "Makefile").read_text()
    pulumi_yaml = (PROJECT_DIR / "Pulumi.yaml").read_text()
    assert "url: file://~/.pulumi-kamaji-hami-lab" in pulumi_yaml
    assert "STATE_DIR := $(HOME)/.pulumi-kamaji-hami-lab" in makefile
