"""Build the real programs the real-tier tests run, from the Go module proxy, into a cache.

    python tests/real/binaries.py            # build what is missing or stale, print progress

Everything lives outside the repo in ``${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-hami-lab/real``:
``bin/`` (the binaries), ``src/<set>/`` (a generated wrapper module per binary set), and Go's own
module and build caches (``gomod/``, ``go-build/``), so ``rm -rf`` of that directory resets it all.
A set whose binaries exist and whose stamp matches its spec is skipped; otherwise ``go build``
runs, which after the first build only re-links from ``go-build/``.

Why wrapper modules: ``go install module/cmd@version`` refuses any module whose go.mod has
``replace`` directives (k/k points its staging modules at ``./staging/src``, pulumi/pkg at
``../sdk``). A replace in a dependency's go.mod is ignored, so the wrapper, as main module, makes
the same replacements with the published release of each locally replaced module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

WRAPPER_MODULE_PREFIX = "kamaji-hami-lab.local/real"
GO_MISSING = (
    "no `go` on PATH: the real tier builds its programs from the Go module proxy"
    " with Go >= 1.26.7.\n"
    "Install it, e.g.: curl -fsSL https://go.dev/dl/go1.26.8.linux-amd64.tar.gz"
    " | sudo tar -C /usr/local -xz && export PATH=/usr/local/go/bin:$PATH"
)


@dataclasses.dataclass(frozen=True)
class BinarySet:
    """Binaries built together from one module at one version.

    ``local_replace_version``: the release that stands in for every module the dependency's own
    go.mod replaces with a local path (k/k's staging modules are released as v0.<minor>.<patch>).
    """

    name: str
    module: str
    version: str
    packages: tuple[str, ...]
    local_replace_version: str
    ldflags: tuple[str, ...] = ()
    # Files copied from a module of the build graph into bin/: (module path, file in module).
    extra_files: tuple[tuple[str, str], ...] = ()
    # Programs of this repo (repo-relative directories, each one main.go) built against the
    # module's libraries, and modules held at an exact version (replace lines) where a program
    # models another project's build of those libraries.
    programs: tuple[str, ...] = ()
    pins: tuple[tuple[str, str], ...] = ()
    # Under bin/: a second version of programs another set already builds (bin/v1.36.3/...).
    bin_subdir: str = ""
    # Go build tags (``go build -tags``).
    tags: tuple[str, ...] = ()

    def binary_name(self, package: str) -> str:
        # etcd's main package is its module root, go.etcd.io/etcd/server/v3: call that etcd.
        last = package.rsplit("/", 1)[-1]
        return self.name if last.startswith("v") and last[1:].isdigit() else last

    @property
    def binaries(self) -> tuple[str, ...]:
        return (
            tuple(self.binary_name(package) for package in self.packages)
            + tuple(Path(file).name for _, file in self.extra_files)
            + tuple(Path(directory).name for directory in self.programs)
        )


REPO_ROOT = Path(__file__).resolve().parents[2]

K8S_VERSION = "v1.35.4"
# The newest minor, for what only it has on by default (DRA's consumable capacity).
K8S_NEXT_VERSION = "v1.36.3"
# k/k v1.35.4's go.mod requires go.etcd.io/etcd/server/v3 v3.6.5 (indirect, via the apiserver).
ETCD_VERSION = "v3.6.5"
KWOK_VERSION = "v0.8.0"
PULUMI_VERSION = "v3.274.1"
PULUMI_PYTHON_HOST_VERSION = "v3.68.0"
PULUMI_SDK = "github.com/pulumi/pulumi/sdk/v3"
ACTIONLINT_VERSION = "v1.7.12"
# Prometheus v3 is published on the module proxy as v0.3<minor>.<patch>: v0.316.0 is 3.16.0.
PROMETHEUS_VERSION = "v0.316.0"
PROMETHEUS_COMMON = "github.com/prometheus/common"


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    # What k/k's hack/lib/version.sh stamps; without it /version says v0.0.0-master.
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {package}.gitVersion={version}",
            f"-X {package}.gitMajor={major}",
            f"-X {package}.gitMinor={minor}",
            f"-X {package}.gitTreeState=clean",
        ]
    return tuple(flags)


def prometheus_release(module_version: str) -> str:
    """Prometheus's own version of a v3 module version: v0.316.0 is 3.16.0."""
    minor, patch = module_version.split(".")[1:]
    return f"3.{int(minor) - 300}.{patch}"


def _pulumi_version_ldflag(version: str) -> tuple[str, ...]:
    return (f"-X {PULUMI_SDK}/go/common/version.Version={version}",)


BINARY_SETS: tuple[BinarySet, ...] = (
    # Ordered so that the Pulumi tests can run first: those sets are the quick ones.
    BinarySet(
        name="pulumi-language-python",
        module=PULUMI_SDK,
        version=PULUMI_PYTHON_HOST_VERSION,
        packages=(f"{PULUMI_SDK}/python/cmd/pulumi-language-python",),
        local_replace_version=PULUMI_PYTHON_HOST_VERSION,
        ldflags=_pulumi_version_ldflag(PULUMI_PYTHON_HOST_VERSION),
    ),
    BinarySet(
        name="pulumi",
        module="github.com/pulumi/pulumi/pkg/v3",
        version=PULUMI_VERSION,
        packages=("github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",),
        local_replace_version=PULUMI_VERSION,
        ldflags=_pulumi_version_ldflag(PULUMI_VERSION),
        # The language host v3.68.0 runs this script; the current SDK's copy matches the
        # current pulumi Python package in the venv.
        extra_files=((PULUMI_SDK, "python/cmd/pulumi-language-python-exec"),),
    ),
    BinarySet(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        packages=("go.etcd.io/etcd/server/v3",),
        local_replace_version=ETCD_VERSION,
    ),
    BinarySet(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=KWOK_VERSION,
        packages=("sigs.k8s.io/kwok/cmd/kwok",),
        local_replace_version=KWOK_VERSION,
        ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION}",),
    ),
    BinarySet(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=K8S_VERSION,
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{cmd}"
            for cmd in (
                "kube-apiserver",
                "kube-controller-manager",
                "kube-scheduler",
                "kubectl",
                "kubeadm",  # judges the workers' JoinConfiguration (test_kubeadm_config.py)
            )
        ),
        local_replace_version="v0." + K8S_VERSION.split(".", 1)[1],
        ldflags=_k8s_ldflags(K8S_VERSION),
    ),
    BinarySet(
        name="kubernetes-next",
        module="k8s.io/kubernetes",
        version=K8S_NEXT_VERSION,
        packages=tuple(
            f"k8s.io/kubernetes/cmd/{cmd}"
            for cmd in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        local_replace_version="v0." + K8S_NEXT_VERSION.split(".", 1)[1],
        ldflags=_k8s_ldflags(K8S_NEXT_VERSION),
        bin_subdir=K8S_NEXT_VERSION,
    ),
    # Lints .github/workflows (test_workflows_lint.py); what its releases stamp as the version.
    BinarySet(
        name="actionlint",
        module="github.com/rhysd/actionlint",
        version=ACTIONLINT_VERSION,
        packages=("github.com/rhysd/actionlint/cmd/actionlint",),
        local_replace_version=ACTIONLINT_VERSION,
        ldflags=(f"-X github.com/rhysd/actionlint.version={ACTIONLINT_VERSION.lstrip('v')}",),
    ),
    # The lab's Prometheus and its promtool (rules backfill, rule checks): test_prometheus_*.py.
    # remove_all_sd drops every service discovery but file and http, and with it the cloud SDKs,
    # half the build; enable_kubernetes_sd keeps the one the lab uses (the vGPU monitor's pods
    # are found through each tenant's API server). No builtinassets: its embedded UI
    # is generated by upstream's Makefile, not in the module; the HTTP API serves without it.
    BinarySet(
        name="prometheus",
        module="github.com/prometheus/prometheus",
        version=PROMETHEUS_VERSION,
        packages=tuple(
            f"github.com/prometheus/prometheus/cmd/{cmd}" for cmd in ("prometheus", "promtool")
        ),
        local_replace_version=PROMETHEUS_VERSION,
        ldflags=(
            f"-X {PROMETHEUS_COMMON}/version.Version={prometheus_release(PROMETHEUS_VERSION)}",
        ),
        tags=("netgo", "remove_all_sd", "enable_kubernetes_sd"),
        # Writes the past's series into a block with the staleness markers a scrape leaves.
        programs=("tests/real/programs/tsdb-blocks",),
    ),
)


def cache_root(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ["HOME"]) / ".cache")
    return Path(base) / "kamaji-hami-lab" / "real"


def bin_path(name: str, version: str = "") -> Path:
    """Where the built program ``name`` lives (tests/real's fixtures run it from there); a
    ``version`` other than the default set's: that version's build."""
    subdir = "" if version in ("", K8S_VERSION) else version
    return cache_root() / "bin" / subdir / name


def module_dir(set_name: str, module: str) -> Path:
    """The module cache directory of ``module`` as the wrapper of ``set_name`` resolved it,
    downloaded when the module cache lacks it (CI caches the built programs, not gomod/:
    `go list -m` would give an empty Dir)."""
    root = cache_root()
    src = root / "src" / set_name
    if not (src / "go.mod").exists():
        raise SystemExit(f"{set_name} is not built: run `.venv/bin/python tests/real/binaries.py`")
    listed = _run(["go", "mod", "download", "-json", module], src, go_environment(root))
    return Path(json.loads(listed)["Dir"])


def kustomization_files(directory: Path) -> list[Path]:
    """The resource files a kustomization lists, directories (other kustomizations) expanded."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    files: list[Path] = []
    for resource in kustomization.get("resources", []):
        path = (directory / resource).resolve()
        files += kustomization_files(path) if path.is_dir() else [path]
    return files


def kwok_fast_stage_files() -> list[Path]:
    """kwok's own "fast" Stage set (node initialize + heartbeat with lease, pod ready/complete/
    delete), read from the kwok module the build used: kwok >= v0.8.0 ships no default stages."""
    kwok = next(s for s in BINARY_SETS if s.name == "kwok")
    return kustomization_files(module_dir(kwok.name, kwok.module) / "kustomize" / "stage" / "fast")


def go_environment(root: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every go command of this tier runs with (own module and build caches)."""
    env = dict(os.environ if environ is None else environ)
    flags = env.get("GOFLAGS", "").split()
    for flag in ("-buildvcs=false", "-modcacherw"):
        if flag not in flags:
            flags.append(flag)
    env.update(
        GOMODCACHE=str(root / "gomod"),
        GOCACHE=str(root / "go-build"),
        GOFLAGS=" ".join(flags),
        GOWORK="off",
        CGO_ENABLED="0",
    )
    return env


def wrapper_replaces(dependency_replaces: Iterable[dict], local_version: str) -> list[str]:
    """The replace lines a wrapper needs for a dependency's go.mod ``Replace`` entries.

    ``dependency_replaces`` is ``go mod edit -json``'s ``Replace`` list. A local-path target
    (no version) becomes the module's own published ``local_version``; a module target is copied;
    etcd's ``./FORBIDDEN_DEPENDENCY`` guards are dropped (those modules must stay unused).
    """
    lines = []
    for replace in dependency_replaces:
        old, new = replace["Old"], replace["New"]
        old_text = old["Path"] + (f" {old['Version']}" if old.get("Version") else "")
        if "FORBIDDEN_DEPENDENCY" in new["Path"]:
            continue
        if new.get("Version"):
            lines.append(f"{old_text} => {new['Path']} {new['Version']}")
        else:
            lines.append(f"{old_text} => {old['Path']} {local_version}")
    return lines


def pinned_replaces(replaces: Sequence[str], pins: Iterable[tuple[str, str]]) -> list[str]:
    """``replaces`` with each pinned module held at its version (any other replace of it gone)."""
    pins = dict(pins)
    kept = [line for line in replaces if line.split()[0] not in pins]
    return kept + [f"{module} => {module} {version}" for module, version in pins.items()]


def wrapper_go_mod(binary_set: BinarySet, go_directive: str, replaces: Sequence[str]) -> str:
    lines = [
        f"module {WRAPPER_MODULE_PREFIX}/{binary_set.name}",
        "",
        f"go {go_directive}",
        "",
        f"require {binary_set.module} {binary_set.version}",
    ]
    if replaces:
        lines += ["", "replace (", *(f"\t{line}" for line in replaces), ")"]
    return "\n".join(lines) + "\n"


def wrapper_tools_go(binary_set: BinarySet) -> str:
    imports = "\n".join(f'\t_ "{package}"' for package in binary_set.packages)
    return f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n"


def program_source(directory: str) -> str:
    return (REPO_ROOT / directory / "main.go").read_text()


def spec_digest(binary_set: BinarySet, go_version: str) -> str:
    spec: list = [dataclasses.asdict(binary_set), go_version]
    if binary_set.programs or binary_set.pins:
        spec.append([program_source(directory) for directory in binary_set.programs])
    else:  # the digest of a set without either stays what it was before they existed
        del spec[0]["programs"], spec[0]["pins"]
    if not binary_set.bin_subdir:
        del spec[0]["bin_subdir"]
    if not binary_set.tags:
        del spec[0]["tags"]
    payload = json.dumps(spec, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _log(message: str) -> None:
    print(f"[real-build {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _run(args: Sequence[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"`{' '.join(args)}` failed in {cwd}:\n{result.stderr}")
    return result.stdout


def _dependency_go_mod(binary_set: BinarySet, src: Path, env: dict[str, str]) -> dict:
    module = f"{binary_set.module}@{binary_set.version}"
    download = json.loads(_run(["go", "mod", "download", "-json", module], src, env))
    return json.loads(_run(["go", "mod", "edit", "-json", download["GoMod"]], src, env))


def write_wrapper(binary_set: BinarySet, src: Path, env: dict[str, str]) -> None:
    src.mkdir(parents=True, exist_ok=True)
    go_mod = _dependency_go_mod(binary_set, src, env)
    replaces = wrapper_replaces(go_mod.get("Replace") or [], binary_set.local_replace_version)
    replaces = pinned_replaces(replaces, binary_set.pins)
    (src / "go.mod").write_text(wrapper_go_mod(binary_set, go_mod["Go"], replaces))
    (src / "tools.go").write_text(wrapper_tools_go(binary_set))
    for directory in binary_set.programs:
        (src / Path(directory).name).mkdir(exist_ok=True)
        (src / Path(directory).name / "main.go").write_text(program_source(directory))
    _log(f"{binary_set.name}: resolving the module graph (go mod tidy)")
    _run(["go", "mod", "tidy"], src, env)


def _stream_build(args: Sequence[str], cwd: Path, env: dict[str, str], name: str) -> None:
    """Run ``go build -v``, printing a progress line every 20 s instead of every package."""
    process = subprocess.Popen(
        args, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert process.stderr is not None
    state = {"count": 0, "last": "", "lines": []}
    done = threading.Event()

    def heartbeat() -> None:
        started = time.monotonic()
        while not done.wait(20):
            minutes = (time.monotonic() - started) / 60
            _log(f"{name}: {state['count']} packages compiled, {minutes:.1f} min ({state['last']})")

    threading.Thread(target=heartbeat, daemon=True).start()
    for line in process.stderr:
        state["count"] += 1
        state["last"] = line.strip()
        state["lines"] = [*state["lines"][-40:], line]
    done.set()
    if process.wait() != 0:
        raise SystemExit(f"{name}: `{' '.join(args)}` failed:\n{''.join(state['lines'])}")


def build_set(binary_set: BinarySet, root: Path, env: dict[str, str], go_version: str) -> None:
    bin_dir, src = root / "bin" / binary_set.bin_subdir, root / "src" / binary_set.name
    stamp = root / "stamps" / binary_set.name
    digest = spec_digest(binary_set, go_version)
    present = all((bin_dir / name).exists() for name in binary_set.binaries)
    if present and stamp.exists() and stamp.read_text() == digest:
        _log(f"{binary_set.name}: up to date ({', '.join(binary_set.binaries)})")
        return
    started = time.monotonic()
    _log(f"{binary_set.name}: building {binary_set.module}@{binary_set.version}")
    write_wrapper(binary_set, src, env)
    bin_dir.mkdir(parents=True, exist_ok=True)
    own = [f"./{Path(directory).name}" for directory in binary_set.programs]
    for package in (*binary_set.packages, *own):
        output = bin_dir / binary_set.binary_name(package)
        args = ["go", "build", "-v", "-trimpath", "-o", str(output)]
        args += ["-tags", ",".join(binary_set.tags)] if binary_set.tags else []
        args += ["-ldflags", " ".join(["-s", "-w", *binary_set.ldflags]), package]
        _stream_build(args, src, env, f"{binary_set.name}/{output.name}")
    for module, file in binary_set.extra_files:
        module_dir = _run(["go", "list", "-m", "-f", "{{.Dir}}", module], src, env).strip()
        target = bin_dir / Path(file).name
        shutil.copyfile(Path(module_dir) / file, target)
        target.chmod(0o755)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)
    _log(f"{binary_set.name}: built in {(time.monotonic() - started) / 60:.1f} min")


def main(argv: Sequence[str]) -> int:
    if shutil.which("go") is None:
        raise SystemExit(GO_MISSING)
    root = cache_root()
    env = go_environment(root)
    go_version = _run(["go", "env", "GOVERSION"], Path.cwd(), env).strip()
    wanted = set(argv) or {binary_set.name for binary_set in BINARY_SETS}
    unknown = wanted - {binary_set.name for binary_set in BINARY_SETS}
    if unknown:
        raise SystemExit(f"unknown binary set(s) {sorted(unknown)}")
    _log(f"cache {root}, {go_version}")
    started = time.monotonic()
    for binary_set in BINARY_SETS:
        if binary_set.name in wanted:
            build_set(binary_set, root, env, go_version)
    _log(f"all done in {(time.monotonic() - started) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
