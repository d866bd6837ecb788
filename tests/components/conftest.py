import pytest

from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program


@pytest.fixture(scope="module")
def lab() -> ProgramRun:
    """The `lab` stack as the program registers it under mocks, run once per test module."""
    return run_program(lab_stack_config())
