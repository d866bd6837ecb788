"""How the engine replaces the lab: its replacement plan, modelled on pulumi/pulumi
`pkg/resource/deploy/step_generator.go` (see `replacement_steps`), over the graph the program
registers under mocks: what a new kind cluster, control plane or network moves, and that a
second `up` with nothing changed replaces nothing.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
from pulumi.runtime.rpc import UNKNOWN

from components.platform.management import cluster_identity
from components.tenant.control_plane import control_plane_identity
from components.tenant.workers import CONTROL_PLANE_LABEL
from labconfig.parse import parse_config
from tests.support.fake_tools import fake_tools, tool_env
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


def _run_stack(stack: str) -> ProgramRun:
    return run_program(GPU if stack == "gpu" else stack_config(stack), stack=stack)


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
    # Read again, after its gate re-ran; not the stack's own last outputs (UpgradeGuard).
    for read in (r for r in lab.resources if r.read and r.name != "upgrades-last-deployment"):
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
        # host steps: packages, and the version's drain and kubeadm upgrade (nothing to do
        # on a new control plane's first run)
        (
            "gpu",
            "team-a",
            {"gpu-host-1-prepare", "gpu-host-1-drain-for-version", "gpu-host-1-upgrade-node"},
        ),
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
    log = fake_tools(tmp_path, {"kind": 'echo "kind $*" >> "$CALLS"'})
    env = {**tool_env(tmp_path), **kind.inputs["environment"], "KIND_CLUSTER_NAME": "old-lab"}
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
