from pathlib import Path

import pytest

from tests.support.fake_host import FakeHost


@pytest.fixture
def host(tmp_path: Path) -> FakeHost:
    """A fresh fake host (docker, kind, kubectl, kubeadm, ... with state) for one script run."""
    return FakeHost(tmp_path / "host")
