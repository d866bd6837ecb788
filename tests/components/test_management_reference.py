"""A stack that reuses another stack's cluster (`managementStack`) says what is missing."""

from __future__ import annotations

import pulumi
import pytest

from components.platform.management import _referenced_kubeconfig


def test_a_referenced_stack_without_its_kubeconfig_output_names_the_stack_and_the_fix():
    """Found by the real Pulumi CLI: a lab stack whose first `up` failed has no outputs, and
    `require_output` ended the nvml preview with a bare KeyError traceback."""
    with pytest.raises(pulumi.RunError, match="managementStack org/kamaji-hami-lab/lab has no "):
        _referenced_kubeconfig("org/kamaji-hami-lab/lab", None)
    with pytest.raises(pulumi.RunError, match=r"bring that stack up first \(make up STACK=lab\)"):
        _referenced_kubeconfig("lab", "")


def test_a_referenced_kubeconfig_passes_through():
    assert _referenced_kubeconfig("lab", "apiVersion: v1\n") == "apiVersion: v1\n"
