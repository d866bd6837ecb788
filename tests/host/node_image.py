"""The kind node image the host tier builds: kind's images/base layout on Debian bookworm.

No registry is reachable, so the tier builds what `kindest/node:v1.35.4` would be, from
- Debian's packages: the root file system (`debootstrap --variant=minbase`), with kind's
  base packages plus containerd, runc and the CNI plugins (bookworm: containerd 1.6.20, which
  kubelet v1.35 still drives: it falls back to its own cgroupDriver when the runtime lacks
  RuntimeConfig, see docs/upstream-facts/host-tier.md);
- kind's own module (`sigs.k8s.io/kind@v0.31.0`, images/base/files): entrypoint, systemd units,
  kubelet drop-ins, containerd config, /kind/bin scripts, laid out as its Dockerfile does;
- Go modules built by tests/real/binaries.py's machinery and Go caches: kind, kubelet, kubeadm,
  kubectl, kube-proxy and the control-plane programs of k8s.io/kubernetes v1.35.4, etcd,
  CoreDNS (github.com/coredns/coredns at kubeadm's version), and a pause;
- the images `kubeadm config images list` names and the sandbox image, each one layer holding
  its static binary (kube-proxy's also Debian's iptables, conntrack and dash from the node's
  root file system, with a wrapper that picks the node's iptables mode, as upstream's
  distroless-iptables does), written as docker-archive tars to /kind/images and imported into
  the node's containerd at boot, as `kind load` imports (kind's own build imports at build
  time; the names are the same).

Two adaptations for this machine class, both in the image, none in the program: kubelet v1.35
refuses cgroup v1 unless told (`--fail-cgroupv1=false` in /etc/default/kubelet, which kind's
10-kubeadm.conf passes on), and where the node's bounding set lacks CAP_SYS_RESOURCE containerd
clamps pod OOM scores (`restrict_oom_score_adj`, as kind does for rootless nodes). As in
kindest/node, /opt/cni/bin holds host-local, loopback, ptp and portmap and /etc/cni/net.d is
empty; kind's default CNI manifest, kindnetd upstream, is here a DaemonSet of preloaded images
that writes a ptp + host-local conflist over the cluster's pod subnet.

Everything is cached by a key of its inputs under `<tier cache>/node-image/`; `build_node_image`
returns the local tag, `publish` the digest-pinned name a site mirror would give it (a
registry on loopback, distribution's, started for the push only).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from docker_host import Docker, install_if_missing

REAL_TIER = Path(__file__).resolve().parents[1] / "real"
if str(REAL_TIER) not in sys.path:
    sys.path.insert(0, str(REAL_TIER))

import binaries  # noqa: E402  (tests/real/binaries.py: the Go build machinery and its caches)

from labconfig.node_images import KIND_RELEASE as LAB_KIND_RELEASE  # noqa: E402

KIND_VERSION = "v0.31.0"
KIND_MODULE = "sigs.k8s.io/kind"
K8S_VERSION = binaries.K8S_VERSION
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
LAYOUT = "1"  # bump when the layout below changes without its inputs changing
# kind's images/base Dockerfile (v0.31.0) package list, minus what only rootless, NFS/iSCSI
# or the build itself needs, plus what kind builds from source there (containerd, runc, CNI).
PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "conntrack", "iptables", "nftables", "iproute2",
    "ethtool", "util-linux", "mount", "kmod", "libseccomp2", "bash", "ca-certificates",
    "procps", "jq", "containerd", "runc", "containernetworking-plugins",
)  # fmt: skip
# kubeadm v1.35.4's images (cmd/kubeadm/app/constants/constants.go) and kind's sandbox image.
REGISTRY = "registry.k8s.io"
ETCD_IMAGE_TAG = "3.6.6-0"  # kubeadm's DefaultEtcdVersion; the binary is the tier's etcd v3.6.5
COREDNS_VERSION = "v1.13.1"  # kubeadm's CoreDNSVersion, built from its own Go module


@dataclass(frozen=True)
class ImageSpec:
    """A one-layer image: `binary` (a file the build produced) at /usr/local/bin/<name>."""

    name: str  # e.g. registry.k8s.io/kube-apiserver:v1.35.4
    binary: str  # name under the build's bin directories
    entrypoint: tuple[str, ...] = ()
    # Debian packages (with what they depend on) copied from the node's root file system
    # into the same layer, for programs the binary runs (kube-proxy: iptables).
    packages: tuple[str, ...] = ()


# kube-proxy's image upstream is distroless-iptables: iptables (legacy and nft), conntrack, and
# a wrapper that picks the mode the node uses. Here: Debian's packages, and dash for the wrapper.
KUBE_PROXY_PACKAGES = ("iptables", "conntrack", "dash")
# What dash depends on only for its maintainer scripts (a package manager has no use here).
NOT_IN_IMAGES = ("dpkg", "debianutils")


def kube_proxy_image(k8s_version: str = K8S_VERSION) -> str:
    return f"{REGISTRY}/kube-proxy:{k8s_version}"


def kubeadm_images(k8s_version: str = K8S_VERSION) -> tuple[ImageSpec, ...]:
    """The images `kubeadm config images list` names (kubeadm lists pause 3.10.1; the node
    runs kind's sandbox image instead, preloaded_images adds it)."""
    control_plane = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    return (
        *(ImageSpec(f"{REGISTRY}/{cmd}:{k8s_version}", cmd) for cmd in control_plane),
        ImageSpec(kube_proxy_image(k8s_version), "kube-proxy", (), KUBE_PROXY_PACKAGES),
        ImageSpec(f"{REGISTRY}/etcd:{ETCD_IMAGE_TAG}", "etcd"),
        # kubeadm's Deployment gives only args (-conf ...): the entrypoint is the program
        ImageSpec(
            f"{REGISTRY}/coredns/coredns:{COREDNS_VERSION}", "coredns", ("/usr/local/bin/coredns",)
        ),
    )


# The node's programs (/usr/bin, where kind's kubelet.service expects them).
NODE_BINARIES = ("kubelet", "kubeadm", "kubectl")

# A set of its own (not in binaries.BINARY_SETS: the real tier does not need it); the same
# module and version as the real tier's kubernetes set, so Go's build cache shares the work.
NODE_SET = binaries.BinarySet(
    name="host-node",
    module="k8s.io/kubernetes",
    version=K8S_VERSION,
    packages=tuple(
        f"k8s.io/kubernetes/cmd/{cmd}"
        for cmd in (
            "kubelet",
            "kubeadm",
            "kubectl",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kube-proxy",
        )
    ),
    local_replace_version="v0." + K8S_VERSION.split(".", 1)[1],
    ldflags=binaries._k8s_ldflags(K8S_VERSION),
)
ETCD_SET = next(s for s in binaries.BINARY_SETS if s.name == "etcd")
COREDNS_SET = binaries.BinarySet(
    name="coredns",
    module="github.com/coredns/coredns",
    version=COREDNS_VERSION,
    packages=("github.com/coredns/coredns",),
    local_replace_version=COREDNS_VERSION,
)

# The sandbox's process: waits for a signal, reaps nothing (the pause of k/k is C; this is
# the same behaviour from Go's standard library alone).
PAUSE_GO = """\
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
}
"""

# kubelet v1.35 refuses cgroup v1 by default (FailCgroupV1); kind's default file + the flag.
KUBELET_DEFAULTS = (
    "KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service --fail-cgroupv1=false\n"
)
# Lowering a process's oom_score_adj takes CAP_SYS_RESOURCE; where the node's bounding set
# lacks it (this host: tests/host/bounded_runc.py removes it), runc fails every pod sandbox
# (kubelet asks -998) with "can't get final child's PID from pipe". containerd then clamps
# the score to its own, as kind's entrypoint has it do for rootless nodes.
RESTRICT_OOM_SCRIPT = """\
#!/bin/bash
set -euo pipefail
bounding=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if (( (0x$bounding >> 24 & 1) == 0 )); then
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \\
    /etc/containerd/config.toml
fi
"""
CONTAINERD_DROP_IN = """\
[Service]
ExecStartPre=/kind/bin/restrict-oom-score-adj.sh
"""
# Imports /kind/images/*.tar into containerd's k8s.io namespace, as `kind load` does.
IMPORT_SERVICE = """\
[Unit]
Description=Import the node image's preloaded images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/import-images.sh

[Install]
WantedBy=multi-user.target
"""
# kindest/node's containerd 2 reads registry host configs from /etc/containerd/certs.d when its
# config names none (fact containerd-default-config-path); Debian's containerd 1.6 reads them
# only when told, so the tier's node image says so, behaving as kindest/node does.
CERTS_D_CONFIG = """
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
"""
IMPORT_SCRIPT = """\
#!/bin/bash
set -euo pipefail
for _ in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
snapshotter=$(sed -n 's/^ *snapshotter = "\\(.*\\)"/\\1/p' /etc/containerd/config.toml | head -1)
for image in /kind/images/*.tar; do
  ctr --namespace=k8s.io images import --all-platforms \\
    --snapshotter="${snapshotter:-overlayfs}" "$image"
done
"""
# As kindest/node: host-local, loopback, ptp and portmap in /opt/cni/bin (containerd's default
# bin_dir: a CNI's installer, flannel's too, copies its plugin there) and no CNI config in
# /etc/cni/net.d, so a node is Ready only once a CNI wrote one. Debian's package has them in
# /usr/lib/cni.
CNI_PLUGINS = ("host-local", "loopback", "ptp", "portmap")
CNI_BIN_DIR = "opt/cni/bin"
DEBIAN_CNI_DIR = "usr/lib/cni"
CNI_CONFLIST_NAME = "10-host-tier.conflist"
# The conflist the management cluster's CNI writes: ptp + host-local over kind's pod subnet
# (one node: its pods get addresses from the whole subnet, masqueraded out).
CNI_CONFLIST = {
    "cniVersion": "0.4.0",
    "name": "host-tier",
    "plugins": [
        {
            "type": "ptp",
            "ipMasq": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "{{ .PodSubnet }}"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
            "mtu": 1500,
        },
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
DEFAULT_CNI_NAME = "host-tier-cni"
# What kind applies as the default CNI (kindnet upstream: a DaemonSet on the host's network,
# tolerating every taint, that writes the conflist into the host's /etc/cni/net.d). Here
# from preloaded images only: kube-proxy's has dash, whose printf writes the file in one
# write(2); the sandbox image's pause keeps the pod running. kind templates the manifest
# ({{ .PodSubnet }}) when its first line says so.
DEFAULT_CNI_WRITE = "printf '%s\\n' \"$CNI_CONFLIST\" > /host/etc/cni/net.d/" + CNI_CONFLIST_NAME


def default_cni_manifest(writer_image: str, pause_image: str) -> str:
    conflist = json.dumps(CNI_CONFLIST, separators=(",", ":"))
    return f"""\
# would you kindly template this file
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {DEFAULT_CNI_NAME}
  namespace: kube-system
  labels:
    app: {DEFAULT_CNI_NAME}
spec:
  selector:
    matchLabels:
      app: {DEFAULT_CNI_NAME}
  template:
    metadata:
      labels:
        app: {DEFAULT_CNI_NAME}
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations:
      - operator: Exists
      initContainers:
      - name: write-cni-config
        image: {writer_image}
        command: ["/bin/sh", "-c", {json.dumps(DEFAULT_CNI_WRITE)}]
        env:
        - name: CNI_CONFLIST
          value: {json.dumps(conflist)}
        volumeMounts:
        - name: cni-cfg
          mountPath: /host/etc/cni/net.d
      containers:
      - name: pause
        image: {pause_image}
        resources:
          requests:
            cpu: 10m
            memory: 8Mi
      volumes:
      - name: cni-cfg
        hostPath:
          path: /etc/cni/net.d
          type: DirectoryOrCreate
"""


def _run(argv: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)[:200]} exited {result.returncode}:\n"
            f"{result.stdout[-2000:]}{result.stderr[-3000:]}"
        )
    return result


def _digest(*parts: bytes | str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode() if isinstance(part, str) else part)
        hasher.update(b"\0")
    return hasher.hexdigest()


@dataclass
class Timings:
    """What each step took this run (cached steps take next to nothing)."""

    steps: dict[str, float] = field(default_factory=dict)

    def step(self, name: str, fn: Callable[[], object]) -> object:
        started = time.monotonic()
        try:
            return fn()
        finally:
            self.steps[name] = time.monotonic() - started


KIND_SET = binaries.BinarySet(
    name="kind",
    module=KIND_MODULE,
    version=KIND_VERSION,
    packages=(KIND_MODULE,),
    local_replace_version=KIND_VERSION,
)
# The kind release the program asks for (the preflight's), which creates and deletes the
# management cluster (management_cluster.run_script puts it first on PATH); the image's layout and
# its own build stay on KIND_VERSION's files, so the cached node image is not rebuilt for it.
LAB_KIND_SET = binaries.BinarySet(
    name=f"kind-{LAB_KIND_RELEASE}",
    module=KIND_MODULE,
    version=LAB_KIND_RELEASE,
    packages=(KIND_MODULE,),
    local_replace_version=LAB_KIND_RELEASE,
    bin_subdir=LAB_KIND_RELEASE,
)


@dataclass(frozen=True)
class BuildPaths:
    """Where the node image's pieces live: `under(<the tier's cache>)`."""

    root: Path  # <tier cache>/node-image
    go_root: Path  # binaries.build_set's root for the tier's own sets (bin/, src/, stamps/)

    @classmethod
    def under(cls, tier_cache: Path) -> BuildPaths:
        root = tier_cache / "node-image"
        return cls(root, root / "go")

    @property
    def bin(self) -> Path:
        return self.go_root / "bin"

    def rootfs(self, key: str) -> Path:
        return self.root / f"rootfs-{key}"

    def images(self) -> Path:
        return self.root / "images"


def go_env() -> tuple[dict[str, str], str]:
    """The real tier's Go environment (its module and build caches) and Go's version."""
    if shutil.which("go") is None:
        raise RuntimeError(binaries.GO_MISSING)
    env = binaries.go_environment(binaries.cache_root())
    return env, _run(["go", "env", "GOVERSION"], env=env).stdout.strip()


def build_programs(paths: BuildPaths) -> dict[str, Path]:
    """kind, the Kubernetes programs, etcd and pause: name -> binary."""
    env, go_version = go_env()
    for binary_set in (KIND_SET, NODE_SET, COREDNS_SET):
        binaries.build_set(binary_set, paths.go_root, env, go_version)
    binaries.build_set(ETCD_SET, binaries.cache_root(), env, go_version)
    standard_library_program(paths, "pause", PAUSE_GO)
    built = (*KIND_SET.binaries, *NODE_SET.binaries, *COREDNS_SET.binaries, "pause")
    found = {name: paths.bin / name for name in built}
    found["etcd"] = binaries.cache_root() / "bin" / "etcd"
    return found


def standard_library_program(paths: BuildPaths, name: str, source: str) -> Path:
    """bin/<name> built from one main.go that imports the standard library only (rebuilt when
    the source changes)."""
    binary = paths.bin / name
    src = paths.root / f"{name}-src"
    if binary.exists() and (src / "main.go").exists() and (src / "main.go").read_text() == source:
        return binary
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text(f"module kamaji-hami-lab.local/host/{name}\n\ngo 1.24\n")
    (src / "main.go").write_text(source)
    env, _ = go_env()
    argv = ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."]
    _run(argv, cwd=src, env=env)
    return binary


def lab_kind_dir(paths: BuildPaths) -> Path:
    """The directory of the lab's kind (LAB_KIND_SET), built on first use."""
    env, go_version = go_env()
    binaries.build_set(LAB_KIND_SET, paths.go_root, env, go_version)
    return paths.bin / LAB_KIND_RELEASE


def kind_module_dir(paths: BuildPaths) -> Path:
    env, _ = go_env()
    src = paths.go_root / "src" / KIND_SET.name
    listed = _run(["go", "list", "-m", "-f", "{{.Dir}}", KIND_MODULE], cwd=src, env=env)
    return Path(listed.stdout.strip())


def _remove_tree(path: Path) -> None:
    """rm -rf of a build directory, after unmounting what debootstrap may have left mounted
    there (proc, sys): never into a mounted file system."""
    prefix = str(path.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    if path.exists():
        _run(["rm", "-rf", "--one-file-system", str(path)])


def debian_rootfs(
    paths: BuildPaths, mirror: str = DEBIAN_MIRROR, packages: Sequence[str] = PACKAGES
) -> Path:
    """Debian's minbase with `packages`, once per (suite, mirror, packages)."""
    key = _digest(DEBIAN_SUITE, mirror, *packages)[:16]
    target = paths.rootfs(key)
    if (target / ".complete").exists():
        return target
    partial = target.with_name(target.name + ".partial")
    _remove_tree(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    install_if_missing("debootstrap", "debootstrap")  # a fresh machine (CI) has none
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            DEBIAN_SUITE,
            str(partial),
            mirror,
        ],
        timeout=1800,
    )
    # what kind's clean-install leaves out of an image: apt's lists and caches
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for item in (partial / cache).glob("*"):
            if item.is_file():
                item.unlink()
    (partial / ".complete").write_text(key)
    _remove_tree(target)
    partial.rename(target)
    return target


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes | None = None, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = mode, 0
    if data is None:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
    else:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def package_closure(status: str, wanted: Sequence[str]) -> list[str]:
    """`wanted` and every package they (pre-)depend on, from dpkg's status file."""
    depends: dict[str, list[str]] = {}
    for stanza in status.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if "Package" not in fields:
            continue
        needed = ", ".join(f for f in (fields.get("Pre-Depends"), fields.get("Depends")) if f)
        # the first alternative of each dependency; versions and architectures dropped
        depends[fields["Package"]] = [
            d.split("|")[0].split("(")[0].split(":")[0].strip() for d in needed.split(",") if d
        ]
    found: list[str] = []
    todo = list(wanted)
    while todo:
        package = todo.pop()
        if package in found or package not in depends or package in NOT_IN_IMAGES:
            continue
        found.append(package)
        todo += depends[package]
    return sorted(found)


def package_files(root: Path, packages: Sequence[str]) -> list[str]:
    """The paths dpkg lists for `packages` (files and links, not directories), each where it
    really is in `root` (merged /usr: dpkg's /bin/dash is usr/bin/dash)."""
    info = root / "var/lib/dpkg/info"
    real_root = root.resolve()
    paths: set[str] = set()
    for package in packages:
        listed = next(p for p in (info / f"{package}.list", info / f"{package}:amd64.list")
                      if p.exists())  # fmt: skip
        for line in listed.read_text().splitlines():
            path = root / line.lstrip("/")
            if line.strip("/") and (path.is_symlink() or path.is_file()):
                parent = path.parent.resolve().relative_to(real_root)
                paths.add(str(parent / path.name))
    return sorted(paths)


# kube-proxy runs iptables-restore & co. in the node's network namespace: the wrapper uses the
# mode whose tables hold the kubelet's hint chains (kubelet creates KUBE-IPTABLES-HINT and
# KUBE-KUBELET-CANARY in mangle), as kubernetes-sigs/iptables-wrappers does; nft otherwise.
IPTABLES_WRAPPER = """\
#!/bin/sh
command=${0##*/}
case $command in ip6*) save=ip6tables-save ;; *) save=iptables-save ;; esac
mode=nft
for candidate in nft legacy; do
  case $(xtables-$candidate-multi $save -t mangle 2>/dev/null) in
  *KUBE-IPTABLES-HINT* | *KUBE-KUBELET-CANARY*) mode=$candidate; break ;;
  esac
done
exec xtables-$mode-multi "$command" "$@"
"""
IPTABLES_COMMANDS = tuple(
    f"{family}{suffix}"
    for family in ("iptables", "ip6tables")
    for suffix in ("", "-save", "-restore")
)


def _tar_file(tar: tarfile.TarFile, root: Path, relative: str) -> None:
    """A file or symlink of `root` at `relative`, its parent directories first."""
    parts = relative.split("/")
    for depth in range(1, len(parts)):
        directory = "/".join(parts[:depth])
        if directory not in tar.getnames():
            _tar_add(tar, directory)
    path = root / relative
    if path.is_symlink():
        info = tarfile.TarInfo(relative)
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        tar.addfile(info)
    else:
        _tar_add(tar, relative, path.read_bytes(), path.stat().st_mode & 0o7777)


def binary_layer(
    name: str, content: bytes, rootfs: Path | None = None, packages: Sequence[str] = ()
) -> bytes:
    """The one layer of a binary's image: /usr/local/bin/<name> (and /<name> for pause), with
    the files of `packages` from `rootfs` (and the iptables wrapper when iptables is there)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("etc", "tmp", "usr", "usr/local", "usr/local/bin", "var", "var/lib"):
            _tar_add(tar, directory, mode=0o1777 if directory == "tmp" else 0o755)
        _tar_add(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        _tar_add(tar, "etc/group", b"root:x:0:\n", 0o644)
        _tar_add(tar, f"usr/local/bin/{name}", content)
        if name == "pause":
            _tar_add(tar, "pause", content)
        if packages:
            assert rootfs is not None, "packages come from the node's root file system"
            add_packages(tar, rootfs, packages)
    return buffer.getvalue()


def add_packages(tar: tarfile.TarFile, rootfs: Path, packages: Sequence[str]) -> None:
    """The files of `packages` and what they depend on, from `rootfs` (and the iptables
    wrapper in place of the alternatives' links when iptables is among them)."""
    tops = [
        t for t in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") if (rootfs / t).is_symlink()
    ]
    for top in tops:  # merged /usr's links: /bin/sh must resolve
        _tar_file(tar, rootfs, top)
    status = (rootfs / "var/lib/dpkg/status").read_text()
    files = package_files(rootfs, package_closure(status, packages))
    wrapped = {f"usr/sbin/{c}" for c in IPTABLES_COMMANDS} if "iptables" in packages else set()
    for relative in files:
        # the wrapper instead of the alternatives' links into /etc; the links above once
        # (dpkg lists /bin and /lib64 too; `docker load` refuses a layer with a path twice)
        if relative not in wrapped and relative not in tops:
            _tar_file(tar, rootfs, relative)
    for relative in sorted(wrapped):
        _tar_add(tar, relative, IPTABLES_WRAPPER.encode())


def docker_archive(reference: str, layer: bytes, entrypoint: Sequence[str]) -> bytes:
    """A `docker save` archive (what `ctr images import` and `docker load` read) of one layer."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": list(entrypoint) or None,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [reference], "Layers": [layer_name]}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _tar_add(tar, config_name, config_bytes, 0o644)
        _tar_add(tar, layer_name.split("/")[0])
        _tar_add(tar, layer_name, layer, 0o644)
        _tar_add(tar, "manifest.json", json.dumps(manifest).encode(), 0o644)
    return buffer.getvalue()


def sandbox_image(containerd_config: str) -> str:
    """The `sandbox_image` of a containerd config (kind's findSandboxImage reads the same)."""
    for line in containerd_config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "sandbox_image":
            return value.strip().strip('"')
    raise ValueError("no sandbox_image in the containerd config")


def preloaded_images(containerd_config: str) -> tuple[ImageSpec, ...]:
    return (*kubeadm_images(), ImageSpec(sandbox_image(containerd_config), "pause", ("/pause",)))


def image_file_name(reference: str) -> str:
    return reference.replace("/", "_").replace(":", "_") + ".tar"


def _copy_tree(source: Path, target: Path, mode: int) -> None:
    """Files of `source` into `target` with `mode` (the Dockerfile's COPY --chmod)."""
    for item in sorted(source.rglob("*")):
        relative = item.relative_to(source)
        if item.is_dir():
            (target / relative).mkdir(parents=True, exist_ok=True)
            continue
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item, target / relative)
        (target / relative).chmod(mode)


def _symlink(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)


def apply_base_layout(root: Path, kind_files: Path) -> None:
    """kind's images/base Dockerfile (v0.31.0) on a Debian root file system, step by step."""
    _copy_tree(kind_files / "usr/local/bin", root / "usr/local/bin", 0o755)
    _copy_tree(kind_files / "kind", root / "kind", 0o644)
    _copy_tree(kind_files / "kind/bin", root / "kind/bin", 0o755)
    _copy_tree(kind_files / "etc", root / "etc", 0o644)
    # kind builds containerd into /usr/local/bin and runc into /usr/local/sbin: Debian's
    # packages put them in /usr/bin and /usr/sbin, where the units below look for them.
    _symlink(root / "usr/local/bin/containerd", "/usr/bin/containerd")
    _symlink(root / "usr/local/bin/ctr", "/usr/bin/ctr")
    _symlink(root / "usr/local/bin/containerd-shim-runc-v2", "/usr/bin/containerd-shim-runc-v2")
    _symlink(root / "usr/local/sbin/runc", "/usr/sbin/runc")
    # RUN find/rm of the wants kind removes
    for pattern in (
        "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service",
        "lib/systemd/system/multi-user.target.wants/*",
        "etc/systemd/system/*.wants/*",
        "lib/systemd/system/local-fs.target.wants/*",
        "lib/systemd/system/sockets.target.wants/*udev*",
        "lib/systemd/system/sockets.target.wants/*initctl*",
        "lib/systemd/system/basic.target.wants/*",
    ):
        for item in root.glob(pattern):
            if item.is_symlink() or item.is_file():
                item.unlink()
    journald = root / "etc/systemd/journald.conf"
    journald.write_text(journald.read_text() + "ReadKMsg=no\n")
    _symlink(root / "sbin/init", "/lib/systemd/systemd")
    # systemctl enable kubelet containerd undo-mount-hacks (their WantedBy), mask binfmt
    wants = root / "etc/systemd/system/multi-user.target.wants"
    for unit in ("kubelet.service", "containerd.service", "undo-mount-hacks.service"):
        _symlink(wants / unit, f"/etc/systemd/system/{unit}")
    _symlink(root / "etc/systemd/system/systemd-binfmt.service", "/dev/null")
    (root / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    # RUN ctr oci spec | jq (hook + no rlimits) > /etc/containerd/cri-base.json
    spec = json.loads(_run(["chroot", str(root), "/usr/bin/ctr", "oci", "spec"]).stdout)
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append(
        {"path": "/kind/bin/mount-product-files.sh"}
    )
    spec["process"].pop("rlimits", None)
    (root / "etc/containerd/cri-base.json").write_text(json.dumps(spec, indent=4) + "\n")
    (root / "etc/containerd/cri-base.json").chmod(0o644)


def apply_node_layout(
    root: Path, programs: Mapping[str, Path], k8s_version: str, images: Path
) -> None:
    """kind's node-image build (pkg/build/nodeimage/buildcontext.go) plus this host's needs."""
    for name in NODE_BINARIES:
        shutil.copyfile(programs[name], root / "usr/bin" / name)
        (root / "usr/bin" / name).chmod(0o755)
    (root / "kind/version").write_text(k8s_version)
    manifests = root / "kind/manifests"
    manifests.mkdir(parents=True, exist_ok=True)
    config = (root / "etc/containerd/config.toml").read_text() + CERTS_D_CONFIG
    (root / "etc/containerd/config.toml").write_text(config)
    (manifests / "default-cni.yaml").write_text(
        default_cni_manifest(kube_proxy_image(k8s_version), sandbox_image(config))
    )
    (root / "etc/cni/net.d").mkdir(parents=True, exist_ok=True)  # empty, as kind's
    bin_dir = root / CNI_BIN_DIR
    bin_dir.mkdir(parents=True, exist_ok=True)
    for plugin in CNI_PLUGINS:
        shutil.copy2(root / DEBIAN_CNI_DIR / plugin, bin_dir / plugin)
    (root / "etc/default/kubelet").write_text(KUBELET_DEFAULTS)
    shutil.copytree(images, root / "kind/images", dirs_exist_ok=True)
    (root / "kind/bin/import-images.sh").write_text(IMPORT_SCRIPT)
    (root / "kind/bin/import-images.sh").chmod(0o755)
    (root / "kind/bin/restrict-oom-score-adj.sh").write_text(RESTRICT_OOM_SCRIPT)
    (root / "kind/bin/restrict-oom-score-adj.sh").chmod(0o755)
    drop_ins = root / "etc/systemd/system/containerd.service.d"
    drop_ins.mkdir(parents=True, exist_ok=True)
    (drop_ins / "10-host-tier.conf").write_text(CONTAINERD_DROP_IN)
    unit = root / "etc/systemd/system/kind-import-images.service"
    unit.write_text(IMPORT_SERVICE)
    _symlink(
        root / "etc/systemd/system/multi-user.target.wants" / unit.name,
        f"/{unit.relative_to(root)}",
    )


def write_images(
    target: Path, specs: Sequence[ImageSpec], programs: Mapping[str, Path], rootfs: Path
) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        content = programs[spec.binary].read_bytes()
        layer = binary_layer(spec.binary, content, rootfs, spec.packages)
        archive = docker_archive(spec.name, layer, spec.entrypoint)
        (target / image_file_name(spec.name)).write_bytes(archive)


NODE_REPOSITORY = "kamaji-hami-lab-host/kindest-node"
# The last instructions of kind's images/base Dockerfile; `docker import` takes no STOPSIGNAL,
# so a one-step build from the imported file system sets them (metadata only, no container).
IMAGE_CONFIG = """\
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
"""


def import_rootfs(docker: Docker, root: Path, tag: str) -> None:
    """`root` as the image `tag`: `docker import` of its tar, then kind's image config."""
    rootfs_tag = f"{tag}-rootfs"
    _run(
        ["bash", "-o", "pipefail", "-c",
         'tar -C "$1" --numeric-owner -c . | docker import - "$2"', "-", str(root), rootfs_tag],
        env=docker.env(),
    )  # fmt: skip
    try:
        _run(
            ["docker", "build", "--tag", tag, "-"],
            input=f"FROM {rootfs_tag}\n{IMAGE_CONFIG}",
            env={**docker.env(), "DOCKER_BUILDKIT": "0"},
        )
    finally:
        docker.run("image", "rm", rootfs_tag, check=False)  # the tag only: the layer stays


def image_key(rootfs_key: str, kind_files: Path, programs: Mapping[str, Path]) -> str:
    parts: list[bytes | str] = [LAYOUT, KIND_VERSION, K8S_VERSION, rootfs_key]
    for item in sorted(kind_files.rglob("*")):
        if item.is_file():
            parts += [str(item.relative_to(kind_files)), item.read_bytes()]
    for name in sorted(programs):
        parts += [name, hashlib.sha256(programs[name].read_bytes()).hexdigest()]
    source = Path(__file__).read_bytes()  # the layout is this file: any change, a new image
    return _digest(*parts, source)[:16]


def build_node_image(
    docker: Docker, tier_cache: Path, timings: Timings | None = None, prune_old: bool = True
) -> str:
    """The local tag of the node image, built when no image of its key exists (and earlier
    ones pruned, unless `prune_old` is false: another session may still use them)."""
    timings = timings or Timings()
    paths = BuildPaths.under(tier_cache)
    programs = timings.step("node image: Go programs", lambda: build_programs(paths))
    base = timings.step("node image: Debian root file system", lambda: debian_rootfs(paths))
    kind_files = kind_module_dir(paths) / "images/base/files"
    key = image_key(base.name, kind_files, programs)  # type: ignore[union-attr, arg-type]
    tag = f"{NODE_REPOSITORY}:{K8S_VERSION}-{key}"
    if docker.run("image", "inspect", tag, check=False).returncode == 0:
        return tag

    def assemble() -> None:
        staging = paths.root / f"staging-{key}"
        _remove_tree(staging)
        _run(["cp", "-a", str(base), str(staging)])
        try:
            apply_base_layout(staging, kind_files)
            config = (staging / "etc/containerd/config.toml").read_text()
            images = paths.root / f"images-{key}"
            write_images(images, preloaded_images(config), programs, base)  # type: ignore[arg-type]
            apply_node_layout(staging, programs, K8S_VERSION, images)  # type: ignore[arg-type]
            (staging / ".complete").unlink(missing_ok=True)
            import_rootfs(docker, staging, tag)
            shutil.rmtree(images, ignore_errors=True)
        finally:
            _remove_tree(staging)

    timings.step("node image: assemble and import", assemble)
    if prune_old:
        prune(docker, paths, tag, base)
    return tag


def prune(docker: Docker, paths: BuildPaths, tag: str, base: Path) -> None:
    """Earlier node images and root file systems of this tier (other keys); an image a
    container still uses stays."""
    listed = docker.run("images", NODE_REPOSITORY, "--format", "{{.Repository}}:{{.Tag}}")
    for old in set(listed.stdout.split()) - {tag}:
        docker.run("image", "rm", old, check=False)
    for old in paths.root.glob("rootfs-*"):
        if old != base:
            _remove_tree(old)


# A site mirror on loopback: distribution's registry (a Go module) gives the built image the
# digest a mirror would; Docker treats 127.0.0.0/8 registries as insecure (plain HTTP) itself.
REGISTRY_MODULE = "github.com/distribution/distribution/v3"
REGISTRY_SET = binaries.BinarySet(
    name="registry",
    module=REGISTRY_MODULE,
    version="v3.1.2",
    packages=(f"{REGISTRY_MODULE}/cmd/registry",),
    local_replace_version="v3.1.2",
)
MIRROR = "127.0.0.1:5000"
MIRROR_REPOSITORY = "kindest/node"
REGISTRY_START_TIMEOUT_SECONDS = 30


def registry_config(storage: Path, address: str, level: str = "warn") -> str:
    return (
        "version: 0.1\n"
        f"log:\n  level: {level}\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n"
        f"http:\n  addr: {address}\n"
    )


def mirrored_reference(repo_digests: Sequence[str], mirror: str, version: str) -> str | None:
    """`<mirror>/kindest/node:<version>@sha256:…` from an image's RepoDigests, if pushed there."""
    prefix = f"{mirror}/{MIRROR_REPOSITORY}@"
    for entry in repo_digests:
        if entry.startswith(prefix):
            return f"{mirror}/{MIRROR_REPOSITORY}:{version}@{entry.removeprefix(prefix)}"
    return None


def _repo_digests(docker: Docker, image: str) -> list[str]:
    found = json.loads(docker.run("image", "inspect", image).stdout)[0]
    return list(found.get("RepoDigests") or [])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def registry_process(
    binary: Path, storage: Path, address: str, log: Path, level: str = "warn"
) -> Iterator[None]:
    config = log.with_suffix(".yml")
    config.write_text(registry_config(storage, address, level))
    with log.open("ab") as out:
        process = subprocess.Popen(
            [str(binary), "serve", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, "OTEL_TRACES_EXPORTER": "none"},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + REGISTRY_START_TIMEOUT_SECONDS
            while not _answers(f"http://{address}/v2/"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the registry did not start on {address}; see {log}")
                time.sleep(0.2)
            yield
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def publish(
    docker: Docker, tier_cache: Path, tag: str, mirror: str = MIRROR, version: str = K8S_VERSION
) -> str:
    """Pushes a node image of `version` to a registry on loopback (started for the push,
    stopped by its PID after it); returns the digest-pinned name a stack config names it by."""
    reference = mirrored_reference(_repo_digests(docker, tag), mirror, version)
    if reference is not None:
        return reference
    paths = BuildPaths.under(tier_cache)
    env, go_version = go_env()
    binaries.build_set(REGISTRY_SET, paths.go_root, env, go_version)
    log = paths.root / "registry.log"
    with registry_process(paths.bin / "registry", paths.root / "registry", mirror, log):
        mirrored_tag = f"{mirror}/{MIRROR_REPOSITORY}:{version}"
        docker.run("tag", tag, mirrored_tag)
        docker.run("push", mirrored_tag, timeout=900)
    reference = mirrored_reference(_repo_digests(docker, tag), mirror, version)
    if reference is None:
        raise RuntimeError(f"docker push to {mirror} left no RepoDigest on {tag}")
    return reference
