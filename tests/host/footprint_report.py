"""Where the footprint test leaves what it measured, for the session's summary (conftest.py):
name -> (CPUs used, MiB, the model's Footprint for it)."""

from __future__ import annotations

import pytest

from planning.footprint import Footprint

FOOTPRINT = pytest.StashKey[dict[str, tuple[float, float, Footprint]]]()


def footprint_lines(measured: dict[str, tuple[float, float, Footprint]]) -> list[str]:
    return [
        f"{name}: {cpus:.2f} CPU, {mib:.0f} MiB (model: {model.cpus} CPU, {model.memory_mb} MB)"
        for name, (cpus, mib, model) in measured.items()
    ]


# Seconds a module measured (name -> seconds), printed with the session's timings.
MEASURED = pytest.StashKey[dict[str, float]]()
