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
import time

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


# What the gate reads of Kamaji on the management cluster, played on the same API server: a
# TenantControlPlane (a CRD of this test's own, with a status subresource: Kamaji's own is not
# needed for what kubectl reads) and the control plane's Deployment, whose status the test
# writes as Kamaji and the Deployment controller would (no controller manager runs here).
TCP = "tenant-a"
TCP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "tenantcontrolplanes.kamaji.clastix.io"},
    "spec": {
        "group": "kamaji.clastix.io",
        "scope": "Namespaced",
        "names": {"kind": "TenantControlPlane", "plural": "tenantcontrolplanes",
                  "singular": "tenantcontrolplane", "listKind": "TenantControlPlaneList"},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object",
                                           "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}  # fmt: skip


class KamajiSide:
    """The TenantControlPlane and its Deployment, first as right after a spec change: Kamaji
    has not reconciled it and the Deployment still runs an old pod beside the new one."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        plane.kubectl("apply", "-f", "-", input=json.dumps(TCP_CRD))
        plane.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                      f"crd/{TCP_CRD['metadata']['name']}")  # fmt: skip
        plane.kubectl("create", "namespace", TCP)
        plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "kamaji.clastix.io/v1alpha1", "kind": "TenantControlPlane",
            "metadata": {"name": TCP, "namespace": TCP}, "spec": {"replicas": 2},
        }))  # fmt: skip
        labels = {"app": TCP}
        plane.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": TCP, "namespace": TCP},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "kube-apiserver",
                                         "image": "registry.invalid/kube-apiserver:1"}]},
            }},
        }))  # fmt: skip
        self._status("deployment", {"observedGeneration": 1, "replicas": 2,
                                    "updatedReplicas": 1, "readyReplicas": 2,
                                    "availableReplicas": 2})  # fmt: skip

    def _status(self, kind: str, status: dict) -> None:
        self.plane.kubectl("patch", kind, TCP, "-n", TCP, "--subresource=status",
                           "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip

    def reconciled(self) -> KamajiSide:
        self._status("tenantcontrolplane", {"observedGeneration": 1})
        return self

    def rolled_out(self) -> KamajiSide:
        self._status("deployment", {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                                    "availableReplicas": 1})  # fmt: skip
        return self


def policy_api_gate_process(plane: ControlPlane, timeout_seconds: int) -> subprocess.Popen:
    """The program's gate before a tenant's policies, with the real kubectl; the plane is also
    its management cluster (KamajiSide)."""
    kubeconfig = plane.kubeconfig().read_text()
    return subprocess.Popen(
        ["/bin/sh", "-c", admission_policy_api_wait_script(timeout_seconds, interval_seconds=1)],
        env={
            "PATH": f"{bin_path('kubectl').parent}:/usr/bin:/bin",
            # kubectl's discovery cache goes under $HOME/.kube (the working directory without one)
            "HOME": str(plane.kubeconfig().parent),
            "LAB_KUBECONFIG": kubeconfig,
            "MANAGEMENT_KUBECONFIG": kubeconfig,
            "TCP_NAME": TCP,
            "TCP_NAMESPACE": TCP,
            "POLICY_API": policy_api_version(tenant_of(plane)) or "",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def policy_api_gate(plane: ControlPlane, timeout_seconds: int) -> subprocess.CompletedProcess:
    """The gate run to its end, with Kamaji's side done (reconciled and rolled out)."""
    KamajiSide(plane).reconciled().rolled_out()
    process = policy_api_gate_process(plane, timeout_seconds)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


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


@pytest.mark.upstream("kamaji-observed-generation-after-reconcile")
def test_the_gate_asks_the_tenant_only_after_kamajis_rollout(start_control_plane):
    """Right after the flags change the old API server may still answer through the Service:
    the gate waits until Kamaji has reconciled the spec and its Deployment has rolled out,
    read with the real kubectl from a real API server."""
    plane = start_control_plane("policy-gate-rollout", full=False)
    kamaji = KamajiSide(plane)
    gate = policy_api_gate_process(plane, timeout_seconds=60)
    try:
        time.sleep(4)
        assert gate.poll() is None, "the gate passed before Kamaji reconciled the spec"
        kamaji.reconciled()
        time.sleep(4)
        assert gate.poll() is None, "the gate passed while an old API server pod was running"
        kamaji.rolled_out()
        _, stderr = gate.communicate(timeout=45)
    finally:
        gate.kill()
    assert gate.returncode == 0, stderr
    assert f'deployment "{TCP}" successfully rolled out' in stderr
    assert stderr.index("successfully rolled out") < stderr.index("mutatingadmissionpolicies")


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
