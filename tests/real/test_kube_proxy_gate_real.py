"""The gate before the program creates a tenant's own kube-proxy, against a real API server.

`kamaji_kube_proxy_gone_wait_script` (builders/scripts.py) waits until the tenant holds none of
the objects Kamaji's kube-proxy addon made: named as kubeadm names them and labelled
`kamaji.clastix.io/project: kamaji`. Here its two `kubectl get` queries (several kinds, a label
and a name field selector) meet kube-apiserver v1.35.4: Kamaji's other labelled objects
(CoreDNS's) and an unlabelled object of the same name do not hold it.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from binaries import bin_path
from controlplane import ControlPlane

from builders.scripts import kamaji_kube_proxy_gone_wait_script

LABEL = {"kamaji.clastix.io/project": "kamaji"}
PASSED = "no kube-proxy object of Kamaji's addon in the tenant"


def gate(plane: ControlPlane) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LAB_KUBECONFIG": plane.kubeconfig().read_text(),
        "PATH": f"{bin_path('kubectl').parent}:{os.environ['PATH']}",
    }
    script = kamaji_kube_proxy_gone_wait_script(timeout_seconds=2, interval_seconds=1)
    return subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60
    )


def apply(plane: ControlPlane, *items: dict) -> None:
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                         "items": list(items)}))  # fmt: skip


@pytest.mark.upstream("kamaji-kube-proxy-addon-is-kubeadms-default")
def test_the_gate_waits_for_kamajis_labelled_kube_proxy_objects_only(start_control_plane):
    plane = start_control_plane("kube-proxy-gate", full=False)
    assert gate(plane).returncode == 0  # a new tenant: nothing to wait for
    config_map = {"apiVersion": "v1", "kind": "ConfigMap"}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "kubeadm:node-proxier", "labels": LABEL},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:node-proxier",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "kube-proxy", "namespace": "kube-system"}],
    }
    apply(
        plane,
        {
            **config_map,
            "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": LABEL},
        },
        {
            **config_map,
            "metadata": {"name": "coredns", "namespace": "kube-system", "labels": LABEL},
        },
        binding,
    )
    held = gate(plane)
    assert held.returncode == 1
    assert "configmap/kube-proxy" in held.stderr and "kubeadm:node-proxier" in held.stderr
    assert "coredns" not in held.stderr
    plane.kubectl("delete", "configmap", "-n", "kube-system", "kube-proxy")
    held = gate(plane)
    assert held.returncode == 1 and "configmap/kube-proxy" not in held.stderr
    plane.kubectl(
        "label", "clusterrolebinding", "kubeadm:node-proxier", "kamaji.clastix.io/project-"
    )
    passed = gate(plane)
    assert passed.returncode == 0 and PASSED in passed.stderr, passed.stderr
