"""MetalLB's images and chart, and the Helm that installs it, built here from their Go modules.

No registry is reachable, so the tier builds what `quay.io/metallb/{controller,speaker}` hold at
the version the program pins (Pulumi.yaml's metallbVersion): the two programs of
`go.universe.tf/metallb`, static as upstream's Dockerfiles build them, each the one binary of a
one-layer image under the name the chart gives it (node_image.binary_layer, docker_archive).
Upstream's images are distroless/static with the binary at `/controller` and `/speaker`; here it
is /usr/local/bin/<name>, the entrypoint says so, and the chart sets only args. The chart is the
module's own `charts/metallb` (its `crds` and `frr-k8s` subcharts packed in), what the chart
repository serves at that version.

Helm is the tier's one helm (workload_images.helm_binary): `helm.sh/helm/v3` at the version
pulumi-kubernetes' provider embeds, so the chart installs with the library the program's
`Release` uses.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from images import busybox_binary
from node_image import (
    BuildPaths,
    _tar_add,
    binaries,
    binary_layer,
    docker_archive,
    go_env,
)
from workload_images import helm_binary

METALLB_MODULE = "go.universe.tf/metallb"
MIRRORED_REGISTRY = "quay.io/metallb"


def metallb_set(version: str) -> binaries.BinarySet:
    """controller and speaker at `version` (the chart's appVersion, v-prefixed)."""
    return binaries.BinarySet(
        name=f"metallb-{version}",
        module=METALLB_MODULE,
        version=version,
        packages=(f"{METALLB_MODULE}/controller", f"{METALLB_MODULE}/speaker"),
        local_replace_version=version,
    )


@dataclass(frozen=True)
class MetalLBBuild:
    """What the tier installs MetalLB from: the chart directory and the image archives."""

    version: str
    chart: Path
    images: dict[str, Path]  # image reference -> docker-archive tar
    helm: Path


def build_metallb(tier_cache: Path, chart_version: str) -> MetalLBBuild:
    """The binaries (cached by binaries.build_set), the chart from the module, the archives."""
    paths = BuildPaths.under(tier_cache)
    version = chart_version if chart_version.startswith("v") else f"v{chart_version}"
    env, go_version = go_env()
    metallb = metallb_set(version)
    binaries.build_set(metallb, paths.go_root, env, go_version)
    module_dir = Path(
        binaries._run(
            ["go", "list", "-m", "-f", "{{.Dir}}", METALLB_MODULE],
            paths.go_root / "src" / metallb.name,
            env,
        ).strip()
    )
    archives = paths.root / "platform-images"
    archives.mkdir(parents=True, exist_ok=True)
    images = {}
    for program in ("controller", "speaker"):
        reference = f"{MIRRORED_REGISTRY}/{program}:{version}"
        archive = archives / f"metallb-{program}-{version}.tar"
        binary = paths.bin / program
        if not archive.exists() or archive.stat().st_mtime < binary.stat().st_mtime:
            layer = binary_layer(program, binary.read_bytes())
            archive.write_bytes(docker_archive(reference, layer, (f"/usr/local/bin/{program}",)))
        images[reference] = archive
    chart = module_dir / "charts" / "metallb"
    return MetalLBBuild(version, chart, images, helm_binary(tier_cache))


ETCDCTL_SET = binaries.BinarySet(
    name="etcdctl",
    module="go.etcd.io/etcd/etcdctl/v3",
    version=binaries.ETCD_VERSION,
    packages=("go.etcd.io/etcd/etcdctl/v3",),
    local_replace_version=binaries.ETCD_VERSION,
)
ETCD_IMAGE = f"kamaji-hami-lab-host/etcd:{binaries.ETCD_VERSION}"
# busybox applets the setup commands use (sh runs them; the rest for a person who execs in)
ETCD_IMAGE_APPLETS = ("sh", "cat", "ls", "echo", "sleep")


def etcd_layer(etcd: bytes, etcdctl: bytes, busybox: bytes) -> bytes:
    """/usr/local/bin: etcd, etcdctl, busybox and a link per applet in ETCD_IMAGE_APPLETS."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("tmp", "usr", "usr/local", "usr/local/bin", "var", "var/run"):
            _tar_add(tar, directory, mode=0o1777 if directory == "tmp" else 0o755)
        for name, content in (("etcd", etcd), ("etcdctl", etcdctl), ("busybox", busybox)):
            _tar_add(tar, f"usr/local/bin/{name}", content)
        for applet in ETCD_IMAGE_APPLETS:
            link = tarfile.TarInfo(f"usr/local/bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return buffer.getvalue()


def build_etcd_image(tier_cache: Path) -> tuple[str, Path]:
    """The shared datastore's image (shared_datastore.py) and its docker-archive tar."""
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(ETCDCTL_SET, paths.go_root, env, go_version)
    etcd = (binaries.cache_root() / "bin" / "etcd").read_bytes()
    etcdctl = (paths.bin / "etcdctl").read_bytes()
    busybox = busybox_binary(tier_cache).read_bytes()
    layer = etcd_layer(etcd, etcdctl, busybox)
    key = hashlib.sha256(layer).hexdigest()[:16]
    archive = paths.root / "platform-images" / f"etcd-{key}.tar"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(docker_archive(ETCD_IMAGE, layer, ("/usr/local/bin/etcd",)))
    return ETCD_IMAGE, archive
