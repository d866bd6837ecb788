"""GPU models the lab knows by name, with the card HAMi registers for each.

HAMi accounts memory in MB exactly as its device plugin reads it from NVML (``total / 2**20``),
so a card must be described with that figure, not the marketing size. Two tables: what real
cards (and so the simulated ones) report, and what nvml-mock's profiles report, which differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class GpuModel:
    product: str  # the name nvidia-smi prints (NVML device name)
    memory_mb: int  # total memory as NVML reports it, in MiB
    cores: int = 100  # HAMi counts compute in percent of one card


KNOWN_GPU_MODELS: dict[str, GpuModel] = {
    "A100-40GB": GpuModel("NVIDIA A100-SXM4-40GB", 40960),
    "A100-80GB": GpuModel("NVIDIA A100-SXM4-80GB", 81920),
    "H100-80GB": GpuModel("NVIDIA H100 80GB HBM3", 81559),
    "L4": GpuModel("NVIDIA L4", 23034),
    "L40S": GpuModel("NVIDIA L40S", 46068),
    "T4": GpuModel("Tesla T4", 15360),
}


@dataclass(frozen=True)
class NvmlMockProfile:
    name: str  # profiles/<name>.yaml of the nvml-mock chart
    card: GpuModel  # what HAMi registers from it: NVML GetName() and memory.total_bytes / 2**20


# nvml-mock v0.3.0, NVIDIA/k8s-test-infra deployments/nvml-mock/helm/nvml-mock/profiles/:
# device_defaults.name and memory.total_bytes (40, 80, 48 and 16 GiB). Only A100-40GB matches
# KNOWN_GPU_MODELS; the others report whole GiB, and T4 a newer name.
NVML_MOCK_PROFILES: dict[str, NvmlMockProfile] = {
    "A100-40GB": NvmlMockProfile("a100", GpuModel("NVIDIA A100-SXM4-40GB", 40960)),
    "H100-80GB": NvmlMockProfile("h100", GpuModel("NVIDIA H100 80GB HBM3", 81920)),
    "L40S": NvmlMockProfile("l40s", GpuModel("NVIDIA L40S", 49152)),
    "T4": NvmlMockProfile("t4", GpuModel("NVIDIA T4", 16384)),
}


def model_table(gpu_mode: str) -> dict[str, GpuModel]:
    """The card each model name stands for in a GPU mode: nvml-mock's profiles, or real cards."""
    if gpu_mode == "nvml-mock":
        return {model: profile.card for model, profile in NVML_MOCK_PROFILES.items()}
    return KNOWN_GPU_MODELS


def find_by_name(table: dict[str, T], name: str) -> T | None:
    """A table entry by model name, ignoring case (``a100-80gb`` works too)."""
    folded = name.casefold()
    return next((entry for key, entry in table.items() if key.casefold() == folded), None)


def lookup_model(name: str, table: dict[str, GpuModel] = KNOWN_GPU_MODELS) -> GpuModel | None:
    """Finds a built-in model by name, ignoring case."""
    return find_by_name(table, name)


# The kubelet dials device plugins without raising gRPC's default receive limit (kubernetes
# pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go `dial`; grpc-go dialoptions.go
# defaultClientMaxReceiveMessageSize = 4 MiB), so a larger ListAndWatch message is dropped.
GRPC_MAX_RECEIVE_BYTES = 4 * 1024 * 1024


def mock_plugin_max_memory_mb(limit: int = GRPC_MAX_RECEIVE_BYTES) -> int:
    """The most card memory (MB) a node can have under HAMi's mock device plugin.

    The plugin advertises ``nvidia.com/gpumem`` as one device per MB of the node's cards, all
    in one ListAndWatch message (Project-HAMi/mock-device-plugin v1.0.1,
    internal/pkg/mock/server.go:78-95): device i is ``{ID: "mock-devices-id-<i>", health:
    "Healthy"}``. On the wire each costs a tag and a length byte in the response, and in the
    Device a tag, a length and the text for ID (16 + digits(i) bytes) and for health (7 bytes):
    2 + (2 + 16 + digits) + (2 + 7) = 29 + digits bytes, every length below 128 (one byte). Ids
    0-9 take 30 bytes, 10-99 31, ..., 100000 and up 35: 123011 devices fit in 4 MiB.
    """
    size = count = 0
    digits = 1
    while True:
        per_device = 2 + (2 + len("mock-devices-id-") + digits) + (2 + len("Healthy"))
        ids = 10 if digits == 1 else 9 * 10 ** (digits - 1)  # ids with this many digits
        if size + ids * per_device > limit:
            return count + (limit - size) // per_device
        size += ids * per_device
        count += ids
        digits += 1
