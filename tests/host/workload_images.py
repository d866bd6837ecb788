"""The images a tenant worker runs besides the node image's own: flannel (its daemon and its CNI
plugin installer) and the simulated-GPU agent's Python, built here (no registry is reachable),
and the flannel chart the program installs, rendered by a helm built here.

- flannel: `flanneld` and `install-conf` from `github.com/flannel-io/flannel@v0.28.9`, built as
  its Makefile builds dist/flanneld (cgo: the UDP backend is C on amd64; static; the version
  stamped), at /opt/bin as its images/Dockerfile lays them out, with Debian's iptables (legacy
  and nft behind node_image's wrapper, as upstream's iptables-wrapper picks) and nftables from
  the node image's root file system. Two gaps of the module proxy: the Tencent Cloud VPC SDK
  (the tencent-vpc backend's) is not served, a stub stands in (that backend then fails; the lab
  runs vxlan), and `go mod tidy` runs with -e (etcd's test module, a test-only import, is not
  served either).
- the chart's install-cni-plugin image (flannel-io/cni-plugin, a module the proxy does not
  serve): the same `flannel` CNI plugin from containernetworking/plugins v0.9.1, the last
  release that carried plugins/meta/flannel, at /flannel, with Debian's coreutils for the init
  container's `cp -f /flannel /opt/cni/bin/flannel`; named as the chart names its image.
- the agent: Debian's python3 and python-is-python3 (the manifest runs `python -m gpu_agent`),
  from a minbase root file system of their own in the tier's cache.

Each image is a docker archive (node_image.docker_archive). `load_images` imports archives into
a running node container's containerd as the node image's boot imports its own, and names each
also `<repository>@sha256:<manifest digest>`: containerd's CRI finds an image only by a name it
has, and a digest-pinned reference (`repo:tag@sha256:…`) is looked up as `repo@sha256:…`.
`containerd_digest` computes that manifest digest from the archive's bytes, as containerd's
importer writes the manifest (deterministic: so are the archives).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import node_image
import yaml
from docker_host import SESSION_ENV, Docker, tier_cache
from node_image import (
    DEBIAN_MIRROR,
    BuildPaths,
    Timings,
    _digest,
    _run,
    _tar_add,
    add_packages,
    binaries,  # tests/real/binaries.py, on the path node_image sets
    debian_rootfs,
    docker_archive,
    go_env,
    image_file_name,
)

FLANNEL_VERSION = "v0.28.9"
FLANNEL_MODULE = "github.com/flannel-io/flannel"
CNI_PLUGINS_MODULE = "github.com/containernetworking/plugins"
CNI_PLUGINS_VERSION = "v0.9.1"  # the last release with plugins/meta/flannel
HELM_MODULE = "helm.sh/helm/v3"
# The Helm library pulumi-kubernetes' provider embeds (provider/v4 at f47bc2d6f199, its go.mod),
# so charts render here as the program's Releases render them.
HELM_VERSION = "v3.18.6"
HELM_K8S_MINOR = "33"  # helm v3.18.6 requires k8s.io/client-go v0.33.3: its Makefile's 1.33
LAYOUT = "1"  # bump when the image layouts below change without their inputs changing

FLANNEL_SET = binaries.BinarySet(
    name="flannel",
    module=FLANNEL_MODULE,
    version=FLANNEL_VERSION,
    packages=(FLANNEL_MODULE, f"{FLANNEL_MODULE}/cmd/install_conf"),
    local_replace_version=FLANNEL_VERSION,
    ldflags=(f"-X {FLANNEL_MODULE}/pkg/version.Version={FLANNEL_VERSION}", "-extldflags=-static"),
)
FLANNEL_CNI_SET = binaries.BinarySet(
    name="flannel-cni-plugin",
    module=CNI_PLUGINS_MODULE,
    version=CNI_PLUGINS_VERSION,
    packages=(f"{CNI_PLUGINS_MODULE}/plugins/meta/flannel",),
    local_replace_version=CNI_PLUGINS_VERSION,
    ldflags=(f"-X {CNI_PLUGINS_MODULE}/pkg/utils/buildversion.BuildVersion={CNI_PLUGINS_VERSION}",),
)
HELM_SET = binaries.BinarySet(
    name="helm",
    module=HELM_MODULE,
    version=HELM_VERSION,
    packages=(f"{HELM_MODULE}/cmd/helm",),
    local_replace_version=HELM_VERSION,
    ldflags=(
        f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}",
        f"-X {HELM_MODULE}/pkg/chartutil.k8sVersionMajor=1",
        f"-X {HELM_MODULE}/pkg/chartutil.k8sVersionMinor={HELM_K8S_MINOR}",
        f"-X {HELM_MODULE}/pkg/lint/rules.k8sVersionMajor=1",
        f"-X {HELM_MODULE}/pkg/lint/rules.k8sVersionMinor={HELM_K8S_MINOR}",
    ),
)

# flannel's pkg/backend/tencentvpc imports this module, which the proxy does not serve; the
# stub has the names that backend uses, and every call fails.
TENCENT_VPC_MODULE = "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc"
TENCENT_VPC_STUB = """\
// Package v20170312 stands in for the Tencent Cloud VPC SDK, which the Go module proxy does
// not serve: flannel's tencent-vpc backend compiles against it and fails at its first call.
package v20170312

import "errors"

var errUnavailable = errors.New("tencent-vpc backend: the Tencent Cloud SDK is not in this build")

type Filter struct {
	Name   *string
	Values []*string
}

type Route struct {
	RouteId              *uint64
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteType            *string
	Enabled              *bool
}

type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

type DescribeRouteTablesRequest struct{ Filters []*Filter }

type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type DeleteRoutesResponse struct{}

type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

type CreateRoutesResponse struct{}

type Client struct{}

func NewClientWithSecretId(id, key, region string) (*Client, error) { return &Client{}, nil }

func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest {
	return &DescribeRouteTablesRequest{}
}

func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

func (c *Client) DescribeRouteTables(
	*DescribeRouteTablesRequest,
) (*DescribeRouteTablesResponse, error) {
	return nil, errUnavailable
}

func (c *Client) DeleteRoutes(*DeleteRoutesRequest) (*DeleteRoutesResponse, error) {
	return nil, errUnavailable
}

func (c *Client) CreateRoutes(*CreateRoutesRequest) (*CreateRoutesResponse, error) {
	return nil, errUnavailable
}
"""
STUBS: dict[str, dict[str, str]] = {
    FLANNEL_SET.name: {
        TENCENT_VPC_MODULE: {
            "go.mod": f"module {TENCENT_VPC_MODULE}\n\ngo 1.21\n",
            "v20170312/stub.go": TENCENT_VPC_STUB,
        }
    }
}
# Sets that need cgo (the others build as the real tier's do, CGO_ENABLED=0).
CGO_SETS = frozenset({FLANNEL_SET.name})
GO_SETS = (FLANNEL_SET, FLANNEL_CNI_SET, HELM_SET)


def workload_paths(tier_cache_dir: Path) -> BuildPaths:
    """`<tier cache>/workload-images` (node_image's prune leaves it alone)."""
    root = tier_cache_dir / "workload-images"
    return BuildPaths(root, root / "go")


def set_root(tier_cache_dir: Path, name: str) -> Path:
    """Each set its own bin/: flannel's daemon and its CNI plugin are both called `flannel`."""
    return workload_paths(tier_cache_dir).go_root / name


def write_stubs(root: Path, stubs: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The stub modules under `root`; the wrapper's replace lines for them."""
    lines = []
    for module, files in stubs.items():
        directory = root / "stubs" / module.replace("/", "_")
        for name, text in files.items():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            (directory / name).write_text(text)
        lines.append(f"{module} => {directory}")
    return lines


def build_set(
    binary_set: binaries.BinarySet,
    root: Path,
    env: dict[str, str],
    go_version: str,
    stubs: Mapping[str, Mapping[str, str]],
) -> None:
    """binaries.build_set, plus stub modules for what the proxy does not serve and a
    `go mod tidy -e` (a dependency's test-only imports may be unserved too)."""
    if not stubs:
        binaries.build_set(binary_set, root, env, go_version)
        return
    bin_dir, src = root / "bin", root / "src" / binary_set.name
    stamp = root / "stamps" / binary_set.name
    stubs_json = json.dumps(stubs, sort_keys=True)
    digest = _digest(binaries.spec_digest(binary_set, go_version), stubs_json)
    present = all((bin_dir / name).exists() for name in binary_set.binaries)
    if present and stamp.exists() and stamp.read_text() == digest:
        return
    src.mkdir(parents=True, exist_ok=True)
    go_mod = binaries._dependency_go_mod(binary_set, src, env)
    replaces = binaries.wrapper_replaces(
        go_mod.get("Replace") or [], binary_set.local_replace_version
    )
    replaces += write_stubs(root, stubs)
    (src / "go.mod").write_text(binaries.wrapper_go_mod(binary_set, go_mod["Go"], replaces))
    (src / "tools.go").write_text(binaries.wrapper_tools_go(binary_set))
    _run(["go", "mod", "tidy", "-e"], cwd=src, env=env)
    bin_dir.mkdir(parents=True, exist_ok=True)
    for package in binary_set.packages:
        output = bin_dir / binary_set.binary_name(package)
        args = ["go", "build", "-v", "-trimpath", "-o", str(output)]
        args += ["-ldflags", " ".join(["-s", "-w", *binary_set.ldflags]), package]
        binaries._stream_build(args, src, env, f"{binary_set.name}/{output.name}")
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)


def build_programs(tier_cache_dir: Path) -> dict[str, Path]:
    """`<set>/<binary>` -> path: flannel/flannel (flanneld), flannel/install_conf,
    flannel-cni-plugin/flannel, helm/helm."""
    env, go_version = go_env()
    found: dict[str, Path] = {}
    for binary_set in GO_SETS:
        root = set_root(tier_cache_dir, binary_set.name)
        set_env = {**env, "CGO_ENABLED": "1"} if binary_set.name in CGO_SETS else env
        build_set(binary_set, root, set_env, go_version, STUBS.get(binary_set.name, {}))
        for name in binary_set.binaries:
            found[f"{binary_set.name}/{name}"] = root / "bin" / name
    return found


def helm_binary(tier_cache_dir: Path) -> Path:
    env, go_version = go_env()
    root = set_root(tier_cache_dir, HELM_SET.name)
    binaries.build_set(HELM_SET, root, env, go_version)
    return root / "bin" / "helm"


# --- the chart


def flannel_module_dir(tier_cache_dir: Path) -> Path:
    """flannel's module as its wrapper resolved it (built first if it is not)."""
    root = set_root(tier_cache_dir, FLANNEL_SET.name)
    src = root / "src" / FLANNEL_SET.name
    if not (src / "go.mod").exists():
        build_programs(tier_cache_dir)
    env, _ = go_env()
    listed = _run(["go", "list", "-m", "-f", "{{.Dir}}", FLANNEL_MODULE], cwd=src, env=env)
    return Path(listed.stdout.strip())


def flannel_chart_dir(tier_cache_dir: Path | None = None) -> Path:
    """chart/kube-flannel of the flannel module (the chart its Helm repository serves as
    `flannel` at the same version), copied into the tier's cache."""
    cache = tier_cache_dir or tier_cache(SESSION_ENV)
    target = workload_paths(cache).root / "charts" / f"flannel-{FLANNEL_VERSION}"
    if not (target / "Chart.yaml").exists():
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(flannel_module_dir(cache) / "chart/kube-flannel", partial)
        for item in [partial, *partial.rglob("*")]:  # the module cache's files are read-only
            item.chmod(0o755 if item.is_dir() else 0o644)
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def chart_values(tier_cache_dir: Path | None = None) -> dict[str, Any]:
    return yaml.safe_load((flannel_chart_dir(tier_cache_dir) / "values.yaml").read_text())


def flannel_image_names(values: Mapping[str, Any]) -> tuple[str, str]:
    """(flanneld's image, the CNI plugin installer's) as the chart's daemonset.yaml names
    them: `<repository>:<tag>` of flannel.image and flannel.flannel_cni.image."""
    flannel = values["flannel"]
    daemon, cni = flannel["image"], flannel["flannel_cni"]["image"]
    return f"{daemon['repository']}:{daemon['tag']}", f"{cni['repository']}:{cni['tag']}"


def render_flannel(
    values: Mapping[str, Any],
    namespace: str,
    tier_cache_dir: Path | None = None,
    release: str = "flannel",
) -> str:
    """`helm template` of the flannel chart with `values` (the program's flannel_values), as
    its Release (release name `flannel`, components/helm.py) would install it."""
    cache = tier_cache_dir or tier_cache(SESSION_ENV)
    chart = flannel_chart_dir(cache)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(dict(values), file)
        file.flush()
        with tempfile.TemporaryDirectory() as home:  # helm writes nothing of the user's
            rendered = _run(
                [str(helm_binary(cache)), "template", release, str(chart),
                 "--namespace", namespace, "--values", file.name],
                env={"HOME": home, "PATH": "/usr/bin:/bin"},
            )  # fmt: skip
    return rendered.stdout


# --- images

AGENT_PACKAGES = ("python3", "python-is-python3")
AGENT_IMAGE = "kamaji-hami-lab-host/gpu-agent-python:bookworm"
# What flanneld runs: iptables (and ip6tables) behind the wrapper; nft with enableNFTables.
FLANNEL_PACKAGES = ("iptables", "nftables", "dash")
CNI_INSTALLER_PACKAGES = ("coreutils",)
# The agent runs as nobody (its manifest's runAsUser).
PASSWD = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
GROUP = b"root:x:0:\nnogroup:x:65534:\n"


def _add_file(tar: tarfile.TarFile, relative: str, data: bytes, mode: int) -> None:
    """`relative`, its parent directories first."""
    parts = relative.split("/")
    names = set(tar.getnames())
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth])
        if directory not in names:
            _tar_add(tar, directory)
    _tar_add(tar, relative, data, mode)


def image_layer(
    files: Mapping[str, tuple[bytes, int]], rootfs: Path, packages: Sequence[str]
) -> bytes:
    """One layer: `files` (path -> content, mode) and Debian's `packages` from `rootfs`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("etc", "tmp", "var", "var/lib"):
            _tar_add(tar, directory, mode=0o1777 if directory == "tmp" else 0o755)
        _tar_add(tar, "etc/passwd", PASSWD, 0o644)
        _tar_add(tar, "etc/group", GROUP, 0o644)
        for relative, (data, mode) in sorted(files.items()):
            _add_file(tar, relative, data, mode)
        add_packages(tar, rootfs, packages)
    return buffer.getvalue()


def flannel_archives(
    programs: Mapping[str, Path], node_rootfs: Path, values: Mapping[str, Any]
) -> dict[str, bytes]:
    daemon, installer = flannel_image_names(values)
    flanneld = programs["flannel/flannel"].read_bytes()
    install_conf = programs["flannel/install_conf"].read_bytes()
    plugin = programs["flannel-cni-plugin/flannel"].read_bytes()
    daemon_layer = image_layer(
        {"opt/bin/flanneld": (flanneld, 0o755), "opt/bin/install-conf": (install_conf, 0o755)},
        node_rootfs,
        FLANNEL_PACKAGES,
    )
    installer_layer = image_layer({"flannel": (plugin, 0o755)}, node_rootfs, CNI_INSTALLER_PACKAGES)
    return {
        daemon: docker_archive(daemon, daemon_layer, ("/opt/bin/flanneld",)),
        installer: docker_archive(installer, installer_layer, ()),
    }


def agent_archive(agent_rootfs: Path) -> bytes:
    layer = image_layer({}, agent_rootfs, AGENT_PACKAGES)
    return docker_archive(AGENT_IMAGE, layer, ())


def archives_key(programs: Mapping[str, Path], *rootfs: Path) -> str:
    parts: list[bytes | str] = [LAYOUT, *(r.name for r in rootfs)]
    for name in sorted(programs):
        parts += [name, hashlib.sha256(programs[name].read_bytes()).hexdigest()]
    # the layouts are this file and node_image's layer helpers: any change, new archives
    sources = [Path(__file__).read_bytes(), Path(node_image.__file__).read_bytes()]
    return _digest(*parts, *sources)[:16]


def workload_archives(
    tier_cache_dir: Path, timings: Timings | None = None, mirror: str = DEBIAN_MIRROR
) -> dict[str, Path]:
    """Image reference -> docker archive: flannel's two images and the agent's Python, built
    once per key of their inputs under `<tier cache>/workload-images/images-<key>/`."""
    timings = timings or Timings()
    paths = workload_paths(tier_cache_dir)
    programs: dict[str, Path] = timings.step(  # type: ignore[assignment]
        "workload images: Go programs", lambda: build_programs(tier_cache_dir)
    )
    node_rootfs: Path = timings.step(  # type: ignore[assignment]
        "workload images: the node's root file system",
        lambda: debian_rootfs(BuildPaths.under(tier_cache_dir), mirror),
    )
    agent_rootfs: Path = timings.step(  # type: ignore[assignment]
        "workload images: the agent's root file system",
        lambda: debian_rootfs(paths, mirror, AGENT_PACKAGES),
    )
    values = chart_values(tier_cache_dir)
    key = archives_key(programs, node_rootfs, agent_rootfs)
    target = paths.root / f"images-{key}"
    names = [*flannel_image_names(values), AGENT_IMAGE]
    found = {name: target / image_file_name(name) for name in names}
    if all(path.exists() for path in found.values()):
        return found

    def assemble() -> None:
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        archives = {**flannel_archives(programs, node_rootfs, values)}
        archives[AGENT_IMAGE] = agent_archive(agent_rootfs)
        for name, archive in archives.items():
            (partial / image_file_name(name)).write_bytes(archive)
        for old in paths.root.glob("images-*"):  # earlier keys' archives
            if old != partial:
                shutil.rmtree(old, ignore_errors=True)
        partial.rename(target)

    timings.step("workload images: assemble", assemble)
    return found


# --- containerd

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
    }


def archive_references(archive: bytes) -> list[str]:
    """The RepoTags of a docker archive's images."""
    manifest = json.loads(_members(archive)["manifest.json"])
    return [tag for entry in manifest for tag in entry.get("RepoTags") or []]


def containerd_digest(archive: bytes) -> str:
    """The manifest digest containerd (1.6, images/archive/importer.go) records for a
    one-image docker archive with uncompressed layers: the schema 2 manifest it writes,
    Go's json.Marshal of it (fields in struct order, no spaces)."""
    members = _members(archive)
    (entry,) = json.loads(members["manifest.json"])
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": _descriptor(DOCKER_CONFIG, members[entry["Config"]]),
        "layers": [_descriptor(DOCKER_LAYER, members[layer]) for layer in entry["Layers"]],
    }
    encoded = json.dumps(manifest, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def normalized_name(reference: str) -> str:
    """A reference's repository as containerd names it (docker.io/library/ for short names)."""
    name = reference.split("@")[0]
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    first = repository.split("/")[0]
    if "/" not in repository:
        return f"docker.io/library/{repository}"
    if "." in first or ":" in first or first == "localhost":
        return repository
    return f"docker.io/{repository}"


def pinned_reference(archive: bytes) -> str:
    """`<repository>:<tag>@sha256:<digest>`: what a stack config names the image by
    (gpuAgentImage), found without a pull once load_images imported the archive."""
    (reference,) = archive_references(archive)
    return f"{reference}@{containerd_digest(archive)}"


# Imports one archive from stdin as the node image's IMPORT_SCRIPT does (the CRI snapshotter
# of containerd's config), then names it by digest as well: containerd's CRI resolves a
# reference only by an image of that exact name, and `ctr images import` names none by digest
# (its --digests names them `import-<date>@sha256:…`).
LOAD_SCRIPT = """\
set -eu
snapshotter=$(sed -n 's/^ *snapshotter = "\\(.*\\)"/\\1/p' /etc/containerd/config.toml | head -1)
ctr --namespace=k8s.io images import --all-platforms \\
  --snapshotter="${snapshotter:-overlayfs}" - >/dev/null
ctr --namespace=k8s.io images tag --force "$1" "$2" >/dev/null
"""


def load_images(docker: Docker, container: str, archives: Sequence[bytes]) -> list[str]:
    """Each archive into the containerd of a running node container (k8s.io namespace), under
    its tag and `<repository>@<digest>`; returns the pinned references."""
    pinned = []
    for archive in archives:
        (reference,) = archive_references(archive)
        by_digest = f"{normalized_name(reference)}@{containerd_digest(archive)}"
        tagged = normalized_name(reference) + ":" + reference.rsplit(":", 1)[1]
        result = subprocess.run(
            ["docker", "exec", "-i", container, "sh", "-c", LOAD_SCRIPT, "-", tagged, by_digest],
            input=archive,
            capture_output=True,
            env=docker.env(),
            timeout=300,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"loading {reference} into {container}: {result.stderr.decode()}")
        pinned.append(pinned_reference(archive))
    return pinned


def timed_archives(tier_cache_dir: Path) -> tuple[dict[str, Path], dict[str, float]]:
    timings = Timings()
    started = time.monotonic()
    found = workload_archives(tier_cache_dir, timings)
    timings.steps["workload images"] = time.monotonic() - started
    return found, timings.steps
