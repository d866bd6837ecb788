"""Cost of evaluating the program under mocks, by number of tenants.

Each tenant has one worker and one L4 (and a GPU quota) on the default subnet 172.30.0.0/16,
whose 50-address pool caps the lab at 50 tenants. For each size the script prints the median
wall time of a whole program run (tests/pulumi_harness.run_program), the peak of Python
allocations during one run (tracemalloc, measured in a separate run so tracing does not skew
the times), the number of registered resources, and the longest dependency chain over
dependency, provider and parent edges.

    python benchmarks/graph_bench.py [--tenants 1 2 10 50] [--repeat 5] [--chain] [--gc-off]

The chain is what bounds a real `pulumi up` with unlimited parallelism: tenants add width,
never depth, so it must be the same for 2 and 50 tenants.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pulumi_harness import ProgramRun, run_program

import components.lab

_build_seconds: list[float] = []
_build_lab = components.lab.build_lab


def _timed_build_lab(*args: Any, **kwargs: Any) -> Any:
    """build_lab alone: the program's own, synchronous graph construction."""
    start = time.perf_counter()
    try:
        return _build_lab(*args, **kwargs)
    finally:
        _build_seconds.append(time.perf_counter() - start)


components.lab.build_lab = _timed_build_lab  # __main__ imports it from the module at each run


def lab_config(tenants: int) -> dict[str, Any]:
    return {
        "tenants": [
            {"name": f"t{i:02d}", "workers": 1, "gpus": [{"model": "L4"}], "gpuQuotaMb": 23034}
            for i in range(tenants)
        ]
    }


def longest_chain(run: ProgramRun) -> list[str]:
    """Longest path (in resources) over dependency, provider and parent edges.

    Registration order is topological: a resource can only name, as dependency, provider or
    parent, something registered before it. One pass in that order suffices.
    """
    best: dict[str, list[str]] = {}
    for r in run.resources:
        before = [*run.edges(r), *([r.parent] if r.parent else [])]
        longest = max((best[u] for u in before if u in best), key=len, default=[])
        best[r.urn] = [*longest, r.name]
    return max(best.values(), key=len, default=[])


def measure(tenants: int, repeat: int) -> dict[str, Any]:
    config = lab_config(tenants)
    times = []
    _build_seconds.clear()
    for _ in range(repeat):
        start = time.perf_counter()
        run = run_program(config)
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    run_program(config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    chain = longest_chain(run)
    return {
        "tenants": tenants,
        "seconds": statistics.median(times),
        "build_seconds": statistics.median(_build_seconds),
        "peak_mb": peak / 2**20,
        "resources": len(run.resources),
        "chain": chain,
    }


# What one `pulumi preview` pays: a fresh interpreter that imports the SDKs, then evaluates.
FRESH_RUN = """
import sys, time
start = time.perf_counter()
sys.path[:0] = [{tests!r}, {root!r}, {bench!r}]
import graph_bench
from pulumi_harness import run_program
run_program(graph_bench.lab_config({tenants}))
print(time.perf_counter() - start)
"""


def fresh_process_seconds(tenants: int, repeat: int) -> float:
    root = Path(__file__).resolve().parent.parent
    script = FRESH_RUN.format(
        tests=str(root / "tests"), root=str(root), bench=str(root / "benchmarks"), tenants=tenants
    )
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", script], capture_output=True, text=True, check=True
            ).stdout.split()[-1]
        )
        for _ in range(repeat)
    ]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 2, 10, 50])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chain", action="store_true", help="print the longest chain")
    parser.add_argument("--gc-off", action="store_true", help="disable the cyclic GC (diagnosis)")
    parser.add_argument(
        "--fresh", action="store_true", help="also time each size in a fresh interpreter"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the mocks log every registration at debug level
    if args.gc_off:
        gc.disable()

    rows = [measure(n, args.repeat) for n in args.tenants]
    print(
        f"{'tenants':>7} {'wall s':>8} {'per tenant ms':>13} {'build_lab s':>11} "
        f"{'peak MiB':>9} {'resources':>9} {'chain':>5}"
    )
    for row in rows:
        per_tenant = 1000 * row["seconds"] / row["tenants"]
        print(
            f"{row['tenants']:>7} {row['seconds']:>8.3f} {per_tenant:>13.1f} "
            f"{row['build_seconds']:>11.3f} "
            f"{row['peak_mb']:>9.1f} {row['resources']:>9} {len(row['chain']):>5}"
        )
    by_size = {row["tenants"]: row for row in rows}
    if 2 in by_size and 50 in by_size:
        ratio = by_size[50]["seconds"] / by_size[2]["seconds"]
        build = by_size[50]["build_seconds"] / by_size[2]["build_seconds"]
        same = len(by_size[2]["chain"]) == len(by_size[50]["chain"])
        print(
            f"\n50 vs 2 tenants: {ratio:.1f}x the wall time (target < 10x), {build:.1f}x in "
            f"build_lab; longest chain the same: {same}"
        )
    if args.fresh:
        fresh = {n: fresh_process_seconds(n, args.repeat) for n in args.tenants}
        print("\nfresh interpreter (imports + evaluation, as each `pulumi preview` runs it):")
        for n, seconds in fresh.items():
            print(f"{n:>7} tenants {seconds:>8.3f} s")
        if 2 in fresh and 50 in fresh:
            print(f"50 vs 2 tenants: {fresh[50] / fresh[2]:.1f}x")
    if args.chain:
        for row in rows:
            print(f"\n{row['tenants']} tenants: " + " -> ".join(row["chain"]))


if __name__ == "__main__":
    main()
