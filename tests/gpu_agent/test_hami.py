"""What mutation testing found unpinned in gpu_agent (issue 13)."""

from __future__ import annotations

import pytest

from gpu_agent import hami


@pytest.mark.parametrize(
    ("value", "owner"),
    [
        ("2026-01-01T00:00:00Z,ns,pod", ("ns", "pod")),
        ("2026-01-01T00:00:00Z,,pod", None),  # no namespace
        ("2026-01-01T00:00:00Z,ns,", None),  # no pod
        ("2026-01-01T00:00:00Z,,", None),
        ("2026-01-01T00:00:00Z", None),  # legacy: timestamp only
        ("2026-01-01T00:00:00Z,ns,pod,x", None),
    ],
)
def test_a_lock_names_its_owner_only_with_both_namespace_and_pod(value: str, owner):
    assert hami.lock_owner(value) == owner
