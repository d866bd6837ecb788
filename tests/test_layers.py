"""The folders are the layers, and imports point one way (docs/architecture.md).

labconfig -> planning -> builders -> components -> __main__.py; the host-side tools import the
program's layers only downwards and never a component. Checked on every import statement of
every module, function-level ones included, so a cycle cannot hide inside a function.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAM_LAYERS = ("labconfig", "planning", "builders", "components")
HOST_TOOLS = ("preflight", "labcheck", "capacity", "gpu_agent", "policy")
# What each package may import of the project (itself always).
ALLOWED: dict[str, set[str]] = {
    "labconfig": set(),
    "planning": {"labconfig"},
    # The simulated GPUs ship the agent's own files and RBAC rules as data, in ConfigMaps.
    "builders": {"labconfig", "planning", "gpu_agent"},
    "components": {"labconfig", "planning", "builders"},
    "__main__": {"labconfig", "components"},
    "preflight": {"labconfig", "planning"},
    "labcheck": set(),
    # A host tool on labcheck's cluster client, HAMi knowledge and placement picture.
    "capacity": {"labcheck"},
    "gpu_agent": set(),
    "policy": set(),
}
PROJECT_PACKAGES = set(ALLOWED) - {"__main__"}
WORD = re.compile(r"\w+")


def modules() -> dict[str, Path]:
    found = {"__main__": ROOT / "__main__.py"}
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def project_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules `path` imports (a `from pkg import module` counts as the module)."""
    return {name for name in imports_of(path) if name in known and name != "__main__"}


def package_of(module: str) -> str:
    return module.split(".", 1)[0]


def test_every_project_package_is_checked():
    """Packages, and the policy pack (a folder the Pulumi CLI loads, no __init__.py)."""
    on_disk = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()} - {"tests"}
    assert on_disk | {"policy"} == PROJECT_PACKAGES


@pytest.mark.parametrize("module", sorted(modules()))
def test_imports_point_down_the_layers(module: str):
    known = modules()
    package = package_of(module)
    wrong = sorted(
        name
        for name in project_imports(known[module], known)
        if package_of(name) not in ALLOWED[package] | {package}
    )
    assert wrong == [], f"{module} ({package}) may not import {wrong}"


def test_no_module_imports_itself_back_through_another():
    known = modules()
    graph = {module: project_imports(path, known) - {module} for module, path in known.items()}
    done: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph[module]):
            if target in path:
                cycles.append([*path[path.index(target) :], target])
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            visit(module, [module])
    assert cycles == []


def test_the_checker_sees_a_function_level_import(tmp_path: Path):
    """The old config <-> address-plan cycle hid in a function body: the scan sees such imports."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from labconfig.addresses import plan_network\n")
    assert "labconfig.addresses" in imports_of(module)


def test_components_hold_the_component_resources_and_only_they_subclass_one():
    """A ComponentResource outside components/ would be a component hiding in a pure layer."""
    known = modules()
    where = sorted(
        module
        for module, path in known.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).endswith("ComponentResource") for base in node.bases)
    )
    assert where, "no ComponentResource found: the scan is broken"
    assert [m for m in where if package_of(m) != "components"] == []


@pytest.mark.parametrize("package", ["labconfig", "planning", "builders"])
def test_the_pure_layers_register_nothing(package: str):
    """Pure layers may use pulumi types (Config, Input) but never declare a resource."""
    known = modules()
    registering = sorted(
        module
        for module, path in known.items()
        if package_of(module) == package
        and any(
            name.startswith(("pulumi_kubernetes", "pulumi_docker", "pulumi_command"))
            for name in imports_of(path)
        )
    )
    assert registering == []


def test_every_top_level_function_and_class_is_used_somewhere():
    """Dead code reads as behaviour the lab has: labcheck's `run_selector` was called nowhere.
    A name counts as used when it occurs anywhere else in the project's Python (code or tests,
    this file left out), beside its own definition."""
    sources = [*modules().values()]
    sources += [p for d in ("tests", "benchmarks", ".github") for p in (ROOT / d).rglob("*.py")]
    words = Counter(
        word
        for path in sources
        if path != Path(__file__)
        for word in WORD.findall(path.read_text())
    )
    unused = [
        f"{name}.{node.name}"
        for name, path in modules().items()
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and words[node.name] < 2
    ]
    assert unused == []
