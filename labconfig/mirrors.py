"""A mirrored or air-gapped site: the registries and chart repositories the lab pulls from
instead of upstream. Data and validation only; the files and names they become are built in
builders/registry_mirrors.py and planning/pulls.py."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import Field, field_validator, model_validator

from labconfig.base import ConfigModel

# The registries a stack pulls images from (docs/mirrored-site.md lists every image).
UPSTREAM_REGISTRIES = ("docker.io", "registry.k8s.io", "quay.io", "ghcr.io")
# A mirror for every registry that has none of its own (containerd's `_default` host directory).
ALL_REGISTRIES = "*"

# Where each chart comes from upstream: a Helm repository, or an OCI prefix the chart's name is
# appended to. `kamaji-etcd` is the Kamaji chart's subchart (its Chart.lock names the repository).
CHART_REPOSITORIES: dict[str, str] = {
    "cert-manager": "https://charts.jetstack.io",
    "metallb": "https://metallb.github.io/metallb",
    "kamaji-etcd": "https://clastix.github.io/charts",
    "flannel": "https://flannel-io.github.io/flannel/",
    "hami": "https://project-hami.github.io/HAMi/",
    "hami-dra": "https://project-hami.github.io/HAMi-DRA",
    "nvml-mock": "oci://ghcr.io/nvidia/k8s-test-infra/chart",
    "prometheus": "https://prometheus-community.github.io/helm-charts",
    # The grafana chart's maintained home since grafana/helm-charts deprecated it.
    "grafana": "https://grafana-community.github.io/helm-charts",
}
CHART_NAMES = tuple(CHART_REPOSITORIES)
CHART_SOURCE_SCHEMES = ("https://", "http://", "oci://")

_HOST = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:\d{1,5})?"
REGISTRY_HOST = re.compile(_HOST)
# host[:port] and an optional path: a pull-through cache, or a proxy project (Harbor: host/project)
MIRROR = re.compile(_HOST + r"(/[a-z0-9._-]+)*")
PEM_CERTIFICATE = re.compile(
    r"\s*(-----BEGIN CERTIFICATE-----\s[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----\s*)+"
)


class RegistryMirror(ConfigModel):
    """Where one upstream registry's images are pulled from, by every node and by the host's
    Docker for the node images."""

    registry: str = Field(min_length=1)  # docker.io, registry.k8s.io, ... or `*`
    mirror: str = Field(min_length=1)  # host[:port][/path], no scheme
    plain_http: bool = False  # a mirror that speaks HTTP, not HTTPS (a registry on the LAN)
    ca: str = ""  # PEM: the CA the mirror's certificate chains to, when not a public one
    # The registry itself is never asked, also when the mirror fails: a site without internet,
    # where each try of upstream would wait out a dial timeout before the pull fails.
    mirror_only: bool = False

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str) -> str:
        if value != ALL_REGISTRIES and not REGISTRY_HOST.fullmatch(value):
            raise ValueError(
                f"must be a registry host such as {', '.join(UPSTREAM_REGISTRIES)}, "
                f"or {ALL_REGISTRIES!r} for every registry"
            )
        return value

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, value: str) -> str:
        if "://" in value:
            raise ValueError("host[:port][/path] without the scheme (plainHttp: true for http)")
        if not MIRROR.fullmatch(value):
            raise ValueError("must be host[:port][/path], e.g. harbor.example.com/dockerhub-proxy")
        return value

    @field_validator("ca")
    @classmethod
    def _ca(cls, value: str) -> str:
        if value and not PEM_CERTIFICATE.fullmatch(value):
            raise ValueError("must be PEM certificates (-----BEGIN CERTIFICATE----- ...)")
        return value

    @model_validator(mode="after")
    def _ca_needs_tls(self) -> RegistryMirror:
        if self.ca and self.plain_http:
            raise ValueError("ca is for an HTTPS mirror: a plainHttp mirror has no certificate")
        return self

    @property
    def host(self) -> str:
        return self.mirror.split("/", 1)[0]

    @property
    def path(self) -> str:
        """The path prefix after the host ('' for a pull-through cache at the root)."""
        return self.mirror.partition("/")[2]


def check_registry_mirrors(mirrors: tuple[RegistryMirror, ...]) -> tuple[RegistryMirror, ...]:
    seen: set[str] = set()
    for mirror in mirrors:
        if mirror.registry in seen:
            raise ValueError(f"{mirror.registry!r} has two mirrors: one per registry")
        seen.add(mirror.registry)
    return mirrors


def check_chart_sources(sources: dict[str, str]) -> dict[str, str]:
    for chart, source in sources.items():
        if chart not in CHART_REPOSITORIES:
            raise ValueError(f"no chart is named {chart!r}: one of {', '.join(CHART_NAMES)}")
        if not source.startswith(CHART_SOURCE_SCHEMES) or len(source.split("://", 1)[1]) == 0:
            raise ValueError(
                f"{chart}: {source!r} must be a Helm repository (https://...) or an OCI "
                "prefix the chart's name is appended to (oci://registry/path)"
            )
    return sources


@dataclass(frozen=True)
class ChartLocation:
    """A Release's `chart` and `repositoryOpts.repo`: a chart name in a Helm repository, or the
    chart's full `oci://` reference with no repository."""

    name: str  # the chart's own name, also the release's
    chart: str
    repo: str | None


def chart_location(name: str, sources: Mapping[str, str]) -> ChartLocation:
    """Where chart `name` comes from: the stack's `chartSources` entry, else upstream."""
    source = sources.get(name) or CHART_REPOSITORIES[name]
    if source.startswith("oci://"):
        return ChartLocation(name, f"{source.rstrip('/')}/{name}", None)
    return ChartLocation(name, name, source)


def upstream_chart(name: str) -> ChartLocation:
    return chart_location(name, {})
