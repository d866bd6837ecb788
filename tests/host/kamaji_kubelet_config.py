"""The kubelet-config Kamaji uploads for a TenantControlPlane, made by the libraries Kamaji links.

`programs/kamaji-kubelet-config/main.go` follows Kamaji's getKubeletConfigmapContent
(clastix/kamaji ddbabd87 internal/kubeadm/uploadconfig.go:75-109) with k8s.io/kubernetes v1.36.3,
k8s.io/kubelet v0.36.1, k8s.io/apimachinery v0.36.3 and evanphx/json-patch v5.9.11, the versions
Kamaji's go.mod resolves: the kubelet's defaults come from SetDefaults_KubeletConfiguration
itself (no copied values), and the patched document is decoded back into the typed struct, so
a patch to a path the struct lacks is dropped as Kamaji drops it.

Built with the real tier's Go caches into its bin/ (tests/real/binaries.py), when missing.
"""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import kamaji_render
import yaml
from node_image import binaries, go_env

KUBELET_CONFIG_SET = binaries.BinarySet(
    name="kamaji-kubelet-config",
    module="k8s.io/kubernetes",
    version=kamaji_render.KAMAJI_KUBERNETES_LIBRARY.split()[1],
    packages=(),
    # Kamaji's go.mod:9,34,39 and its replace of every other staging module to v0.36.1
    local_replace_version="v0.36.1",
    programs=("tests/host/programs/kamaji-kubelet-config",),
    pins=(
        ("k8s.io/apimachinery", "v0.36.3"),
        ("github.com/evanphx/json-patch/v5", "v5.9.11"),
    ),
)


class KamajiRefusesPatches(RuntimeError):
    """Kamaji's upload-config kubelet phase would fail with this error (the TCP never settles)."""


@functools.cache
def program() -> Path:
    env, go_version = go_env()
    binaries.build_set(KUBELET_CONFIG_SET, binaries.cache_root(), env, go_version)
    return binaries.bin_path(KUBELET_CONFIG_SET.binaries[0])


def request(tcp: dict[str, Any]) -> dict[str, Any]:
    """What UploadKubeletConfig takes from the TCP (uploadconfig.go:38-42): the deprecated
    spec.kubernetes.kubelet.cgroupfs as the driver, the network profile's DNS addresses and
    domain, and the configurationJSONPatches (kubeadm_phases.go:158-165)."""
    spec = kamaji_render.defaulted(tcp)["spec"]
    kubelet, net = spec["kubernetes"]["kubelet"], spec["networkProfile"]
    return {
        "cgroupDriver": kubelet.get("cgroupfs", ""),
        "clusterDNS": list(net["dnsServiceIPs"]),
        "clusterDomain": net["clusterDomain"],
        "patches": kubelet.get("configurationJSONPatches") or None,
    }


def content(tcp: dict[str, Any]) -> str:
    """The ConfigMap's `kubelet` value, as Kamaji encodes it."""
    found = subprocess.run(
        [program()], input=json.dumps(request(tcp)), capture_output=True, text=True, timeout=60
    )
    if found.returncode != 0:
        raise KamajiRefusesPatches(found.stderr.strip())
    return found.stdout


def configuration(tcp: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(content(tcp))
