"""The validation step's command is the same in every checkout, so no preview plans it anew."""

from __future__ import annotations

import pytest

from tests.support.pulumi_harness import lab_stack_config, run_program


@pytest.mark.upstream("pulumi-command-dir-defaults-to-the-project-root")
def test_the_validation_step_has_no_machine_specific_path():
    """Review: `dir` and the interpreter were absolute paths of the deploying checkout, so a
    preview from CI or another clone planned an update (and so a re-run) of the validation."""
    step = run_program(lab_stack_config()).named("validation-labcheck")
    assert "dir" not in step.inputs
    assert step.inputs["create"].startswith(".venv/bin/python -m labcheck --spec-env LABCHECK_SPEC")
    assert step.inputs["create"].endswith("--report-dir reports/lab")
