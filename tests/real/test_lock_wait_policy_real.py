"""The lock-wait policy on a real kube-apiserver with the flags the program gives a tenant.

Every case runs on v1.35.4 (the beta API, which the program's flags switch on) and on v1.36.3
(the GA v1 API, served with no flags: the program passes none).

The program's MutatingAdmissionPolicy (builders/lock_wait_policy.py) labels the GPU pods HAMi
schedules as pod-group members, so HAMi's Bind waits for its node lock instead of failing
(docs/placement-time.md). Each case is a server-side dry run of a pod create, which runs the
mutating admission chain and returns the object as it would be stored.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from binaries import K8S_NEXT_VERSION, K8S_VERSION, bin_path
from controlplane import ControlPlane, wait_until

from builders.admission_policy import policy_api_version
from builders.lock_wait_policy import POD_GROUP_LABEL, POD_GROUP_VALUE, policy_manifests
from builders.scripts import admission_policy_api_wait_script
from labconfig.model import TenantConfig
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

TENANT = parse_config(lab_stack_config()).tenants[0]  # v1.35: the beta API, switched on
APIS = {
    K8S_VERSION: "admissionregistration.k8s.io/v1beta1",
    K8S_NEXT_VERSION: "admissionregistration.k8s.io/v1",
}
NS, IGNORED_NS = "team-a", "not-for-hami"
GPU_LIMITS = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "25"}


def pod(
    name: str,
    *,
    namespace: str = NS,
    limits: dict | None = None,
    labels: dict | None = None,
    scheduler: str | None = None,
    init_limits: dict | None = None,
) -> dict:
    spec: dict = {
        "containers": [
            {"name": "c", "image": "registry.invalid/app:1", "resources": {"limits": limits or {}}}
        ]
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if init_limits:
        spec["initContainers"] = [
            {"name": "i", "image": "registry.invalid/app:1", "resources": {"limits": init_limits}}
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def labels_of(plane: ControlPlane, body: dict) -> dict:
    return plane.admitted(body)["metadata"].get("labels") or {}


def tenant_of(plane: ControlPlane) -> TenantConfig:
    """The tenant a plane stands for: tenant-a at the plane's Kubernetes version."""
    return TENANT.model_copy(update={"kubernetes_version": plane.kubernetes})


@pytest.fixture(scope="module", params=[K8S_VERSION, K8S_NEXT_VERSION])
def plane(request, start_control_plane) -> ControlPlane:
    version = request.param
    plane = start_control_plane(f"lock-wait-policy-{version}", full=False, kubernetes=version)
    assert policy_api_version(tenant_of(plane)) == APIS[version]
    for namespace, labels in ((NS, {}), (IGNORED_NS, {"hami.io/webhook": "ignore"})):
        plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": labels},
        }))  # fmt: skip
        # No controller manager here: the ServiceAccount admission wants the default account.
        plane.kubectl("create", "serviceaccount", "default", "-n", namespace)
    probe = pod("probe", limits=GPU_LIMITS)
    assert POD_GROUP_LABEL not in labels_of(plane, probe)  # nothing labels pods before it
    for manifest in policy_manifests(tenant_of(plane)):
        plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    # The policy takes effect once the API server's policy informer has it.
    wait_until(lambda: POD_GROUP_LABEL in labels_of(plane, probe), "the policy in effect", 30)
    return plane


def policy_api_gate(plane: ControlPlane, timeout_seconds: int) -> subprocess.CompletedProcess:
    """The program's gate before a tenant's policies, with the real kubectl."""
    return subprocess.run(
        ["/bin/sh", "-c", admission_policy_api_wait_script(timeout_seconds, interval_seconds=0)],
        env={
            "PATH": f"{bin_path('kubectl').parent}:/usr/bin:/bin",
            "LAB_KUBECONFIG": plane.kubeconfig().read_text(),
            "POLICY_API": policy_api_version(tenant_of(plane)) or "",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.upstream("kube-mutating-admission-policy-stages")
def test_without_the_programs_flags_a_v1_35_api_server_serves_no_policy(start_control_plane):
    """Beta and off in v1.35: the program's gate and runtime-config are what switch it on;
    the program's gate before the policies says so instead of letting the create fail."""
    bare = start_control_plane("no-tenant-flags", full=False, tenant_args=())
    (policy, _) = policy_manifests(TENANT)
    result = bare.kubectl("apply", "-f", "-", input=json.dumps(policy), check=False)
    assert result.returncode != 0
    assert 'no matches for kind "MutatingAdmissionPolicy"' in result.stderr
    gate = policy_api_gate(bare, timeout_seconds=0)
    assert gate.returncode == 1
    assert "did not serve mutatingadmissionpolicies" in gate.stderr


def test_with_them_the_gate_opens(plane):
    """On v1.36 "them" is no flag at all: the v1 API is on by default."""
    gate = policy_api_gate(plane, timeout_seconds=30)
    assert gate.returncode == 0, gate.stderr
    assert f"mutatingadmissionpolicies served in {APIS[plane.kubernetes]}" in gate.stderr
    assert bool(plane.tenant_args) == (plane.kubernetes == K8S_VERSION)


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_a_users_gpu_pod_becomes_a_pod_group_member(plane):
    assert labels_of(plane, pod("user", limits=GPU_LIMITS)) == {POD_GROUP_LABEL: POD_GROUP_VALUE}


def test_a_pod_already_on_hamis_scheduler_is_labelled_too(plane):
    body = pod("named", limits=GPU_LIMITS, scheduler="hami-scheduler")
    assert labels_of(plane, body)[POD_GROUP_LABEL] == POD_GROUP_VALUE


def test_a_gpu_init_container_is_enough(plane):
    body = pod("init", init_limits={"nvidia.com/gpu": "1"})
    assert labels_of(plane, body)[POD_GROUP_LABEL] == POD_GROUP_VALUE


def test_a_pod_asking_only_memory_and_cores_is_labelled(plane):
    """HAMi's webhook, which runs after the policy, adds nvidia.com/gpu: 1 to such a pod
    (defaultGPUNum), and HAMi's Bind takes the node lock for it like any other."""
    body = pod("memory-only", limits={"nvidia.com/gpumem": "8000", "nvidia.com/gpucores": "20"})
    assert labels_of(plane, body)[POD_GROUP_LABEL] == POD_GROUP_VALUE
    percent = pod("percent", limits={"nvidia.com/gpumem-percentage": "50"})
    assert labels_of(plane, percent)[POD_GROUP_LABEL] == POD_GROUP_VALUE


def test_an_empty_pod_group_is_no_group(plane):
    """HAMi takes only a non-empty value for membership; the policy fills an empty one."""
    body = pod("empty-group", limits=GPU_LIMITS, labels={POD_GROUP_LABEL: ""})
    assert labels_of(plane, body)[POD_GROUP_LABEL] == POD_GROUP_VALUE


def test_a_real_pod_group_keeps_its_own_name(plane):
    body = pod("gang", limits=GPU_LIMITS, labels={POD_GROUP_LABEL: "training-gang", "app": "x"})
    assert labels_of(plane, body) == {POD_GROUP_LABEL: "training-gang", "app": "x"}


def test_other_labels_stay_as_they_are(plane):
    body = pod("labelled", limits=GPU_LIMITS, labels={"app": "inference"})
    assert labels_of(plane, body) == {"app": "inference", POD_GROUP_LABEL: POD_GROUP_VALUE}


@pytest.mark.parametrize(
    "body",
    [
        pod("cpu-only", limits={"cpu": "1"}),
        pod("volcano", limits=GPU_LIMITS, scheduler="volcano"),
        pod("ignored-pod", limits=GPU_LIMITS, labels={"hami.io/webhook": "ignore"}),
        pod("ignored-namespace", namespace=IGNORED_NS, limits=GPU_LIMITS),
    ],
    ids=["no-gpu", "another-scheduler", "pod-ignored-by-hami", "namespace-ignored-by-hami"],
)
def test_pods_hami_does_not_place_are_left_alone(plane, body):
    assert POD_GROUP_LABEL not in labels_of(plane, body)
