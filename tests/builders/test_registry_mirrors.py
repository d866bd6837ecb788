"""containerd's hosts.toml files for a mirrored site, as the nodes receive them."""

from __future__ import annotations

import stat
import subprocess

import pytest

from builders.registry_mirrors import (
    MARKER,
    files_environment,
    holds_credentials,
    hosts_toml,
    install_files_script,
    registry_files,
    remove_files_script,
)
from labconfig.mirrors import RegistryMirror
from tests.support.fake_tools import fake_tools, tool_env

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"


@pytest.mark.upstream("containerd-hosts-toml")
def test_a_pull_through_cache_at_the_root_of_its_host():
    mirror = RegistryMirror(registry="registry.k8s.io", mirror="cache.example:5000")
    assert hosts_toml(mirror) == (
        'server = "https://registry.k8s.io"\n'
        "\n"
        '[host."https://cache.example:5000"]\n'
        '  capabilities = ["pull", "resolve"]\n'
    )


@pytest.mark.upstream("containerd-hosts-toml")
def test_a_proxy_project_names_its_api_root_and_docker_hub_its_api_host():
    """A Harbor proxy project is reached at /v2/<project>: containerd must not add /v2 itself."""
    mirror = RegistryMirror(registry="docker.io", mirror="harbor.example/dockerhub-proxy", ca=CA)
    assert hosts_toml(mirror) == (
        'server = "https://registry-1.docker.io"\n'
        "\n"
        '[host."https://harbor.example/v2/dockerhub-proxy"]\n'
        '  capabilities = ["pull", "resolve"]\n'
        "  override_path = true\n"
        '  ca = "/etc/containerd/certs.d/docker.io/ca.crt"\n'
    )


@pytest.mark.upstream("containerd-hosts-toml")
def test_one_mirror_for_every_other_registry_has_no_upstream_server():
    mirror = RegistryMirror(registry="*", mirror="10.0.0.5:5000", plain_http=True)
    assert hosts_toml(mirror) == (
        '[host."http://10.0.0.5:5000"]\n  capabilities = ["pull", "resolve"]\n'
    )
    assert set(registry_files([mirror])) == {"/etc/containerd/certs.d/_default/hosts.toml", MARKER}


@pytest.mark.upstream("containerd-hosts-server-last")
def test_by_default_the_registry_itself_comes_after_the_mirror():
    """containerd asks `server` when the mirror fails: the registry, or for `_default` (no
    server written) each image's own registry."""
    for registry, server in (
        ("quay.io", "https://quay.io"),
        ("docker.io", "https://registry-1.docker.io"),
    ):
        text = hosts_toml(RegistryMirror(registry=registry, mirror="m.example"))
        assert text.startswith(f'server = "{server}"\n\n[host."https://m.example"]\n')
    assert "server" not in hosts_toml(RegistryMirror(registry="*", mirror="m.example"))


@pytest.mark.upstream("containerd-hosts-server-only", "containerd-hosts-server-last")
def test_a_mirror_only_mirror_is_the_server_and_no_host_comes_after_it():
    """`mirrorOnly`: the mirror, with its path, CA and credentials, is containerd's `server`,
    and no `[host]` table is left for containerd to try before it: the registry is never asked."""
    mirror = RegistryMirror(
        registry="docker.io", mirror="harbor.example/dockerhub-proxy", ca=CA, mirror_only=True
    )
    assert hosts_toml(mirror, "robot:pw") == (
        'server = "https://harbor.example/v2/dockerhub-proxy"\n'
        'capabilities = ["pull", "resolve"]\n'
        "override_path = true\n"
        'ca = "/etc/containerd/certs.d/docker.io/ca.crt"\n'
        "\n"
        "[header]\n"
        '  Authorization = "Basic cm9ib3Q6cHc="\n'
    )
    assert holds_credentials(hosts_toml(mirror, "robot:pw"))


@pytest.mark.upstream("containerd-hosts-server-only", "containerd-hosts-default-dir")
def test_a_mirror_only_mirror_for_every_registry_is_the_default_directorys_server():
    mirror = RegistryMirror(registry="*", mirror="10.0.0.5:5000", plain_http=True, mirror_only=True)
    files = registry_files([mirror])
    assert files["/etc/containerd/certs.d/_default/hosts.toml"] == (
        'server = "http://10.0.0.5:5000"\ncapabilities = ["pull", "resolve"]\n'
    )


def test_the_files_list_themselves_so_a_later_run_removes_them():
    files = registry_files(
        [
            RegistryMirror(registry="quay.io", mirror="q.example", ca=CA),
            RegistryMirror(registry="ghcr.io", mirror="g.example"),
        ]
    )
    assert files["/etc/containerd/certs.d/quay.io/ca.crt"] == CA + "\n"
    assert files[MARKER].splitlines() == sorted(files)
    assert registry_files([]) == {}


def test_the_files_reach_the_command_as_readable_text_one_variable_each():
    """So a preview's diff shows the lines of a hosts.toml that change, not an archive."""
    files = registry_files([RegistryMirror(registry="quay.io", mirror="q.example", ca=CA)])
    environment = files_environment(files)
    assert environment["REGISTRY_FILES"].split("\n") == sorted(files)
    for n, path in enumerate(sorted(files), 1):
        assert environment[f"REGISTRY_FILE_{n}"] == files[path]
    assert files_environment(dict(reversed(files.items()))) == environment


def test_the_scripts_replace_and_remove_only_what_the_program_wrote():
    install, remove = install_files_script(), remove_files_script()
    assert f"xargs rm -f < {MARKER}" in install and f"xargs rm -f < {MARKER}" in remove
    # The old files go before the new ones come: a dropped mirror leaves nothing behind.
    assert install.index("xargs rm -f") < install.index('cat > "$1"')
    # A container already gone (a destroy of a broken lab) is nothing to do.
    assert remove.splitlines()[1] == 'docker inspect "$NODE" >/dev/null 2>&1 || exit 0'


@pytest.mark.upstream("containerd-default-config-path")
def test_the_files_go_where_the_node_images_containerd_reads_them_by_default():
    """kindest/node's containerd 2 reads /etc/containerd/certs.d with no config change, so the
    program edits no containerd config: it only adds these files."""
    files = registry_files([RegistryMirror(registry="registry.k8s.io", mirror="m.example")])
    assert sorted(files) == [
        "/etc/containerd/certs.d/.kamaji-hami-lab-files",
        "/etc/containerd/certs.d/registry.k8s.io/hosts.toml",
    ]


@pytest.mark.upstream("containerd-cri-credentials-by-host")
def test_a_mirrors_credentials_are_a_basic_auth_header_for_that_host_only():
    mirror = RegistryMirror(registry="docker.io", mirror="harbor.example/hub")
    other = RegistryMirror(registry="quay.io", mirror="quay-cache.example")
    files = registry_files([mirror, other], {"harbor.example": "robot$lab:s3cret"})
    hub = files["/etc/containerd/certs.d/docker.io/hosts.toml"]
    assert hub.endswith(
        '  [host."https://harbor.example/v2/hub".header]\n'
        '    Authorization = "Basic cm9ib3QkbGFiOnMzY3JldA=="\n'
    )
    assert "Authorization" not in files["/etc/containerd/certs.d/quay.io/hosts.toml"]


# `docker exec [-i] NODE sh -c SCRIPT sh ARGS...` run here, the node's / under $NODE_ROOT, with
# the umask a `docker exec` starts with.
FAKE_DOCKER_EXEC = """\
[ "$1" = exec ] || exit 1
shift
[ "$1" = -i ] && shift
shift
args=()
for arg in "$@"; do args+=("${arg//\\/etc\\//$NODE_ROOT/etc/}"); done
umask 022
exec "${args[@]}"
"""


def test_only_the_file_with_credentials_is_readable_by_root_alone(tmp_path):
    """A hosts.toml with a mirror's Authorization header is 0600 inside the node, also where a
    file of that name was there before (0644, as the program wrote it before); the others and
    the CA stay 0644."""
    mirrors = [
        RegistryMirror(registry="docker.io", mirror="harbor.example/hub", ca=CA),
        RegistryMirror(registry="quay.io", mirror="quay-cache.example"),
    ]
    files = registry_files(mirrors, {"harbor.example": "robot$lab:s3cret"})
    root = tmp_path / "node"
    earlier = root / "etc/containerd/certs.d/docker.io/hosts.toml"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("an earlier file\n")
    earlier.chmod(0o644)
    fake_tools(tmp_path, {"docker": FAKE_DOCKER_EXEC})
    env = {**tool_env(tmp_path), **files_environment(files), "NODE": "n", "NODE_ROOT": str(root)}
    subprocess.run(["bash", "-c", install_files_script()], env=env, check=True)
    modes = {path: stat.S_IMODE((root / path.lstrip("/")).stat().st_mode) for path in files}
    assert modes == {
        path: 0o600 if "Authorization" in text else 0o644 for path, text in files.items()
    }
    assert modes["/etc/containerd/certs.d/docker.io/hosts.toml"] == 0o600
    assert (root / "etc/containerd/certs.d/docker.io/ca.crt").read_text() == CA + "\n"
