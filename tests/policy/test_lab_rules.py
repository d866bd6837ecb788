"""The policy pack: plain validators, and the pack run through pulumi-policy's own analyzer.

Props come from a mock run of the lab stack (the harness records what the engine would get),
sent through ``_PolicyAnalyzerServicer`` as the engine sends them: secrets marked, remediation
pass first, then analysis. So the lab must pass, and one mutation must give one violation.
"""

from __future__ import annotations

import copy
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel, proxy
from pulumi_policy.policy import _PolicyAnalyzerServicer

from tests.policy.lab_graph import RESOURCE_MUTATIONS, mutated, set_to, without
from tests.support.pulumi_harness import (
    PROJECT_DIR,
    SECRET_MARK,
    SECRET_SIG,
    ProgramRun,
    Registration,
    lab_stack_config,
    run_program,
)

sys.path.insert(0, str(PROJECT_DIR / "policy"))  # the pack imports its modules top-level

import lab_policies
import lab_rules

UNKNOWN = proxy.UNKNOWN_STRING_VALUE
DIGEST = "@sha256:" + "a" * 64


@pytest.fixture(scope="module")
def lab() -> ProgramRun:
    return run_program(lab_stack_config())


def unwrap(value: Any) -> Any:
    """Secret markers removed."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_MARK:
            return unwrap(value["value"])
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


def secret(value: Any) -> dict[str, Any]:
    return {SECRET_SIG: SECRET_MARK, "value": value}


def struct(props: dict[str, Any]) -> struct_pb2.Struct:
    return json_format.ParseDict(props, struct_pb2.Struct())


def marked(r: Registration) -> dict[str, Any]:
    """The inputs as the engine sends them to an analyzer: the secret paths marked."""
    props = copy.deepcopy(r.inputs)
    for path in r.secret_inputs:
        *parents, last = path.split(".")
        target = props
        for key in parents:
            target = target[key]
        target[last] = secret(target[last])
    return props


class Pack:
    """The pack's servicer, driven the way the engine drives an analyzer."""

    def __init__(self, **levels: EnforcementLevel) -> None:
        self.servicer = _PolicyAnalyzerServicer(
            "kamaji-hami-lab", "0.0.1", lab_policies.POLICIES, EnforcementLevel.MANDATORY
        )
        if levels:
            config = {
                name: proto.PolicyConfig(enforcementLevel=self._level(level))
                for name, level in levels.items()
            }
            self.servicer.Configure(proto.ConfigureAnalyzerRequest(policyConfig=config), None)

    @staticmethod
    def _level(level: EnforcementLevel) -> int:
        return {
            EnforcementLevel.ADVISORY: proto.ADVISORY,
            EnforcementLevel.MANDATORY: proto.MANDATORY,
            EnforcementLevel.REMEDIATE: proto.REMEDIATE,
        }[level]

    @staticmethod
    def _provider(run: ProgramRun, r: Registration) -> proto.AnalyzerProviderResource | None:
        if not r.provider:
            return None
        provider = run.by_urn()[r.provider.rsplit("::", 1)[0]]
        return proto.AnalyzerProviderResource(
            urn=provider.urn, type=provider.type, name=provider.name, properties=struct({})
        )

    def resource(self, run: ProgramRun, r: Registration) -> list[tuple[str, str]]:
        request = proto.AnalyzeRequest(
            urn=r.urn,
            type=r.type,
            name=r.name,
            properties=struct(marked(r)),
            options=proto.AnalyzerResourceOptions(
                additionalSecretOutputs=r.secret_outputs, parent=r.parent
            ),
            provider=self._provider(run, r),
        )
        remediation = self.servicer.Remediate(request, None)
        assert not remediation.remediations  # the pack observes; it never rewrites a resource
        return self._diagnostics(self.servicer.Analyze(request, None))

    def stack(self, run: ProgramRun) -> list[tuple[str, str]]:
        resources = [
            proto.AnalyzerResource(
                urn=r.urn,
                type=r.type,
                name=r.name,
                properties=struct(marked(r)),
                options=proto.AnalyzerResourceOptions(parent=r.parent),
                provider=self._provider(run, r),
                parent=r.parent,
                dependencies=r.dependencies,
            )
            for r in run.resources
        ]
        request = proto.AnalyzeStackRequest(resources=resources)
        return self._diagnostics(self.servicer.AnalyzeStack(request, None))

    def all(self, run: ProgramRun) -> list[tuple[str, str]]:
        found = [d for r in run.resources for d in self.resource(run, r)]
        return found + self.stack(run)

    @staticmethod
    def _diagnostics(response: Any) -> list[tuple[str, str]]:
        for d in response.diagnostics:
            assert d.enforcementLevel == proto.MANDATORY, d
        # The SDK puts the policy's description on the message's first line.
        return [
            (d.policyName, d.message.removeprefix(f"{d.description}\n"))
            for d in response.diagnostics
        ]


def test_the_packs_modules_shadow_no_other_module():
    """The pack's directory is first on sys.path when it runs (pulumi.policy runs it with
    runpy.run_path), so a module of it named like a package hides that package: `validators`,
    the pack's old rules module, is a PyPI package. Its modules carry the `lab_` prefix (names
    checked against PyPI's list when chosen) and none is importable from anywhere else."""
    pack = PROJECT_DIR / "policy"
    modules = sorted(path.stem for path in pack.glob("*.py") if path.stem != "__main__")
    assert modules, "no module found: the scan is broken"
    assert [m for m in modules if not m.startswith("lab_")] == []
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != pack.resolve()]
    assert [m for m in modules if importlib.machinery.PathFinder.find_spec(m, elsewhere)] == []


def test_unknown_sentinels_are_pulumi_policys():
    names = [n for n in dir(proxy) if n.startswith("UNKNOWN_") and n.endswith("_VALUE")]
    assert {getattr(proxy, n) for n in names} == lab_rules.UNKNOWN_VALUES


def test_lab_stack_passes_every_policy(lab: ProgramRun):
    assert Pack().all(lab) == []


def test_lab_stack_passes_the_plain_validators(lab: ProgramRun):
    for r in lab.resources:
        props = r.inputs
        assert lab_rules.image_violations(r.type, props) == [], r.name
        assert lab_rules.privileged_violations(r.type, props) == [], r.name
        assert lab_rules.secret_violations(r.type, props, r.secret_inputs, r.secret_outputs) == []
    stack = [
        lab_rules.StackResource(
            r.type, r.name, r.urn, r.inputs, r.parent, r.provider.rsplit("::", 1)[0]
        )
        for r in lab.resources
    ]
    assert lab_rules.gpu_quota_violations(stack) == []
    assert lab_rules.pool_violations(stack) == []


# --- one mutation, one violation, through the pack ----------------------------------------


@pytest.mark.parametrize(
    ("name", "change", "policy", "message"),
    RESOURCE_MUTATIONS,
    ids=[f"{m[2]}:{m[0]}" for m in RESOURCE_MUTATIONS],
)
def test_one_mutation_gives_exactly_its_violation(lab, name, change, policy, message):
    run = mutated(lab, name, change)
    assert Pack().all(run) == [(policy, message)]


def test_kind_stdout_must_stay_a_secret_output(lab: ProgramRun):
    run = copy.deepcopy(lab)
    run.named("management-kind").secret_outputs = []
    assert Pack().all(run) == [
        (
            "credentials-are-secrets",
            "kind prints its kubeconfig on stdout: stdout must be a secret output",
        )
    ]


def test_credentials_policy_fails_closed_without_the_remediation_pass(lab: ProgramRun):
    # Configured to mandatory, the SDK skips its remediation: secretness is then unobservable.
    pack = Pack(**{"credentials-are-secrets": EnforcementLevel.MANDATORY})
    found = {name for name, _ in pack.all(lab)}
    assert found == {"credentials-are-secrets"}


def test_tenant_without_gpu_quota(lab: ProgramRun):
    run = without(lab, "tenant-b-hami-gpu-quota")
    assert Pack().all(run) == [
        (
            "gpu-tenants-have-quota",
            "tenant tenant-b runs GPUs (tenant-b-simulated-gpus) but has no ResourceQuota on "
            "limits.nvidia.com/gpumem: set gpuQuotaMb",
        )
    ]


def _stack(run: ProgramRun) -> list[lab_rules.StackResource]:
    return [
        lab_rules.StackResource(
            r.type, r.name, r.urn, r.inputs, r.parent, r.provider.rsplit("::", 1)[0]
        )
        for r in run.resources
    ]


def test_a_tenant_without_cards_needs_no_gpu_quota():
    cpu_only = run_program({"tenants": [{"name": "cpu-only"}], "validate": "false"})
    assert lab_rules.gpu_quota_violations(_stack(cpu_only)) == []
    with_cards = run_program(
        {"tenants": [{"name": "gpu", "gpus": [{"model": "T4"}]}], "validate": "false"}
    )
    (problem,) = lab_rules.gpu_quota_violations(_stack(with_cards))
    assert "tenant gpu runs GPUs (gpu-simulated-gpus)" in problem


def test_quota_of_another_tenant_does_not_count(lab: ProgramRun):
    # tenant-b's quota registered under tenant-a's Hami: tenant-b has none of its own.
    run = copy.deepcopy(lab)
    quota = run.named("tenant-b-hami-gpu-quota")
    quota.parent = run.named("tenant-a-hami").urn
    quota.provider = run.named("tenant-a-hami-gpu-quota").provider
    assert [p for p, _ in Pack().stack(run)] == ["gpu-tenants-have-quota"]


@pytest.mark.parametrize(
    ("addresses", "message"),
    [
        (
            ["10.0.0.10-10.0.0.20"],
            "10.0.0.10-10.0.0.20 is not inside the lab subnet (172.30.0.0/16)",
        ),
        (
            ["172.30.0.10-172.30.0.20"],
            "172.30.0.10-172.30.0.20 overlaps the docker container range",
        ),
        (["not-a-range"], "'not-a-range' is not an IPv4 range or CIDR"),
    ],
)
def test_pool_outside_the_subnet(lab: ProgramRun, addresses: list[str], message: str):
    run = mutated(lab, "metallb-ipaddresspool", set_to(["spec", "addresses"], addresses))
    assert Pack().all(run) == [("metallb-pool-in-subnet", f"metallb-ipaddresspool: {message}")]


# --- the plain functions on their own -----------------------------------------------------


@pytest.mark.parametrize(
    ("image", "digest", "problem"),
    [
        ("kindest/node:v1.35.0" + DIGEST, True, None),
        ("kindest/node" + DIGEST, True, None),
        ("kindest/node:v1.35.0", True, "is not pinned by digest (@sha256:…)"),
        ("python:3.13", False, None),
        ("python", False, "has no tag"),
        ("localhost:5000/python", False, "has no tag"),
        ("localhost:5000/python:latest", False, "uses the :latest tag"),
        ("registry.k8s.io/kube-scheduler:v1.35.0", False, None),
    ],
)
def test_image_problem(image: str, digest: bool, problem: str | None):
    assert lab_rules.image_problem(image, digest=digest) == problem


def test_unknown_values_are_never_judged():
    container = {"image": UNKNOWN, "privileged": True, "labels": [{"label": "x", "value": "y"}]}
    assert lab_rules.image_violations(lab_rules.CONTAINER, container) == []
    provider = {"kubeconfig": UNKNOWN}
    assert lab_rules.secret_violations(lab_rules.K8S_PROVIDER, provider, set()) == []
    pool = lab_rules.StackResource(
        lab_rules.IP_ADDRESS_POOL, "pool", "urn:pool", {"spec": {"addresses": [UNKNOWN]}}
    )
    assert lab_rules.pool_violations([pool]) == []
    # privileged is known here and the label is missing: that is still a violation
    assert len(lab_rules.privileged_violations(lab_rules.CONTAINER, container)) == 1


def test_a_secret_object_covers_what_is_inside():
    props = {"environment": {"LAB_KUBECONFIG": "k", "NODE_NAME": "n"}}
    assert lab_rules.secret_violations(lab_rules.COMMAND, props, {"environment"}) == []
    assert lab_rules.secret_violations(lab_rules.COMMAND, props, {"environmentX"}) == [
        "environment.LAB_KUBECONFIG holds a credential but is not a secret"
    ]


def test_daemonset_and_cronjob_pods_are_checked():
    pod = {
        "containers": [{"name": "c", "image": "x:latest", "securityContext": {"privileged": True}}]
    }
    daemonset = {"spec": {"template": {"spec": pod}}}
    cronjob = {"spec": {"jobTemplate": {"spec": {"template": {"spec": pod}}}}}
    for type_, props in (
        ("kubernetes:apps/v1:DaemonSet", daemonset),
        ("kubernetes:batch/v1:CronJob", cronjob),
    ):
        assert lab_rules.privileged_violations(type_, props) == ["container 'c' is privileged"]
        assert lab_rules.image_violations(type_, props) == [
            "container 'c': image 'x:latest' uses the :latest tag"
        ]


def test_secret_paths_read_the_remediation_props_of_the_sdk():
    from pulumi_policy.deserialize import deserialize_properties

    raw = {
        "kubeconfig": secret("k"),
        "environment": {"LAB_KUBECONFIG": secret("k"), "NODE_NAME": "n"},
        "list": [secret("s"), "p"],
    }
    props = deserialize_properties(raw, True)  # as the SDK's Remediate does
    paths = set(lab_policies.secret_paths(props))
    assert paths == {"kubeconfig", "environment.LAB_KUBECONFIG", "list[0]"}
    assert lab_policies.plain(props) == unwrap(raw)
    # the analysis pass gets no markers at all: nothing there to tell a secret from plain text
    assert set(lab_policies.secret_paths(deserialize_properties(raw))) == set()


def test_only_the_nodes_own_kube_proxy_may_run_privileged_in_a_tenant():
    """kubeadm's kube-proxy DaemonSet (the tenants' own: builders/kube_proxy.py) is privileged;
    the same container elsewhere, or another container in it, is not allowed."""
    pod = {"containers": [{"name": "kube-proxy", "securityContext": {"privileged": True}}]}
    proxy = {
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {"template": {"spec": pod}},
    }
    daemon_set = "kubernetes:apps/v1:DaemonSet"
    assert lab_rules.privileged_violations(daemon_set, proxy) == []
    elsewhere = {**proxy, "metadata": {"name": "kube-proxy", "namespace": "default"}}
    renamed = {**proxy, "metadata": {"name": "proxy", "namespace": "kube-system"}}
    for props in (elsewhere, renamed):
        assert lab_rules.privileged_violations(daemon_set, props) == [
            "container 'kube-proxy' is privileged"
        ]
    deployment = "kubernetes:apps/v1:Deployment"
    assert lab_rules.privileged_violations(deployment, proxy) != []
    sidecar = {"name": "sidecar", "securityContext": {"privileged": True}}
    with_sidecar = {
        **proxy,
        "spec": {"template": {"spec": {"containers": [*pod["containers"], sidecar]}}},
    }
    assert lab_rules.privileged_violations(daemon_set, with_sidecar) == [
        "container 'sidecar' is privileged"
    ]
