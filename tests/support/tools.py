"""Programs on PATH that a test needs: a missing one fails the test in CI and skips it elsewhere.

CI (`CI` set, as GitHub Actions and `.ci/run` under CI=true have it) must run every test, so a
tool it lacks is a defect of the CI setup, not a reason to pass; a contributor's machine without
the tool skips the test and the skip reason says it would fail in CI.
"""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def require_tool(name: str) -> str:
    """The tool's path; else fails the calling test in CI, skips it elsewhere."""
    found = shutil.which(name)
    if found:
        return found
    if in_ci():
        pytest.fail(f"{name} is not on PATH; CI must provide it", pytrace=False)
    pytest.skip(f"{name} is not on PATH (skipped outside CI only: CI fails this test)")
