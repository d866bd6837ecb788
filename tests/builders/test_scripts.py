"""The generated shell scripts, run for real on a fake host (tests/support/fake_host.py).

The fakes honour their inputs (which kubeconfig, which container state, which flags) and keep
the state a script changes, so each test asserts on effects: the node object deleted, the file
mode of the admin kubeconfig, the temp files gone, containerd's config after the merge.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from builders.kubeadm import JOIN_CONFIG_PATH
from builders.remote_scripts import (
    node_registered_script,
    prepare_script,
    remote_join_script,
    remote_reset_script,
    remote_upgrade_node_script,
)
from builders.scripts import (
    api_server_healthz_wait_script,
    control_plane_admission_wait_script,
    control_plane_version_wait_script,
    drain_for_upgrade_script,
    kind_cluster_config,
    kind_create_script,
    kind_delete_script,
    metallb_webhook_wait_script,
    node_delete_script,
    node_upgraded_script,
    worker_join_script,
)
from tests.support.fake_host import (
    CONTAINERD_SOCKET,
    JOIN_COMMAND,
    FakeHost,
    registered_labels,
)

IMAGE = "kindest/node:v1.35.0@sha256:" + "1" * 64
NODE = "tenant-a-worker-1"
TOKEN = JOIN_COMMAND.split()[4]
DISCOVERY = {
    "bootstrapToken": {
        "apiServerEndpoint": "172.30.255.205:6443",
        "token": TOKEN,
        "caCertHashes": ["sha256:" + "0" * 64],
    }
}
KIND_OWN_KUBELET_DEFAULTS = "KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service"
DOCKER_CONTAINERD_CONFIG = 'disabled_plugins = ["cri"]\n\n#root = "/var/lib/containerd"\n'


def kind_env(**extra: str) -> dict[str, str]:
    return {
        "KIND_CLUSTER_NAME": "lab",
        "KIND_CONFIG": kind_cluster_config("lab", IMAGE),
        "KIND_NODE_IMAGE": IMAGE,
        "KIND_EXPERIMENTAL_DOCKER_NETWORK": "kamaji-hami-lab",
        **extra,
    }


def tmp_files(host: FakeHost) -> list[Path]:
    """Files the scripts left in the temp directory they were given."""
    return sorted((host.state.root / "tmp").glob("*"))


def run(host: FakeHost, script: str, stdin: str = "", **env: str):
    (host.state.root / "tmp").mkdir(exist_ok=True)
    return host.run(script, stdin, TMPDIR=str(host.state.root / "tmp"), **env)


SCRIPTS = {
    "kind-create": kind_create_script(),
    "kind-delete": kind_delete_script(),
    "metallb-wait": metallb_webhook_wait_script(),
    "tcp-admission-wait": control_plane_admission_wait_script(),
    "api-healthz-wait": api_server_healthz_wait_script(),
    "worker-join": worker_join_script(),
    "node-delete": node_delete_script(),
    "node-registered": node_registered_script(),
    "prepare-lab": prepare_script("gpu-host-1", "v1.35.0", "nvml-mock"),
    "prepare-real-v1.36": prepare_script("gpu-host-1", "v1.36.0", "real"),
    "remote-join": remote_join_script("gpu-host-1", "gpu=on"),
    "remote-reset": remote_reset_script("gpu-host-1"),
    "remote-upgrade-node": remote_upgrade_node_script("gpu-host-1"),
    "drain-for-upgrade": drain_for_upgrade_script(),
    "node-upgraded": node_upgraded_script(),
    "version-wait": control_plane_version_wait_script(),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_generated_script_is_valid_strict_bash(name: str):
    script = SCRIPTS[name]
    assert script.startswith("set -eu\n")
    done = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- kind


def test_kind_config_is_ipv4_single_node_pinned():
    cfg = yaml.safe_load(kind_cluster_config("lab", "img@sha256:x"))
    assert cfg["networking"] == {"ipFamily": "ipv4"}
    assert cfg["nodes"] == [{"role": "control-plane", "image": "img@sha256:x"}]


@pytest.mark.upstream("kind-kubeconfig-flag")
def test_kind_create_on_the_lab_network_prints_only_the_kubeconfig(host: FakeHost):
    """m2: kind writes its context to a temp file (removed), never to the user's kubeconfig."""
    result = run(host, kind_create_script(), **kind_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout == "apiVersion: v1\nkind: Config\ncurrent-context: kind-lab\n"
    (create,) = [c for c in host.calls("kind") if c[1] == "create"]
    kubeconfig = create[create.index("--kubeconfig") + 1]
    assert kubeconfig.startswith(str(host.state.root / "tmp"))
    node = host.containers()["lab-control-plane"]
    assert (node["image"], node["networks"]) == (IMAGE, ["kamaji-hami-lab"])
    assert not (host.state.root / "home/.kube/config").exists()
    assert tmp_files(host) == []  # kind's kubeconfig and the config file are gone


def test_kind_create_reuses_the_lab_cluster(host: FakeHost):
    host.add_kind_cluster("lab", IMAGE, "kamaji-hami-lab")
    result = run(host, kind_create_script(), **kind_env())
    assert result.returncode == 0, result.stderr
    assert not [c for c in host.calls("kind") if c[1] == "create"]
    assert "reusing it" in result.stderr
    assert result.stdout == "kubeconfig-of-lab\n"


@pytest.mark.upstream("kind-node-container")
@pytest.mark.parametrize(
    ("image", "network", "named"),
    [
        (IMAGE, "kind", "on the network(s) 'kind', not kamaji-hami-lab"),
        ("kindest/node:v1.34.0", "kamaji-hami-lab", "runs 'kindest/node:v1.34.0', not " + IMAGE),
    ],
)
def test_kind_create_refuses_a_cluster_it_did_not_make(host, image, network, named):
    """m2: a leftover cluster of that name (kind's own dual-stack network, another image)."""
    host.add_kind_cluster("lab", image, network)
    result = run(host, kind_create_script(), **kind_env())
    assert result.returncode == 1
    assert named in result.stderr
    assert "kind delete cluster --name lab" in result.stderr
    assert result.stdout == ""  # no kubeconfig reaches the provider


@pytest.mark.upstream("kind-cluster-names-are-exact", "kind-kubeconfig-flag")
@pytest.mark.parametrize("others", [["lab-old"], ["la"], ["lab-old", "old-lab", "lab2"]])
def test_kind_create_takes_no_cluster_whose_name_only_begins_like_the_labs(host, others):
    """m2: `lab-old` (or `la`) is not the lab's `lab`: the lab's cluster is created, its own
    kubeconfig printed, and the other clusters and their nodes are left as they were."""
    for name in others:
        host.add_kind_cluster(name, "kindest/node:v1.34.0", "kind")
    result = run(host, kind_create_script(), **kind_env())
    assert result.returncode == 0, result.stderr
    assert "reusing" not in result.stderr and "exists" not in result.stderr
    (create,) = [c for c in host.calls("kind") if c[1] == "create"]
    assert create[create.index("--name") + 1] == "lab"
    assert result.stdout == "apiVersion: v1\nkind: Config\ncurrent-context: kind-lab\n"
    assert not [c for c in host.calls("docker") if any(f"{o}-control-plane" in c for o in others)]
    containers = host.containers()
    assert all(containers[f"{o}-control-plane"]["image"] == "kindest/node:v1.34.0" for o in others)
    assert sorted(host.state.load("kind", {})) == sorted([*others, "lab"])


@pytest.mark.upstream("kind-cluster-names-are-exact", "kind-node-container")
def test_kind_create_reuses_the_labs_cluster_beside_one_named_like_it(host: FakeHost):
    """Beside `lab-old` (another image, kind's own network) `lab` is still reused and its
    kubeconfig, not the other one's, is what the script prints."""
    host.add_kind_cluster("lab-old", "kindest/node:v1.34.0", "kind")
    host.add_kind_cluster("lab", IMAGE, "kamaji-hami-lab")
    result = run(host, kind_create_script(), **kind_env())
    assert result.returncode == 0, result.stderr
    assert "reusing it" in result.stderr
    assert not [c for c in host.calls("kind") if c[1] == "create"]
    assert [c for c in host.calls("kind") if c[1:3] == ["get", "kubeconfig"]] == [
        ["kind", "get", "kubeconfig", "--name", "lab"]
    ]
    assert result.stdout == "kubeconfig-of-lab\n"


@pytest.mark.upstream("kind-cluster-names-are-exact")
@pytest.mark.parametrize("lab_exists", [True, False])
def test_kind_delete_removes_the_labs_cluster_only(host: FakeHost, lab_exists: bool):
    """`lab-old` and its node survive a delete of `lab`, whether `lab` exists or not."""
    host.add_kind_cluster("lab-old", IMAGE, "kamaji-hami-lab")
    if lab_exists:
        host.add_kind_cluster("lab", IMAGE, "kamaji-hami-lab")
    result = run(host, kind_delete_script(), KIND_CLUSTER_NAME="lab")
    assert result.returncode == 0, result.stderr
    assert list(host.state.load("kind", {})) == ["lab-old"]
    assert list(host.containers()) == ["lab-old-control-plane"]
    (delete,) = host.calls("kind")
    assert delete[:5] == ["kind", "delete", "cluster", "--name", "lab"]


def test_kind_create_failure_stops_the_script(host: FakeHost):
    result = run(host, kind_create_script(), **kind_env(FAKE_KIND_CREATE_FAILS="1"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert not [c for c in host.calls("kind") if c[1] == "get" and c[2] == "kubeconfig"]
    assert tmp_files(host) == []


@pytest.mark.upstream("kind-kubeconfig-flag")
def test_kind_delete_leaves_the_users_kubeconfig_alone(host: FakeHost):
    host.add_kind_cluster("lab", IMAGE, "kamaji-hami-lab")
    result = run(host, kind_delete_script(), KIND_CLUSTER_NAME="lab")
    assert result.returncode == 0, result.stderr
    assert "lab-control-plane" not in host.containers()
    assert not (host.state.root / "home/.kube/config").exists()
    assert tmp_files(host) == []


# --------------------------------------------------------------------------- MetalLB


def test_metallb_wait_retries_until_the_webhook_admits_the_pool(host: FakeHost):
    result = run(
        host,
        metallb_webhook_wait_script(30),
        LAB_KUBECONFIG="management-kc",
        METALLB_MANIFEST="kind: IPAddressPool",
        FAKE_WEBHOOK_FAILS="2",
    )
    assert result.returncode == 0, result.stderr
    assert len([c for c in host.calls("kubectl") if "--dry-run=server" in c]) == 3
    assert host.calls("kubectl")[0][1:4] == ["-n", "metallb-system", "rollout"]
    assert tmp_files(host) == []


def test_metallb_wait_gives_up_with_the_webhook_error(host: FakeHost):
    result = run(
        host,
        metallb_webhook_wait_script(0),
        LAB_KUBECONFIG="kc",
        METALLB_MANIFEST="x",
        FAKE_WEBHOOK_FAILS="99",
    )
    assert result.returncode == 1
    assert "ipaddresspoolvalidationwebhook.metallb.io" in result.stderr
    assert tmp_files(host) == []


def test_metallb_wait_stops_when_the_controller_never_rolls_out(host: FakeHost):
    result = run(
        host,
        metallb_webhook_wait_script(30),
        LAB_KUBECONFIG="kc",
        METALLB_MANIFEST="x",
        FAKE_ROLLOUT_FAILS="1",
    )
    assert result.returncode == 1
    assert "timed out waiting for the condition" in result.stderr
    assert not [c for c in host.calls("kubectl") if "--dry-run=server" in c]
    assert tmp_files(host) == []


# --------------------------------------------------------------------------- container workers


def join(host: FakeHost, timeout: int = 30, labels: str = "gpu=on", **env: str):
    env = {
        "NODE_NAME": NODE,
        "NODE_LABELS": labels,
        "LAB_KUBECONFIG": host.tenant_kubeconfig,
        **env,
    }
    return run(host, worker_join_script(timeout), **env)


@pytest.mark.upstream(
    "kubelet-node-labels-at-registration",
    "kubeadm-join-config-v1beta4",
    "kubeadm-join-config-refuses-flags",
)
def test_join_registers_the_node_with_its_labels_from_the_join_configuration(host: FakeHost):
    """T6: the label comes with the registration, through kubeadm's kubeletExtraArgs; the
    node's own files stay as kind ships them."""
    root = host.add_container(NODE)
    host.set_tenant(token_failures=2)
    result = join(host)
    assert result.returncode == 0, result.stderr
    assert host.tenant_nodes() == {NODE: {"gpu": "on"}}
    assert host.join_configurations() == [
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            "discovery": DISCOVERY,
            "nodeRegistration": {
                "kubeletExtraArgs": [{"name": "node-labels", "value": "gpu=on"}],
                "ignorePreflightErrors": ["SystemVerification", "FileExisting", "Swap"],
            },
        }
    ]
    assert (root / "var/lib/kubelet/kubeadm-flags.env").read_text() == (
        'KUBELET_KUBEADM_ARGS="--node-labels=gpu=on"\n'
    )
    assert (root / "etc/default/kubelet").read_text() == KIND_OWN_KUBELET_DEFAULTS
    tokens = [c for c in host.calls("kubeadm") if c[1:3] == ["token", "create"]]
    assert len(tokens) == 3  # retried until Kamaji's bootstrap RBAC is there
    (joined,) = [c for c in host.calls("kubeadm") if c[1] == "join"]
    assert joined == ["kubeadm", "join", "--config", str(root) + JOIN_CONFIG_PATH]


@pytest.mark.upstream("kubelet-empty-node-labels")
def test_join_without_labels_registers_a_node_without_labels(host: FakeHost):
    """Simulated GPUs: NODE_LABELS is empty, and an empty --node-labels adds no label."""
    root = host.add_container(NODE)
    assert join(host, labels="").returncode == 0
    assert host.tenant_nodes() == {NODE: {}}
    (config,) = host.join_configurations()
    assert config["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-labels", "value": ""}]
    assert (root / "var/lib/kubelet/kubeadm-flags.env").read_text() == (
        'KUBELET_KUBEADM_ARGS="--node-labels="\n'
    )


def test_join_keeps_the_bootstrap_token_off_every_command_line(host: FakeHost):
    """The token goes from kubeadm's output to the 0600 config file on stdin; the file goes."""
    root = host.add_container(NODE)
    assert join(host).returncode == 0
    assert not [c for c in host.calls() if TOKEN in " ".join(c)]
    config = str(root) + JOIN_CONFIG_PATH
    assert [c[1] for c in host.calls("join-config")] == [f"{config} mode=600"]
    assert not (root / JOIN_CONFIG_PATH.lstrip("/")).exists()


@pytest.mark.upstream("kubeadm-print-join-command")
def test_join_reads_a_token_of_digits_as_a_string(host: FakeHost):
    """A token may be all digits: quoted in the config, it stays the token, not a number."""
    host.add_container(NODE)
    command = JOIN_COMMAND.replace(TOKEN, "012345.0123456789012345")
    host.set_tenant(join_command=command)
    result = join(host)
    assert result.returncode == 0, result.stderr
    (config,) = host.join_configurations()
    assert config["discovery"]["bootstrapToken"]["token"] == "012345.0123456789012345"


@pytest.mark.upstream("kubeadm-print-join-command")
@pytest.mark.parametrize(
    ("printed", "words"),
    [
        (JOIN_COMMAND + " --discovery-token-ca-cert-hash sha256:" + "1" * 64, 9),  # two CAs
        (JOIN_COMMAND.replace("--token", "--tokens"), 7),
        (JOIN_COMMAND.replace(TOKEN, TOKEN.upper()), 7),
        (JOIN_COMMAND.replace("sha256:", "sha1:"), 7),
        (JOIN_COMMAND.replace("172.30.255.205:6443", '"172.30.255.205:6443'), 7),
        (JOIN_COMMAND.split(" --discovery")[0], 5),
    ],
)
def test_join_stops_on_a_join_command_it_cannot_read(host: FakeHost, printed: str, words: int):
    """Anything but one CA's join command: no join, no token in the message, nothing left."""
    root = host.add_container(NODE)
    host.set_tenant(join_command=printed)
    result = join(host)
    assert result.returncode == 1
    assert result.stderr == (
        f"{NODE}: kubeadm token create --print-join-command printed {words} words, not the"
        " join command of one CA\n"
    )
    assert [c for c in host.calls("kubeadm") if c[1] == "join"] == []
    assert not (root / "etc/kubernetes/lab-admin.conf").exists()
    assert not (root / JOIN_CONFIG_PATH.lstrip("/")).exists()


@pytest.mark.parametrize("labels", ['gpu="on"', "gpu=on\nzone=a", "gpu=$on", "gpu=on\\"])
def test_join_refuses_labels_that_would_break_the_config(host: FakeHost, labels: str):
    host.add_container(NODE)
    result = join(host, labels=labels)
    assert result.returncode == 1
    assert f"{NODE}: NODE_LABELS is not a list of labels: {labels}" in result.stderr
    assert host.calls("auth") == [] and host.tenant_nodes() == {}


def test_join_hands_the_admin_kubeconfig_over_privately(host: FakeHost):
    """Through stdin into a 0600 file, removed before the join; never on a command line."""
    root = host.add_container(NODE)
    assert join(host).returncode == 0
    auths = [c[1] for c in host.calls("auth")]
    assert auths == [f"kubeconfig={root}/etc/kubernetes/lab-admin.conf mode=600"]
    assert not (root / "etc/kubernetes/lab-admin.conf").exists()
    assert not any(host.tenant_kubeconfig in " ".join(c) for c in host.calls())


ADMIN = "/etc/kubernetes/lab-admin.conf"


def spy_on(host: FakeHost, wrapper: Path, body: str) -> Path:
    """Puts a `sh` spy in front of one fake tool: `body` runs, then the fake with "$@".
    Its log (one line per record) lands beside the fake host's own state."""
    fake = wrapper.with_name(wrapper.name + ".fake")
    if wrapper.is_symlink():
        fake.symlink_to(wrapper.resolve())
        wrapper.unlink()
    else:
        wrapper.rename(fake)
    log = host.state.root / f"spy-{wrapper.parent.name}-{wrapper.name}.log"
    wrapper.write_text(f'#!/bin/sh\nlog={shlex.quote(str(log))}\n{body}\nexec "$0.fake" "$@"\n')
    wrapper.chmod(0o755)
    return log


def spy_on_the_credential(host: FakeHost, root: Path) -> tuple[Path, Path]:
    """Host docker: its argv and, for `exec -i`, what reached its stdin.
    The node's kubeadm: at `join`, whether the admin kubeconfig is in the node, and its env."""
    docker = spy_on(
        host,
        host.state.root / "bin/docker",
        'printf "argv %s\\n" "$*" >>"$log"\n'
        'if [ "$1 $2" = "exec -i" ]; then\n'
        '  stdin=$(mktemp); cat >"$stdin"; sed "s/^/stdin /" "$stdin" >>"$log"\n'
        '  exec <"$stdin"; rm -f "$stdin"\nfi',
    )
    kubeadm = spy_on(
        host,
        host.state.root / "node-bin/kubeadm",
        f'if [ "$1" = join ]; then\n'
        f'  [ -e {shlex.quote(str(root) + ADMIN)} ] && echo admin-kubeconfig-present >>"$log"\n'
        '  env | sed "s/^/env /" >>"$log"\nfi',
    )
    return docker, kubeadm


@pytest.mark.upstream("docker-exec-env-only-from-its-flags")
@pytest.mark.parametrize(
    ("tenant", "code"),
    [({}, 0), ({"token_failures": 99}, 1), ({"join_fails": True}, 1)],
    ids=["joins", "no-token", "join-fails"],
)
def test_the_admin_kubeconfig_reaches_the_node_on_stdin_only_and_is_gone_before_the_join(
    host: FakeHost, tenant: dict, code: int
):
    """LAB_KUBECONFIG (the tenant's admin) goes to the node once, on the stdin of the one
    `docker exec -i` that writes it under umask 077; it is on no command line and in no
    environment a docker exec passes on (none takes -e), never in the script's output, gone
    from the node before `kubeadm join` runs, and gone when the script fails too."""
    admin = "apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: s3cr3t}}]"
    host.set_tenant(kubeconfig=admin, **tenant)
    root = host.add_container(NODE)
    docker_log, kubeadm_log = spy_on_the_credential(host, root)
    result = join(host, timeout=0 if tenant.get("token_failures") else 30)
    assert result.returncode == code, result.stderr
    assert "s3cr3t" not in result.stdout + result.stderr
    logged = docker_log.read_text().splitlines()
    argv = [line.removeprefix("argv ") for line in logged if line.startswith("argv ")]
    assert not [a for a in argv if "s3cr3t" in a or {"-e", "--env", "--env-file"} & {*a.split()}]
    stdin = [line.removeprefix("stdin ") for line in logged if line.startswith("stdin ")]
    assert stdin[:3] == admin.splitlines()  # the first `exec -i` is the kubeconfig's write
    assert next(a for a in argv if a.startswith("exec -i")) == (
        f"exec -i {NODE} sh -c umask 077 && cat > {ADMIN}"
    )
    assert sum("s3cr3t" in line for line in stdin) == 1
    if code == 0 or tenant.get("join_fails"):
        assert [c[1] for c in host.calls("kubeadm")].count("join") == 1
        assert "admin-kubeconfig-present" not in kubeadm_log.read_text()
        assert "s3cr3t" not in kubeadm_log.read_text()  # kubeadm join's environment
    assert not (root / ADMIN.lstrip("/")).exists()
    assert not (root / JOIN_CONFIG_PATH.lstrip("/")).exists()


def test_a_failed_write_of_the_admin_kubeconfig_leaves_no_copy_in_the_node(host: FakeHost):
    """The write into the node fails after `cat >` created the file (a full disk, a docker
    exec cut off): the script stops, and the partial copy of the credential goes with it."""
    root = host.add_container(NODE)
    cat, failing = shutil.which("cat"), host.state.root / "node-bin/cat"  # first on its PATH
    assert cat is not None
    failing.write_text(f'#!/bin/sh\n{shlex.quote(cat)} "$@"\nexit 1\n')
    failing.chmod(0o755)
    result = join(host)
    assert result.returncode == 1
    assert host.calls("auth") == []  # no token was asked for
    assert not (root / ADMIN.lstrip("/")).exists()


def test_join_is_skipped_for_a_joined_node(host: FakeHost):
    root = host.add_container(NODE)
    (root / "etc/kubernetes/kubelet.conf").write_text("joined")
    result = join(host)
    assert result.returncode == 0
    assert "already joined" in result.stderr
    assert host.calls("kubeadm") == []


def test_join_without_a_token_fails_and_removes_the_admin_kubeconfig(host: FakeHost):
    root = host.add_container(NODE)
    host.set_tenant(token_failures=99)
    result = join(host, timeout=0)
    assert result.returncode == 1
    assert f"{NODE}: no bootstrap token from the tenant within 0s" in result.stderr
    assert not (root / "etc/kubernetes/lab-admin.conf").exists()  # the trap removed it


def test_a_failed_kubeadm_join_fails_the_script(host: FakeHost):
    root = host.add_container(NODE)
    host.set_tenant(join_fails=True)
    result = join(host)
    assert result.returncode == 1
    assert "timed out waiting for the condition" in result.stderr
    assert f"{NODE} joined" not in result.stderr
    assert host.tenant_nodes() == {}
    assert not (root / JOIN_CONFIG_PATH.lstrip("/")).exists()  # the trap removed the token


def test_join_of_a_stopped_container_fails_before_touching_the_tenant(host: FakeHost):
    host.add_container(NODE, running=False)
    result = join(host)
    assert result.returncode == 1
    assert f"container {NODE} is not running" in result.stderr
    assert host.calls("auth") == []


@pytest.mark.upstream("docker-exec-needs-running-container")
@pytest.mark.parametrize("container", ["running", "stopped", "gone"])
def test_leave_deletes_the_node_whatever_state_the_container_is_in(host, container):
    """T8: destroy must not stop on a stopped or vanished worker; the node object goes anyway."""
    if container != "gone":
        host.add_container(NODE, running=container == "running")
    host.set_tenant(nodes={NODE: {}, "tenant-a-worker-2": {}})
    result = run(host, node_delete_script(), NODE_NAME=NODE, LAB_KUBECONFIG=host.tenant_kubeconfig)
    assert result.returncode == 0, result.stderr
    assert host.tenant_nodes() == {"tenant-a-worker-2": {}}
    assert host.calls("docker") == []
    assert tmp_files(host) == []  # the kubeconfig copy is gone


@pytest.mark.upstream("kamaji-admin-certificate-lifetime")
@pytest.mark.parametrize(
    ("tenant", "error"),
    [
        ({"unreachable": True}, "Unable to connect to the server"),
        ({"kubeconfig": "rotated-admin-kubeconfig"}, "Unauthorized"),
    ],
)
def test_leave_warns_but_never_blocks_destroy(host, tenant, error):
    """T13: a tenant that is gone, or no longer accepts the stored kubeconfig, only warns."""
    host.set_tenant(nodes={NODE: {}}, **tenant)
    result = run(
        host, node_delete_script(), NODE_NAME=NODE, LAB_KUBECONFIG="tenant-admin-kubeconfig"
    )
    assert result.returncode == 0
    assert error in result.stderr
    assert f"warning: could not delete node {NODE} from its tenant" in result.stderr
    assert tmp_files(host) == []


# --------------------------------------------------------------------------- remote hosts


def remote_config(host: FakeHost) -> str:
    return (host.state.host_root / "etc/containerd/config.toml").read_text()


def containerd_restarts(host: FakeHost) -> int:
    return host.calls().count(["systemctl", "restart", "containerd"])


def test_prepare_installs_containerd_and_kubeadm_on_a_bare_host(host: FakeHost):
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "nvml-mock"))
    assert result.returncode == 0, result.stderr
    assert "gpu-host-1: prepared for Kubernetes v1.35.0" in result.stderr
    assert host.remote()["kubeadm_version"] == "v1.35.0"
    config = remote_config(host)
    assert "SystemdCgroup = true" in config and "disabled_plugins = []" in config
    assert containerd_restarts(host) == 1


@pytest.mark.upstream("kubelet-fail-cgroupv1-flag")
def test_prepare_refuses_a_cgroup_v1_host_before_touching_it(host: FakeHost):
    """The tenant's kubelet config (Kamaji's, failCgroupV1 true) would stop the kubelet after
    kubeadm join on a cgroup v1 host; the prepare script says so first and changes nothing."""
    host.set_remote_cgroup_v2(False)
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "real"))
    assert result.returncode == 1
    assert "gpu-host-1: the host runs cgroup v1" in result.stderr
    assert "failCgroupV1: true" in result.stderr
    assert "systemd.unified_cgroup_hierarchy=1" in result.stderr
    assert host.calls() == [["id", "-u"]]  # no sudo, no package, no module, no sysctl
    assert not (host.state.host_root / "etc/modules-load.d/kamaji-hami-lab.conf").exists()


def test_prepare_stops_at_the_first_failing_step(host: FakeHost):
    host.set_remote(offline=True)
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "nvml-mock"))
    assert result.returncode == 100
    assert "Temporary failure resolving" in result.stderr
    assert "prepared" not in result.stderr
    assert host.calls("containerd") == []


@pytest.mark.parametrize("script", ["prepare", "join", "reset"])
def test_remote_scripts_need_passwordless_sudo(host: FakeHost, script: str):
    """A prompt would hang the SSH session: sudo -n fails at once, and so does the script."""
    host.set_remote(kubeadm_version="v1.35.0", sudo_password=True)
    scripts = {
        "prepare": prepare_script("h", "v1.35.0", "nvml-mock"),
        "join": remote_join_script("h", "gpu=on"),
        "reset": remote_reset_script("h"),
    }
    result = host.run_remote(scripts[script], stdin=host.tenant_kubeconfig)
    assert result.returncode == 1
    assert "sudo: a password is required" in result.stderr
    assert host.tenant_nodes() == {}


@pytest.mark.upstream("containerd-io-disables-cri")
def test_prepare_enables_cri_in_dockers_containerd_config(host: FakeHost):
    """T5: Docker's containerd.io ships `disabled_plugins = ["cri"]`; kubeadm would fail."""
    host.set_remote(containerd_version="1.7.27", kubeadm_version="v1.35.0")
    (host.state.host_root / "etc/containerd").mkdir(parents=True)
    (host.state.host_root / "etc/containerd/config.toml").write_text(DOCKER_CONTAINERD_CONFIG)
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "nvml-mock"))
    assert result.returncode == 0, result.stderr
    config = remote_config(host)
    assert '"cri"' not in config and "SystemdCgroup = true" in config
    backup = host.state.host_root / "etc/containerd/config.toml.bak"
    assert backup.read_text() == DOCKER_CONTAINERD_CONFIG
    assert containerd_restarts(host) == 1
    # ...and a second prepare changes nothing, so containerd is left running
    assert host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "nvml-mock")).returncode == 0
    assert containerd_restarts(host) == 1


def test_prepare_merges_an_existing_full_config(host: FakeHost):
    """T5: settings the host owner made stay; only CRI and the cgroup driver are changed."""
    host.set_remote(containerd_version="1.7.27", kubeadm_version="v1.35.0")
    (host.state.host_root / "etc/containerd").mkdir(parents=True)
    (host.state.host_root / "etc/containerd/config.toml").write_text(
        "version = 2\n"
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.zfs"]\n'
        'root = "/data/containerd"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "  SystemdCgroup = false\n"
    )
    assert host.run_remote(prepare_script("h", "v1.35.0", "nvml-mock")).returncode == 0
    assert remote_config(host) == (
        'version = 2\ndisabled_plugins = ["io.containerd.snapshotter.v1.zfs"]\n'
        'root = "/data/containerd"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "  SystemdCgroup = true\n"
    )


@pytest.mark.upstream("kubernetes-1-36-needs-containerd-2")
@pytest.mark.parametrize(("containerd", "ok"), [("1.7.27", False), ("2.1.4", True)])
def test_prepare_checks_containerd_against_the_tenant_version(host, containerd, ok):
    """T5: from Kubernetes v1.36 on, containerd 2.x; the failure names the fix."""
    host.set_remote(containerd_version=containerd, kubeadm_version="v1.36.0")
    result = host.run_remote(prepare_script("gpu-host-1", "v1.36.0", "nvml-mock"))
    assert (result.returncode == 0) is ok, result.stderr
    if not ok:
        too_old = "gpu-host-1: containerd 1.7.27 is too old for Kubernetes v1.36.0,"
        assert f"{too_old} which needs containerd 2.x" in result.stderr
        assert "install containerd 2.x" in result.stderr
        assert not (host.state.host_root / "etc/containerd/config.toml").exists()


RUNC_OPTIONS = {
    2: ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "runc", "options"),
    3: ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "runc", "options"),
}


def runc_options(config: dict) -> dict:
    """The CRI runc options containerd reads, at the table of the file's config version."""
    table = config
    for key in RUNC_OPTIONS[config["version"]]:
        table = table[key]
    return table


@pytest.mark.upstream("containerd-default-config-systemd-cgroup")
@pytest.mark.parametrize(
    ("containerd", "kubernetes", "version"),
    [
        ("1.7.27", "v1.35.0", 2),
        ("2.0.0", "v1.36.0", 3),  # the key left out of the defaults
        ("2.1.4", "v1.36.0", 3),  # the key left out of the defaults
        ("2.0.7", "v1.36.0", 3),  # the backport of containerd#12244
        ("2.1.5", "v1.36.0", 3),
        ("2.2.1", "v1.36.0", 3),
    ],
)
def test_prepare_sets_the_systemd_cgroup_driver_in_containerds_defaults(
    host: FakeHost, containerd: str, kubernetes: str, version: int
):
    """T5: containerd 2.0.0-2.0.6 and 2.1.0-2.1.4 print no `SystemdCgroup` in their default
    config (containerd#12101): the key is added to the runc options of the file's version,
    the file stays TOML that containerd loads, and a second prepare changes nothing."""
    host.set_remote(containerd_version=containerd, kubeadm_version=kubernetes)
    result = host.run_remote(prepare_script("gpu-host-1", kubernetes, "nvml-mock"))
    assert result.returncode == 0, result.stderr
    text = remote_config(host)
    config = tomllib.loads(text)
    assert config["version"] == version
    options = runc_options(config)
    assert options["SystemdCgroup"] is True
    assert options["BinaryName"] == ""  # containerd's other defaults stay
    assert text.count("SystemdCgroup") == 1
    assert containerd_restarts(host) == 1
    assert host.run_remote(prepare_script("gpu-host-1", kubernetes, "nvml-mock")).returncode == 0
    assert (remote_config(host), containerd_restarts(host)) == (text, 1)


def test_prepare_of_a_real_gpu_host_needs_the_driver(host: FakeHost):
    host.set_remote(containerd_version="2.1.4", kubeadm_version="v1.35.0")
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "real"))
    assert result.returncode == 1
    assert "gpu-host-1: no working NVIDIA driver (nvidia-smi failed)" in result.stderr
    host.set_remote(gpus=["NVIDIA L4"])
    result = host.run_remote(prepare_script("gpu-host-1", "v1.35.0", "real"))
    assert result.returncode == 0, result.stderr
    assert "runtimes.nvidia" in remote_config(host)


@pytest.mark.upstream("kubeadm-needs-cri-socket-with-two-runtimes", "kubeadm-join-config-v1beta4")
def test_remote_join_names_the_cri_socket_and_registers_the_label(host: FakeHost):
    """T12 and T6: a host with containerd and cri-dockerd joins; the node is a GPU node."""
    host.set_remote(
        kubeadm_version="v1.35.0",
        cri_sockets=[CONTAINERD_SOCKET, "unix:///var/run/cri-dockerd.sock"],
    )
    result = host.run_remote(
        remote_join_script("gpu-host-1", "gpu=on"), stdin=host.tenant_kubeconfig
    )
    assert result.returncode == 0, result.stderr
    assert host.tenant_nodes() == {"gpu-host-1": {"gpu": "on"}}
    assert host.join_configurations() == [
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "JoinConfiguration",
            "discovery": DISCOVERY,
            "nodeRegistration": {
                "name": "gpu-host-1",
                "criSocket": CONTAINERD_SOCKET,
                "kubeletExtraArgs": [{"name": "node-labels", "value": "gpu=on"}],
            },
        }
    ]
    config = host.state.host_root / JOIN_CONFIG_PATH.lstrip("/")
    (joined,) = [c for c in host.calls("kubeadm") if c[1] == "join"]
    assert joined == ["kubeadm", "join", "--config", str(config)]
    assert [c[1] for c in host.calls("join-config")] == [f"{config} mode=600"]
    admin = host.state.host_root / "etc/kubernetes/lab-admin.conf"
    assert [c[1] for c in host.calls("auth")] == [f"kubeconfig={admin} mode=600"]
    assert not admin.exists() and not config.exists()
    assert not [c for c in host.calls() if TOKEN in " ".join(c)]


def test_remote_join_of_a_joined_host_only_reads_stdin(host: FakeHost):
    (host.state.host_root / "etc/kubernetes").mkdir(parents=True)
    (host.state.host_root / "etc/kubernetes/kubelet.conf").write_text("joined")
    result = host.run_remote(remote_join_script("gpu-host-1", "gpu=on"), stdin="kc")
    assert result.returncode == 0
    assert "gpu-host-1 already joined" in result.stderr
    assert host.calls("kubeadm") == []


def test_remote_join_without_a_token_removes_the_admin_kubeconfig(host: FakeHost):
    host.set_remote(kubeadm_version="v1.35.0")
    result = host.run_remote(remote_join_script("h", "", 0), stdin="wrong-kubeconfig")
    assert result.returncode == 1
    assert "h: no bootstrap token from the tenant within 0s" in result.stderr
    assert not (host.state.host_root / "etc/kubernetes/lab-admin.conf").exists()


@pytest.mark.upstream("kubeadm-reset-leaves-cni-state")
def test_remote_reset_removes_flannels_state_and_the_labels(host: FakeHost):
    """T12: after reset the host can join again with nothing of the old node left."""
    host.set_remote(
        kubeadm_version="v1.35.0",
        cri_sockets=[CONTAINERD_SOCKET, "unix:///var/run/cri-dockerd.sock"],
        links=["flannel.1"],
    )
    host.run_remote(remote_join_script("gpu-host-1", "gpu=on"), stdin=host.tenant_kubeconfig)
    conflist = host.state.host_root / "etc/cni/net.d/10-flannel.conflist"
    conflist.parent.mkdir(parents=True)
    conflist.write_text("{}")
    result = host.run_remote(remote_reset_script("gpu-host-1"))
    assert result.returncode == 0, result.stderr
    assert not conflist.exists()
    assert host.remote()["links"] == []
    assert not (host.state.host_root / "etc/kubernetes/kubelet.conf").exists()
    assert registered_labels(host.state.host_root) == {}
    # a second reset (nothing left to remove) still succeeds
    assert host.run_remote(remote_reset_script("gpu-host-1")).returncode == 0


def test_remote_reset_goes_on_when_kubeadm_reset_fails(host: FakeHost):
    """Destroy must not stop on a host whose reset fails; the CNI state still goes."""
    host.set_remote(kubeadm_version="v1.35.0", reset_fails=True, links=["flannel.1"])
    result = host.run_remote(remote_reset_script("gpu-host-1"))
    assert result.returncode == 0
    assert "gpu-host-1: kubeadm reset failed" in result.stderr
    assert host.remote()["links"] == []


def test_registered_waits_for_the_node_object(host: FakeHost):
    env = {"NODE_NAME": "gpu-host-1", "LAB_KUBECONFIG": host.tenant_kubeconfig}
    missing = run(host, node_registered_script(0), **env)
    assert missing.returncode == 1
    assert "gpu-host-1 did not register within 0s" in missing.stderr
    host.set_tenant(nodes={"gpu-host-1": {}})
    assert run(host, node_registered_script(0), **env).returncode == 0
    assert tmp_files(host) == []


def test_a_failed_write_of_the_admin_kubeconfig_leaves_no_copy_on_the_remote_host(host: FakeHost):
    """As in a worker container: the remote join's cleanup is armed before the write, so a
    write that fails after `cat >` created the file leaves no partial credential behind."""
    host.set_remote(kubeadm_version="v1.35.0")
    cat, failing = shutil.which("cat"), host.state.root / "host-bin/cat"  # first on its PATH
    assert cat is not None and not failing.exists()
    failing.write_text(f'#!/bin/sh\n{shlex.quote(cat)} "$@"\nexit 1\n')
    failing.chmod(0o755)
    result = host.run_remote(
        remote_join_script("gpu-host-1", "gpu=on"), stdin=host.tenant_kubeconfig
    )
    assert result.returncode == 1
    assert host.calls("kubeadm") == []  # no token was asked for
    assert not (host.state.host_root / "etc/kubernetes/lab-admin.conf").exists()


# --------------------------------------------------------------------------- leave: the drain


def kubectl_verbs(host: FakeHost) -> list[str]:
    words = (
        [word for word in call[1:] if not word.startswith("-")] for call in host.calls("kubectl")
    )
    return [" ".join(found[:2]) for found in words]


def test_leave_drains_the_node_before_deleting_it(host: FakeHost):
    """kubeadm's order for a node that leaves or is upgraded: what it runs is listed, then it is
    drained (DaemonSet pods stay, bare pods are deleted), and only then the Node goes."""
    host.set_tenant(nodes={NODE: {}})
    result = run(host, node_delete_script(), NODE_NAME=NODE, LAB_KUBECONFIG=host.tenant_kubeconfig)
    assert result.returncode == 0, result.stderr
    assert kubectl_verbs(host) == ["get node", "get pods", f"drain {NODE}", "delete node"]
    drain = host.calls("kubectl")[2]
    assert {"--ignore-daemonsets", "--delete-emptydir-data", "--force"} <= set(drain)
    assert "--timeout=120s" in drain
    listing = host.calls("kubectl")[1]
    assert f"spec.nodeName={NODE}" in listing
    assert f"draining {NODE}" in result.stderr
    assert host.tenant_nodes() == {}


def test_a_drain_that_does_not_finish_warns_and_the_node_still_goes(host: FakeHost):
    host.set_tenant(nodes={NODE: {}}, drain_fails=True)
    result = run(
        host, node_delete_script(30), NODE_NAME=NODE, LAB_KUBECONFIG=host.tenant_kubeconfig
    )
    assert result.returncode == 0, result.stderr
    assert "--timeout=30s" in host.calls("kubectl")[2]
    assert f"warning: {NODE} was not drained within 30s" in result.stderr
    assert host.tenant_nodes() == {}


def test_a_node_already_gone_is_not_drained(host: FakeHost):
    host.set_tenant(nodes={"tenant-a-worker-2": {}})
    result = run(host, node_delete_script(), NODE_NAME=NODE, LAB_KUBECONFIG=host.tenant_kubeconfig)
    assert result.returncode == 0, result.stderr
    assert kubectl_verbs(host) == ["get node", "delete node"]
    assert host.tenant_nodes() == {"tenant-a-worker-2": {}}


# --------------------------------------------------------------------------- remote upgrades


def on_tenant(host: FakeHost, version: str = "v1.36.4") -> dict[str, str]:
    return {"NODE_NAME": "gpu-host-1", "VERSION": version, "LAB_KUBECONFIG": host.tenant_kubeconfig}


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        ({}, "gpu-host-1 is not in the tenant yet: nothing to drain"),
        ({"gpu-host-1": {"kubeletVersion": "v1.36.4"}}, "gpu-host-1 already runs v1.36.4"),
    ],
)
def test_the_upgrade_drain_leaves_a_new_or_current_host_alone(host: FakeHost, nodes, said):
    host.set_tenant(nodes=nodes)
    result = run(host, drain_for_upgrade_script(), **on_tenant(host))
    assert result.returncode == 0, result.stderr
    assert said in result.stderr
    assert "drain" not in kubectl_verbs(host)[-1]


def test_the_upgrade_drain_drains_a_host_on_the_old_version(host: FakeHost):
    host.set_tenant(nodes={"gpu-host-1": {"kubeletVersion": "v1.35.8"}})
    result = run(host, drain_for_upgrade_script(), **on_tenant(host))
    assert result.returncode == 0, result.stderr
    assert "draining gpu-host-1 for its upgrade from v1.35.8 to v1.36.4" in result.stderr
    assert kubectl_verbs(host) == ["get node", "get pods", "drain gpu-host-1"]
    assert host.tenant_nodes()["gpu-host-1"]["unschedulable"] is True


def test_an_upgrade_drain_that_does_not_finish_stops_the_upgrade(host: FakeHost):
    """Unlike a leave: the host keeps its pods and stays cordoned, and pulumi up stops there."""
    host.set_tenant(nodes={"gpu-host-1": {"kubeletVersion": "v1.35.8"}}, drain_fails=True)
    result = run(host, drain_for_upgrade_script(45), **on_tenant(host))
    assert result.returncode == 1
    assert "gpu-host-1 was not drained within 45s, so its upgrade stops here" in result.stderr
    assert "gpu-host-1" in host.tenant_nodes()


def test_a_host_at_the_version_is_uncordoned(host: FakeHost):
    host.set_tenant(nodes={"gpu-host-1": {"kubeletVersion": "v1.36.4", "unschedulable": True}})
    result = run(host, node_upgraded_script(), **on_tenant(host))
    assert result.returncode == 0, result.stderr
    assert "uncordon gpu-host-1" in kubectl_verbs(host)
    assert "unschedulable" not in host.tenant_nodes()["gpu-host-1"]
    assert "gpu-host-1 runs v1.36.4, schedulable" in result.stderr


def test_a_host_whose_kubelet_stays_old_fails_and_stays_cordoned(host: FakeHost):
    host.set_tenant(nodes={"gpu-host-1": {"kubeletVersion": "v1.35.8", "unschedulable": True}})
    result = run(host, node_upgraded_script(2, 1), **on_tenant(host))
    assert result.returncode == 1
    assert "gpu-host-1's kubelet does not report v1.36.4 after 2s" in result.stderr
    assert host.tenant_nodes()["gpu-host-1"]["unschedulable"] is True


@pytest.mark.upstream("kubeadm-upgrade-node-on-a-worker")
def test_kubeadm_upgrade_node_runs_only_on_a_joined_host(host: FakeHost):
    fresh = host.run_remote(remote_upgrade_node_script("gpu-host-1"))
    assert fresh.returncode == 0, fresh.stderr
    assert "gpu-host-1: not joined yet: nothing to upgrade" in fresh.stderr
    assert host.calls("kubeadm") == []
    prepared = host.run_remote(prepare_script("gpu-host-1", "v1.35.8", "nvml-mock"))
    assert prepared.returncode == 0, prepared.stderr  # kubeadm and kubelet installed
    kubelet_conf = host.state.host_root / "etc/kubernetes/kubelet.conf"
    kubelet_conf.parent.mkdir(parents=True, exist_ok=True)
    kubelet_conf.write_text("joined")
    before = len(host.calls("kubeadm"))
    joined = host.run_remote(remote_upgrade_node_script("gpu-host-1"))
    assert joined.returncode == 0, joined.stderr
    assert host.calls("kubeadm")[before:] == [["kubeadm", "upgrade", "node"]]
    assert ["systemctl", "restart", "kubelet"] in host.calls("systemctl")


@pytest.mark.parametrize("ready", ["False", "Unknown"])
def test_a_node_whose_kubelet_is_gone_is_deleted_without_a_drain(host: FakeHost, ready: str):
    """Nothing would end its pods: a drain would only wait out its whole timeout (measured on
    a real API server: a 15 s timeout took 15.8 s, the pod still Terminating)."""
    host.set_tenant(nodes={NODE: {"ready": ready}})
    result = run(host, node_delete_script(), NODE_NAME=NODE, LAB_KUBECONFIG=host.tenant_kubeconfig)
    assert result.returncode == 0, result.stderr
    assert kubectl_verbs(host) == ["get node", "delete node"]
    assert f"{NODE} is not Ready (its kubelet is stopped or gone): not drained" in result.stderr
    assert host.tenant_nodes() == {}
