"""The shared platform: kind cluster, its network, the management provider, Kamaji's charts.

Graph facts come from the program run under mocks; how the engine turns them into steps is
modelled on pulumi/pulumi `pkg/resource/deploy/step_generator.go` (see `replacement_steps`).
Scripts run against fake executables that record their calls.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from pulumi.runtime.rpc import UNKNOWN

from builders.kamaji import (
    KAMAJI_NAMESPACE,
    KAMAJI_RESOURCES,
    crds_values,
    etcd_quota_bytes,
    kamaji_values,
    quantity_bytes,
)
from components.platform.kamaji_chart import (
    CACHE_IN_PROJECT,
    KAMAJI_GIT_URL,
    PROJECT_DIR,
    ChartFetchFailed,
    chart_fetch_script,
    default_cache_root,
    ensure_chart_cache,
    fetch_environment,
    release_chart_path,
)
from components.platform.management import cluster_identity
from components.platform.network import (
    MTU_OPTION,
    MtuProbeFailed,
    bridge_options,
    creation_mtu,
    docker_default_bridge_mtu,
)
from components.tenant.control_plane import control_plane_identity
from components.tenant.workers import CONTROL_PLANE_LABEL
from labconfig.kamaji_sources import KAMAJI_SOURCES, kamaji_source
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    ProgramRun,
    Registration,
    lab_stack_config,
    run_program,
    stack_config,
)

LAB = lab_stack_config()
PROVIDER = "pulumi:providers:kubernetes"
COMMAND = "command:local:Command"
REMOTE_COMMAND = "command:remote:Command"
CONTAINER = "docker:index/container:Container"
TENANT_CONTROL_PLANE = "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane"
# The ForceNew inputs of docker_container among those the worker containers set
# (kreuzwerker/terraform-provider-docker `resource_docker_container.go`), by their Pulumi names.
CONTAINER_FORCE_NEW = {
    "name",
    "hostname",
    "image",
    "privileged",
    "securityOpts",
    "volumes",
    "cgroupnsMode",
    "tty",
    "envs",
    "labels",
    "networksAdvanced",
}


@pytest.fixture(scope="module")
def lab() -> ProgramRun:
    return run_program(LAB)


# --- the engine's replacement plan ------------------------------------------------------------


def _provider_urn(registration: Registration) -> str:
    return registration.provider.rsplit("::", 1)[0] if registration.provider else ""


def _diff_replaces(registration: Registration, unknown: set[str]) -> bool:
    """Whether the provider's Diff replaces `registration` when the inputs `unknown` turn
    unknown (they came from a resource being replaced). Modelled: the providers a lab
    resource that is not managed by a Kubernetes provider goes through; Kubernetes objects
    move with their provider. Any other resource is taken as updated in place."""
    if registration.type == PROVIDER:
        # pulumi-kubernetes DiffConfig: an identifier that changed (unknown counts) replaces;
        # one that is set and unchanged clears every replacement, the kubeconfig's included.
        if "clusterIdentifier" in registration.inputs:
            return "clusterIdentifier" in unknown
        return "kubeconfig" in unknown
    if registration.type in (COMMAND, REMOTE_COMMAND):
        # pulumi-go-provider's infer diff: an unknown input differs, and `triggers` is the only
        # replaceOnChanges input of pulumi-command; the environment only updates.
        return "triggers" in unknown
    if registration.type == CONTAINER:
        # terraform-plugin-sdk: a ForceNew attribute whose new value is computed RequiresNew.
        return bool(unknown & CONTAINER_FORCE_NEW)
    return False


def _dependents(run: ProgramRun, root: Registration) -> list[Registration]:
    """DependingOn(root): later resources reaching root through dependencies or provider."""
    reached = {root.urn}
    found = []
    for registration in run.resources[run.resources.index(root) + 1 :]:
        if reached & {*registration.dependencies, _provider_urn(registration)}:
            reached.add(registration.urn)
            found.append(registration)
    return found


def replacement_steps(
    run: ProgramRun, root: Registration, *, provider_asks_delete_first: bool = False
) -> list[tuple[str, str]]:
    """The delete and create steps of a replacement of `root`, in execution order.

    Create-before-delete (the default) creates the new `root` first and deletes the old one
    after every other step. Delete-before-replace (the resource option, or the provider's
    Diff: `provider_asks_delete_first`) first deletes, in reverse order, each dependent that
    must be replaced: one managed by a provider in the replace set, or one whose Diff
    replaces it once the inputs that came from the replace set are unknown
    (`calculateDependentReplacements`); the program then re-creates them ("recreating").
    """
    name = root.name
    if not (root.delete_before_replace or provider_asks_delete_first):
        return [("create", name), ("delete", name)]
    replace_set = {root.urn}
    replaced = []
    for dependent in _dependents(run, root):
        if not dependent.custom or dependent.read:
            continue
        unknown = {
            key for key, urns in dependent.property_dependencies.items() if replace_set & set(urns)
        }
        if _provider_urn(dependent) in replace_set or (
            unknown and _diff_replaces(dependent, unknown)
        ):
            replace_set.add(dependent.urn)
            replaced.append(dependent.name)
    return (
        [("delete", n) for n in reversed(replaced)]
        + [("delete", name), ("create", name)]
        + [("create", n) for n in replaced]
    )


def _managed_by(run: ProgramRun, provider: Registration) -> list[str]:
    """What the provider creates; its reads (`Resource.get`) are external, never deleted."""
    return [r.name for r in run.resources if _provider_urn(r) == provider.urn and not r.read]


@pytest.mark.upstream(
    "pulumi-engine-delete-before-replace-deletes-dependents-first",
    "pulumi-k8s-cluster-identifier-masks-kubeconfig-replace",
)
def test_replacing_the_kind_cluster_moves_everything_before_the_old_cluster_goes(lab: ProgramRun):
    """M1: a node image change replaces the kind Command. It is delete-before-replace, and the
    provider's identifier comes from it, so the engine deletes everything on the old cluster
    while that cluster still runs, then the cluster, then builds the new one and re-creates
    all of it there. Nothing deletes a cluster after the new one exists."""
    kind = lab.named("management-kind")
    provider = lab.named("management-provider")
    steps = replacement_steps(lab, kind)
    managed = _managed_by(lab, provider)
    assert {"kamaji-chart", "kamaji-crds", "metallb-chart", "tenant-a-control-plane"} <= set(
        managed
    )

    assert steps.count(("delete", kind.name)) == 1
    delete_cluster = steps.index(("delete", kind.name))
    create_cluster = steps.index(("create", kind.name))
    assert delete_cluster < create_cluster
    for name in [provider.name, *managed]:
        assert steps.index(("delete", name)) < delete_cluster, name
        assert steps.index(("create", name)) > create_cluster, name


def test_a_constant_identifier_would_leave_the_releases_on_the_deleted_cluster(lab: ProgramRun):
    """M1, the counter-case that pins the model: with the identifier as a plain string (no
    dependency on the kind Command) the provider survives the replacement, so nothing it
    manages is deleted before the cluster is."""
    provider = copy.deepcopy(lab.named("management-provider"))
    provider.property_dependencies["clusterIdentifier"] = []
    run = ProgramRun(resources=[provider if r.name == provider.name else r for r in lab.resources])
    steps = replacement_steps(run, run.named("management-kind"))
    assert ("delete", "management-provider") not in steps
    assert ("delete", "kamaji-chart") not in steps


# What a replacement of the kind cluster leaves alone: steps on the host, and the network the
# cluster stands on (replaced, when it is, before the cluster: see the network test below).
INDEPENDENT_OF_THE_KIND_CLUSTER = {
    "preflight-checks",  # checks the host
    "lab-network-bridge",  # the Docker network the kind node is attached to
    "tenant-a-workers-image",  # image pulls on the host
    "tenant-b-workers-image",
}
GPU = {**stack_config("gpu"), "sshPrivateKey": "ssh-key", "managementKubeconfig": FAKE_KUBECONFIG}


def _created(run: ProgramRun) -> list[Registration]:
    """What a run creates, so what a replacement may delete: custom resources, not reads."""
    return [r for r in run.resources if r.custom and not r.read]


def _moved(steps: list[tuple[str, str]], root: str) -> tuple[set[str], set[str]]:
    """Which resources are deleted before `root` is, and which are created after it is."""
    delete_root, create_root = steps.index(("delete", root)), steps.index(("create", root))
    deleted = {name for op, name in steps[:delete_root] if op == "delete"}
    created = {name for op, name in steps[create_root + 1 :] if op == "create"}
    return deleted, created


@pytest.mark.upstream(
    "pulumi-engine-delete-before-replace-deletes-dependents-first",
    "pulumi-k8s-cluster-identifier-masks-kubeconfig-replace",
    "pulumi-command-unknown-trigger-replaces",
    "docker-container-computed-force-new-replaces",
)
def test_replacing_the_kind_cluster_moves_every_resource_of_the_lab(lab: ProgramRun):
    """M1 (issue 9): every resource of the lab stack is either moved, i.e. deleted while the
    old cluster still runs and re-created once the new one exists (Kamaji, both tenants'
    control planes, gates, providers, worker containers and joins, flannel, HAMi, the agent,
    validation), or independent of the cluster (host steps, the network it is attached to).
    A resource added later that is neither fails here. Nothing is deleted after the new
    cluster exists, so the live cluster is never deleted."""
    kind = lab.named("management-kind")
    steps = replacement_steps(lab, kind)
    others = {r.name for r in _created(lab)} - {kind.name}
    assert others >= INDEPENDENT_OF_THE_KIND_CLUSTER
    must_move = others - INDEPENDENT_OF_THE_KIND_CLUSTER

    deleted, created = _moved(steps, kind.name)
    assert must_move - deleted == set()
    assert must_move - created == set()
    assert deleted == created == must_move
    create_cluster = steps.index(("create", kind.name))
    assert [step for step in steps[create_cluster:] if step[0] == "delete"] == []
    # Fixed names: a container replaced on its own also goes before its successor starts.
    assert all(container.delete_before_replace for container in lab.of_type(CONTAINER))
    # The join's delete removes the Node through the tenant, which still answers then.
    for tenant in ("tenant-a", "tenant-b"):
        join = steps.index(("delete", f"{tenant}-worker-1-join"))
        assert join < steps.index(("delete", f"{tenant}-control-plane")), tenant

    index = lab.by_urn()
    for registration in _created(lab):
        if registration.name in INDEPENDENT_OF_THE_KIND_CLUSTER:
            upstream = {index[urn].name for urn in lab.depends_on(registration.urn)}
            assert kind.name not in upstream, registration.name
    for read in (r for r in lab.resources if r.read):  # read again, after its gate re-ran
        upstream = {index[urn].name for urn in lab.depends_on(read.urn)}
        assert upstream & must_move, read.name


@pytest.mark.upstream(
    "pulumi-engine-delete-before-replace-deletes-dependents-first",
    "pulumi-k8s-cluster-identifier-masks-kubeconfig-replace",
    "pulumi-command-unknown-trigger-replaces",
    "docker-container-computed-force-new-replaces",
)
@pytest.mark.parametrize(
    ("name", "key", "left_behind"),
    [
        # A constant tenant identifier keeps the tenant provider, so all it manages.
        (
            "tenant-a-provider",
            "clusterIdentifier",
            {"tenant-a-provider", "tenant-a-cni-chart", "tenant-a-hami-chart"},
        ),
        # Without the control plane's identity in its labels the container stays, and the
        # join with it: an update only, which finds kubelet.conf and skips.
        ("tenant-a-worker-1", "labels", {"tenant-a-worker-1", "tenant-a-worker-1-join"}),
        # Without triggers the gate is updated in place, not re-run on the new cluster first.
        ("tenant-a-admission-ready", "triggers", {"tenant-a-admission-ready"}),
    ],
)
def test_an_input_that_does_not_come_from_the_cluster_leaves_resources_behind(
    lab: ProgramRun, name: str, key: str, left_behind: set[str]
):
    """M1, the counter-cases that pin the model: with that input a plain value (no
    dependency on the resources being replaced), those resources stay on the deleted
    cluster's state while everything else moves."""
    changed = copy.deepcopy(lab.named(name))
    changed.property_dependencies[key] = []
    run = ProgramRun(resources=[changed if r.name == name else r for r in lab.resources])
    deleted, _ = _moved(replacement_steps(run, run.named("management-kind")), "management-kind")
    assert left_behind.isdisjoint(deleted)
    assert {"tenant-a-control-plane", "tenant-b-provider", "tenant-b-worker-1"} <= deleted


def _run_stack(stack: str) -> ProgramRun:
    return run_program(GPU if stack == "gpu" else stack_config(stack), stack=stack)


@pytest.mark.upstream(
    "pulumi-k8s-named-replace-deletes-first",
    "pulumi-engine-delete-before-replace-deletes-dependents-first",
    "pulumi-k8s-cluster-identifier-masks-kubeconfig-replace",
    "pulumi-command-unknown-trigger-replaces",
    "docker-container-computed-force-new-replaces",
)
@pytest.mark.parametrize(
    ("stack", "tenant", "stays"),
    [
        ("lab", "tenant-a", {"tenant-a-workers-image"}),
        ("nvml", "tenant-nvml", {"tenant-nvml-workers-image"}),
        ("gpu", "team-a", {"gpu-host-1-prepare"}),  # installs packages on the host
    ],
)
def test_replacing_a_control_plane_moves_its_tenant_and_nothing_else(
    stack: str, tenant: str, stays: set[str]
):
    """M1 (issue 9), per tenant and in every stack: a re-created control plane (with the
    cluster, or on its own: pulumi-kubernetes deletes a named object first) takes with it
    its provider and all it manages, worker containers or remote joins, and validation;
    what it stands on (namespace, admission gate) and host steps stay, other tenants too."""
    run = _run_stack(stack)
    control_plane = run.named(f"{tenant}-control-plane")
    steps = replacement_steps(run, control_plane, provider_asks_delete_first=True)
    in_tenant = {r.name for r in run.subtree(tenant) if r.custom and not r.read}
    beneath = {f"{tenant}-namespace", f"{tenant}-admission-ready", control_plane.name}
    assert stays <= in_tenant
    must_move = (in_tenant - beneath - stays) | {"validation-labcheck"}

    deleted, created = _moved(steps, control_plane.name)
    assert deleted == created == must_move


@pytest.mark.upstream("pulumi-command-id-new-per-create")
def test_a_second_up_with_nothing_changed_replaces_nothing(lab: ProgramRun):
    """M1: the identifiers, triggers and container labels that replace things come from IDs
    kept in the state, never from a value of the run: a second `up`, and a preview of the
    lab as it is, see the same values, all known (an unknown one would plan a replacement)."""

    def replacing_inputs(run: ProgramRun) -> dict[str, dict]:
        keys = {
            COMMAND: {"triggers"},
            REMOTE_COMMAND: {"triggers"},
            PROVIDER: {"clusterIdentifier"},
            CONTAINER: CONTAINER_FORCE_NEW,
        }
        return {
            r.name: {key: r.inputs.get(key) for key in keys[r.type]}
            for r in run.resources
            if r.type in keys
        }

    first = replacing_inputs(lab)
    assert replacing_inputs(run_program(LAB)) == first
    preview = replacing_inputs(run_program(LAB, preview=True))
    assert preview == first
    assert UNKNOWN not in json.dumps(preview)

    address = lab.outputs["tenants"]["tenant-a"]["endpoint"].split("//")[1].split(":")[0]
    identity = control_plane_identity("tenant-a", address, "tenant-a-api-ready-id")
    assert first["tenant-a-provider"]["clusterIdentifier"] == identity
    assert {"label": CONTROL_PLANE_LABEL, "value": identity} in first["tenant-a-worker-1"]["labels"]
    management = lab.named("management-provider").inputs["clusterIdentifier"]
    assert first["tenant-a-admission-ready"]["triggers"] == [management]
    assert management in first["validation-labcheck"]["triggers"]


@pytest.mark.upstream("pulumi-command-triggers-replace-on-changes")
def test_kind_cluster_is_replaced_on_name_image_or_network(lab: ProgramRun):
    """M1: a new name is a new cluster too. As an update it would run `create` again and
    start a second cluster next to the first, which nothing deletes."""
    kind = lab.named("management-kind")
    network = lab.named("lab-network-bridge")
    assert kind.inputs["triggers"] == [
        "kamaji-hami-lab",
        parse_config(LAB).management_node_image,
        "kamaji-hami-lab",
    ]
    assert kind.property_dependencies["triggers"] == [network.urn]


def test_the_management_identity_names_the_cluster_image_network_and_instance(lab: ProgramRun):
    """M1: the identifier changes with the node image, so the provider's own DiffConfig
    replaces it on the real run too."""
    image = parse_config(LAB).management_node_image
    other = image.rsplit("@", 1)[0].replace("v1.35.0", "v1.35.1") + "@sha256:" + "a" * 64
    assert cluster_identity("lab", image, "net", "id-1") == (
        f"kind-lab/net/{image.rsplit('@', 1)[1]}/id-1"
    )
    changed = run_program({**LAB, "managementNodeImage": other})
    before = lab.named("management-provider").inputs["clusterIdentifier"]
    after = changed.named("management-provider").inputs["clusterIdentifier"]
    assert before.endswith("/management-kind-id") and after.endswith("/management-kind-id")
    assert ("a" * 64) in after and before != after


@pytest.mark.upstream("pulumi-command-delete-runs-the-old-state")
def test_kind_delete_takes_the_cluster_name_from_the_state_it_was_created_with(
    lab: ProgramRun, tmp_path: Path
):
    """M1: the engine deletes with the old state's `delete` and environment, so the old
    cluster's name must come from the environment, not from the new config."""
    kind = lab.named("management-kind")
    log = _fake_tools(tmp_path, {"kind": 'echo "kind $*" >> "$CALLS"'})
    env = {**_tool_env(tmp_path), **kind.inputs["environment"], "KIND_CLUSTER_NAME": "old-lab"}
    subprocess.run(["bash", "-c", kind.inputs["delete"]], env=env, check=True)
    (call,) = log.read_text().splitlines()
    assert call.split()[:5] == ["kind", "delete", "cluster", "--name", "old-lab"]


@pytest.mark.upstream("pulumi-k8s-delete-unreachable-option-overrides-env")
def test_management_provider_leaves_delete_unreachable_to_make_destroy(lab: ProgramRun):
    """M5: set on the provider, the option wins over PULUMI_K8S_DELETE_UNREACHABLE and a
    refresh while the node is down empties the state; unset, only `make destroy` enables it."""
    provider = lab.named("management-provider")
    assert "deleteUnreachable" not in provider.inputs
    assert provider.inputs["clusterIdentifier"].startswith("kind-kamaji-hami-lab/")


@pytest.mark.upstream("docker-network-rm-refuses-active-endpoints")
def test_replacing_the_network_first_removes_the_kind_cluster_attached_to_it(lab: ProgramRun):
    """M1 (network): the lab network has a fixed name and Docker keeps a network with
    endpoints, so a new subnet or MTU deletes the kind cluster (and what it runs) first."""
    network = lab.named("lab-network-bridge")
    steps = replacement_steps(lab, network)
    delete_network = steps.index(("delete", network.name))
    for name in ("management-kind", "management-provider", "kamaji-chart"):
        assert steps.index(("delete", name)) < delete_network, name
        assert steps.index(("create", name)) > steps.index(("create", network.name)), name


# --- the network's MTU ---------------------------------------------------------------------------


def _fake_tools(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """Executables on a private PATH; each body sees $CALLS, the log they append to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        tool = bin_dir / name
        tool.write_text("#!/bin/bash\nset -eu\n" + textwrap.dedent(body))
        tool.chmod(0o755)
    return tmp_path / "calls.log"


def _tool_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls.log"),
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


FAKE_DOCKER = """\
echo "docker $*" >> "$CALLS"
[ "$*" = 'network inspect bridge -f {{ index .Options "com.docker.network.driver.mtu" }}' ]
printf '%s\\n' "$BRIDGE_MTU"
"""


@pytest.mark.upstream("kind-network-mtu-from-default-bridge")
@pytest.mark.parametrize(("mtu", "expected"), [("1400", 1400), ("", 0), ("<no value>", 0)])
def test_bridge_mtu_is_read_from_dockers_default_bridge_like_kind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mtu: str, expected: int
):
    """m1: kind's getDefaultNetworkMTU: the default bridge's driver MTU option, 0 when absent."""
    log = _fake_tools(tmp_path, {"docker": FAKE_DOCKER})
    for key, value in {**_tool_env(tmp_path), "BRIDGE_MTU": mtu}.items():
        monkeypatch.setenv(key, value)
    assert docker_default_bridge_mtu() == expected
    assert log.read_text().count("network inspect bridge") == 1


def test_a_failed_mtu_probe_is_not_taken_for_no_mtu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """m1/M1: Docker missing or failing is an error of the probe, not "the bridge sets none"."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(MtuProbeFailed, match=r"No such file|not found"):
        docker_default_bridge_mtu()
    _fake_tools(tmp_path, {"docker": 'echo "Cannot connect to the Docker daemon" >&2; exit 1'})
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    with pytest.raises(MtuProbeFailed, match=r"Cannot connect to the Docker daemon"):
        docker_default_bridge_mtu()
    assert creation_mtu() == 0  # a create goes on without the option, as kind's does


@pytest.mark.upstream("kind-network-mtu-from-default-bridge", "docker-network-options-force-new")
@pytest.mark.parametrize("probe", ["1380", "1500", "fails"])
def test_a_second_up_never_changes_the_networks_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe: str
):
    """M1 (network MTU): Docker replaces a network on any option change and the replacement
    deletes the kind cluster first. Whatever a later probe says (another MTU, a timeout, no
    daemon), the engine keeps the created options: they are ignore_changes, and kind too
    never touches an existing network."""
    body = FAKE_DOCKER if probe != "fails" else "sleep 0; exit 1"
    _fake_tools(tmp_path, {"docker": body})
    for key, value in {**_tool_env(tmp_path), "BRIDGE_MTU": probe}.items():
        monkeypatch.setenv(key, value)
    for preview in (False, True):
        network = run_program(LAB, preview=preview).named("lab-network-bridge")
        assert network.ignore_changes == ["options"]
        assert network.delete_before_replace is True


@pytest.mark.upstream("kind-network-mtu-from-default-bridge")
def test_lab_network_carries_the_daemon_mtu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """m1: as kind creates its own network: masquerade, and the MTU only when it is known."""
    assert bridge_options(0) == {"com.docker.network.bridge.enable_ip_masquerade": "true"}
    assert bridge_options(1450)[MTU_OPTION] == "1450"
    _fake_tools(tmp_path, {"docker": FAKE_DOCKER})
    for key, value in {**_tool_env(tmp_path), "BRIDGE_MTU": "1380"}.items():
        monkeypatch.setenv(key, value)
    network = run_program(LAB).named("lab-network-bridge")
    assert network.inputs["options"] == {
        "com.docker.network.bridge.enable_ip_masquerade": "true",
        MTU_OPTION: "1380",
    }
    assert network.delete_before_replace is True


# --- Kamaji's charts -----------------------------------------------------------------------------

SOURCE = KAMAJI_SOURCES["26.8.2-edge"]
LOCK = """\
dependencies:
- name: kamaji-etcd
  repository: https://clastix.github.io/charts
  version: 0.15.0
digest: sha256:dffc71b76c5711884d1bb4b66dee859e4dc70b149b02b4d36d0c60d299d7c55a
"""
FAKE_GIT = """\
echo "git $* repo_config=${HELM_REPOSITORY_CONFIG:-}" >> "$CALLS"
if [ "$1" = clone ]; then
  dest="${@: -1}"
  mkdir -p "$dest/charts/kamaji" "$dest/charts/kamaji-crds/templates"
  printf '%s' "$LOCK" > "$dest/charts/kamaji/Chart.lock"
elif [ "$1 $3 $4" = "-C rev-parse HEAD" ]; then
  echo "$TAG_COMMIT"
else
  exit 2
fi
"""
FAKE_HELM = """\
echo "helm $* repo_config=${HELM_REPOSITORY_CONFIG:-}" >> "$CALLS"
if [ "$1 $2" = "dependency build" ]; then
  mkdir -p "$3/charts" && touch "$3/charts/kamaji-etcd-0.15.0.tgz"
fi
"""


def _cache_root(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "kamaji-hami-lab" / "kamaji"


def _run_fetch(tmp_path: Path, tag_commit: str) -> subprocess.CompletedProcess[str]:
    env = {
        **_tool_env(tmp_path),
        **fetch_environment(SOURCE, _cache_root(tmp_path)),
        "LOCK": LOCK,
        "TAG_COMMIT": tag_commit,
    }
    return subprocess.run(
        ["bash", "-c", chart_fetch_script()], env=env, capture_output=True, text=True
    )


@pytest.mark.upstream("kamaji-chart-at-the-image-tag", "helm-dependency-build-needs-a-known-repo")
def test_chart_fetch_puts_the_tags_charts_with_locked_subcharts_in_the_cache(tmp_path: Path):
    """M3: the tag's charts/kamaji and charts/kamaji-crds, checked against the pinned commit;
    `helm dependency build` gets the lock's etcd chart through a private repo config (Helm only
    downloads from repositories it knows); stdout is the directory, and a second run reuses it."""
    _fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    result = _run_fetch(tmp_path, SOURCE.commit)
    assert result.returncode == 0, result.stderr
    cached = tmp_path / "cache" / "kamaji-hami-lab" / "kamaji" / SOURCE.commit
    assert result.stdout == f"{cached}\n"
    assert (cached / "kamaji" / "charts" / "kamaji-etcd-0.15.0.tgz").is_file()
    assert (cached / "kamaji-crds" / "templates").is_dir()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    clone, rev_parse, repo_add, build = calls
    assert clone.startswith(f"git clone --quiet --depth 1 --branch 26.8.2-edge {KAMAJI_GIT_URL} ")
    assert rev_parse.split()[3:5] == ["rev-parse", "HEAD"]
    repo_config = repo_add.rsplit("repo_config=", 1)[1]
    assert repo_add.startswith("helm repo add lock-1 https://clastix.github.io/charts ")
    assert repo_config and not repo_config.startswith(str(tmp_path / "home"))
    assert build.startswith("helm dependency build ") and build.endswith(repo_config)
    assert not list((tmp_path / "cache" / "kamaji-hami-lab" / "kamaji").glob(".fetch.*"))

    again = _run_fetch(tmp_path, SOURCE.commit)
    assert again.stdout == result.stdout
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 4  # nothing fetched


@pytest.mark.upstream("kamaji-chart-at-the-image-tag")
def test_chart_fetch_refuses_a_tag_that_moved(tmp_path: Path):
    """M3: a re-pointed tag would be a moving target again: stop and say so."""
    _fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    result = _run_fetch(tmp_path, "f" * 40)
    assert result.returncode == 1
    assert f"is now commit {'f' * 40}, not the pinned {SOURCE.commit}" in result.stderr
    assert "helm" not in (tmp_path / "calls.log").read_text()
    assert not (tmp_path / "cache" / "kamaji-hami-lab" / "kamaji" / SOURCE.commit).exists()


def test_kamaji_tag_without_a_pinned_source_is_a_config_error():
    with pytest.raises(ConfigError, match=r"kamajiImageTag.*no pinned chart source.*26\.8\.2-edge"):
        parse_config({**LAB, "kamajiImageTag": "26.9.1-edge"})
    assert kamaji_source("26.8.2-edge").commit == "ddbabd87ed0e8d7c319414383e153c46f21733a9"


def _fetch_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tag_commit: str) -> Path:
    """Fake git and helm on PATH for ensure_chart_cache, which runs the fetch script itself."""
    log = _fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    env = {**_tool_env(tmp_path), "LOCK": LOCK, "TAG_COMMIT": tag_commit}
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.upstream("pulumi-k8s-release-check-skips-unknown-chart")
def test_the_program_fetches_missing_charts_on_any_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3 (review 3): a machine that never deployed (CI's preview, another checkout) has no
    cache, and the releases' Check loads the chart path: the program fetches the pinned
    charts itself, once, and a second run reuses them without git or helm."""
    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    root = _cache_root(tmp_path)
    dest = ensure_chart_cache(SOURCE, root)
    assert dest == root / SOURCE.commit
    assert (dest / "kamaji" / "charts" / "kamaji-etcd-0.15.0.tgz").is_file()
    assert (dest / "kamaji-crds" / "templates").is_dir()
    assert [call.split()[:2] for call in _calls(log)] == [
        ["git", "clone"], ["git", "-C"], ["helm", "repo"], ["helm", "dependency"],
    ]  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git, no helm: not needed now
    assert ensure_chart_cache(SOURCE, root) == dest
    assert len(_calls(log)) == 4


def test_cached_charts_are_used_without_git_or_helm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3: a complete cache entry is the answer, whatever is on PATH."""
    dest = tmp_path / SOURCE.commit
    (dest / "kamaji").mkdir(parents=True)
    (dest / ".complete").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ensure_chart_cache(SOURCE, tmp_path) == dest


def test_a_tag_that_moved_stops_the_program_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3: the commit pin is checked on every fetch, wherever it runs."""
    log = _fetch_tools(tmp_path, monkeypatch, "f" * 40)
    root = _cache_root(tmp_path)
    with pytest.raises(
        ChartFetchFailed, match=rf"is now commit f{{40}}, not the pinned {SOURCE.commit}"
    ):
        ensure_chart_cache(SOURCE, root)
    assert not (root / SOURCE.commit).exists()
    assert not any("helm" in call for call in _calls(log))


def test_an_interrupted_fetch_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """M3: a directory without the completion mark is a fetch that died half-way."""
    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    root = _cache_root(tmp_path)
    (root / SOURCE.commit / "kamaji").mkdir(parents=True)
    assert ensure_chart_cache(SOURCE, root) == root / SOURCE.commit
    assert (root / SOURCE.commit / ".complete").is_file()
    assert _calls(log)[0].startswith("git clone ")


def test_missing_git_or_helm_is_named_before_fetching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    _fake_tools(tmp_path, {"git": FAKE_GIT})
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(
        ChartFetchFailed, match=r"are not in .* yet, and fetching them needs helm on PATH"
    ):
        ensure_chart_cache(SOURCE, tmp_path / "cache")
    assert not (tmp_path / "calls.log").exists()


def test_concurrent_runs_fetch_the_charts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """M3: two programs at once (a preview next to an up) share the cache: the lock makes the
    second wait and find the first one's charts."""
    import threading

    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    slow_git = tmp_path / "bin" / "git"
    slow_git.write_text(slow_git.read_text().replace("set -eu\n", "set -eu\nsleep 0.3\n", 1))
    root = _cache_root(tmp_path)
    results: list[Path] = []

    def one_program() -> None:
        results.append(ensure_chart_cache(SOURCE, root))

    runs = [threading.Thread(target=one_program) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert results == [root / SOURCE.commit] * 2
    assert sum(call.startswith("git clone ") for call in _calls(log)) == 1


@pytest.mark.upstream("pulumi-k8s-release-relative-chart-path")
def test_the_chart_path_is_the_same_in_every_checkout(tmp_path: Path):
    """M3 (review 3, 4): the cache is in the checkout and the Release names its chart relative
    to the project, which the provider resolves from the project's root: another checkout or
    CI's preview sends the same `chart` and plans no update of the releases."""
    for checkout in (tmp_path / "alice/lab", tmp_path / "runner/work/lab"):
        cache = checkout / CACHE_IN_PROJECT / SOURCE.commit
        assert release_chart_path(cache, "kamaji", checkout) == (
            f"./.cache/kamaji-charts/{SOURCE.commit}/kamaji"
        )
    elsewhere = tmp_path / "cache" / SOURCE.commit
    assert release_chart_path(elsewhere, "kamaji-crds", tmp_path / "lab") == str(
        elsewhere / "kamaji-crds"
    )
    assert default_cache_root() == PROJECT_DIR / ".cache/kamaji-charts"
    ignored = (PROJECT_DIR / ".gitignore").read_text().splitlines()
    assert "/.cache/" in ignored, "the chart cache must be gitignored"


@pytest.mark.upstream(
    "helm-crds-dir-installed-once", "pulumi-k8s-release-check-skips-unknown-chart"
)
def test_kamaji_crds_are_their_own_release_from_the_fetched_charts(
    lab: ProgramRun, kamaji_charts_already_cached: Path
):
    """M3: the CRDs come from the tag's kamaji-crds chart, a release Helm upgrades with the
    tag; the Kamaji release skips its crds/. Both charts are in the machine's cache, a path
    known in every preview (the provider's Check loads it), not the output of a resource."""
    cached = kamaji_charts_already_cached / SOURCE.commit
    crds = lab.named("kamaji-crds")
    kamaji = lab.named("kamaji-chart")
    assert not [r for r in lab.of_type(COMMAND) if r.name.startswith("kamaji")]
    for release, chart in ((crds, "kamaji-crds"), (kamaji, "kamaji")):
        assert release.inputs["chart"] == str(cached / chart)
        assert (
            "chart" not in release.property_dependencies
            or not release.property_dependencies["chart"]
        )
        assert "repositoryOpts" not in release.inputs and "version" not in release.inputs
        assert release.inputs["namespace"] == KAMAJI_NAMESPACE
    assert kamaji.inputs["skipCrds"] is True and "skipCrds" not in crds.inputs
    assert crds.urn in kamaji.dependencies
    assert lab.named("kamaji-cert-manager").urn in crds.dependencies
    assert (
        crds.inputs["values"]
        == crds_values()
        == {
            "kamajiNamespace": "kamaji-system",
            "kamajiService": "kamaji-webhook-service",
            "kamajiCertificateName": "kamaji-serving-cert",
        }
    )


@pytest.mark.upstream("kamaji-chart-values-at-the-tag", "kamaji-etcd-quota-backend-bytes")
def test_kamaji_values_set_resources_pull_policy_and_an_etcd_quota_inside_the_volume():
    """m3, m4, m14: explicit resources (Helm merges into the chart's limits 200m/100Mi, which
    a null may not reach), IfNotPresent for the pinned tag, and an etcd quota below the volume,
    as a string like the chart's own (a number renders in exponent form)."""
    values = kamaji_values("26.8.2-edge", 1, "2Gi")
    assert (
        values["resources"]
        == KAMAJI_RESOURCES
        == {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        }
    )
    assert values["image"]["pullPolicy"] == "IfNotPresent"
    etcd = values["kamaji-etcd"]
    assert etcd["quotaBackendBytes"] == "1610612736"
    assert int(etcd["quotaBackendBytes"]) < quantity_bytes(etcd["persistentVolumeClaim"]["size"])
    assert etcd_quota_bytes("512Mi") == 402653184
    with pytest.raises(ValueError, match=r"kamajiEtcdVolumeSize: '2GB' is not a size"):
        quantity_bytes("2GB")


def test_kamaji_chart_source_is_a_stack_output(lab: ProgramRun):
    """M3: what was installed, by commit and chart tree (the charts' content digests)."""
    assert lab.outputs["kamajiChart"] == {
        "tag": "26.8.2-edge",
        "commit": "ddbabd87ed0e8d7c319414383e153c46f21733a9",
        "chartTree": "844f16ac9d4eaf0532b47f263f3ce2556d5633e5",
        "crdsChartTree": "492465f5b4df1d06c3db5b3d444ecd11a32456a9",
        "etcdChartVersion": "0.15.0",
    }


def test_the_pr_preview_has_git_and_a_pinned_helm_before_the_program_runs():
    """M3 (review 3): CI's preview runs the program, which fetches the charts with git and helm."""
    import yaml

    workflow = Path(__file__).resolve().parents[2] / ".github/workflows/pull-request.yml"
    steps = yaml.safe_load(workflow.read_text())["jobs"]["preview"]["steps"]
    uses = [step.get("uses", "") for step in steps]
    helm = next(i for i, name in enumerate(uses) if name.startswith("azure/setup-helm@"))
    assert re.fullmatch(r"v3\.\d+\.\d+", steps[helm]["with"]["version"])
    assert uses.index("actions/checkout@v4") < helm  # git: the checkout ran on it
    assert helm < next(i for i, name in enumerate(uses) if name.startswith("pulumi/actions@"))
