"""Debian packages a test tier installs on a fresh machine (CI, a new host): with apt, as root or
through passwordless sudo, only when the program it needs is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any


class PackageUnavailable(Exception):
    """apt could not install a Debian package the tier needs; the message has apt's error."""


def install_if_missing(program: str, package: str, run: Any = subprocess.run) -> bool:
    """Installs Debian's `package` when `program` is not on PATH (a fresh machine, CI);
    True when it did."""
    if shutil.which(program):
        return False
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        [*sudo, "apt-get", "update"],
        [*sudo, "apt-get", "install", "-y", "--no-install-recommends", package],
    ):
        result = run(argv, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise PackageUnavailable(f"{' '.join(argv)} failed: {result.stderr[-2000:]}")
    return True
