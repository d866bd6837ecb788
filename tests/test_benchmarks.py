"""Every script under benchmarks/ runs, as the docs tell a user to run it, in its smoke mode.

Nothing else runs the benchmarks, so a layout move once broke graph_bench.py unnoticed while
the README and docs/scaling.md quoted its figures (issue 17, item 8). Each script runs as a
subprocess from the project root (`python benchmarks/<name>.py --smoke`), with a private HOME
and fake docker, git, helm, kubectl, kind and pulumi first on PATH that record any call: a
benchmark must stay as hermetic as the tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.fake_tools import fake_tools, tool_env
from tests.support.pulumi_harness import PROJECT_DIR

BENCHMARKS = PROJECT_DIR / "benchmarks"
HOST_TOOLS = ("docker", "git", "helm", "kubectl", "kind", "pulumi")
NUMBER = r"\d+(?:\.\d+)?"


def run_smoke(tmp_path: Path, script: str) -> str:
    """stdout of `python benchmarks/<script> --smoke`; fails if it touched a host tool."""
    calls = fake_tools(
        tmp_path, {tool: f'echo "{tool} $*" >> "$CALLS"; exit 1' for tool in HOST_TOOLS}
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script's own path
    result = subprocess.run(
        [sys.executable, f"benchmarks/{script}", "--smoke"],
        cwd=PROJECT_DIR,
        env={**env, **tool_env(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert not calls.exists(), f"{script} ran host tools:\n{calls.read_text()}"
    return result.stdout


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(NUMBER, line)]


def test_graph_bench_smoke_prints_every_figure_the_docs_quote(tmp_path: Path):
    """The table (docs/scaling.md), the comparison line, the fresh-interpreter times (README)
    and the chains, for 1 and 2 tenants."""
    out = run_smoke(tmp_path, "graph_bench.py")
    lines = out.splitlines()
    header = "tenants   wall s    CPU s CPU ms/tenant build_lab s  peak MiB resources chain"
    assert lines[0] == header, out
    rows = {int(row[0]): row for row in map(numbers, lines[1:3])}
    assert sorted(rows) == [1, 2] and all(len(row) == 8 for row in rows.values()), out
    assert all(value > 0 for row in rows.values() for value in row), out
    assert rows[2][6] > rows[1][6], "2 tenants register more resources than 1"
    assert rows[1][7] == rows[2][7], "tenants add width, never depth"
    assert re.search(
        rf"^2 vs 1 tenants: {NUMBER}x the wall time, {NUMBER}x the CPU, {NUMBER}x in build_lab, "
        rf"{NUMBER}x the resources; longest chain the same: True$",
        out,
        re.M,
    ), out
    fresh = out.split("fresh interpreter (imports + evaluation")[1].splitlines()[1:3]
    assert [numbers(line)[0] for line in fresh] == [1, 2], out
    assert all(
        re.fullmatch(rf" +\d tenants +{NUMBER} s wall +{NUMBER} s CPU", line) for line in fresh
    ), out
    assert re.search(rf"^2 vs 1 tenants: {NUMBER}x the wall time, {NUMBER}x the CPU$", out, re.M), (
        out
    )
    chains = re.findall(r"^(\d) tenants: (.*)$", out, re.M)
    assert [int(n) for n, _ in chains] == [1, 2], out
    assert [len(chain.split(" -> ")) for _, chain in chains] == [rows[1][7], rows[2][7]], out


def test_agent_bench_smoke_prints_every_figure_the_docs_quote(tmp_path: Path):
    """The allocation table (README, docs/gpu-agent.md) in both modes on 1 and 4 nodes, and
    the re-join table."""
    out = run_smoke(tmp_path, "agent_bench.py")
    assert out.startswith("6 allocations, pods padded to ~4000 B, Python 3."), out
    header = next(line for line in out.splitlines() if line.lstrip().startswith("mode nodes"))
    columns = ["mode", "nodes", "rounds", "CPU us/alloc", "decode", "rest", "LIST/alloc"]
    columns += ["WATCH/alloc", "GET+PATCH/alloc", "writes/alloc", "requests/alloc"]
    columns += ["events/alloc", "idle round us", "full pass us"]
    assert header.split() == " ".join(columns).split(), out
    rows = re.findall(r"^ *(watch|list) +([14]) +(.*)$", out, re.M)
    assert [(mode, int(nodes)) for mode, nodes, _ in rows] == [
        ("watch", 1),
        ("watch", 4),
        ("list", 1),
        ("list", 4),
    ], out
    for _, nodes, cells in rows:
        values = numbers(cells)
        assert len(values) == len(columns) - 2, out
        assert values[0] == -(-6 // int(nodes)), "one per node and round, 2 in the last on 4"
        assert values[7] == 2.0, "2 writes per allocation (pod patch, lock release)"
    touch = re.search(rf"^ +requeue touch 17 s +({NUMBER}) +({NUMBER}) +({NUMBER})$", out, re.M)
    no_touch = re.search(rf"^ +no requeue touch +({NUMBER}) +({NUMBER}) +({NUMBER})$", out, re.M)
    assert touch and no_touch, out
    assert float(touch.group(3)) < float(no_touch.group(3)), "the touch shortens the worst case"


SMOKE_TESTS: dict[str, Callable[[Path], None]] = {
    "graph_bench.py": test_graph_bench_smoke_prints_every_figure_the_docs_quote,
    "agent_bench.py": test_agent_bench_smoke_prints_every_figure_the_docs_quote,
}


def test_every_benchmark_has_a_smoke_test():
    """A new script under benchmarks/ fails here until it has a smoke test above."""
    assert sorted(path.name for path in BENCHMARKS.glob("*.py")) == sorted(SMOKE_TESTS)


@pytest.mark.parametrize("doc", ["README.md", "docs/scaling.md", "docs/gpu-agent.md"])
def test_the_benchmarks_the_docs_name_exist(doc: str):
    named = set(re.findall(r"benchmarks/(\w+\.py)", (PROJECT_DIR / doc).read_text()))
    assert named, f"{doc} quotes benchmark figures: it names the script"
    assert named <= set(SMOKE_TESTS), f"{doc} names {named - set(SMOKE_TESTS)}"
