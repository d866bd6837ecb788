"""Agent cost per allocation: 100 queued GPU pods driven through the fake API.

Each round the fake HAMi scheduler binds what the node locks allow, then the agent runs
one pass. Only the agent's passes are timed (time.process_time); the fake's server-side
work (building and encoding responses) is subtracted, while decoding the JSON responses
stays in, as it would in the real agent.

    python benchmarks/agent_bench.py [--pods 100] [--pad-bytes 4000] [--repeat 9]

Figures are medians over --repeat runs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from gpu_agent import parse_config, reconcile_once
from tests.fakes.fake_kube import FakeKube

CARD = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}


def scenario(nodes: int, pods: int, pad_bytes: int) -> dict[str, float]:
    names = [f"tenant-{i}-worker-1" for i in range(nodes)]
    config = parse_config({"splitCount": 10, "nodes": {n: [CARD, CARD] for n in names}})
    kube = FakeKube()
    for n in names:
        kube.add_node(n)
    reconcile_once(kube, config)  # registration is not part of the per-allocation cost
    for i in range(pods):
        pod = kube.add_pod(f"team-{i % 5}", f"job-{i:03d}")
        # Real pods carry managedFields, status conditions...: pad to a realistic size.
        pod["metadata"]["managedFields"] = [{"manager": "kubectl", "pad": "x" * pad_bytes}]
    kube.calls.clear()
    cpu = server = 0.0
    passes = 0
    while any(not p["spec"].get("nodeName") for p in kube.pods.values()):
        for i, n in enumerate(names):  # the scheduler spreads the queue over the nodes
            for (ns, name), p in kube.pods.items():
                mine = not p["spec"].get("nodeName") and int(name[4:]) % nodes == i
                if mine and kube.schedule(ns, name, n) == "bound":
                    break
        s0, t0 = kube.server_cpu, time.process_time()
        summary = reconcile_once(kube, config)
        cpu += time.process_time() - t0
        server += kube.server_cpu - s0
        passes += 1
        assert not summary.errors, summary.errors
    assert all(
        p["metadata"]["annotations"]["hami.io/bind-phase"] == "success" for p in kube.pods.values()
    )
    assert all(kube.lock(n) is None for n in names)
    calls, writes = len(kube.calls), len(kube.writes())
    lists = sum(v for k, v in kube.decode_cpu.items() if k.startswith("list_"))
    s0, t0 = kube.server_cpu, time.process_time()
    idle = reconcile_once(kube, config)
    idle_cpu = time.process_time() - t0 - (kube.server_cpu - s0)
    assert idle.actions == 0
    return {
        "passes": passes,
        "cpu_us_per_alloc": (cpu - server) / pods * 1e6,
        "list_decode_us_per_alloc": lists / pods * 1e6,
        "rest_us_per_alloc": (cpu - server - lists) / pods * 1e6,
        "calls_per_alloc": calls / pods,
        "writes_per_alloc": writes / pods,
        "idle_pass_us": idle_cpu * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--pad-bytes", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    logging.disable(logging.INFO)  # one log line per action would dominate the figures
    py = sys.version.split()[0]
    print(f"{args.pods} allocations, pods padded to ~{args.pad_bytes} B, Python {py}")
    print(
        f"{'nodes':>5} {'passes':>6} {'CPU us/alloc':>12} {'list decode':>11} {'rest':>6} "
        f"{'calls/alloc':>11} {'writes/alloc':>12} {'idle pass us':>12}"
    )
    for nodes in (1, 4):
        runs = [scenario(nodes, args.pods, args.pad_bytes) for _ in range(args.repeat)]
        r = {k: statistics.median(run[k] for run in runs) for k in runs[0]}  # CPU time is noisy
        print(
            f"{nodes:>5} {r['passes']:>6.0f} {r['cpu_us_per_alloc']:>12.0f} "
            f"{r['list_decode_us_per_alloc']:>11.0f} {r['rest_us_per_alloc']:>6.0f} "
            f"{r['calls_per_alloc']:>11.2f} {r['writes_per_alloc']:>12.2f} "
            f"{r['idle_pass_us']:>12.0f}"
        )


if __name__ == "__main__":
    main()
