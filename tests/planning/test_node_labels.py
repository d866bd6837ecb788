"""Layering: the workers take their registration labels from a plain module, not a component."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(module: str) -> set[str]:
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    return {
        name
        for node in ast.walk(tree)
        for name in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else []
        )
    }


@pytest.mark.parametrize(
    "module", ["components/tenant/workers", "components/tenant/remote_workers"]
)
def test_workers_take_their_labels_from_the_pure_module(module: str):
    """T6: container and remote workers share node_labels; the GpuNodes component is not theirs."""
    imports = imported_modules(module)
    assert "planning.node_labels" in imports
    assert "components.tenant.gpu_nodes" not in imports


def test_the_labels_module_imports_no_pulumi_and_no_component():
    assert imported_modules("planning/node_labels") == {"__future__"}


def test_the_docs_name_no_node_patches_the_program_no_longer_declares():
    """T6: nodes register `gpu=on` themselves, so no text may promise NodePatches."""
    root = ROOT
    texts = [root / "README.md", *sorted((root / "tests/real").glob("*.py"))]
    assert [path.name for path in texts if "NodePatch" in path.read_text()] == []
