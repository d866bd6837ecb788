"""Agent cost per allocation: 100 queued GPU pods driven through the fake API.

Each round the fake HAMi scheduler binds what the node locks allow, then the agent runs.
Only the agent's work is timed (time.process_time); the fake's server-side work (building,
filtering and encoding responses and watch events) is subtracted, while decoding the JSON
responses and events stays in, as it would in the real agent.

    python benchmarks/agent_bench.py [--mode watch|list|both|rejoin] [--pods 100]
                                     [--pad-bytes 4000] [--repeat 9] [--no-kubelet]
                                     [--smoke]

--mode watch (default): the long-running loop. One LIST at start, then per round the
agent reads the node and pod watch streams from where they stopped and judges only what
the events touched. Here each round re-opens both streams (one WATCH request each, ended
by a bookmark once caught up); the real agent keeps one stream per resource open and
re-opens it every relistSeconds, so the WATCH column is an upper bound.
--mode list: the previous design, a full LIST + level-triggered pass (reconcile_once)
per round, kept for comparison.
--mode rejoin: create -> allocated for a GPU pod created while HAMi has not read its
re-joined node's registration yet (virtual time: kube-scheduler's queue and HAMi's 15 s
tick as tests/support/fake_kube.py models them), with and without the agent's requeue touch.

As on a real node, the kubelet writes each pod's status right after its Binding, while the
agent reacts to the bind event: the status write lands between the agent's read and its
pod patch (--no-kubelet leaves it out; its own CPU is not counted).

Figures are medians over --repeat runs.

--smoke: every mode at tiny sizes (6 pods, one run; the re-join grid as is), a few seconds;
the hermetic tests run it (tests/test_benchmarks.py) so that the script cannot break
unnoticed. Everything runs against the in-memory fake API: no cluster, no kubeconfig.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from gpu_agent import Agent, parse_config, reconcile_once
from tests.support.fake_kube import FakeKube, rejoin_latency

CARD = {"type": "NVIDIA A100-SXM4-80GB", "devmem": 81920, "devcore": 100}


def kubelet_races_the_agent(kube: FakeKube) -> None:
    """Before the agent's first patch of a pod, its kubelet writes the pod's status."""
    written: set[tuple[str, str]] = set()

    def before(method: str, args: tuple) -> None:
        if method == "patch_pod" and args[:2] not in written:
            t0 = time.process_time()
            written.add(args[:2])
            kube.set_pod_phase(*args[:2], "Running")
            kube.server_cpu += time.process_time() - t0  # the kubelet's work, not the agent's

    kube.before_call = before


def scenario(mode: str, nodes: int, pods: int, pad_bytes: int, kubelet: bool) -> dict[str, float]:
    names = [f"tenant-{i}-worker-1" for i in range(nodes)]
    config = parse_config({"splitCount": 10, "nodes": {n: [CARD, CARD] for n in names}})
    kube = FakeKube()
    for n in names:
        kube.add_node(n)
    agent = Agent(kube, config)

    def agent_round():
        """One round of the agent: a full pass (list mode), or read both streams and step."""
        if mode == "list":
            return reconcile_once(kube, config)
        agent.follow("nodes", 0)
        agent.follow("pods", 0)
        return agent.step()

    agent.step()  # list and register: not part of the per-allocation cost
    agent.follow("nodes", 0)  # the registration's own events
    agent.follow("pods", 0)
    for i in range(pods):
        pod = kube.add_pod(f"team-{i % 5}", f"job-{i:03d}")
        # Real pods carry managedFields, status conditions...: pad to a realistic size.
        pod["metadata"]["managedFields"] = [{"manager": "kubectl", "pad": "x" * pad_bytes}]
    kube.calls.clear()
    kube.decode_cpu.clear()
    kube.events_sent.clear()
    if kubelet:
        kubelet_races_the_agent(kube)
    cpu = server = 0.0
    rounds = 0
    while any(not p["spec"].get("nodeName") for p in kube.pods.values()):
        bound = 0
        for i, n in enumerate(names):  # the scheduler spreads the queue over the nodes
            for (ns, name), p in kube.pods.items():
                mine = not p["spec"].get("nodeName") and int(name[4:]) % nodes == i
                if mine and kube.schedule(ns, name, n) == "bound":
                    bound += 1
                    break
        s0, t0 = kube.server_cpu, time.process_time()
        summary = agent_round()
        cpu += time.process_time() - t0
        server += kube.server_cpu - s0
        rounds += 1
        assert not summary.errors, summary.errors
        # One per node, fewer in the last round when the pods do not divide evenly.
        assert len(summary.completed) == len(summary.released) == bound, summary
    assert all(
        p["metadata"]["annotations"]["hami.io/bind-phase"] == "success" for p in kube.pods.values()
    )
    assert all(kube.lock(n) is None for n in names)
    decode = sum(kube.decode_cpu.values())  # every response and event
    result = {
        "rounds": rounds,
        "cpu_us_per_alloc": (cpu - server) / pods * 1e6,
        "decode_us_per_alloc": decode / pods * 1e6,
        "rest_us_per_alloc": (cpu - server - decode) / pods * 1e6,
        "lists_per_alloc": kube.count("list") / pods,
        "watches_per_alloc": kube.count("watch") / pods,
        "other_calls_per_alloc": (kube.count("get") + kube.count("patch")) / pods,
        "writes_per_alloc": len(kube.writes()) / pods,
        "requests_per_alloc": len(kube.calls) / pods,
        "events_per_alloc": sum(kube.events_sent.values()) / pods,
    }
    # A round with nothing new (the last round's own events are read first). In watch mode
    # that is re-opening both streams to a bookmark, which is in every round above.
    if mode == "watch":
        agent_round()
    s0, t0 = kube.server_cpu, time.process_time()
    idle = agent_round()
    result["idle_round_us"] = (time.process_time() - t0 - (kube.server_cpu - s0)) * 1e6
    assert idle.actions == 0
    # A full pass with 100 bound pods and nothing to do: every round in list mode, once per
    # relistSeconds (60 s) in watch mode.
    s0, t0 = kube.server_cpu, time.process_time()
    idle = reconcile_once(kube, config)
    result["full_pass_us"] = (time.process_time() - t0 - (kube.server_cpu - s0)) * 1e6
    assert idle.actions == 0
    return result


COLUMNS = [  # (key, header, format)
    ("rounds", "rounds", ".0f"),
    ("cpu_us_per_alloc", "CPU us/alloc", ".0f"),
    ("decode_us_per_alloc", "decode", ".0f"),
    ("rest_us_per_alloc", "rest", ".0f"),
    ("lists_per_alloc", "LIST/alloc", ".2f"),
    ("watches_per_alloc", "WATCH/alloc", ".2f"),
    ("other_calls_per_alloc", "GET+PATCH/alloc", ".2f"),
    ("writes_per_alloc", "writes/alloc", ".2f"),
    ("requests_per_alloc", "requests/alloc", ".2f"),
    ("events_per_alloc", "events/alloc", ".2f"),
    ("idle_round_us", "idle round us", ".0f"),
    ("full_pass_us", "full pass us", ".0f"),
]


def rejoin(args: argparse.Namespace) -> None:
    """create -> allocated after a re-join, over pod creation times and HAMi tick phases."""
    creates = (0.5, 2.0, 5.0, 8.0, 11.0, 14.0)
    ticks = (1.0, 5.0, 10.0, 14.9)
    print("create -> allocated (s) for a pod created 0.5-14 s after its node re-joined,")
    print(f"HAMi's first tick {ticks[0]}-{ticks[-1]} s after it; {len(creates) * len(ticks)} runs")
    print(f"{'agent':>24} {'median':>7} {'p90':>7} {'max':>7}")
    for requeue in (17.0, 0.0):
        config = parse_config(
            {"nodes": {"tenant-a-worker-1": [CARD]}, "requeueAfterRegisterSeconds": requeue}
        )
        runs = [
            rejoin_latency(config, first_tick=tick, create_at=at, until=args.rejoin_until)
            for tick in ticks
            for at in creates
        ]
        waits = sorted(args.rejoin_until if r is None else r for r in runs)
        p90 = waits[int(0.9 * (len(waits) - 1))]
        label = f"requeue touch {requeue:g} s" if requeue else "no requeue touch"
        print(f"{label:>24} {statistics.median(waits):7.2f} {p90:7.2f} {waits[-1]:7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("watch", "list", "both", "rejoin"), default="watch")
    ap.add_argument("--pods", type=int, default=100)
    ap.add_argument("--pad-bytes", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--no-kubelet", dest="kubelet", action="store_false")
    ap.add_argument("--rejoin-until", type=float, default=400.0)
    ap.add_argument("--smoke", action="store_true", help="every mode, 6 pods, one run")
    args = ap.parse_args()
    if args.smoke:
        args.mode, args.pods, args.repeat = "both", 6, 1  # 4 nodes: 4, then 2
    logging.disable(logging.INFO)  # one log line per action would dominate the figures
    if args.mode == "rejoin":
        rejoin(args)
        return
    allocations(args)
    if args.smoke:
        print()
        rejoin(args)


def allocations(args: argparse.Namespace) -> None:
    """The table of --mode watch, list or both."""
    py = sys.version.split()[0]
    kubelet = "with" if args.kubelet else "without"
    print(f"{args.pods} allocations, pods padded to ~{args.pad_bytes} B, Python {py}, {kubelet}")
    print("a kubelet status write between the agent's read and its pod patch")
    print(f"{'mode':>5} {'nodes':>5} " + " ".join(f"{h:>{len(h)}}" for _, h, _ in COLUMNS))
    modes = ("watch", "list") if args.mode == "both" else (args.mode,)
    for mode in modes:
        for nodes in (1, 4):
            runs = [
                scenario(mode, nodes, args.pods, args.pad_bytes, args.kubelet)
                for _ in range(args.repeat)
            ]
            r = {k: statistics.median(run[k] for run in runs) for k in runs[0]}  # CPU is noisy
            cells = " ".join(f"{r[k]:>{len(h)}{fmt}}" for k, h, fmt in COLUMNS)
            print(f"{mode:>5} {nodes:>5} {cells}")


if __name__ == "__main__":
    main()
