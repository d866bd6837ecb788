import sys
from pathlib import Path

import pytest

# Tests import the project's packages and their helpers (tests.support) from the project root.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session", autouse=True)
def kamaji_charts_already_cached(tmp_path_factory: pytest.TempPathFactory):
    """Every program run finds the pinned Kamaji charts in a cache of its own, as on a machine
    that fetched them before: no test reaches GitHub or the user's real cache.
    tests/components/test_platform.py runs the fetch itself against fake git and helm."""
    from components.platform import kamaji_chart
    from labconfig.kamaji_sources import KAMAJI_SOURCES

    root = tmp_path_factory.mktemp("kamaji-chart-cache")
    for source in KAMAJI_SOURCES.values():
        for chart in ("kamaji", "kamaji-crds"):
            (root / source.commit / chart).mkdir(parents=True)
        (root / source.commit / kamaji_chart.COMPLETE_MARK).touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kamaji_chart, "default_cache_root", lambda: root)
        yield root
