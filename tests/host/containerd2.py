"""containerd 2 in a worker of the tier's node image, as kindest/node runs it.

kindest/node of kind v0.31.0 ships containerd v2.2.0 (fact `kind-node-containerd-2`), whose CRI
reads registry host configs from /etc/containerd/certs.d with no `config_path` in its config
(fact `containerd-default-config-path`). The tier's node image runs Debian's containerd 1.6.20,
which reads them only from a configured `config_path` (node_image.py, CERTS_D_CONFIG). For the
mirror tests a booted worker gets containerd v2.2.0 built here from its Go module (containerd,
ctr, the runc shim) in place of Debian's, and kind's own containerd config unchanged (the tier's
OOM-score adaptation, node_image.RESTRICT_OOM_SCRIPT, still applies it at start), then containerd
restarts: its content store and the preloaded images stay.
"""

from __future__ import annotations

from pathlib import Path

from docker_host import Docker
from node_image import BuildPaths, binaries, go_env, kind_module_dir

CONTAINERD_VERSION = "v2.2.0"  # kind v0.31.0 images/base/Dockerfile CONTAINERD_VERSION
CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CONTAINERD_SET = binaries.BinarySet(
    name="containerd2",
    module=CONTAINERD_MODULE,
    version=CONTAINERD_VERSION,
    packages=tuple(
        f"{CONTAINERD_MODULE}/cmd/{cmd}" for cmd in ("containerd", "ctr", "containerd-shim-runc-v2")
    ),
    local_replace_version=CONTAINERD_VERSION,
    # what `containerd --version` and the User-Agent of its registry requests say, as a release
    ldflags=(f"-X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}",),
)
# Where kind's base image installs them (the node's containerd.service starts this path).
NODE_BIN = "/usr/local/bin"
KIND_CONFIG = "images/base/files/etc/containerd/config.toml"


def containerd2_binaries(tier_cache: Path) -> dict[str, Path]:
    """containerd, ctr, containerd-shim-runc-v2 v2.2.0 (built once into the tier's cache)."""
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(CONTAINERD_SET, paths.go_root, env, go_version)
    return {name: paths.bin / name for name in CONTAINERD_SET.binaries}


def kind_containerd_config(tier_cache: Path) -> str:
    """kind v0.31.0's /etc/containerd/config.toml, as its module has it."""
    return (kind_module_dir(BuildPaths.under(tier_cache)) / KIND_CONFIG).read_text()


def swap_in_containerd2(docker: Docker, node: str, tier_cache: Path) -> None:
    """Worker `node` (booted) runs containerd v2.2.0 with kind's config, ready for the CRI."""
    for name, binary in containerd2_binaries(tier_cache).items():
        # the image has links into Debian's /usr/bin there: replace the link, not its target
        docker.run("exec", node, "rm", "-f", f"{NODE_BIN}/{name}")
        docker.run("cp", str(binary), f"{node}:{NODE_BIN}/{name}")
    config = kind_containerd_config(tier_cache)
    docker.run("exec", "-i", node, "sh", "-c", "cat > /etc/containerd/config.toml", input=config)
    docker.run("exec", node, "systemctl", "restart", "containerd")
    for _ in range(60):
        if docker.run("exec", node, "ctr", "version", check=False).returncode == 0:
            return
        docker.run("exec", node, "sleep", "0.5")
    raise RuntimeError(f"containerd {CONTAINERD_VERSION} did not answer in {node}")
