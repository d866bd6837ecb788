"""kubeadm's JoinConfiguration (builders/kubeadm.py): the document, and the shell that fills in
its discovery at run time. The scripts that use them run on the fake host in test_scripts.py;
the real kubeadm validates the same documents in tests/real/test_kubeadm_config.py."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from builders.kubeadm import (
    FIRST_MINOR_WITH_V1BETA4,
    JOIN_API_VERSION,
    SCRIPT_DISCOVERY,
    TokenDiscovery,
    join_configuration,
    read_join_command,
    shell_value,
    write_join_configuration,
)
from labconfig.model import SUPPORTED_TENANT_MINORS

HASH = "sha256:" + "0123456789abcdef" * 4
DISCOVERY = TokenDiscovery("172.30.255.205:6443", "abcdef.0123456789abcdef", HASH)
JOIN_COMMAND = (
    f"kubeadm join 172.30.255.205:6443 --token abcdef.0123456789abcdef "
    f"--discovery-token-ca-cert-hash {HASH} "  # kubeadm ends the line with a space
)


@pytest.mark.upstream("kubeadm-join-config-v1beta4")
def test_every_supported_tenant_minor_reads_v1beta4():
    """The kubeadm that joins has the tenant's minor; v1beta4 is read from v1.31 on."""
    assert JOIN_API_VERSION == "kubeadm.k8s.io/v1beta4"
    assert FIRST_MINOR_WITH_V1BETA4 == (1, 31)
    assert (1, SUPPORTED_TENANT_MINORS.start) >= FIRST_MINOR_WITH_V1BETA4


@pytest.mark.upstream("kubeadm-join-config-v1beta4")
def test_a_join_configuration_holds_discovery_and_registration_in_v1beta4_shape():
    text = join_configuration(
        DISCOVERY,
        node_labels="gpu=on,zone=a",
        node_name="gpu-host-1",
        cri_socket="unix:///run/containerd/containerd.sock",
        ignore_preflight_errors=("Swap", "FileExisting"),
    )
    assert text == (
        "apiVersion: kubeadm.k8s.io/v1beta4\n"
        "kind: JoinConfiguration\n"
        "discovery:\n"
        "  bootstrapToken:\n"
        "    apiServerEndpoint: 172.30.255.205:6443\n"
        "    token: abcdef.0123456789abcdef\n"
        "    caCertHashes:\n"
        f"    - {HASH}\n"
        "nodeRegistration:\n"
        "  name: gpu-host-1\n"
        "  criSocket: unix:///run/containerd/containerd.sock\n"
        "  kubeletExtraArgs:\n"
        "  - name: node-labels\n"
        "    value: gpu=on,zone=a\n"
        "  ignorePreflightErrors:\n"
        "  - Swap\n"
        "  - FileExisting\n"
    )


def test_a_join_configuration_leaves_out_what_is_not_given():
    """kubeadm's defaults then apply: the hostname, the detected CRI, no extra arguments."""
    config = yaml.safe_load(join_configuration(DISCOVERY))
    assert config["nodeRegistration"] == {}
    assert config["discovery"]["bootstrapToken"]["caCertHashes"] == [HASH]


def test_a_token_of_digits_stays_a_string():
    discovery = TokenDiscovery("10.0.0.1:6443", "012345.0123456789012345", HASH)
    token = yaml.safe_load(join_configuration(discovery))["discovery"]["bootstrapToken"]["token"]
    assert token == "012345.0123456789012345"


def test_values_the_script_fills_in_are_double_quoted_placeholders():
    config = join_configuration(SCRIPT_DISCOVERY, node_labels=shell_value("NODE_LABELS"))
    assert '    apiServerEndpoint: "${endpoint}"\n' in config
    assert '    token: "${token}"\n' in config
    assert '    - "${ca_hash}"\n' in config
    assert '    value: "${NODE_LABELS}"\n' in config


def sh(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True
    )


@pytest.mark.upstream("kubeadm-print-join-command")
def test_the_join_command_gives_endpoint_token_and_hash():
    script = (
        "set -eu\n"
        + read_join_command("node")
        + 'printf "%s|%s|%s" "$endpoint" "$token" "$ca_hash"\n'
    )
    done = sh(script, join=JOIN_COMMAND)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"172.30.255.205:6443|abcdef.0123456789abcdef|{HASH}"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("abcdef.", "abcde."),  # a token id is 6 characters
        ("abcdef.", "abcdeF."),
        ("0123456789abcdef ", "0123456789abcde "),  # its secret 16
        (HASH, HASH[:-1]),  # a SHA-256 is 64 hex digits
        (HASH, HASH + "0"),
        (HASH, HASH.upper()),
        ("172.30.255.205:6443", '"172.30.255.205:6443'),  # no quote may reach the YAML
        ("172.30.255.205:6443", "172.30.255.205:6443\\"),
    ],
)
def test_a_join_command_of_another_shape_is_refused(old: str, new: str):
    script = "set -eu\n" + read_join_command("node") + "echo read\n"
    done = sh(script, join=JOIN_COMMAND.replace(old, new, 1))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "node: kubeadm token create --print-join-command printed 7 words, not the join command"
        " of one CA\n"
    )


def test_the_join_command_is_split_without_expanding_globs(tmp_path):
    """`set -f` while splitting: a word that is a glob stays that word (and is refused)."""
    (tmp_path / "kubeadm").write_text("")
    script = f"cd {tmp_path}\n" + read_join_command("node") + "echo read\n"
    done = sh(script, join=JOIN_COMMAND.replace("kubeadm", "kubeadm*", 1))
    assert done.returncode == 1
    assert "node: kubeadm token create --print-join-command printed 7 words" in done.stderr
    done = sh("set -eu\n" + read_join_command("node") + "echo *\n", join=JOIN_COMMAND)
    assert done.stdout != "*\n"  # globbing is on again afterwards


def test_the_written_configuration_fills_in_the_scripts_values(tmp_path):
    out = tmp_path / "join.yaml"
    script = (
        "set -eu\n"
        + read_join_command("node")
        + write_join_configuration(f"cat > {out}", node_labels=shell_value("NODE_LABELS"))
    )
    done = sh(script, join=JOIN_COMMAND, NODE_LABELS="gpu=on")
    assert done.returncode == 0, done.stderr
    expected = join_configuration(DISCOVERY, node_labels="gpu=on")
    assert yaml.safe_load(out.read_text()) == yaml.safe_load(expected)


@pytest.mark.parametrize("labels", ["gpu=$on", "gpu=`on`", "gpu=on\\"])
def test_a_value_the_shell_would_expand_is_refused(labels: str):
    with pytest.raises(ValueError, match="holds a character the shell expands"):
        write_join_configuration("cat", node_labels=labels)


def test_only_the_placeholders_are_left_to_the_shell():
    text = write_join_configuration("cat > f", node_labels="gpu=on", node_name="h")
    assert text.startswith("cat > f <<EOF\napiVersion: kubeadm.k8s.io/v1beta4\n")
    assert text.endswith("    value: gpu=on\nEOF\n")
    assert text.count("$") == 3  # endpoint, token, ca_hash
