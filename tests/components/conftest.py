import pytest

from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program


@pytest.fixture(scope="module")
def lab() -> ProgramRun:
    """The `lab` stack as the program registers it under mocks, run once per test module."""
    return run_program(lab_stack_config())


@pytest.fixture(scope="module")
def lab_135() -> ProgramRun:
    """The `lab` stack with its tenants on v1.35, where the policy API is beta and off."""
    config = lab_stack_config()
    config["tenants"] = [{**t, "kubernetesVersion": "v1.35.8"} for t in config["tenants"]]
    return run_program(config)
