"""The lab's record over time: one Prometheus in the management cluster that scrapes every
tenant's HAMi, and Grafana with the sharing dashboard. Data and validation only; the values,
rules and dashboard are built in builders/."""

from __future__ import annotations

import re

from pydantic import field_validator

from labconfig.base import ConfigModel

# Prometheus's duration units (model.ParseDuration); retention and scrape intervals use them.
PROMETHEUS_DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
KUBERNETES_QUANTITY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti)")


class MonitoringConfig(ConfigModel):
    """`monitoring` in the stack config. On by default: the record of who held which slices
    exists only if Prometheus runs while the pods do."""

    enabled: bool = True
    # How long samples are kept (Prometheus's --storage.tsdb.retention.time): the ledger
    # reaches back this far.
    retention: str = "15d"
    # The Prometheus server's volume; a restart keeps the record.
    volume_size: str = "8Gi"
    scrape_interval: str = "30s"
    grafana: bool = True  # the dashboard, on a MetalLB address the host reaches
    prometheus_chart_version: str = "29.27.0"
    grafana_chart_version: str = "12.11.1"

    @field_validator("retention", "scrape_interval")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not PROMETHEUS_DURATION.fullmatch(value):
            raise ValueError("must be a Prometheus duration such as 30s, 12h or 15d")
        return value

    @field_validator("volume_size")
    @classmethod
    def _quantity(cls, value: str) -> str:
        if not KUBERNETES_QUANTITY.fullmatch(value):
            raise ValueError("must be a size such as 8Gi")
        return value
