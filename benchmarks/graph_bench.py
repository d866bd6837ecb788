"""Cost of evaluating the program under mocks, by number of tenants.

Each tenant has one worker and one L4 (and a GPU quota) on the default subnet 172.30.0.0/16,
whose 50-address pool caps the lab at 50 tenants. For each size the script prints the median
wall and CPU time of a whole program run (tests/support/pulumi_harness.run_program), the peak
of Python allocations during one run (tracemalloc, measured in a separate run so tracing does
not skew the times), the number of registered resources, and the longest dependency chain
over dependency, provider and parent edges. On a shared machine the CPU time is the figure
that load does not inflate.

    python benchmarks/graph_bench.py [--tenants 1 2 10 50] [--repeat 5] [--fresh] [--chain]
                                     [--gc-off | --gc-default] [--smoke]

--smoke: 1 and 2 tenants, one run each, with --fresh and --chain (seconds); the hermetic
tests run it (tests/test_benchmarks.py) so that the script cannot break unnoticed.

Hermetic like the tests: run_program plays the program's host (tests/support/pulumi_harness
MockHost: Kamaji's charts in a cache of its own, Docker's bridge answered without Docker), so
no run touches Docker, the network or a kubeconfig.

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

# Run from anywhere. The root only: tests/ on sys.path would shadow the real `components`
# package with tests/components.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import components.lab
from tests.support.pulumi_harness import ProgramRun, run_program

ROOT = Path(__file__).resolve().parent.parent


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
    times, cpu = [], []
    _build_seconds.clear()
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        run = run_program(config)
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    tracemalloc.start()
    run_program(config)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    chain = longest_chain(run)
    return {
        "tenants": tenants,
        "seconds": statistics.median(times),
        "cpu_seconds": statistics.median(cpu),
        "build_seconds": statistics.median(_build_seconds),
        "peak_mb": peak / 2**20,
        "resources": len(run.resources),
        "chain": chain,
    }


# What one `pulumi preview` pays: a fresh interpreter that imports the SDKs, then evaluates.
FRESH_RUN = """
import sys, time
start, start_cpu = time.perf_counter(), time.process_time()
sys.path[:0] = [{root!r}, {bench!r}]
import graph_bench
graph_bench.run_program(graph_bench.lab_config({tenants}))
print(time.perf_counter() - start, time.process_time() - start_cpu)
"""


def fresh_process_seconds(tenants: int, repeat: int) -> tuple[float, float]:
    """Medians of the wall and CPU time of a fresh interpreter."""
    script = FRESH_RUN.format(root=str(ROOT), bench=str(ROOT / "benchmarks"), tenants=tenants)
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.split()[-2:]
        for _ in range(repeat)
    ]
    return tuple(statistics.median(float(run[i]) for run in runs) for i in (0, 1))


def compared_sizes(sizes: list[int]) -> tuple[int, int] | None:
    """The sizes the summary line compares: 2 (or the smallest) against the largest."""
    others = [n for n in sizes if n != max(sizes)]
    if not others:
        return None
    return (2 if 2 in others else min(others)), max(sizes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, nargs="+", default=[1, 2, 10, 50])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chain", action="store_true", help="print the longest chain")
    parser.add_argument("--gc-off", action="store_true", help="disable the cyclic GC (diagnosis)")
    parser.add_argument(
        "--gc-default",
        action="store_true",
        help="keep CPython's default GC thresholds: ignore __main__.py's gc.set_threshold",
    )
    parser.add_argument(
        "--fresh", action="store_true", help="also time each size in a fresh interpreter"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 and 2 tenants, one run each, with --fresh and --chain",
    )
    args = parser.parse_args()
    if args.smoke:
        args.tenants, args.repeat, args.fresh, args.chain = [1, 2], 1, True, True
    logging.disable(logging.WARNING)  # the mocks log every registration at debug level
    if args.gc_off:
        gc.disable()
    if args.gc_default:
        gc.set_threshold = lambda *_: None  # __main__.py calls it at every run
    report(args)


def report(args: argparse.Namespace) -> None:
    rows = [measure(n, args.repeat) for n in args.tenants]
    print(
        f"{'tenants':>7} {'wall s':>8} {'CPU s':>8} {'CPU ms/tenant':>13} {'build_lab s':>11} "
        f"{'peak MiB':>9} {'resources':>9} {'chain':>5}"
    )
    for row in rows:
        per_tenant = 1000 * row["cpu_seconds"] / row["tenants"]
        print(
            f"{row['tenants']:>7} {row['seconds']:>8.3f} {row['cpu_seconds']:>8.3f} "
            f"{per_tenant:>13.1f} "
            f"{row['build_seconds']:>11.3f} "
            f"{row['peak_mb']:>9.1f} {row['resources']:>9} {len(row['chain']):>5}"
        )
    by_size = {row["tenants"]: row for row in rows}
    pair = compared_sizes(list(by_size))
    if pair:
        small, big = (by_size[n] for n in pair)
        ratio = big["seconds"] / small["seconds"]
        cpu = big["cpu_seconds"] / small["cpu_seconds"]
        build = big["build_seconds"] / small["build_seconds"]
        resources = big["resources"] / small["resources"]
        same = len(small["chain"]) == len(big["chain"])
        target = " (target < 10x)" if pair == (2, 50) else ""
        print(
            f"\n{pair[1]} vs {pair[0]} tenants: {ratio:.1f}x the wall time{target}, "
            f"{cpu:.1f}x the CPU, {build:.1f}x in build_lab, {resources:.1f}x the resources; "
            f"longest chain the same: {same}"
        )
    if args.fresh:
        fresh = {n: fresh_process_seconds(n, args.repeat) for n in args.tenants}
        print("\nfresh interpreter (imports + evaluation, as each `pulumi preview` runs it):")
        for n, (wall, cpu) in fresh.items():
            print(f"{n:>7} tenants {wall:>8.3f} s wall {cpu:>8.3f} s CPU")
        if pair:
            big, small = fresh[pair[1]], fresh[pair[0]]
            print(
                f"{pair[1]} vs {pair[0]} tenants: {big[0] / small[0]:.1f}x the wall time, "
                f"{big[1] / small[1]:.1f}x the CPU"
            )
    if args.chain:
        for row in rows:
            print(f"\n{row['tenants']} tenants: " + " -> ".join(row["chain"]))


if __name__ == "__main__":
    main()
