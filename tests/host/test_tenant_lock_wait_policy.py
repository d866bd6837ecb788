"""The lock-wait admission policy in a tenant whose API server runs with Kamaji's flags.

The tenant stand-in's kube-apiserver runs with exactly the flags Kamaji renders for the
program's TenantControlPlane, its extraArgs included (kamaji_render.apiserver_args): the
program's MutatingAdmissionPolicy must be served there and label a user's GPU pod. HAMi's
scheduler cannot run here; what the label does to its Bind is tested in tests/real.
"""

from __future__ import annotations

import pytest
from konnectivity import wait_for
from tenant_lab import TENANTS, TenantLab

from builders.lock_wait_policy import POD_GROUP_LABEL, POD_GROUP_VALUE, POLICY_NAME

KINDS = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}


@pytest.mark.upstream(
    "kamaji-apiserver-extra-args-appended", "kube-mutating-admission-policy-stages"
)
@pytest.mark.parametrize("tenant", TENANTS)
def test_the_tenants_api_server_serves_the_policy_and_labels_a_users_gpu_pod(
    tenants: TenantLab, tenant: str
):
    assert POD_GROUP_LABEL not in tenants.dry_run_gpu_pod_labels(tenant)
    applied = tenants.apply_lock_wait_policy(tenant)
    assert {o["kind"] for o in applied} == KINDS
    stored = tenants.get(tenant, "mutatingadmissionpolicies", POLICY_NAME)
    assert stored["metadata"]["name"] == POLICY_NAME
    wait_for(
        f"{tenant}'s API server labels a GPU pod",
        lambda: tenants.dry_run_gpu_pod_labels(tenant).get(POD_GROUP_LABEL) == POD_GROUP_VALUE,
        timeout=30,
    )
