"""The real Pulumi CLI (v3.274.1) previews every stack on a fresh local backend.

It must accept the project (Pulumi.yaml) and the stack's config, and run the program: the
program's components show up in the plan. The run then stops where this machine has to stop:
at the first provider plugin download (docker, command, kubernetes; downloads are pointed at a
closed loopback port, so the result does not depend on the network). That must be the only
error.
B1 was the counter-example: the CLI refused the config before the program ran.
"""

from __future__ import annotations

import re

import pytest
from binaries import bin_path
from pulumi_workspace import PulumiWorkspace, error_lines

STACKS = ("lab", "nvml", "gpu", "dra")
PLUGIN_ERROR = re.compile(
    r"error: Could not automatically download and install resource plugin "
    r"'pulumi-resource-(docker|command|kubernetes)' at version v[\d.]+"
)
# The first component each stack's program registers, before any provider is needed: its
# presence in the plan shows the program ran (how far it gets depends on which provider the
# program needs first, which is no concern of this test).
FIRST_COMPONENT = {
    "lab": "HostPreflight preflight",
    "nvml": "ExistingManagementCluster management",
    "gpu": "ExistingManagementCluster management",
    "dra": "ExistingManagementCluster management",
}


@pytest.fixture
def workspace(tmp_path) -> PulumiWorkspace:
    assert bin_path("pulumi").exists(), "not built: run `make test-real`"
    return PulumiWorkspace(tmp_path)


@pytest.mark.upstream(
    "pulumi-secret-config-validated-before-the-program",
    "pulumi-backend-url-env-first",
    "pulumi-missing-plugin-fails-at-first-use",
)
@pytest.mark.parametrize("stack", STACKS)
def test_pulumi_preview_runs_the_program_up_to_the_first_plugin_download(stack, workspace):
    """B1: the CLI validates config before the program runs; a `secret: true` key with a
    plaintext default stopped every stack there ("must be encrypted as it's secret")."""
    workspace.init_stack(stack)
    result = workspace.pulumi("preview", "--stack", stack, check=False)
    output = result.stdout + result.stderr
    assert "validating stack config" not in output, output
    assert "must be encrypted as it's secret" not in output
    assert f"kamaji-hami-lab:index:{FIRST_COMPONENT[stack]} create" in output, output
    errors = error_lines(output)
    assert errors, output
    assert all(PLUGIN_ERROR.match(line) for line in errors), "\n".join(errors)
    assert result.returncode == 1, output


def test_the_cli_still_refuses_a_secret_key_with_a_plaintext_default(workspace):
    """B1, the other way round: the same CLI, the same backend, a project key made
    `secret: true` with a plaintext default again: the preview stops before the program."""
    pulumi_yaml = workspace.project / "Pulumi.yaml"
    text = pulumi_yaml.read_text()
    key = "  kamaji-hami-lab:sshPrivateKey:\n    type: string\n"
    assert key in text
    pulumi_yaml.write_text(text.replace(key, key + "    secret: true\n"))
    workspace.init_stack("lab")
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    assert result.returncode == 1
    assert error_lines(result.stdout + result.stderr) == [
        "error: validating stack config: Stack 'lab' with configuration key "
        "'kamaji-hami-lab:sshPrivateKey' must be encrypted as it's secret"
    ]


def test_a_mirrored_site_set_as_the_docs_say_reaches_the_program(workspace):
    """registryMirrors and chartSources set with `--path`, the mirror credentials with
    `--secret` (docs/mirrored-site.md): the CLI takes them and the program runs with them."""
    workspace.init_stack("lab")
    for path, value in (
        ("registryMirrors[0].registry", "docker.io"),
        ("registryMirrors[0].mirror", "harbor.example/dockerhub-proxy"),
        ("registryMirrors[1].registry", "*"),
        ("registryMirrors[1].mirror", "harbor.example/all-proxy"),
        ("chartSources.hami", "oci://harbor.example/charts"),
    ):
        workspace.pulumi("config", "set", "--stack", "lab", "--path", path, value)
    workspace.pulumi(
        "config", "set", "--secret", "--stack", "lab", "registryMirrorAuth",
        input='{"harbor.example": "robot:pw"}',
    )  # fmt: skip
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    output = result.stdout + result.stderr
    assert "kamaji-hami-lab:index:HostPreflight preflight create" in output, output
    assert all(PLUGIN_ERROR.match(line) for line in error_lines(output)), output
    assert "robot:pw" not in output
    # A mistake in them stops the program with one line naming the key.
    workspace.pulumi("config", "set", "--stack", "lab", "--path", "chartSources.kamaji", "x")
    result = workspace.pulumi("preview", "--stack", "lab", check=False)
    errors = error_lines(result.stdout + result.stderr)
    assert errors == [
        "error: invalid stack config: chartSources: no chart is named 'kamaji': one of "
        "cert-manager, metallb, kamaji-etcd, flannel, hami, hami-dra, nvml-mock, prometheus, "
        "grafana "
        '(got {"hami": "oci://harbor.example/charts", "kamaji": "x"})'
    ], errors
