"""No Kubernetes provider of the program ever falls back to the user's own kubeconfig.

pulumi-kubernetes takes an empty kubeconfig as "use KUBECONFIG or ~/.kube/config" (fact
`pulumi-k8s-empty-kubeconfig-is-ambient`): a tenant provider built from a Secret without
`admin.conf` would have installed flannel, HAMi, the quota and the agent into whatever cluster
the user's kubectl points at (issue 17, item 3). Each source of a provider's kubeconfig, when
unusable, now stops the program with one error that says which one, and that provider (and
what it would manage) is never registered.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Callable
from typing import Any

import pulumi
import pytest
from pulumi_kubernetes.provider import ProviderArgs

from builders.kubeconfig import UnusableKubeconfig, kubeconfig_problem
from tests.support import pulumi_harness
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    ProgramRun,
    lab_stack_config,
    run_program,
    stack_config,
)

PROVIDER = "pulumi:providers:kubernetes"
GPU_SECRETS = {"sshPrivateKey": "fake-ssh-key", "managementKubeconfig": FAKE_KUBECONFIG}
NO_CLUSTERS = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n"
# What a broken source may hand over: nothing, blanks, a path (which the provider would read),
# a kubeconfig that names no cluster.
UNUSABLE = {
    "empty": "",
    "blank": " \n\t\n",
    "a path": "~/.kube/config",
    "no clusters": NO_CLUSTERS,
}


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> list[ProgramRun]:
    """Every ProgramRun the harness makes: what was registered even when the run raised.

    The program's error also ends in futures nobody awaits; like the harness's failed reads,
    they are not logged (see `_ignore_failed_reads` for why that logging is harmful).
    """
    runs: list[ProgramRun] = []

    class Kept(ProgramRun):
        def __init__(self) -> None:
            super().__init__()
            runs.append(self)

    ignore_failed_reads = pulumi_harness._ignore_failed_reads

    def ignore_expected(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), UnusableKubeconfig):
            ignore_failed_reads(loop, context)

    monkeypatch.setattr(pulumi_harness, "ProgramRun", Kept)
    monkeypatch.setattr(pulumi_harness, "_ignore_failed_reads", ignore_expected)
    return runs


def providers(runs: list[ProgramRun]) -> dict[str, Any]:
    """Provider name -> the kubeconfig it was registered with (absent: None)."""
    (run,) = runs
    return {r.name: r.inputs.get("kubeconfig") for r in run.of_type(PROVIDER)}


def admin_secret_without_conf(monkeypatch: pytest.MonkeyPatch, data: dict[str, str] | None):
    """Kamaji's admin kubeconfig Secret of tenant-b holds `data` instead of admin.conf."""
    original = pulumi_harness._objects_left_by

    def left_by(type_: str, inputs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        objects = original(type_, inputs)
        key = ("kubernetes:core/v1:Secret", "tenant-b/tenant-b-admin-kubeconfig")
        if key in objects:
            objects[key] = {"data": data}
        return objects

    monkeypatch.setattr(pulumi_harness, "_objects_left_by", left_by)


def creates_with(
    monkeypatch: pytest.MonkeyPatch, which: Callable[[Any], bool], **outputs: Any
) -> None:
    """The resources `which` selects come out of their create with these outputs."""
    create = pulumi_harness.LabMocks._create

    def patched(self: pulumi_harness.LabMocks, args: Any) -> tuple[str, dict[str, Any]]:
        id_, state = create(self, args)
        return id_, {**state, **outputs} if which(args) else state

    monkeypatch.setattr(pulumi_harness.LabMocks, "_create", patched)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "data",
    [None, {}, {"other.conf": b64(FAKE_KUBECONFIG)}],
    ids=["no data", "empty data", "other keys only"],
)
def test_a_tenant_secret_without_admin_conf_stops_the_program_naming_tenant_and_secret(
    monkeypatch: pytest.MonkeyPatch, registered: list[ProgramRun], data: dict[str, str] | None
):
    admin_secret_without_conf(monkeypatch, data)
    with pytest.raises(pulumi.RunError) as info:
        run_program(lab_stack_config())
    message = str(info.value)
    assert message.startswith(
        "tenant tenant-b: admin.conf of Secret tenant-b/tenant-b-admin-kubeconfig"
    )
    assert "is missing" in message and "~/.kube/config" in message
    assert "tenant-b-provider" not in providers(registered)  # so nothing lands anywhere


@pytest.mark.parametrize("text", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_an_unusable_admin_conf_stops_the_program(
    monkeypatch: pytest.MonkeyPatch, registered: list[ProgramRun], text: str
):
    admin_secret_without_conf(monkeypatch, {"admin.conf": b64(text)})
    with pytest.raises(pulumi.RunError, match=r"^tenant tenant-b: admin\.conf of Secret "):
        run_program(lab_stack_config())
    assert "tenant-b-provider" not in providers(registered)


def test_the_remote_workers_never_get_an_empty_tenant_kubeconfig(
    monkeypatch: pytest.MonkeyPatch, registered: list[ProgramRun]
):
    """The gpu stack's remote join reads the tenant kubeconfig on stdin, and the node check
    runs kubectl with it: neither is declared for a tenant whose admin.conf is missing."""
    original = pulumi_harness._objects_left_by

    def left_by(type_: str, inputs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        return {key: {"data": {}} for key in original(type_, inputs)}

    monkeypatch.setattr(pulumi_harness, "_objects_left_by", left_by)
    with pytest.raises(pulumi.RunError, match=r"^tenant team-[ab]: admin\.conf of Secret team-"):
        run_program({**stack_config("gpu"), **GPU_SECRETS}, stack="gpu")
    (run,) = registered
    names = {r.name for r in run.resources}
    assert not names & {"gpu-host-1-join", "gpu-host-1-registered", "gpu-host-2-join"}
    assert not {"team-a-provider", "team-b-provider"} & names


@pytest.mark.parametrize("stdout", UNUSABLE.values(), ids=UNUSABLE.keys())
def test_a_kind_cluster_without_a_kubeconfig_on_stdout_stops_the_program(
    monkeypatch: pytest.MonkeyPatch, registered: list[ProgramRun], stdout: str
):
    creates_with(monkeypatch, lambda args: args.name == "management-kind", stdout=stdout)
    with pytest.raises(pulumi.RunError) as info:
        run_program(lab_stack_config())
    assert str(info.value).startswith(
        "the kubeconfig of kind cluster kamaji-hami-lab (stdout of its create script) "
    )
    assert providers(registered) == {}  # not one provider: the tenants hang off this one


@pytest.mark.parametrize(
    "text", [UNUSABLE["blank"], UNUSABLE["a path"], NO_CLUSTERS], ids=["blank", "path", "empty"]
)
def test_an_unusable_existing_management_kubeconfig_stops_the_program(
    registered: list[ProgramRun], text: str
):
    """`managementKubeconfig` "" is a config error already; blanks pass that rule, and a path
    (the gpu stack's comment says `< mgmt.kubeconfig`) would be read by the provider."""
    with pytest.raises(pulumi.RunError) as info:
        run_program(
            {**stack_config("gpu"), **GPU_SECRETS, "managementKubeconfig": text}, stack="gpu"
        )
    message = str(info.value)
    assert message.startswith("managementKubeconfig (secret config) ")
    assert "pulumi config set --secret managementKubeconfig < " in message
    assert providers(registered) == {}


@pytest.mark.parametrize("output", [UNUSABLE["blank"], NO_CLUSTERS], ids=["blank", "empty"])
def test_an_unusable_referenced_management_kubeconfig_stops_the_program(
    monkeypatch: pytest.MonkeyPatch, registered: list[ProgramRun], output: str
):
    creates_with(
        monkeypatch,
        lambda args: args.typ == "pulumi:pulumi:StackReference",
        outputs={"managementKubeconfig": output},
    )
    with pytest.raises(pulumi.RunError) as info:
        run_program(stack_config("nvml"), stack="nvml")
    assert str(info.value).startswith(
        "managementKubeconfig output of stack organization/kamaji-hami-lab/lab "
    )
    assert providers(registered) == {}


@pytest.mark.upstream("pulumi-k8s-empty-kubeconfig-is-ambient")
def test_the_sdk_hands_a_provider_without_kubeconfig_the_ambient_one(
    monkeypatch: pytest.MonkeyPatch,
):
    """The installed SDK's half of the fact: a Provider declared without `kubeconfig` is
    registered with $KUBECONFIG (a path), and the provider reads a path as a file."""
    monkeypatch.setenv("KUBECONFIG", "/home/someone/.kube/config")
    assert ProviderArgs().kubeconfig == "/home/someone/.kube/config"
    assert kubeconfig_problem("/home/someone/.kube/config") is not None


@pytest.mark.upstream("pulumi-k8s-empty-kubeconfig-is-ambient")
@pytest.mark.parametrize("stack", ["lab", "nvml", "gpu"])
def test_every_provider_of_every_stack_gets_a_kubeconfig_naming_its_cluster(
    monkeypatch: pytest.MonkeyPatch, stack: str
):
    """Each provider is given a kubeconfig of its own, never left to the SDK's $KUBECONFIG
    default or the provider's ambient loading."""
    monkeypatch.setenv("KUBECONFIG", "/home/someone/.kube/config")
    config = copy.deepcopy(stack_config(stack))
    run = run_program({**config, **(GPU_SECRETS if stack == "gpu" else {})}, stack=stack)
    kubeconfigs = {r.name: r.inputs.get("kubeconfig") for r in run.of_type(PROVIDER)}
    assert len(kubeconfigs) == 1 + len(config["tenants"])
    assert {name: kubeconfig_problem(text) for name, text in kubeconfigs.items()} == dict.fromkeys(
        kubeconfigs
    )
