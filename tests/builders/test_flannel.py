"""flannel's values and CNI config (builders/flannel.py)."""

from __future__ import annotations

import json

from builders.flannel import flannel_cni_conf, flannel_values


def test_flannel_routes_the_tenant_pod_cidr_through_ptp():
    values = flannel_values("10.250.0.0/16")
    assert values["podCidr"] == "10.250.0.0/16"
    conf = json.loads(values["flannel"]["cniConf"])
    assert conf == json.loads(flannel_cni_conf())
    flannel = conf["plugins"][0]
    assert flannel["type"] == "flannel"
    assert flannel["delegate"]["type"] == "ptp"  # kindest/node has no bridge plugin
    assert {"dst": "0.0.0.0/0"} in flannel["ipam"]["routes"]
