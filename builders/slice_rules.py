"""Recording rules: one set of `lab:` series for every tenant, HAMi's and HAMi-DRA's alike.

HAMi v2.10.0's scheduler exports per container `hami_vgpu_memory_allocated_bytes` and
`hami_vgpu_core_allocated_ratio` (bytes; percent of a card) and per card the limits (fact
hami-sched-metrics-per-container, -per-card); HAMi-DRA's monitor exports the same allocations
under HAMi's legacy-style names, in MiB and with other label names (fact
hami-dra-monitor-exports-allocations). The rules put both into one shape, labelled
`tenant, namespace, pod, container_index, node, card` (card = the device UUID), with memory in
MB as the lab counts it everywhere (HAMi's MB are MiB).

A slice's share of its card is the larger of its memory fraction and its compute fraction: a
slice holding a quarter of the memory keeps a quarter of the card from others whatever its
compute, and the other way round. Four pods of 25 % each for an hour are one GPU-hour.

Slice-hours are the integral of these series over time (`slice_hours_expr`): the ledger and
the dashboard evaluate it over their window, one sample a minute. The rules record what is held
at each moment; a pod's samples stay in Prometheus after the pod is gone.
"""

from __future__ import annotations

from typing import Any

MIB = 1048576
SLICE_LABELS = "tenant, namespace, pod, container_index, node, card"
CARD_LABELS = "tenant, node, card"
# The step of the integrals: a pod's lifetime counts to within a minute at each end.
INTEGRAL_STEP_SECONDS = 60

SLICE_MEMORY = "lab:slice_memory_mb"
SLICE_CORES = "lab:slice_cores_percent"
SLICE_SHARE = "lab:slice_gpu_share"
CARD_MEMORY = "lab:card_memory_mb"
CARD_CORES = "lab:card_cores_percent"
CARD_SLICES = "lab:card_slices"
SLICE_IDLE_SHARE = "lab:slice_idle_gpu_share"
# A container that ran no kernel on its card for this long holds its slice idle (real cards:
# HAMi's vGPU monitor, `hami_container_last_kernel_elapsed_seconds`).
IDLE_SECONDS = 300


def renamed(metric: str, renames: dict[str, str]) -> str:
    """`metric` with each label copied to a new name (label_replace), old names dropped by
    the `sum by` around it."""
    expr = metric
    for new, old in renames.items():
        expr = f'label_replace({expr}, "{new}", "$1", "{old}", "(.+)")'
    return expr


def _either(labels: str, hami: str, dra: str) -> str:
    """HAMi's series, or HAMi-DRA's: a tenant has one or the other."""
    return f"sum by ({labels}) ({hami})\nor\nsum by ({labels}) ({dra})"


HAMI_SLICE = {"card": "device_uuid"}
DRA_SLICE = {"card": "deviceuuid", "namespace": "podnamespace", "pod": "podname", "node": "nodeid"}
HAMI_CARD = {"card": "device_uuid"}
DRA_CARD = {"card": "deviceuuid", "node": "nodeid"}


def _fraction_of_card(slice_metric: str, card_metric: str, kind: str) -> str:
    return (
        f"label_replace({slice_metric} / on (tenant, card) group_left {card_metric}, "
        f'"share_of", "{kind}", "", "")'
    )


def recording_rules() -> list[dict[str, str]]:
    """In evaluation order: a rule may read those before it in the same evaluation."""
    hami_bytes = renamed("hami_vgpu_memory_allocated_bytes", HAMI_SLICE)
    dra_mb = renamed("vGPUDeviceMemoryAllocated", DRA_SLICE)
    return [
        {"record": SLICE_MEMORY, "expr": _either(SLICE_LABELS, f"{hami_bytes} / {MIB}", dra_mb)},
        {
            "record": SLICE_CORES,
            "expr": _either(
                SLICE_LABELS,
                renamed("hami_vgpu_core_allocated_ratio", HAMI_SLICE),
                renamed("vGPUDeviceCoreAllocated", DRA_SLICE),
            ),
        },
        {
            "record": CARD_MEMORY,
            "expr": _either(
                CARD_LABELS,
                f"{renamed('hami_gpu_memory_limit_bytes', HAMI_CARD)} / {MIB}",
                renamed("GPUDeviceMemoryLimit", DRA_CARD),
            ),
        },
        {
            "record": CARD_CORES,
            "expr": _either(
                CARD_LABELS,
                renamed("hami_gpu_core_limit_ratio", HAMI_CARD),
                renamed("GPUDeviceCoreLimit", DRA_CARD),
            ),
        },
        {
            "record": SLICE_SHARE,
            "expr": (
                "max without (share_of) (\n"
                f"  {_fraction_of_card(SLICE_MEMORY, CARD_MEMORY, 'memory')}\n"
                "  or\n"
                f"  {_fraction_of_card(SLICE_CORES, CARD_CORES, 'cores')}\n"
                ")"
            ),
        },
        # Slices whose container ran no kernel for IDLE_SECONDS: only where a vGPU monitor runs.
        {
            "record": SLICE_IDLE_SHARE,
            "expr": (
                f"{SLICE_SHARE}\nand on (tenant, namespace, pod, card) (\n"
                "  max by (tenant, namespace, pod, card) ("
                f"{renamed('hami_container_last_kernel_elapsed_seconds', HAMI_SLICE)})"
                f" > {IDLE_SECONDS}\n)"
            ),
        },
        # Pods sharing each card: the lab's count, the same for HAMi and DRA (HAMi's own
        # hami_gpu_shared_count counts slots, not pods).
        {"record": CARD_SLICES, "expr": f"count by ({CARD_LABELS}) ({SLICE_MEMORY})"},
    ]


def rule_groups(interval: str) -> list[dict[str, Any]]:
    """The groups of Prometheus's rule file: evaluated as often as the tenants are scraped."""
    return [{"name": "lab-slices", "interval": interval, "rules": recording_rules()}]


def slice_hours_expr(series: str, by: str, window: str) -> str:
    """`series`·hours per `by` over the last `window` (a Prometheus duration): the integral,
    one sample a minute. A series absent at a step (no pod, Prometheus down) adds nothing."""
    per_hour = 3600 // INTEGRAL_STEP_SECONDS
    return (
        f"sum by ({by}) (sum_over_time({series}[{window}:{INTEGRAL_STEP_SECONDS}s])) / {per_hour}"
    )


LEDGER_BY = "tenant, namespace, card"
WINDOW = "$__range"  # Grafana's name for the chosen range; the ledger puts its window there
# labcheck's own pods (namespaces labcheck-<run id>, labcheck/context.py) hold slices while the
# validation runs: recorded like any pod, but no tenant's to bill.
NOT_LABCHECK = '{namespace!~"labcheck-.+"}'


def ledger_queries() -> dict[str, str]:
    """The ledger's columns, each by tenant, namespace and card over WINDOW."""
    return {
        "mb_hours": slice_hours_expr(SLICE_MEMORY + NOT_LABCHECK, LEDGER_BY, WINDOW),
        "core_hours": slice_hours_expr(SLICE_CORES + NOT_LABCHECK, LEDGER_BY, WINDOW),
        "gpu_hours": slice_hours_expr(SLICE_SHARE + NOT_LABCHECK, LEDGER_BY, WINDOW),
        "idle_gpu_hours": slice_hours_expr(SLICE_IDLE_SHARE + NOT_LABCHECK, LEDGER_BY, WINDOW),
        # Pods that held a slice of the card at a sample of the integrals' one-minute grid (a
        # pod seen only between two grid points holds no slice-hours either).
        "pods": f"count by ({LEDGER_BY}) (count by ({LEDGER_BY}, pod) "
        f"(count_over_time({SLICE_MEMORY}{NOT_LABCHECK}[{WINDOW}:{INTEGRAL_STEP_SECONDS}s])))",
    }
