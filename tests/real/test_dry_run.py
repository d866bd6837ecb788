"""Every built-in Kubernetes object the program declares is accepted by a real API server.

The mocks harness renders each stack; per Kubernetes provider of the program (the management
cluster, each tenant) a real API server (v1.36.3: the minor the stacks' tenants run by default;
it judges the v1.37 management cluster's objects too) judges that provider's objects with a
server-side dry-run apply, the way pulumi-kubernetes applies them (server-side apply). Custom
resources (MetalLB, Kamaji) and Helm releases are out of scope: their CRDs and charts are not
obtainable here. Reads (``Secret.get``) are not declarations and are skipped.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from typing import Any

import pytest
from binaries import K8S_NEXT_VERSION

from labconfig.model import DEFAULT_TENANT_VERSION
from labconfig.versions import kubernetes_minor
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    Registration,
    kubernetes_object,
    run_program,
    stack_config,
)

STACKS = ("lab", "nvml", "gpu", "dra")
# The gpu stack's two secrets, set as Pulumi.gpu.yaml tells the user to.
GPU_SECRETS = {"managementKubeconfig": FAKE_KUBECONFIG, "sshPrivateKey": "fake-ssh-key"}
# API groups served by a bare kube-apiserver (no CRDs, no aggregated APIs).
BUILT_IN_GROUPS = {
    "core",
    "apps",
    "batch",
    "rbac.authorization.k8s.io",
    "policy",
    "scheduling.k8s.io",
    "networking.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "autoscaling",
    "certificates.k8s.io",
    "apiextensions.k8s.io",
}
# What a bare API server cannot judge, and why.
OUT_OF_SCOPE_GROUPS = {
    "helm.sh": "Helm releases: the charts are not obtainable here",
    "metallb.io": "MetalLB custom resources: CRDs not obtainable",
    "kamaji.clastix.io": "Kamaji custom resources: CRDs not obtainable",
}
FIELD_MANAGER = "pulumi-kubernetes"
# What every cluster has before anything is applied (the API server creates them).
PRESENT_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


@functools.cache
def program_run(stack: str):
    config = {**stack_config(stack), **(GPU_SECRETS if stack == "gpu" else {})}
    return run_program(config, stack=stack)


def api_group(registration: Registration) -> str:
    # kubernetes:<group>/<version>:<Kind>, e.g. kubernetes:core/v1:Namespace
    return registration.type.split(":")[1].split("/")[0]


def is_kubernetes_declaration(registration: Registration) -> bool:
    return registration.type.startswith("kubernetes:") and not registration.read


def is_built_in_declaration(registration: Registration) -> bool:
    return is_kubernetes_declaration(registration) and api_group(registration) in BUILT_IN_GROUPS


def by_provider(registrations: list[Registration]) -> dict[str, list[Registration]]:
    groups: dict[str, list[Registration]] = defaultdict(list)
    for registration in registrations:
        assert registration.provider, f"{registration.name} has no explicit provider"
        provider_urn = registration.provider.rsplit("::", 1)[0]
        groups[provider_urn.rsplit("::", 1)[1]].append(registration)
    return dict(groups)


def applied_names(stdout: str) -> list[str]:
    # kubectl apply --server-side prints "<kind>/<name> serverside-applied (server dry run)".
    return sorted(line.split()[0] for line in stdout.splitlines() if line.strip())


def object_ref(manifest: dict[str, Any]) -> str:
    group = manifest["apiVersion"].split("/")[0] if "/" in manifest["apiVersion"] else ""
    kind = manifest["kind"].lower() + (f".{group}" if group else "")
    return f"{kind}/{manifest['metadata']['name']}"


def release_namespaces(registrations: list[Registration]) -> dict[str, set[str]]:
    """By provider, the namespaces its Helm releases create (`createNamespace`): what the
    objects the program declares after a release (its metrics reader, in HAMi-DRA's) find."""
    found: dict[str, set[str]] = defaultdict(set)
    for r in registrations:
        if r.type == "kubernetes:helm.sh/v3:Release" and r.inputs.get("createNamespace"):
            found[r.provider.rsplit("::", 1)[0].rsplit("::", 1)[1]].add(r.inputs["namespace"])
    return dict(found)


def prepare_cluster(
    plane, manifests: list[dict[str, Any]], created: set[str] | frozenset[str] = frozenset()
) -> None:
    """What exists before the provider applies: the namespaces the program declares or its
    releases create (`created`; applied for real, so this is itself a real apply) and any Node
    it declares (kubeadm would have joined it; the program declares none: workers register
    their labels at join)."""
    namespaces = [m for m in manifests if m["kind"] == "Namespace"]
    namespaces += [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        for name in sorted(created - {m["metadata"]["name"] for m in namespaces})
    ]
    declared = {m["metadata"]["name"] for m in namespaces}
    for manifest in manifests:
        namespace = manifest["metadata"].get("namespace")
        assert namespace is None or namespace in declared | PRESENT_NAMESPACES, (
            f"{object_ref(manifest)} is in namespace {namespace!r}, which nothing declares"
        )
    patched_nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": m["metadata"]["name"]}}
        for m in manifests
        if m["kind"] == "Node"
    ]
    for manifest in namespaces + patched_nodes:
        plane.kubectl(
            "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
            input=json.dumps(manifest),
        )  # fmt: skip


@pytest.fixture(scope="module")
def api_server(start_control_plane):
    """One API server for every cluster of every stack: a dry-run stores nothing, so the only
    shared state is the namespaces applied for real, and prepare_cluster demands that each
    provider's objects sit in namespaces that provider itself declares."""
    assert kubernetes_minor(K8S_NEXT_VERSION) == kubernetes_minor(DEFAULT_TENANT_VERSION)
    plane = start_control_plane("dry-run", full=False, kubernetes=K8S_NEXT_VERSION)
    yield plane
    plane.stop()


@pytest.mark.parametrize("stack", STACKS)
def test_every_built_in_object_passes_a_server_side_dry_run(stack, api_server):
    run = program_run(stack)
    declared = [r for r in run.resources if is_built_in_declaration(r)]
    created = release_namespaces(run.resources)
    groups = by_provider(declared)
    assert groups, f"{stack}: no built-in objects rendered"
    for provider, registrations in groups.items():
        manifests = [kubernetes_object(r) for r in registrations]
        prepare_cluster(api_server, manifests, created.get(provider, set()))
        result = api_server.kubectl(
            "apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}",
            "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}),
            check=False,
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (0, ""), (
            f"{stack}/{provider}: the API server refused:\n{result.stderr}"
        )
        assert applied_names(result.stdout) == sorted(object_ref(m) for m in manifests)


@pytest.mark.parametrize("stack", STACKS)
def test_no_kubernetes_object_is_left_out_unnoticed(stack):
    """Every Kubernetes declaration is either judged above or out of scope for a named reason
    (a new kind, e.g. a yaml/v2 ConfigGroup, must be placed on purpose)."""
    groups = {api_group(r) for r in program_run(stack).resources if is_kubernetes_declaration(r)}
    assert groups - BUILT_IN_GROUPS - set(OUT_OF_SCOPE_GROUPS) == set()
    if stack == "lab":  # the simulated GPUs' agent: RBAC and a Deployment
        assert {"core", "rbac.authorization.k8s.io", "apps"} <= groups


def test_the_dry_run_refuses_what_a_real_api_server_refuses(api_server):
    """The check can fail: a Deployment whose selector does not match its template, a
    ResourceQuota on a non-quota resource name, and a misspelt field (server-side apply types
    the object against the schema) are each refused by the same apply."""
    bad = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "a"}},
                "template": {
                    "metadata": {"labels": {"app": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "bad", "namespace": "default"},
            "spec": {"hard": {"gpumem": "1"}},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bad", "namespace": "default"},
            "datta": {"a": "b"},
        },
    ]
    refusals = []
    for manifest in bad:
        result = api_server.kubectl(
            "apply", "--server-side", "--dry-run=server", "-f", "-",
            input=json.dumps(manifest), check=False,
        )  # fmt: skip
        refusals.append((result.returncode, result.stderr))
    deployment, quota, config_map = refusals
    assert deployment[0] == 1 and "`selector` does not match template `labels`" in deployment[1]
    assert quota[0] == 1 and 'spec.hard[gpumem]: Invalid value: "gpumem"' in quota[1]
    assert config_map[0] == 1 and ".datta: field not declared in schema" in config_map[1]
