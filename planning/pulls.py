"""Every image and chart a stack pulls, at its pinned versions: what a mirrored or air-gapped
site must hold (docs/mirrored-site.md). Images the program names come from its config and
builders; the images a chart or Kamaji picks itself are the tables below, read in upstream's
source at the pinned versions (upstream facts in docs/upstream-facts/mirrored-site.md)."""

from __future__ import annotations

from dataclasses import dataclass

from labconfig.kamaji_sources import kamaji_source
from labconfig.mirrors import ALL_REGISTRIES, RegistryMirror
from labconfig.model import LabConfig, TenantConfig
from labconfig.versions import kubernetes_minor

HOST_DOCKER = "host Docker"
MANAGEMENT = "management cluster"

# Chart default images by (chart, version), `*` for any version; `{v}` is the version as the
# stack pins it (the charts tag their images with their own version).
CHART_IMAGES: dict[tuple[str, str], tuple[str, ...]] = {
    # cert-manager deploy/charts/cert-manager/values.yaml: image.repository, webhook.image,
    # cainjector.image, startupapicheck.image (the job runs by default); tag = appVersion.
    ("cert-manager", "*"): tuple(
        f"quay.io/jetstack/cert-manager-{part}:{{v}}"
        for part in ("controller", "webhook", "cainjector", "startupapicheck")
    ),
    # MetalLB charts/metallb/values.yaml: controller.image, speaker.image; FRR off (the program).
    ("metallb", "*"): ("quay.io/metallb/controller:v{v}", "quay.io/metallb/speaker:v{v}"),
    ("flannel", "v0.28.9"): (
        "ghcr.io/flannel-io/flannel:v0.28.9",
        "ghcr.io/flannel-io/flannel-cni-plugin:v1.9.1-flannel3",
    ),
    # kamaji-etcd 0.15.0: the StatefulSet's etcd (appVersion 3.5.17) and its install jobs'
    # images; clastix/kubectl is tagged with the cluster's minor, cfssl is `latest`.
    ("kamaji-etcd", "0.15.0"): (
        "quay.io/coreos/etcd:v3.5.17",
        "docker.io/cfssl/cfssl:latest",
        "docker.io/clastix/kubectl:{cluster_minor}",
        "quay.io/coreos/etcd:v3.5.6",
    ),
    # HAMi 2.10.0: the extender (global.imageTag), the webhook certificate job (imageNew, for
    # Kubernetes >= 1.22); the scheduler's kube-scheduler image is set by the program.
    ("hami", "2.10.0"): (
        "docker.io/projecthami/hami:v2.10.0",
        "docker.io/liangjw/kube-webhook-certgen:v1.1.1",
    ),
    # HAMi-DRA 0.2.2: its webhook and monitor; the fake plugin's image is set by the program.
    ("hami-dra", "0.2.2"): (
        "ghcr.io/project-hami/hami-dra-webhook:v0.2.0",
        "ghcr.io/project-hami/hami-dra-monitor:v0.2.0",
    ),
    # prometheus 29.27.0: the server (tag = appVersion) and its config reloader; the
    # subcharts are off (builders/monitoring_values.py).
    ("prometheus", "29.27.0"): (
        "quay.io/prometheus/prometheus:v3.14.0",
        "quay.io/prometheus-operator/prometheus-config-reloader:v0.93.1",
    ),
    # grafana 12.11.1 (grafana-community): Grafana alone; no sidecar, no init containers with
    # the program's values.
    ("grafana", "12.11.1"): ("docker.io/grafana/grafana:13.2.0",),
}
# CoreDNS as the kubeadm Kamaji builds with (k8s.io/kubernetes v1.36.3) deploys it.
KAMAJI_COREDNS = "registry.k8s.io/coredns/coredns:v1.14.2"
# labcheck's own pods (builders/labcheck_spec.py) and its real-GPU check's image.
LABCHECK_IMAGES = ("registry.k8s.io/pause:3.10", "docker.io/library/busybox:1.37.0")
LABCHECK_SMI_IMAGE = "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"


def kube_proxy_image(tenant: TenantConfig) -> str:
    """The program's kube-proxy (builders/kube_proxy.py): kubeadm's image at the tenant's
    version, as Kamaji's addon picked it."""
    return f"registry.k8s.io/kube-proxy:{tenant.kubernetes_version}"


@dataclass(frozen=True)
class ImagePull:
    image: str  # the full reference: registry/repository:tag[@digest]
    puller: str  # HOST_DOCKER, MANAGEMENT, or a tenant's name (its workers' containerd)
    purpose: str


@dataclass(frozen=True)
class ChartPull:
    name: str
    version: str
    source: str  # a Helm repository, an OCI reference, or git URL@commit
    cluster: str  # MANAGEMENT or a tenant's name


@dataclass(frozen=True)
class Pulls:
    images: tuple[ImagePull, ...]
    charts: tuple[ChartPull, ...]
    unread: tuple[str, ...]  # charts at versions whose default images are not in the tables


def full_reference(image: str) -> str:
    """`image` with its registry spelled out, as containerd names it (Docker Hub and its
    `library/` for one-part names)."""
    first, sep, _ = image.partition("/")
    if not sep:
        return f"docker.io/library/{image}"
    if first == "localhost" or "." in first or ":" in first:
        return image
    return f"docker.io/{image}"


def _name_and_tag(reference: str) -> tuple[str, str]:
    """`name:tag` as (name, tag); the tag is "" when the last path part has no colon (a
    registry's port is not a tag)."""
    name, sep, tag = reference.rpartition(":")
    return (name, tag) if sep and "/" not in tag else (reference, "")


def is_pinned(image: str) -> bool:
    """Pinned by a digest, or by a tag other than `latest`: a tag-less or `latest` reference
    names whatever its registry holds when it is pulled or copied."""
    name, digest = image.partition("@")[::2]
    return bool(digest) or _name_and_tag(name)[1] not in ("", "latest")


UNPINNED_WHY = "(no tag, or `latest`): a mirror holds what it named when copied"


def copy_reference(image: str) -> str:
    """`image` as skopeo copies it: pinned by tag and digest, by its digest alone, since
    skopeo refuses a reference with both and a node pulls such an image by its digest
    (upstream fact `skopeo-tag-and-digest`)."""
    name, sep, digest = image.partition("@")
    return f"{_name_and_tag(name)[0]}@{digest}" if sep else image


def registry_of(image: str) -> str:
    return full_reference(image).split("/", 1)[0]


def through(image: str, mirrors: tuple[RegistryMirror, ...]) -> str:
    """The mirror a node pulls `image` through, or `upstream`."""
    by_registry = {m.registry: m.mirror for m in mirrors}
    registry = registry_of(image)
    return by_registry.get(registry) or by_registry.get(ALL_REGISTRIES) or "upstream"


class _Collector:
    def __init__(self) -> None:
        self.images: list[ImagePull] = []
        self.charts: list[ChartPull] = []
        self.unread: list[str] = []

    def image(self, image: str, puller: str, purpose: str) -> None:
        pull = ImagePull(full_reference(image), puller, purpose)
        if pull not in self.images:
            self.images.append(pull)

    def chart(self, cfg: LabConfig, name: str, version: str, cluster: str, **fill: str) -> None:
        location = cfg.chart(name)
        self.charts.append(ChartPull(name, version, location.repo or location.chart, cluster))
        self.chart_images(name, version, cluster, **fill)

    def chart_images(self, name: str, version: str, cluster: str, **fill: str) -> None:
        images = CHART_IMAGES.get((name, version)) or CHART_IMAGES.get((name, "*"))
        if images is None:
            self.unread.append(f"{name} {version}")
            return
        for image in images:
            self.image(image.format(v=version, **fill), cluster, f"{name} chart")


def _node_minor(image: str) -> str:
    """`v1.35` of a node image, also one on a mirror with a port (127.0.0.1:5001/kindest/...)."""
    tag = _name_and_tag(image.partition("@")[0])[1]
    return "v{}.{}".format(*kubernetes_minor(tag))


def _platform(cfg: LabConfig, pulls: _Collector) -> None:
    cluster_minor = (
        _node_minor(cfg.management_node_image)
        if cfg.management_mode == "kind"
        else "<the management cluster's v1.N>"
    )
    pulls.chart(cfg, "cert-manager", cfg.cert_manager_version, MANAGEMENT)
    pulls.chart(cfg, "metallb", cfg.metallb_version, MANAGEMENT)
    source = kamaji_source(cfg.kamaji_image_tag)
    for chart in ("kamaji-crds", "kamaji"):
        pulls.charts.append(
            ChartPull(chart, source.tag, f"{cfg.kamaji_git_url}@{source.commit}", MANAGEMENT)
        )
    pulls.image(f"clastix/kamaji:{cfg.kamaji_image_tag}", MANAGEMENT, "kamaji chart")
    pulls.chart(
        cfg, "kamaji-etcd", source.etcd_chart_version, MANAGEMENT, cluster_minor=cluster_minor
    )


def _control_plane(tenant: TenantConfig, pulls: _Collector) -> None:
    """What Kamaji runs for a tenant: its control plane in the management cluster, its addons
    on the tenant's workers (konnectivity at v0.<minor>.0, as Kamaji infers it); and the
    program's kube-proxy there."""
    version, (_, minor) = tenant.kubernetes_version, kubernetes_minor(tenant.kubernetes_version)
    for part in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        pulls.image(f"registry.k8s.io/{part}:{version}", MANAGEMENT, f"{tenant.name} control plane")
    konnectivity = f"registry.k8s.io/kas-network-proxy/proxy-{{}}:v0.{minor}.0"
    pulls.image(konnectivity.format("server"), MANAGEMENT, f"{tenant.name} control plane")
    pulls.image(konnectivity.format("agent"), tenant.name, "Kamaji addon")
    pulls.image(kube_proxy_image(tenant), tenant.name, "kube-proxy")
    pulls.image(KAMAJI_COREDNS, tenant.name, "Kamaji addon")


def _gpu_sharing(cfg: LabConfig, tenant: TenantConfig, pulls: _Collector) -> None:
    if tenant.gpu_sharing == "dra":
        pulls.chart(cfg, "cert-manager", cfg.cert_manager_version, tenant.name)
        pulls.chart(cfg, "hami-dra", cfg.hami_dra_chart_version, tenant.name)
        pulls.image(cfg.hami_dra_fake_driver_image, tenant.name, "hami-dra fake plugin")
        return
    if tenant.gpu_mode == "nvml-mock":
        chart = cfg.chart("nvml-mock")
        pulls.charts.append(
            ChartPull(
                "nvml-mock", cfg.nvml_mock_chart_version, chart.repo or chart.chart, tenant.name
            )
        )
        pulls.image(cfg.nvml_mock_image, tenant.name, "nvml-mock chart")
    pulls.chart(cfg, "hami", cfg.hami_chart_version, tenant.name)
    # builders/hami.py sets it: the tenant's own kube-scheduler.
    pulls.image(f"registry.k8s.io/kube-scheduler:{tenant.kubernetes_version}", tenant.name,
                "hami chart")  # fmt: skip
    if tenant.gpu_mode == "simulated" and tenant.gpus:
        pulls.image(cfg.gpu_agent_image, tenant.name, "gpu_agent")


def stack_pulls(cfg: LabConfig) -> Pulls:
    pulls = _Collector()
    if cfg.management_mode == "kind":
        pulls.image(cfg.management_node_image, HOST_DOCKER, "kind node")
    for tenant in cfg.tenants:
        if tenant.worker_mode == "container":
            pulls.image(tenant.node_image, HOST_DOCKER, f"{tenant.name} workers")
    if cfg.management_mode == "kind" or cfg.install_platform:
        _platform(cfg, pulls)
    if cfg.registry_mirrors and cfg.management_mode == "kind":
        # labcheck reads the kind node's mirror files with a pod of its tools image.
        pulls.image(LABCHECK_IMAGES[1], MANAGEMENT, "labcheck")
    if cfg.monitoring.enabled:
        pulls.chart(cfg, "prometheus", cfg.monitoring.prometheus_chart_version, MANAGEMENT)
        if cfg.monitoring.grafana:
            pulls.chart(cfg, "grafana", cfg.monitoring.grafana_chart_version, MANAGEMENT)
    for tenant in cfg.tenants:
        _control_plane(tenant, pulls)
        pulls.chart(cfg, "flannel", cfg.flannel_chart_version, tenant.name)
        _gpu_sharing(cfg, tenant, pulls)
        for image in LABCHECK_IMAGES:
            pulls.image(image, tenant.name, "labcheck")
        if tenant.gpu_mode == "real":
            pulls.image(LABCHECK_SMI_IMAGE, tenant.name, "labcheck")
    return Pulls(tuple(pulls.images), tuple(pulls.charts), tuple(pulls.unread))


def image_table(pulls: Pulls, mirrors: tuple[RegistryMirror, ...] = ()) -> list[str]:
    """A Markdown table: each image once, with who pulls it, for what, and through which
    mirror."""
    by_image: dict[str, list[ImagePull]] = {}
    for pull in pulls.images:
        by_image.setdefault(pull.image, []).append(pull)
    lines = ["| image | pulled by | for | through |", "|---|---|---|---|"]
    for image, uses in by_image.items():
        pullers = ", ".join(dict.fromkeys(u.puller for u in uses))
        purposes = ", ".join(dict.fromkeys(u.purpose for u in uses))
        flag = "" if is_pinned(image) else " (not pinned)"
        lines.append(f"| `{image}`{flag} | {pullers} | {purposes} | {through(image, mirrors)} |")
    return lines


def chart_table(pulls: Pulls) -> list[str]:
    lines = ["| chart | version | from | into |", "|---|---|---|---|"]
    by_chart: dict[tuple[str, str, str], list[str]] = {}
    for chart in pulls.charts:
        by_chart.setdefault((chart.name, chart.version, chart.source), []).append(chart.cluster)
    for (name, version, source), clusters in by_chart.items():
        lines.append(f"| {name} | {version} | `{source}` | {', '.join(clusters)} |")
    return lines


def unique_images(pulls: Pulls) -> list[str]:
    return list(dict.fromkeys(pull.image for pull in pulls.images))


def copy_list(pulls: Pulls) -> list[str]:
    """`make pulls`: each image once, as skopeo copies it (docs/mirrored-site.md)."""
    return list(dict.fromkeys(copy_reference(image) for image in unique_images(pulls)))


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    from pathlib import Path

    from labconfig.model import ConfigError
    from labconfig.parse import parse_config
    from labconfig.stack import raw_stack_config, stack_file_values

    parser = argparse.ArgumentParser(
        prog="python -m planning.pulls",
        description="Every image (one per line, as skopeo copies it) and chart a stack pulls at "
        "its pinned versions; an image that is not pinned is named on stderr.",
    )
    parser.add_argument("stack_file", type=Path, help="the stack's Pulumi.<stack>.yaml")
    parser.add_argument("--charts", action="store_true", help="list the charts instead")
    parser.add_argument("--table", action="store_true", help="a Markdown table with the details")
    args = parser.parse_args(argv)
    try:
        values, secrets = stack_file_values(args.stack_file.read_text())
        # The secrets a user sets later (a kubeconfig, an SSH key) change nothing pulled.
        cfg = parse_config(raw_stack_config(values, secrets), secrets_set=False)
    except (OSError, ConfigError) as error:
        print(f"pulls: {error}", file=sys.stderr)
        return 2
    pulls = stack_pulls(cfg)
    if args.charts:
        lines = chart_table(pulls) if args.table else [
            f"{c.name} {c.version} {c.source}"
            for c in dict.fromkeys(ChartPull(c.name, c.version, c.source, "") for c in pulls.charts)
        ]  # fmt: skip
    else:
        lines = image_table(pulls, cfg.registry_mirrors) if args.table else copy_list(pulls)
    print("\n".join(lines))
    if not (args.charts or args.table):
        for image in unique_images(pulls):
            if not is_pinned(image):
                print(f"pulls: not pinned: {image} {UNPINNED_WHY}", file=sys.stderr)
    for chart in pulls.unread:
        print(f"pulls: the default images of {chart} are not known here", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
