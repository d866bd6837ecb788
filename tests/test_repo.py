"""The README's commands stay true: they exist, and CI runs the test ones, in order."""

from __future__ import annotations

import re
import subprocess
import tomllib

from tests.support.pulumi_harness import PROJECT_DIR


def first_commands(path: str) -> list[str]:
    """The commands of a document's first bash block, comments dropped."""
    text = (PROJECT_DIR / path).read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < text.index("\n## "), "commands come first"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def readme_commands() -> list[str]:
    return first_commands("README.md")


def make_targets() -> set[str]:
    makefile = (PROJECT_DIR / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))


def test_readme_starts_with_bring_up_and_run_the_tests():
    """A user's first page: the two commands, bring the lab up and run the tests; the other
    tiers are contributors' (docs/testing.md)."""
    up, test = readme_commands()
    assert up.endswith("make up") and "PULUMI_CONFIG_PASSPHRASE=" in up
    assert test == "make test"
    assert {"up", "test", "test-real", "test-host", "destroy", "preview", "check"} <= make_targets()


def test_ci_runs_the_readme_test_command_then_every_tier_last_in_order_each_timed():
    tiers = first_commands("docs/testing.md")
    assert tiers == ["make test", "make test-real", "make test-host"]
    assert tiers[0] == readme_commands()[-1]
    ci = (PROJECT_DIR / ".ci/run").read_text().splitlines()
    assert [line.removeprefix("timed ") for line in ci[-3:]] == tiers
    assert all(line.startswith("timed ") for line in ci[-3:])


def test_ci_prints_each_tiers_wall_time_and_keeps_its_exit_status(tmp_path):
    """`timed` as .ci/run defines it, run by bash on a passing and a failing command."""
    ci = (PROJECT_DIR / ".ci/run").read_text()
    function = re.search(r"^timed\(\) \{\n.*?^\}\n", ci, re.S | re.M)
    assert function, "no timed() in .ci/run"
    script = f"set -euo pipefail\n{function.group(0)}timed true\ntimed sh -c 'exit 3'\necho after"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 3
    assert done.stdout.splitlines() == [
        "== true: 0 min 00 s (exit 0)",
        "== sh -c exit 3: 0 min 00 s (exit 3)",
    ]


def test_make_test_leaves_the_real_and_host_tiers_out_and_their_targets_run_them():
    """`make test` stays hermetic: pytest's collection skips tests/real and tests/host unless
    they are named."""
    pytest_ini = tomllib.loads((PROJECT_DIR / "pyproject.toml").read_text())["tool"]["pytest"]
    assert {"real", "host"} <= set(pytest_ini["ini_options"]["norecursedirs"])
    host = re.search(r"^test-host:.*\n((?:\t.*\n)+)", (PROJECT_DIR / "Makefile").read_text(), re.M)
    assert host and host.group(1).splitlines() == ["\t$(PY) -m pytest tests/host"]
    recipe = re.search(
        r"^test-real:.*\n((?:\t.*\n)+)", (PROJECT_DIR / "Makefile").read_text(), re.M
    )
    assert recipe and recipe.group(1).splitlines() == [
        "\t$(PY) tests/real/binaries.py",
        "\t$(PY) -m pytest tests/real",
    ]


def test_up_uses_the_local_backend_declared_in_pulumi_yaml():
    makefile = (PROJECT_DIR / "Makefile").read_text()
    pulumi_yaml = (PROJECT_DIR / "Pulumi.yaml").read_text()
    assert "url: file://~/.pulumi-kamaji-hami-lab" in pulumi_yaml
    assert "STATE_DIR := $(HOME)/.pulumi-kamaji-hami-lab" in makefile


ROOT = PROJECT_DIR
DOC_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]*\.(?:py|md|json|yaml|yml|toml|png))`")


def doc_paths(text: str) -> set[str]:
    """Repository paths a doc names in backticks (globs and placeholders left out)."""
    return {p for p in DOC_PATH.findall(text) if not any(c in p for c in "*<>")}


def test_the_docs_name_only_paths_that_exist():
    """After the layout move (issue 11) every path the README and docs name must still be there.
    docs/upstream-facts/ is left out: its paths are upstream's, in the repositories it cites."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = {
        f"{doc.relative_to(ROOT)}: {path}"
        for doc in docs
        for path in doc_paths(doc.read_text())
        if not (ROOT / path).exists()
    }
    assert sorted(missing) == []


# Where the code, the tests and the tooling name a doc (comments, docstrings, messages).
CODE_DOC_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]*[\w-]\.(?:md|png))")
CODE_DIRS = ("benchmarks", "builders", "capacity", "components", "gpu_agent", "labcheck",
             "labconfig", "planning", "policy", "preflight", "tests", ".github", ".ci")  # fmt: skip


def test_the_code_names_only_docs_that_exist():
    """The upstream facts' one file became the folder docs/upstream-facts/, and pyproject.toml's
    marker help and a test's docstring still named the file."""
    files = [ROOT / "Makefile", *ROOT.glob("*.toml"), *ROOT.glob("*.yaml"), *ROOT.glob("*.py")]
    files += [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*")) if p.is_file()]
    missing = {
        f"{path.relative_to(ROOT)}: {doc}"
        for path in files
        if path.suffix not in (".json", ".png", ".pyc")
        for doc in CODE_DOC_PATH.findall(path.read_text(errors="replace"))
        if not (ROOT / doc).exists()
    }
    assert sorted(missing) == []


def test_the_docs_state_no_test_counts():
    """A count of tests is wrong at the next commit that adds one; times are what a reader
    plans with."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    counts = {
        f"{doc.relative_to(ROOT)}: {count}"
        for doc in docs
        for count in re.findall(r"\b\d[\d,]* tests\b", doc.read_text())
    }
    assert sorted(counts) == []


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (code blocks left out)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {
        re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        for heading in re.findall(r"^#+ (.+)$", text, re.M)
    }


def test_the_docs_links_to_a_section_of_a_doc_find_it():
    """A passage moved between docs (user docs to docs/evidence.md) takes its anchor along."""
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = {
        f"{doc.relative_to(ROOT)}: {target}#{anchor}"
        for doc in docs
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)#([\w-]+)\)", doc.read_text())
        if anchor not in heading_anchors(((doc.parent / target) if target else doc).read_text())
    }
    assert sorted(broken) == []


def test_the_user_docs_link_the_evidence_they_moved_out():
    """Each user doc keeps what to do and what you see; how it is tested is in docs/evidence.md,
    one section per user doc, linked both ways."""
    evidence = (ROOT / "docs/evidence.md").read_text()
    user_docs = re.findall(r"^The user doc: \[([\w.-]+\.md)\]", evidence, re.M)
    assert user_docs
    for name in user_docs:
        assert "evidence.md#" in (ROOT / "docs" / name).read_text(), name


def test_the_doc_path_scan_finds_paths():
    assert doc_paths("see `labconfig/parse.py` and `tests/*.py`") == {"labconfig/parse.py"}
