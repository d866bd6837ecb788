"""The GPU model catalog (labconfig/gpu_models.py)."""

from __future__ import annotations

from labconfig.gpu_models import hami_card_type


def test_card_types_as_hami_registers_them():
    assert hami_card_type("NVIDIA L4") == "NVIDIA L4"
    assert hami_card_type("Tesla T4") == "NVIDIA-Tesla T4"
