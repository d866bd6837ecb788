"""MetalLB's values and address pool (builders/metallb.py)."""

from __future__ import annotations

from builders.metallb import metallb_values, pool_manifests
from labconfig.addresses import plan_network
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config

CFG = parse_config(lab_stack_config())
PLAN = plan_network(CFG)


def test_metallb_native_mode_and_pool_range():
    values = metallb_values()
    assert values["speaker"]["frr"]["enabled"] is False
    assert values["frrk8s"]["enabled"] is False
    pool, l2 = pool_manifests(PLAN.pool_range)
    assert pool["kind"] == "IPAddressPool" and pool["apiVersion"] == "metallb.io/v1beta1"
    assert pool["spec"]["addresses"] == ["172.30.255.205-172.30.255.254"]
    assert pool["metadata"]["namespace"] == l2["metadata"]["namespace"] == "metallb-system"
    assert l2["kind"] == "L2Advertisement"
    assert l2["spec"]["ipAddressPools"] == [pool["metadata"]["name"]]
