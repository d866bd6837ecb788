"""The real programs are the pinned ones, built the way binaries.py says."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import binaries
import pytest
from binaries import (
    BINARY_SETS,
    K8S_VERSION,
    PULUMI_SDK,
    PULUMI_VERSION,
    bin_path,
    cache_root,
    kwok_fast_stage_files,
    module_dir,
    wrapper_go_mod,
    wrapper_replaces,
)


def test_local_replaces_become_the_published_release_and_module_replaces_are_copied():
    replaces = [
        {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
        {"Old": {"Path": "go.etcd.io/etcd/api/v3"}, "New": {"Path": "../api"}},
        {"Old": {"Path": "go.etcd.io/etcd"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
        {
            "Old": {"Path": "github.com/atotto/clipboard"},
            "New": {
                "Path": "github.com/tgummerer/clipboard",
                "Version": "v0.0.0-20241001131231-d02d263e614e",
            },
        },
        {
            "Old": {"Path": "golang.org/x/text", "Version": "v0.3.0"},
            "New": {"Path": "golang.org/x/text", "Version": "v0.3.6"},
        },
    ]
    assert wrapper_replaces(replaces, "v0.35.4") == [
        "k8s.io/api => k8s.io/api v0.35.4",
        "go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v0.35.4",
        "github.com/atotto/clipboard => github.com/tgummerer/clipboard"
        " v0.0.0-20241001131231-d02d263e614e",
        "golang.org/x/text v0.3.0 => golang.org/x/text v0.3.6",
    ]


def test_a_pin_replaces_whatever_else_the_dependency_replaces_the_module_with():
    replaces = [
        "k8s.io/api => k8s.io/api v0.36.1",
        "k8s.io/apimachinery => k8s.io/apimachinery v0.36.1",
    ]
    assert binaries.pinned_replaces(replaces, [("k8s.io/apimachinery", "v0.36.3")]) == [
        "k8s.io/api => k8s.io/api v0.36.1",
        "k8s.io/apimachinery => k8s.io/apimachinery v0.36.3",
    ]


def test_a_sets_own_program_is_rebuilt_when_its_source_changes(tmp_path, monkeypatch):
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "main.go").write_text("package main\n\nfunc main() {}\n")
    monkeypatch.setattr(binaries, "REPO_ROOT", tmp_path)
    tool = binaries.BinarySet("tool", "example.com/m", "v1.0.0", (), "v1.0.0", programs=("tool",))
    assert tool.binaries == ("tool",)
    before = binaries.spec_digest(tool, "go1.26.8")
    (tmp_path / "tool" / "main.go").write_text("package main\n\nfunc main() { println() }\n")
    assert binaries.spec_digest(tool, "go1.26.8") != before


def test_build_tags_change_a_sets_digest_and_a_set_without_tags_keeps_its_old_one():
    plain = binaries.BinarySet("tool", "example.com/m", "v1.0.0", ("example.com/m/cmd",), "v1.0.0")
    payload = [dataclasses.asdict(plain), "go1.26.8"]
    for field in ("programs", "pins", "bin_subdir", "tags"):
        del payload[0][field]
    before_tags_existed = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    assert binaries.spec_digest(plain, "go1.26.8") == before_tags_existed
    tagged = dataclasses.replace(plain, tags=("remove_all_sd",))
    assert binaries.spec_digest(tagged, "go1.26.8") != before_tags_existed


def test_prometheus_module_versions_are_its_v3_releases():
    assert binaries.prometheus_release("v0.316.0") == "3.16.0"
    assert binaries.prometheus_release("v0.300.1") == "3.0.1"


def test_the_wrapper_go_mod_requires_the_module_and_replaces():
    kubernetes = next(s for s in BINARY_SETS if s.name == "kubernetes")
    assert wrapper_go_mod(kubernetes, "1.25.0", ["k8s.io/api => k8s.io/api v0.35.4"]) == (
        "module kamaji-hami-lab.local/real/kubernetes\n\ngo 1.25.0\n\n"
        "require k8s.io/kubernetes v1.35.4\n\nreplace (\n\tk8s.io/api => k8s.io/api v0.35.4\n)\n"
    )


def served_go_mod(set_name: str, module_at_version: str) -> Path:
    """The go.mod the proxy serves for a module version (fetched alone when not cached)."""
    root = cache_root()
    listed = subprocess.run(
        ["go", "list", "-m", "-json", module_at_version],
        cwd=root / "src" / set_name,
        env=binaries.go_environment(root),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(listed.stdout)["GoMod"])


def test_the_kubernetes_wrapper_replaces_every_staging_module_of_the_served_go_mod():
    served = served_go_mod("kubernetes", f"k8s.io/kubernetes@{K8S_VERSION}")
    staging = set(re.findall(r"^\t(k8s\.io/[\w.-]+) => \./staging/", served.read_text(), re.M))
    assert len(staging) >= 30, staging
    wrapper = (cache_root() / "src/kubernetes/go.mod").read_text()
    replaced = set(re.findall(r"^\t(k8s\.io/[\w.-]+) => \1 v0\.35\.4$", wrapper, re.M))
    assert replaced == staging


@pytest.mark.parametrize(
    ("binary", "args", "expected"),
    [
        ("kube-apiserver", ["--version"], "Kubernetes v1.35.4"),
        ("kube-controller-manager", ["--version"], "Kubernetes v1.35.4"),
        ("kube-scheduler", ["--version"], "Kubernetes v1.35.4"),
        ("kubectl", ["version", "--client"], "Client Version: v1.35.4"),
        ("kubeadm", ["version", "-o", "short"], "v1.35.4"),
        ("etcd", ["--version"], "etcd Version: 3.6.5"),
        ("kwok", ["--version"], "v0.8.0"),
        ("pulumi", ["version"], "v3.274.1"),
        ("prometheus", ["--version"], "prometheus, version 3.16.0"),
        ("promtool", ["--version"], "promtool, version 3.16.0"),
    ],
)
def test_each_program_reports_its_pinned_version(binary, args, expected):
    result = subprocess.run(
        [str(bin_path(binary)), *args], capture_output=True, text=True, timeout=30
    )
    assert expected in result.stdout + result.stderr


@pytest.mark.upstream("kwok-v0.8-needs-stages")
def test_kwok_gets_node_and_pod_stages_from_its_own_module():
    files = kwok_fast_stage_files()
    assert [f.name for f in files] == [
        "node-initialize.yaml",
        "node-heartbeat-with-lease.yaml",
        "pod-ready.yaml",
        "pod-complete.yaml",
        "pod-delete.yaml",
    ]
    assert all("sigs.k8s.io/kwok@v0.8.0/kustomize/stage/" in str(f) for f in files)
    assert all("kind: Stage" in f.read_text() for f in files)


def run_build_script(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(Path(binaries.__file__))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_second_build_reuses_the_cache():
    result = run_build_script(dict(os.environ))
    assert result.returncode == 0, result.stderr
    for binary_set in BINARY_SETS:
        assert f"{binary_set.name}: up to date" in result.stdout


def test_without_go_the_build_stops_with_the_command_that_installs_it():
    result = run_build_script({**os.environ, "PATH": "/nonexistent"})
    assert result.returncode == 1
    assert "no `go` on PATH" in result.stderr
    assert "https://go.dev/dl/go1.26.8.linux-amd64.tar.gz" in result.stderr


def test_the_python_exec_shim_is_the_current_sdks():
    sdk = module_dir("pulumi", PULUMI_SDK)
    assert sdk.name == f"v3@{PULUMI_VERSION}"
    shim = sdk / "python/cmd/pulumi-language-python-exec"
    assert bin_path("pulumi-language-python-exec").read_bytes() == shim.read_bytes()
