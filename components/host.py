"""The machine that evaluates the program, and everything the program reads from it.

The program's host reads, in preview too, all go through `current`: the MTU of Docker's
default bridge (platform/network.py) and the checkout's cache of Kamaji's charts, fetched with
git and helm when missing (platform/kamaji_chart.py). The hermetic tests put their own Host
here for every program run (tests/support/pulumi_harness.py), so a program evaluated under the
mocks reaches no Docker daemon, no GitHub and no cache of the user's; tests/test_hermetic.py
checks that no other module of the program runs a command or reads the environment.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
CACHE_IN_PROJECT = Path(".cache")  # gitignored: what the program fetched, kept across runs

# What a command that ran out of time raises (subprocess's own).
CommandTimedOut = subprocess.TimeoutExpired


class Host:
    """The real machine."""

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs a command, its text output captured and its exit code not checked. `env` adds
        to the program's own environment. Raises OSError (no such program) and CommandTimedOut."""
        return subprocess.run(
            list(argv),
            env={**os.environ, **env} if env else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def which(self, tool: str) -> str | None:
        return shutil.which(tool)

    def cache_dir(self) -> Path:
        """Where the program keeps what it fetched: the checkout's own `.cache`."""
        return PROJECT_DIR / CACHE_IN_PROJECT


current: Host = Host()
