"""A mirrored site under Pulumi mocks: every node gets the mirrors before anything pulls, every
chart comes from the site's source, and a stack without them declares what it did before (the
snapshots hold that graph)."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
MIRRORS = [
    {"registry": "registry.k8s.io", "mirror": "harbor.example/k8s-proxy"},
    {"registry": "*", "mirror": "harbor.example/all-proxy"},
]
SOURCES = {
    "cert-manager": "oci://harbor.example/charts",
    "metallb": "https://harbor.example/chartrepo/metallb",
    "flannel": "oci://harbor.example/charts",
    "hami": "oci://harbor.example/charts",
}


@pytest.fixture(scope="module")
def mirrored() -> ProgramRun:
    return run_program({**lab_stack_config(), "registryMirrors": MIRRORS, "chartSources": SOURCES})


def files_of(command_inputs: dict) -> dict[str, str]:
    environment = command_inputs["environment"]
    paths = environment["REGISTRY_FILES"].split("\n")
    return {path: environment[f"REGISTRY_FILE_{n}"] for n, path in enumerate(paths, 1)}


def test_the_kind_node_pulls_through_the_mirrors_before_anything_is_installed(
    mirrored: ProgramRun,
):
    files = mirrored.named("management-registry-mirrors")
    assert files.inputs["environment"]["NODE"] == "kamaji-hami-lab-control-plane"
    written = files_of(files.inputs)
    assert (
        'host."https://harbor.example/v2/k8s-proxy"'
        in written["/etc/containerd/certs.d/registry.k8s.io/hosts.toml"]
    )
    assert "/etc/containerd/certs.d/_default/hosts.toml" in written
    kind = mirrored.named("management-kind")
    assert kind.urn in mirrored.depends_on(files.urn)
    # The provider waits for the files, so every release and object of the cluster does too.
    assert files.urn in mirrored.depends_on(mirrored.named("management-provider").urn)


def test_each_worker_gets_the_mirrors_before_it_joins(mirrored: ProgramRun):
    for node in ("tenant-a-worker-1", "tenant-b-worker-1"):
        files = mirrored.named(f"{node}-registry-mirrors")
        assert files.inputs["environment"]["NODE"] == node
        # A new container (its ID) gets them again.
        assert files.inputs["triggers"] == [f"{node}-id"]
        assert files.urn in mirrored.depends_on(mirrored.named(f"{node}-join").urn)


def repo_of(inputs: dict) -> str | None:
    return inputs.get("repositoryOpts", {}).get("repo")


def test_every_chart_comes_from_the_sites_source(mirrored: ProgramRun):
    charts = {
        r.name: (r.inputs["name"], r.inputs["chart"], repo_of(r.inputs))
        for r in mirrored.of_type(RELEASE)
        if not r.inputs["chart"].startswith("./")  # Kamaji's own charts: from kamajiGitUrl
    }  # fmt: skip
    assert charts["kamaji-cert-manager"] == (
        "cert-manager", "oci://harbor.example/charts/cert-manager", None,
    )  # fmt: skip
    assert charts["metallb-chart"] == (
        "metallb", "metallb", "https://harbor.example/chartrepo/metallb",
    )  # fmt: skip
    assert charts["tenant-a-hami-chart"] == ("hami", "oci://harbor.example/charts/hami", None)
    assert charts["tenant-b-cni-chart"] == (
        "flannel", "oci://harbor.example/charts/flannel", None,
    )  # fmt: skip


def test_labcheck_expects_in_each_node_what_its_command_writes_there():
    """The spec labcheck reads names every node the program gives files, with the Command that
    writes them, and each file as that Command writes it (by digest, credentials redacted)."""
    config = {**lab_stack_config(), "registryMirrors": MIRRORS}
    config["registryMirrorAuth"] = '{"harbor.example": "robot:pw"}'
    run = run_program(config, secret_keys=["registryMirrorAuth"])
    spec = json.loads(run.named("validation-labcheck").inputs["environment"]["LABCHECK_SPEC"])
    expected = spec["registryFiles"]
    nodes = {**expected["managementNodes"]}
    for tenant_nodes in expected["tenantNodes"].values():
        nodes |= tenant_nodes
    commands = {r.name: r for r in run.resources if r.name.endswith("-registry-mirrors")}
    assert sorted(nodes.values()) == sorted(commands)
    for node, name in nodes.items():
        assert commands[name].inputs["environment"]["NODE"] == node
        written = files_of(commands[name].inputs)
        assert {f["path"]: f["sha256"] for f in expected["files"]} == {
            path: hashlib.sha256(text.encode()).hexdigest() for path, text in written.items()
        }
    assert "robot:pw" not in json.dumps(expected)


def test_a_stack_without_mirrors_has_no_mirror_commands():
    plain = run_program(lab_stack_config())
    assert not [r for r in plain.resources if r.name.endswith("-registry-mirrors")]


def test_with_credentials_the_files_are_a_secret_in_the_plan():
    config = {**lab_stack_config(), "registryMirrors": MIRRORS}
    config["registryMirrorAuth"] = '{"harbor.example": "robot:pw"}'
    run = run_program(config, secret_keys=["registryMirrorAuth"])
    files = run.named("management-registry-mirrors")
    # Only a hosts.toml that carries credentials is secret: the rest stays readable.
    paths = files.inputs["environment"]["REGISTRY_FILES"].split("\n")
    secret = {
        p for n, p in enumerate(paths, 1) if files.is_secret(f"environment.REGISTRY_FILE_{n}")
    }
    assert secret == {  # both mirrors are on the host with credentials
        "/etc/containerd/certs.d/_default/hosts.toml",
        "/etc/containerd/certs.d/registry.k8s.io/hosts.toml",
    }
    assert not files.is_secret("environment.REGISTRY_FILES")
    worker = run.named("tenant-a-worker-1-registry-mirrors")
    assert worker.is_secret("environment.REGISTRY_FILE_2")


def test_a_mirror_only_entry_reaches_every_node_as_the_registrys_only_server():
    only = [{**MIRRORS[0], "mirrorOnly": True}, MIRRORS[1]]
    run = run_program({**lab_stack_config(), "registryMirrors": only})
    for node in ("management", "tenant-a-worker-1"):
        written = files_of(run.named(f"{node}-registry-mirrors").inputs)
        k8s = written["/etc/containerd/certs.d/registry.k8s.io/hosts.toml"]
        assert k8s.startswith('server = "https://harbor.example/v2/k8s-proxy"\n')
        assert "[host." not in k8s and "registry.k8s.io" not in k8s.split("\n")[0]
        # the other entry keeps the fallback it had
        assert "[host." in written["/etc/containerd/certs.d/_default/hosts.toml"]
