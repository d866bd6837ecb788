"""The admission policy giving HAMi's GPU pods the pod-group label (builders/lock_wait_policy.py).

What the tenant's real API server does with it (labels which pods, leaves which alone) is
tested against a real kube-apiserver in tests/real/test_lock_wait_policy_real.py.
"""

from __future__ import annotations

import pytest

from builders.admission_policy import feature_gates, policy_api_version
from builders.control_plane import apiserver_extra_args, tenant_control_plane_manifest
from builders.lock_wait_policy import HAMI_RESOURCES, POD_GROUP_LABEL, POLICY_NAME, policy_manifests
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

TENANT_A = parse_config(lab_stack_config()).tenants[0]


def at(version: str):
    return TENANT_A.model_copy(update={"kubernetes_version": version})


@pytest.mark.upstream("kube-mutating-admission-policy-stages")
@pytest.mark.parametrize(
    ("version", "api", "extra_args"),
    [
        ("v1.33.4", None, []),
        (
            "v1.34.1",
            "admissionregistration.k8s.io/v1beta1",
            [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies=true,"
                "admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings=true",
            ],
        ),
        (
            "v1.35.0",
            "admissionregistration.k8s.io/v1beta1",
            [
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies=true,"
                "admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings=true",
            ],
        ),
        ("v1.36.0", "admissionregistration.k8s.io/v1", []),
    ],
)
def test_the_policy_api_and_the_flags_that_switch_it_on_follow_the_tenant_version(
    version, api, extra_args
):
    tenant = at(version)
    assert policy_api_version(tenant) == api
    assert apiserver_extra_args(tenant) == extra_args
    manifests = policy_manifests(tenant)
    assert [m["apiVersion"] for m in manifests] == ([api, api] if api else [])


@pytest.mark.upstream("kamaji-apiserver-extra-args-appended")
def test_the_tenant_control_plane_carries_the_flags_as_kamaji_extra_args():
    deployment = tenant_control_plane_manifest(at("v1.35.0"), "172.30.255.205")["spec"][
        "controlPlane"
    ]["deployment"]
    assert deployment["extraArgs"] == {"apiServer": apiserver_extra_args(at("v1.35.0"))}
    ga = tenant_control_plane_manifest(at("v1.36.0"), "172.30.255.205")["spec"]["controlPlane"]
    # Nothing to switch on, but set: Kamaji resets the flags only while extraArgs is set, so
    # a tenant moved from v1.35 to v1.36 loses the gate and runtime-config it no longer needs.
    assert ga["deployment"]["extraArgs"] == {"apiServer": []}


def test_only_the_gate_the_policy_needs_is_switched_on():
    assert feature_gates(at("v1.35.0")) == {"MutatingAdmissionPolicy": True}
    assert feature_gates(at("v1.36.0")) == {}


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_the_policy_sets_the_label_hami_reads_and_only_where_none_is_set():
    policy, binding = policy_manifests(TENANT_A)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore"  # a broken policy costs the wait, never a pod
    rule = spec["matchConstraints"]["resourceRules"]
    assert rule == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    ]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert f"!('{POD_GROUP_LABEL}' in object.metadata.labels)" in conditions["in-no-pod-group"]
    for name in HAMI_RESOURCES:  # any of them: HAMi's webhook adds nvidia.com/gpu after us
        assert f"'{name}'" in conditions["asks-for-a-hami-gpu"]
    assert "requests" not in conditions["asks-for-a-hami-gpu"]  # HAMi reads limits only
    assert "initContainers" in conditions["asks-for-a-hami-gpu"]
    assert f"['{POD_GROUP_LABEL}'] == ''" in conditions["in-no-pod-group"]  # empty: no group
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    assert (
        f'"{POD_GROUP_LABEL}": "hami-node-lock-wait"'
        in (mutation["applyConfiguration"]["expression"])
    )
    assert binding["spec"]["policyName"] == POLICY_NAME == policy["metadata"]["name"]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    for selector in ("namespaceSelector", "objectSelector"):
        assert binding["spec"]["matchResources"][selector] == {"matchExpressions": [ignore]}
