import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

# Tests import the project's packages and their helpers (tests.support) from the project root.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.host_trap import UNSET_VARS, HostTrap  # noqa: E402

REAL_TIER = ROOT / "tests" / "real"


def trap_applies(test_files: Iterable[Path]) -> bool:
    """The hermetic tier runs in the trap; tests/real (real programs, which need the real HOME
    for their cache and the Pulumi CLI's plugins) never does."""
    return not any(path.is_relative_to(REAL_TIER) for path in test_files)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    real = [item.path.is_relative_to(REAL_TIER) for item in items]
    if any(real) and not all(real):
        raise pytest.UsageError(
            "tests/real runs real programs against the real HOME, and the hermetic tests run in "
            "a trap (tests/conftest.py): run them apart (make test, make test-real)"
        )


@pytest.fixture(scope="session", autouse=True)
def host_trap(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostTrap | None]:
    """Every hermetic test process (each xdist worker) finds Docker, a kubeconfig's cluster and
    HOME only in a trap (tests/support/host_trap.py), set before any other fixture runs: the
    machine's daemon and the user's ~/.kube/config stay out of reach, and any touch of the
    trap fails the test it happened in (`nothing_reached_the_host`)."""
    if not trap_applies(item.path for item in request.session.items):
        yield None
        return
    trap = HostTrap(tmp_path_factory.mktemp("host-trap"))
    try:
        with pytest.MonkeyPatch.context() as patch:
            for name in UNSET_VARS:
                patch.delenv(name, raising=False)
            for name, value in trap.env().items():
                patch.setenv(name, value)
            yield trap
        left = trap.take()
    finally:
        trap.close()
    if left:
        pytest.fail(trap_report("the session's last fixtures", left), pytrace=False)


def trap_report(who: str, touched: list[str]) -> str:
    lines = "\n".join(f"  - {touch}" for touch in touched)
    return (
        f"{who} reached for the host's Docker or Kubernetes (tests/support/host_trap.py):\n"
        f"{lines}\nThe hermetic tests must not: use the fakes in tests/support."
    )


@pytest.fixture(autouse=True)
def nothing_reached_the_host(
    request: pytest.FixtureRequest, host_trap: HostTrap | None
) -> Iterator[None]:
    """Fails, at its teardown, the test during which the trap was touched (its fixtures
    included: a module fixture counts for the test that first needed it)."""
    yield
    touched = host_trap.take() if host_trap else []
    if touched:
        pytest.fail(trap_report(request.node.nodeid, touched), pytrace=False)


@pytest.fixture(scope="session")
def kamaji_charts_already_cached() -> Path:
    """Where every program run finds the pinned Kamaji charts: the harness's own cache
    (tests/support/pulumi_harness.py, MockHost), as on a machine that fetched them before.
    No run reaches GitHub or the checkout's cache; tests/components/test_kamaji_chart.py runs
    the fetch itself against fake git and helm."""
    from tests.support.pulumi_harness import prepared_chart_cache

    return prepared_chart_cache()
