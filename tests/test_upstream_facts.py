"""Every upstream behaviour the code relies on is listed with its source, and a test pins it.

Tests mark themselves `@pytest.mark.upstream("<id>")` (or set `pytestmark`); the ids live in
docs/upstream-facts/*.md as level-3 headings. Read statically, so a partial test run still checks
the whole tree.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.pulumi_harness import PROJECT_DIR

FACTS_DIR = PROJECT_DIR / "docs" / "upstream-facts"
TESTS_DIR = PROJECT_DIR / "tests"


def fact_entries() -> dict[str, str]:
    """Fact id -> its entry text, over every file in docs/upstream-facts/."""
    entries: dict[str, str] = {}
    for path in sorted(FACTS_DIR.glob("*.md")):
        for chunk in re.split(r"^### ", path.read_text(), flags=re.M)[1:]:
            match = re.match(r"`([a-z0-9][a-z0-9.-]*)`", chunk)
            assert match, f"{path.name}: a fact heading is not an id in backticks: {chunk[:60]!r}"
            assert match.group(1) not in entries, f"fact {match.group(1)} is listed twice"
            entries[match.group(1)] = chunk
    return entries


def documented_facts() -> set[str]:
    return set(fact_entries())


def _upstream_ids(tree: ast.AST) -> set[str]:
    ids: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "upstream"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "mark"
        ):
            for arg in node.args:
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), (
                    f"line {node.lineno}: pytest.mark.upstream takes literal fact ids"
                )
                ids.add(arg.value)
    return ids


def pinned_facts() -> dict[str, set[Path]]:
    pinned: dict[str, set[Path]] = {}
    for path in sorted(TESTS_DIR.rglob("test_*.py")):
        for fact in _upstream_ids(ast.parse(path.read_text(), str(path))):
            pinned.setdefault(fact, set()).add(path.relative_to(PROJECT_DIR))
    return pinned


def test_every_pinned_fact_is_documented_with_its_source():
    unknown = sorted(set(pinned_facts()) - documented_facts())
    assert not unknown, f"tests name facts missing from docs/upstream-facts/: {unknown}"


def test_every_documented_fact_is_pinned_by_a_test():
    unpinned = sorted(documented_facts() - set(pinned_facts()))
    assert not unpinned, f"facts with no @pytest.mark.upstream test: {unpinned}"


def test_every_fact_entry_names_an_upstream_source():
    for fact, entry in fact_entries().items():
        assert "Source:" in entry, f"{fact}: no 'Source:' line"


def test_the_scanner_sees_marks_in_decorators_and_pytestmark():
    tree = ast.parse(
        'import pytest\npytestmark = pytest.mark.upstream("a")\n'
        '@pytest.mark.upstream("b", "c")\ndef test_x(): pass\n'
    )
    assert _upstream_ids(tree) == {"a", "b", "c"}
