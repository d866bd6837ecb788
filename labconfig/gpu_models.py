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
