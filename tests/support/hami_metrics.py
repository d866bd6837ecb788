"""What HAMi v2.10.0's scheduler serves on :9395/metrics, from a list of cards and containers.

The names, help texts, label names and units are those of cmd/scheduler/metrics.go at the pinned
commit (fact `hami-scheduler-metrics-v2.10`): per card ``hami_gpu_*`` and ``hami_node_gpu_*``,
per container and card ``hami_vgpu_*``, every one a gauge with the constant label zone="vGPU",
memory in bytes (HAMi counts MiB and multiplies by 1024*1024), cores in percent of a card (100 is
a whole card), ``hami_node_gpu_memory_allocated_ratio`` a 0-1 ratio. The text is what
client_golang's text exposition writes (labels sorted by name, series sorted by label values,
Go's shortest float format), so a test can compare it with a real scrape byte for byte.

Not modelled: MIG instances, AMD core normalisation, and HAMi's 15 s lag of the per-card
series behind the pods
(the per-card values are computed from the same containers, at once).

``HamiMetricsServer`` serves it over HTTP; ``state`` may be replaced while it runs (pods come and
go), each scrape renders the state of that moment.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any

MIB = 1024 * 1024
ZONE = ("zone", "vGPU")  # NewClusterManager("vGPU", ...) wraps every collector series with it
BUILD_INFO = {  # hami_build_info's labels (pkg/metrics/metrics.go); values as a release sets them
    "build_date": "2026-08-21T00:00:00Z",
    "compiler": "gc",
    "go_version": "go1.25.5",
    "platform": "linux/amd64",
    "revision": "4707fb02c91c545bc7343ce26dba4c32919f9a3e",
    "version": "v2.10.0",
}


@dataclasses.dataclass(frozen=True)
class Card:
    uuid: str
    node: str
    total_mb: int
    index: int = 0
    type: str = "NVIDIA"
    total_cores: int = 100


@dataclasses.dataclass(frozen=True)
class Container:
    """One container's share of one card (a container with two cards is two of these)."""

    namespace: str
    pod: str
    container_index: int
    node: str
    uuid: str
    mb: int
    cores: int


@dataclasses.dataclass(frozen=True)
class Quota:
    """A namespace's ResourceQuota on one of HAMi's resources (``name``: the resource, e.g.
    nvidia.com/gpumem), in that resource's units; ``limit`` None: no limit set."""

    namespace: str
    name: str
    used: int
    limit: int | None = None


@dataclasses.dataclass(frozen=True)
class HamiState:
    cards: tuple[Card, ...]
    containers: tuple[Container, ...] = ()
    quotas: tuple[Quota, ...] = ()


# name -> (help, label names in HAMi's declared order); cmd/scheduler/metrics.go:107-146,
# 286-295, 325-334.
CARD_LABELS = ("node", "device_uuid", "device_index", "device_type")
CONTAINER_LABELS = ("namespace", "node", "pod", "container_index", "device_uuid")
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hami_gpu_memory_limit_bytes": ("Device memory limit for a certain GPU", CARD_LABELS),
    "hami_gpu_core_limit_ratio": ("Device core limit for a certain GPU", CARD_LABELS),
    "hami_gpu_memory_allocated_bytes": (
        "Device memory allocated for a certain GPU",
        ("node", "device_uuid", "device_index", "device_cores", "device_type"),
    ),
    "hami_gpu_shared_count": ("Number of containers sharing this GPU", CARD_LABELS),
    "hami_gpu_core_allocated_ratio": ("Device core allocated for a certain GPU", CARD_LABELS),
    "hami_node_gpu_overview": (
        "GPU overview on a certain node",
        (*CARD_LABELS[:3], "device_cores", "device_memory_limit", "device_type"),
    ),
    "hami_node_gpu_memory_allocated_ratio": (
        "GPU Memory Allocated Percentage on a certain GPU",
        CARD_LABELS,
    ),
    "hami_resource_quota_used": (
        "resourcequota usage for a certain device",
        ("namespace", "quota_name", "limit"),
    ),
    "hami_resource_quota_limit": (
        "resourcequota limit for a certain device",
        ("namespace", "quota_name"),
    ),
    "hami_vgpu_memory_allocated_bytes": (
        "vGPU memory allocated from a container",
        CONTAINER_LABELS,
    ),
    "hami_vgpu_core_allocated_ratio": ("vGPU core allocated from a container", CONTAINER_LABELS),
}

Sample = tuple[str, dict[str, str], float]


def samples(state: HamiState) -> list[Sample]:
    """Every series HAMi's collector sends for ``state`` (without hami_build_info)."""
    out: list[Sample] = []

    def send(name: str, value: float, *values: object) -> None:
        labels = dict(zip(METRICS[name][1], map(str, values), strict=True))
        out.append((name, {**labels, ZONE[0]: ZONE[1]}, value))

    for card in state.cards:
        on_card = [c for c in state.containers if c.uuid == card.uuid and c.node == card.node]
        used_mb = sum(c.mb for c in on_card)
        used_cores = sum(c.cores for c in on_card)
        ids = (card.node, card.uuid, card.index)
        send("hami_gpu_memory_limit_bytes", card.total_mb * MIB, *ids, card.type)
        send("hami_gpu_core_limit_ratio", card.total_cores, *ids, card.type)
        send("hami_gpu_memory_allocated_bytes", used_mb * MIB, *ids, card.total_cores, card.type)
        send("hami_gpu_shared_count", len(on_card), *ids, card.type)
        send("hami_gpu_core_allocated_ratio", used_cores, *ids, card.type)
        send("hami_node_gpu_overview", used_mb * MIB, *ids, card.total_cores, card.total_mb,
             card.type)  # fmt: skip
        if card.total_mb > 0:
            send("hami_node_gpu_memory_allocated_ratio", used_mb / card.total_mb, *ids, card.type)
    for q in state.quotas:  # metrics.go:304-313; an unset limit reads 0 in the `limit` label
        send("hami_resource_quota_used", q.used, q.namespace, q.name, q.limit or 0)
        if q.limit is not None:
            send("hami_resource_quota_limit", q.limit, q.namespace, q.name)
    for c in state.containers:
        ids = (c.namespace, c.node, c.pod, c.container_index, c.uuid)
        send("hami_vgpu_memory_allocated_bytes", c.mb * MIB, *ids)
        send("hami_vgpu_core_allocated_ratio", c.cores, *ids)
    return out


# HAMi-DRA 0.2.2's monitor (chart 0.2.2, tree bf26feb): HAMi's legacy-style names, in MiB, its
# own label names, no constant labels; a claim's allocation once per pod using it, no container.
DRA_DEVICE_LABELS = (
    "nodeid",
    "deviceuuid",
    "deviceidx",
    "devicename",
    "devicebrand",
    "deviceproductname",
)
DRA_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "GPUDeviceMemoryLimit": ("Device memory limit for a certain GPU", DRA_DEVICE_LABELS),
    "GPUDeviceCoreLimit": ("Device core limit for a certain GPU", DRA_DEVICE_LABELS),
    "GPUDeviceMemoryAllocated": ("Device memory allocated for a certain GPU", DRA_DEVICE_LABELS),
    "GPUDeviceCoreAllocated": ("Device core allocated for a certain GPU", DRA_DEVICE_LABELS),
    "vGPUDeviceMemoryAllocated": (
        "vGPU Device memory allocated for a container",
        (*DRA_DEVICE_LABELS, "podnamespace", "podname"),
    ),
    "vGPUDeviceCoreAllocated": (
        "vGPU Device core allocated for a container",
        (*DRA_DEVICE_LABELS, "podnamespace", "podname"),
    ),
}


def dra_samples(state: HamiState, product: str = "NVIDIA-L4") -> list[Sample]:
    """What HAMi-DRA's monitor sends for ``state`` (its cards are a node's devices in its
    ResourceSlices, ``index`` their position; its containers are claims' allocations, one per
    pod using the claim; ``container_index`` has no counterpart)."""
    out: list[Sample] = []

    def send(name: str, value: float, device: Card, *more: str) -> None:
        values = (device.node, device.uuid, str(device.index), f"gpu-{device.index}", "NVIDIA",
                  product, *more)  # fmt: skip
        out.append((name, dict(zip(DRA_METRICS[name][1], values, strict=True)), value))

    for card in state.cards:
        on_card = [c for c in state.containers if c.uuid == card.uuid and c.node == card.node]
        send("GPUDeviceMemoryLimit", card.total_mb, card)
        send("GPUDeviceCoreLimit", card.total_cores, card)
        send("GPUDeviceMemoryAllocated", sum(c.mb for c in on_card), card)
        send("GPUDeviceCoreAllocated", sum(c.cores for c in on_card), card)
        for c in on_card:
            send("vGPUDeviceCoreAllocated", c.cores, card, c.namespace, c.pod)
            send("vGPUDeviceMemoryAllocated", c.mb, card, c.namespace, c.pod)
    return out


# HAMi v2.10.0's vGPU monitor (device plugin pods, :9394; cmd/vGPUmonitor/metrics.go:76-101):
# what the containers use of their slices, from HAMi-core's shared region (real cards only).
# The subset the lab reads; the monitor's other families are not played.
VGPU_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid")
VGPU_METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hami_vgpu_memory_used_bytes": ("vGPU device memory usage in bytes", VGPU_LABELS),
    "hami_vgpu_memory_limit_bytes": ("vGPU device memory limit in bytes", VGPU_LABELS),
    "hami_container_last_kernel_elapsed_seconds": (
        "Seconds since last kernel execution in container",
        VGPU_LABELS,
    ),
}


@dataclasses.dataclass(frozen=True)
class Use:
    """A container's use of its slice of a card, as the vGPU monitor on its node reads it."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int
    uuid: str
    used_mb: int
    limit_mb: int
    idle_seconds: float  # since the container's last kernel


def vgpu_monitor_samples(uses: Iterable[Use]) -> list[Sample]:
    out: list[Sample] = []
    for u in uses:
        labels = dict(zip(VGPU_LABELS, (u.namespace, u.pod, u.container, str(u.vdevice_index),
                                        u.uuid), strict=True))  # fmt: skip
        out.append(("hami_vgpu_memory_used_bytes", labels, u.used_mb * MIB))
        out.append(("hami_vgpu_memory_limit_bytes", dict(labels), u.limit_mb * MIB))
        out.append(("hami_container_last_kernel_elapsed_seconds", dict(labels), u.idle_seconds))
    return out


def go_float(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64), as client_golang's text format writes a value:
    the shortest digits that read back the same, in %e form when the exponent is < -4 or >= 6."""
    if value == 0:
        return "0"
    digits = Decimal(repr(float(value))).normalize()
    exponent = digits.adjusted()
    if exponent < -4 or exponent >= 6:
        return f"{float(value):.{len(digits.as_tuple().digits) - 1}e}"
    return format(digits, "f")


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{_escape(labels[k])}"' for k in sorted(labels))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def exposition(state: HamiState, build_info: bool = True) -> str:
    """The text format 0.0.4 body of one scrape of HAMi's scheduler."""
    helps = {name: text for name, (text, _) in METRICS.items()}
    extra = [("hami_build_info", dict(BUILD_INFO), 1.0)] if build_info else []
    helps["hami_build_info"] = "hami build metadata exposed as labels with a constant value of 1."
    return render([*samples(state), *extra], helps)


def vgpu_monitor_exposition(uses: Iterable[Use]) -> str:
    """The vGPU monitor's body (its families the lab reads)."""
    helps = {name: text for name, (text, _) in VGPU_METRICS.items()}
    return render(vgpu_monitor_samples(uses), helps)


def render(all_samples: Iterable[Sample], helps: dict[str, str]) -> str:
    """client_golang's text format: families by name, each a gauge, series by label values."""
    families: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in all_samples:
        families.setdefault(name, []).append((labels, value))
    lines: list[str] = []
    for name in sorted(families):
        lines += [f"# HELP {name} {helps[name]}", f"# TYPE {name} gauge"]
        rows = sorted(families[name], key=lambda row: [row[0][k] for k in sorted(row[0])])
        lines += [f"{name}{{{_labels(labels)}}} {go_float(value)}" for labels, value in rows]
    return "\n".join(lines) + "\n"


class HamiMetricsServer:
    """HAMi's scheduler metrics endpoint: GET /metrics renders ``state`` at that moment (with
    ``exposed=vgpu_monitor_exposition`` and a list of ``Use``: the vGPU monitor's)."""

    def __init__(
        self,
        host: str,
        state: Any,
        port: int = 0,
        exposed: Callable[[Any], str] = exposition,
    ) -> None:
        self.state = state
        self.scrapes = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exposed(server.state).encode()
                server.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.host, self.port = host, self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> HamiMetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def state_of(cards: Iterable[Card], containers: Sequence[Container] = ()) -> HamiState:
    return HamiState(tuple(cards), tuple(containers))
