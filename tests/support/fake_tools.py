"""Small fake executables on a private PATH, for tests of one command or script at a time.

tests/support/fake_host.py is the whole host (docker, kind, kubectl, kubeadm, ... with state);
these are one-off bash bodies, each appending what it was called with to $CALLS.
"""

from __future__ import annotations

import subprocess
import textwrap
from dataclasses import dataclass
from pathlib import Path

# A fake's prelude that takes the next word of $ANSWERS as `answer`, one word per call (its
# count kept in $STATE/n): for gates that ask the same thing until it holds.
NEXT_ANSWER = r"""
n=$(cat "$STATE/n" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/n"
answer=$(echo $ANSWERS | cut -d' ' -f$((n + 1)))
"""


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


@dataclass(frozen=True)
class ScriptRun:
    """Runs one shell script at a time against the fakes in tmp_path/bin, with a $STATE
    directory the fakes may keep things in, and $CALLS their log."""

    tmp_path: Path
    calls: Path
    state: Path

    def __call__(self, script: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["/bin/sh", "-c", script],
            env={**tool_env(self.tmp_path), "STATE": str(self.state), **env},
            capture_output=True,
            text=True,
            timeout=30,
        )


def script_run(tmp_path: Path, scripts: dict[str, str]) -> ScriptRun:
    """The fakes of `scripts` (fake_tools) and a runner of scripts against them."""
    calls = fake_tools(tmp_path, scripts)
    state = tmp_path / "state"
    state.mkdir()
    return ScriptRun(tmp_path, calls, state)
