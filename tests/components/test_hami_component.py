"""What the Hami component declares in each tenant beside HAMi's chart."""

from __future__ import annotations

from tests.support.pulumi_harness import ProgramRun

POLICY = "kubernetes:admissionregistration.k8s.io/v1beta1:MutatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1beta1:MutatingAdmissionPolicyBinding"


def test_each_tenant_gets_the_lock_wait_policy_through_its_own_api_server(lab: ProgramRun):
    for tenant in ("tenant-a", "tenant-b"):
        policy = lab.named(f"{tenant}-hami-mutatingadmissionpolicy")
        binding = lab.named(f"{tenant}-hami-mutatingadmissionpolicybinding")
        assert (policy.type, binding.type) == (POLICY, BINDING)
        for resource in (policy, binding):
            assert f"::{tenant}-provider::" in resource.provider
            assert resource.parent.endswith(f"::{tenant}-hami")
        assert binding.inputs["spec"]["policyName"] == policy.inputs["metadata"]["name"]
        # After the tenant's nodes and CNI, like HAMi's chart: the API server is up by then.
        assert any(
            "index:Flannel$" in urn and f"::{tenant}-cni" in urn
            for urn in lab.depends_on(policy.urn)
        )
