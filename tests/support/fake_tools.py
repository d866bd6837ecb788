"""Small fake executables on a private PATH, for tests of one command or script at a time.

tests/support/fake_host.py is the whole host (docker, kind, kubectl, kubeadm, ... with state);
these are one-off bash bodies, each appending what it was called with to $CALLS.
"""

from __future__ import annotations

import textwrap
from pathlib import Path


def fake_tools(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """Executables in tmp_path/bin; each body sees $CALLS, the log returned here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/bash\nset -eu\n" + textwrap.dedent(body))
        tool.chmod(0o755)
    return tmp_path / "calls.log"


def tool_env(tmp_path: Path) -> dict[str, str]:
    """An environment that finds the fakes first, with a private HOME and cache."""
    return {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls.log"),
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
