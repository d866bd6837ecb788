"""The mocks harness itself: what it records, and that its deliberate failures stay contained."""

from __future__ import annotations

import gc
import logging

import pytest

from components.tenant import control_plane
from tests.support.pulumi_harness import MissingResource, lab_stack_config, run_program

KIND_CLUSTER_ONLY = (
    "preflight-checks",
    "lab-network-bridge",
    "management-kind",
    "management-provider",
)


def test_a_failed_read_leaves_nothing_for_asyncio_to_log_later(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """A read the harness fails on purpose leaves futures nobody awaits. When the garbage
    collector logged them, the traceback formatting (ast.parse on CPython 3.11) could run
    inside pytest's own ast.parse and end the session with "AST constructor recursion depth
    mismatch"; so nothing may be logged for them at all."""
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with monkeypatch.context() as patch, pytest.raises(MissingResource, match="not exist"):
            patch.setattr(
                control_plane, "admin_kubeconfig_secret_id", lambda name, _gate: f"{name}/x"
            )
            run_program(lab_stack_config(), preview=True, existing=KIND_CLUSTER_ONLY)
        run_program(lab_stack_config())  # the next run drops the runtime's last references
        gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


def test_each_run_parents_its_components_to_its_own_stack():
    """set_mocks makes a root Stack only when there is none; the harness resets it per run."""
    first = run_program(lab_stack_config(), stack="lab")
    second = run_program(lab_stack_config(), stack="other")
    assert first.named("validation").parent.endswith("::kamaji-hami-lab-lab")
    assert second.named("validation").parent.endswith("::kamaji-hami-lab-other")
