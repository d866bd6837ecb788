"""The JoinConfiguration the join scripts write, judged by the real kubeadm (v1.35.4).

Each script's here-document is cut out of the script and filled in by `sh` the way the script
fills it in (discovery values of the right shape, the labels of each stack), then handed to
`kubeadm config validate`, which decodes it strictly against kubeadm's v1beta4 types and runs
kubeadm's own validation. No join runs: a real join needs a control plane and root.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from binaries import bin_path

from builders.kubeadm import TokenDiscovery, join_configuration
from builders.remote_scripts import remote_join_script
from builders.scripts import worker_join_script

ENDPOINT = "172.30.255.205:6443"
TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "0123456789abcdef" * 4
DISCOVERY = TokenDiscovery(ENDPOINT, TOKEN, CA_HASH)


@pytest.fixture(scope="module")
def kubeadm() -> Path:
    path = bin_path("kubeadm")
    assert path.exists(), (
        f"kubeadm is not built (in {bin_path('')}): run `.venv/bin/python tests/real/binaries.py`"
    )
    return path


def validate(kubeadm: Path, config: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "join.yaml"
    file.write_text(config)
    return subprocess.run(
        [str(kubeadm), "config", "validate", "--config", str(file)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def written_config(script: str, **env: str) -> str:
    """What the script's here-document writes, filled in by `sh` from `env`."""
    start = script.index("<<EOF\n") + len("<<EOF\n")
    body = script[start : script.index("\nEOF\n", start) + 1]
    done = subprocess.run(
        ["sh", "-c", f"cat <<EOF\n{body}EOF\n"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


DISCOVERY_ENV = {"endpoint": ENDPOINT, "token": TOKEN, "ca_hash": CA_HASH}
CONFIGS = {
    "container-gpu": lambda: written_config(
        worker_join_script(), NODE_LABELS="gpu=on", **DISCOVERY_ENV
    ),
    "container-simulated": lambda: written_config(
        worker_join_script(), NODE_LABELS="", **DISCOVERY_ENV
    ),
    "remote-gpu": lambda: written_config(
        remote_join_script("gpu-host-1", "gpu=on"), **DISCOVERY_ENV
    ),
    "remote-no-labels": lambda: written_config(remote_join_script("gpu-host-1"), **DISCOVERY_ENV),
    "digits-token": lambda: written_config(
        worker_join_script(),
        NODE_LABELS="gpu=on",
        **{**DISCOVERY_ENV, "token": "012345.0123456789012345"},
    ),
    "builder-all-fields": lambda: join_configuration(
        DISCOVERY,
        node_labels="gpu=on,zone=a",
        node_name="gpu-host-1",
        cri_socket="unix:///run/containerd/containerd.sock",
        ignore_preflight_errors=("SystemVerification", "FileExisting", "Swap"),
    ),
}


@pytest.mark.upstream("kubeadm-join-config-v1beta4")
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_kubeadm_accepts_the_join_configuration(kubeadm: Path, tmp_path: Path, name: str):
    config = CONFIGS[name]()
    assert yaml.safe_load(config)["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    result = validate(kubeadm, config, tmp_path)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


@pytest.mark.upstream("kubeadm-join-config-v1beta4")
@pytest.mark.parametrize(
    ("change", "error"),
    [
        # v1beta3's map, under v1beta4: what kind v0.31.0 still writes
        (
            lambda c: c["nodeRegistration"].update(kubeletExtraArgs={"node-labels": "gpu=on"}),
            # the words tests/support/fake_host.py's kubeadm answers with
            "json: cannot unmarshal object into Go struct field NodeRegistrationOptions"
            ".nodeRegistration.kubeletExtraArgs of type []v1beta4.Arg",
        ),
        (lambda c: c["nodeRegistration"].update(kubeletExtraArgz=[]), "kubeletExtraArgz"),
        (
            lambda c: c["discovery"]["bootstrapToken"].update(token="ABCDEF.0123456789abcdef"),
            "the bootstrap token is invalid",
        ),
        (lambda c: c["discovery"]["bootstrapToken"].pop("caCertHashes"), "caCertHashes"),
    ],
)
def test_kubeadm_refuses_what_v1beta4_does_not_describe(kubeadm, tmp_path, change, error):
    """The check bites: a shape or value kubeadm's types refuse fails the validation."""
    config = yaml.safe_load(CONFIGS["builder-all-fields"]())
    change(config)
    result = validate(kubeadm, yaml.safe_dump(config), tmp_path)
    assert result.returncode != 0
    assert error in result.stderr


@pytest.mark.upstream("kubeadm-join-config-refuses-flags")
def test_kubeadm_join_refuses_the_flags_the_config_file_replaces(kubeadm: Path, tmp_path: Path):
    """Refused before any phase runs (--dry-run besides, so nothing would change anyway)."""
    file = tmp_path / "join.yaml"
    file.write_text(CONFIGS["remote-gpu"]())
    flags = ["--cri-socket", "unix:///run/containerd/containerd.sock", "--token", TOKEN]
    command = [str(kubeadm), "join", "--config", str(file), "--dry-run", *flags]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "can not mix '--config' with arguments [cri-socket token]" in result.stderr
