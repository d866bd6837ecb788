"""The lab's Prometheus, asked through the management cluster's API server (its service proxy):
no address or port-forward of its own, and the management kubeconfig is all it takes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .cluster import Cluster, ClusterError


class PrometheusError(Exception):
    """Prometheus answered, but not with a vector: the query, or Prometheus, is wrong."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Prometheus:
    cluster: Cluster  # the management cluster
    path: str  # the service-proxy path of Prometheus's HTTP root (spec.monitoring.prometheus)

    def instant(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query (`/api/v1/query`), at `at` (Unix seconds) or now."""
        query = [("query", expr)] + ([("time", f"{at:.3f}")] if at is not None else [])
        try:
            text = self.cluster.get_raw(f"{self.path}/api/v1/query", query)
        except ClusterError as exc:
            if exc.status == 503:
                raise ClusterError(
                    503, f"{exc.message} (the lab's Prometheus has no ready pod behind its Service)"
                ) from None
            raise
        return parse_vector(text, expr)


def parse_vector(text: str, expr: str) -> list[Sample]:
    """Prometheus's JSON answer to an instant query, as samples; an error names the query."""
    try:
        answer = json.loads(text)
    except ValueError:
        raise PrometheusError(f"not Prometheus's JSON for {expr!r}: {text[:200]!r}") from None
    if answer.get("status") != "success":
        raise PrometheusError(f"Prometheus refused {expr!r}: {answer.get('error', answer)}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"{expr!r} gave a {data.get('resultType')}, not a vector")
    return [
        Sample(dict(item.get("metric") or {}), float(item["value"][1]))
        for item in data.get("result") or []
    ]
