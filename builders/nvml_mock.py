"""nvml-mock's Helm values: NVIDIA's fake NVML for a tenant's card profile."""

from __future__ import annotations

from typing import Any

from labconfig.model import TenantConfig, nvml_mock_profile


def nvml_mock_values(tenant: TenantConfig, image: str) -> dict[str, Any]:
    repository, _, tag = image.rpartition(":")
    return {
        "gpu": {"profile": nvml_mock_profile(tenant), "count": tenant.gpus[0].count},
        "image": {"repository": repository, "tag": tag},
    }
