"""`python -m labcheck.kubeconfigs` (`make kubeconfig`): the tenants' admin kubeconfigs from the
stack's outputs, read through a fake `pulumi` on PATH, written owner-only."""

from __future__ import annotations

import io
import json
import os
import shlex
import stat
from pathlib import Path

import pytest
import yaml

from labcheck import kubeconfigs
from labcheck.kubeconfigs import main
from tests.support.fake_tools import fake_tools


def kamaji_admin(server: str, token: str) -> str:
    """An admin kubeconfig as the stack exports it: YAML text, kubeadm's default names."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kubernetes",
                    "cluster": {"server": server, "certificate-authority-data": "Q0E="},
                }
            ],
            "users": [{"name": "kubernetes-admin", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "kubernetes-admin@kubernetes",
                    "context": {"cluster": "kubernetes", "user": "kubernetes-admin"},
                }
            ],
            "current-context": "kubernetes-admin@kubernetes",
        }
    )


OUTPUTS = {
    "poolRange": "172.30.255.200-172.30.255.250",
    "tenantKubeconfigs": {
        "tenant-a": kamaji_admin("https://172.30.255.200:6443", "token-a"),
        "tenant-b": kamaji_admin("https://172.30.255.201:6443", "token-b"),
    },
}


def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """`pulumi` on PATH: logs its arguments, then runs `body` (prints outputs or fails)."""
    log = fake_tools(tmp_path, {"pulumi": f'echo "$*" >> "$CALLS"\n{body}'})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(log))
    return log


def prints(outputs: object) -> str:
    return f"cat <<'EOF'\n{json.dumps(outputs, indent=4)}\nEOF\n"


def call(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_tenant_gets_its_own_owner_only_file_and_an_export_line(tmp_path, monkeypatch):
    log = fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    target = tmp_path / "kubeconfigs" / "lab"
    code, out, err = call("--stack", "lab", "--dir", str(target))
    assert (code, err) == (0, "")
    paths = [target / "tenant-a.yaml", target / "tenant-b.yaml"]
    assert out.splitlines() == [f"export KUBECONFIG={p}" for p in paths]
    assert log.read_text() == "stack output --show-secrets --json --stack lab\n"
    assert mode(target) == mode(target.parent) == 0o700
    assert [mode(p) for p in paths] == [0o600, 0o600]
    assert sorted(p.name for p in target.iterdir()) == ["tenant-a.yaml", "tenant-b.yaml"]


def test_the_context_cluster_and_user_are_named_after_the_tenant(tmp_path, monkeypatch):
    """kubectl merges `KUBECONFIG=a:b` by name, first wins: kubeadm's shared names would hand
    tenant-b's context tenant-a's credentials."""
    fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    call("--stack", "lab", "--dir", str(tmp_path / "k"))
    doc = yaml.safe_load((tmp_path / "k" / "tenant-b.yaml").read_text())
    assert doc == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tenant-b",
                "cluster": {
                    "server": "https://172.30.255.201:6443",
                    "certificate-authority-data": "Q0E=",
                },
            }
        ],
        "users": [{"name": "tenant-b", "user": {"token": "token-b"}}],
        "contexts": [{"name": "tenant-b", "context": {"cluster": "tenant-b", "user": "tenant-b"}}],
        "current-context": "tenant-b",
    }


def test_one_tenant_only(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    target = tmp_path / "dir with space" / "lab"
    code, out, _ = call("--stack", "lab", "--tenant", "tenant-a", "--dir", str(target))
    assert code == 0
    assert out == f"export KUBECONFIG={shlex.quote(str(target / 'tenant-a.yaml'))}\n"
    assert "'" in out  # quoted: the line is pasted into a shell
    assert [p.name for p in target.iterdir()] == ["tenant-a.yaml"]


def test_a_relative_dir_prints_an_absolute_path(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    monkeypatch.chdir(tmp_path)
    _, out, _ = call("--stack", "lab", "--tenant", "tenant-b", "--dir", "kubeconfigs/lab")
    assert out == f"export KUBECONFIG={tmp_path}/kubeconfigs/lab/tenant-b.yaml\n"


def test_an_unknown_tenant_is_named_and_nothing_is_written(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    target = tmp_path / "kubeconfigs" / "lab"
    code, out, err = call("--stack", "lab", "--tenant", "tenant-c", "--dir", str(target))
    assert (code, out) == (1, "")
    assert err == (
        "kubeconfig: unknown tenant 'tenant-c' in stack lab (its tenants: tenant-a, tenant-b)\n"
    )
    assert not (tmp_path / "kubeconfigs").exists()


@pytest.mark.upstream("pulumi-stack-output-all-json")
def test_a_stack_never_brought_up_says_to_run_make_up(tmp_path, monkeypatch):
    """`pulumi stack init` then `pulumi stack output --json`: `{}`, exit 0."""
    fake_pulumi(tmp_path, monkeypatch, "echo '{}'\n")
    code, out, err = call("--stack", "lab", "--dir", str(tmp_path / "k"))
    assert (code, out) == (1, "")
    assert err == (
        "kubeconfig: stack lab has no outputs yet: bring the lab up first: make up STACK=lab\n"
    )
    assert not (tmp_path / "k").exists()


@pytest.mark.upstream("pulumi-stack-output-not-up-yet")
def test_a_stack_that_does_not_exist_says_to_run_make_up(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, monkeypatch, "echo \"error: no stack named 'dev' found\" >&2\nexit 6\n")
    code, _, err = call("--stack", "dev", "--dir", str(tmp_path / "k"))
    assert code == 1
    assert err == (
        "kubeconfig: stack dev has no outputs yet: bring the lab up first: make up STACK=dev\n"
    )


def test_other_pulumi_failures_are_relayed_without_a_hint(tmp_path, monkeypatch):
    says = "error: failed to decrypt: incorrect passphrase"
    fake_pulumi(tmp_path, monkeypatch, f"echo {shlex.quote(says)} >&2\nexit 255\n")
    code, _, err = call("--stack", "lab", "--dir", str(tmp_path / "k"))
    assert code == 1
    assert err == f"kubeconfig: 'pulumi stack output --stack lab' failed: {says}\n"


def test_a_broken_kubeconfig_names_its_tenant_not_its_text(tmp_path, monkeypatch):
    outputs = {"tenantKubeconfigs": {**OUTPUTS["tenantKubeconfigs"], "tenant-b": "secret: [x"}}
    fake_pulumi(tmp_path, monkeypatch, prints(outputs))
    code, _, err = call("--stack", "lab", "--dir", str(tmp_path / "k"))
    assert code == 1
    assert err == (
        "kubeconfig: tenant tenant-b: its kubeconfig in tenantKubeconfigs has no usable "
        "current context\n"
    )
    assert not (tmp_path / "k").exists()  # checked before tenant-a's file was written


def test_an_old_world_readable_file_is_replaced_and_never_readable_on_the_way(
    tmp_path, monkeypatch
):
    """Even with umask 0: the new file is created 0600 and complete before it takes the name."""
    fake_pulumi(tmp_path, monkeypatch, prints(OUTPUTS))
    target = tmp_path / "k"
    target.mkdir(mode=0o755)
    old = target / "tenant-a.yaml"
    old.write_text("old")
    old.chmod(0o644)
    seen = []
    real_replace = os.replace

    def replace(src: str, dst: Path) -> None:
        seen.append((mode(Path(src)), yaml.safe_load(Path(src).read_text())["current-context"]))
        real_replace(src, dst)

    monkeypatch.setattr(kubeconfigs.os, "replace", replace)
    previous = os.umask(0)
    try:
        code, _, _ = call("--stack", "lab", "--tenant", "tenant-a", "--dir", str(target))
    finally:
        os.umask(previous)
    assert code == 0
    assert seen == [(0o600, "tenant-a")]
    assert (mode(target), mode(old)) == (0o700, 0o600)
    assert [p.name for p in target.iterdir()] == ["tenant-a.yaml"]  # no temporary file left
