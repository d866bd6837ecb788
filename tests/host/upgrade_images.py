"""What a tenant upgraded to v1.36.3 runs on its workers: kindest/node's v1.36.3 programs.

kind publishes a node image per Kubernetes version; here the worker image of v1.36.3 is the
tier's v1.35.4 node image (node_image.py) with kubelet and kubeadm v1.36.3 in /usr/bin, where
kind's kubelet.service and the join script find them, /kind/version saying v1.36.3, and
kubeadm's kube-proxy image of v1.36.3 among the images the node imports at boot (the program's
kube-proxy DaemonSet at v1.36.3 names it). The programs are built from the Go module into the
tier's cache (bin/v1.36.3, beside kube_proxy_run.py's kube-proxy); the image is made by a
`docker build` of those files on the node image (no container runs), tagged by a content key.
kubectl stays v1.35.4 in the image: the join and leave scripts run kubectl on the host only.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from docker_host import Docker
from kube_proxy_run import NEXT_VERSION, kube_proxy_next
from node_image import (
    KUBE_PROXY_PACKAGES,
    NODE_REPOSITORY,
    BuildPaths,
    binaries,
    binary_layer,
    debian_rootfs,
    docker_archive,
    go_env,
    image_file_name,
    kube_proxy_image,
    publish,
)

# The node's programs at v1.36.3: a set of its own beside kube_proxy_run's (same module and
# version, so Go's build cache shares the work), into the same bin/v1.36.3.
NODE_NEXT_SET = binaries.BinarySet(
    name="host-node-next",
    module="k8s.io/kubernetes",
    version=NEXT_VERSION,
    packages=("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kubeadm"),
    local_replace_version="v0." + NEXT_VERSION.split(".", 1)[1],
    ldflags=binaries._k8s_ldflags(NEXT_VERSION),
    bin_subdir=NEXT_VERSION,
)
# Its own repository: node_image.prune removes every other tag of the node image's.
UPGRADE_REPOSITORY = f"{NODE_REPOSITORY}-upgrade"
DOCKERFILE = f"""\
FROM {{base}}
COPY kubelet kubeadm /usr/bin/
COPY version /kind/version
COPY {image_file_name(kube_proxy_image(NEXT_VERSION))} /kind/images/
"""


def node_next_programs(tier_cache: Path) -> dict[str, Path]:
    """kubelet, kubeadm and kube-proxy v1.36.3, built once into the tier's cache."""
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(NODE_NEXT_SET, paths.go_root, env, go_version)
    kube_proxy = kube_proxy_next(tier_cache)
    found = {name: paths.bin / NEXT_VERSION / name for name in NODE_NEXT_SET.binaries}
    return {**found, "kube-proxy": kube_proxy}


def kube_proxy_next_archive(tier_cache: Path, programs: dict[str, Path]) -> bytes:
    """kubeadm's kube-proxy image of v1.36.3, made as the node image makes v1.35.4's."""
    rootfs = debian_rootfs(BuildPaths.under(tier_cache))  # cached: the node image's Debian
    content = programs["kube-proxy"].read_bytes()
    layer = binary_layer("kube-proxy", content, rootfs, KUBE_PROXY_PACKAGES)
    return docker_archive(kube_proxy_image(NEXT_VERSION), layer, ())


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def next_worker_image(docker: Docker, tier_cache: Path, node_image: str) -> str:
    """The local tag of the v1.36.3 worker image derived from `node_image`, built when no image
    of its key exists (earlier ones of the repository removed)."""
    programs = node_next_programs(tier_cache)
    base = json.loads(docker.run("image", "inspect", node_image).stdout)[0]["Id"]
    parts = [base, Path(__file__).read_text()]
    parts += [hashlib.sha256(programs[n].read_bytes()).hexdigest() for n in sorted(programs)]
    key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    tag = f"{UPGRADE_REPOSITORY}:{NEXT_VERSION}-{key}"
    if docker.run("image", "inspect", tag, check=False).returncode == 0:
        return tag
    archive = kube_proxy_next_archive(tier_cache, programs)
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        _add(tar, "Dockerfile", DOCKERFILE.format(base=node_image).encode(), 0o644)
        for name in NODE_NEXT_SET.binaries:
            _add(tar, name, programs[name].read_bytes(), 0o755)
        _add(tar, "version", NEXT_VERSION.encode(), 0o644)
        _add(tar, image_file_name(kube_proxy_image(NEXT_VERSION)), archive, 0o644)
    built = subprocess.run(
        ["docker", "build", "--tag", tag, "-"],
        input=context.getvalue(),
        env={**docker.env(), "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        check=False,
        timeout=900,
    )
    if built.returncode != 0:
        raise RuntimeError(f"docker build of {tag} failed:\n{built.stderr.decode()[-3000:]}")
    listed = docker.run("images", UPGRADE_REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}")
    for old in set(listed.stdout.split()) - {tag}:
        docker.run("image", "rm", old, check=False)
    return tag


def publish_next(docker: Docker, tier_cache: Path, tag: str) -> str:
    """The v1.36.3 image pushed to the loopback mirror as node_image.publish pushes the v1.35.4
    one (the layers they share are there already); its digest-pinned name."""
    return publish(docker, tier_cache, tag, version=NEXT_VERSION)
