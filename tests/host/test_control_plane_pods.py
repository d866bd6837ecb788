"""control_plane_pods.py and shared_datastore.py, pure: the control plane Deployment and the
tenant's datastore identity as Kamaji (26.8.2-edge, ddbabd87) makes them for the program's TCP.

The expected mounts, role and certificate are what Kamaji made for the program's tenants in a
whole-lab run (docs/upstream-facts/tenant-stand-in.md). No Docker: these tests request no
fixture of the tier; test_management_platform.py runs the same objects on a kind cluster.
"""

from __future__ import annotations

import control_plane_pods as cpp
import kamaji_render as kr
import konnectivity as kn
import pytest
import shared_datastore as sd
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from builders.control_plane import tenant_control_plane_manifest
from labconfig.model import TenantConfig

ADDRESS = "172.31.255.10"
UID = "0b7c3a5e-1111-4222-8333-944455556666"
VERSION = "v1.35.4"

# What each container of Kamaji's pod sees under /etc/kubernetes (a directory for `pki`), and
# whether it shares the Konnectivity socket's emptyDir: the scheduler gets its kubeconfig alone.
KAMAJI_FILES = {
    "kube-apiserver": (
        {"pki", "konnectivity/configurations/egress-selector-configuration.yaml"},
        True,
    ),
    "kube-controller-manager": ({"pki", "controller-manager.conf"}, False),
    "kube-scheduler": ({"scheduler.conf"}, False),
    "konnectivity-server": ({"pki", "konnectivity-server.conf"}, True),
}


def program_tcp() -> dict:
    tcp = tenant_control_plane_manifest(
        TenantConfig(name="tenant-a", kubernetes_version=VERSION), ADDRESS
    )
    tcp["metadata"]["uid"] = UID
    return tcp


def files(konnectivity: bool = True) -> dict[str, bytes]:
    paths = ["pki/ca.crt", "pki/etcd/server.crt", "controller-manager.conf", "scheduler.conf"]
    if konnectivity:
        paths += [
            "konnectivity-server.conf",
            "konnectivity/configurations/egress-selector-configuration.yaml",
        ]
    return {path: b"" for path in paths}


def pod_spec(konnectivity: bool = True) -> dict:
    _, deployment = cpp.manifests(program_tcp(), files(konnectivity), VERSION)
    return deployment["spec"]["template"]["spec"]


@pytest.mark.upstream("kamaji-control-plane-deployment")
def test_each_container_sees_the_files_kamaji_mounts_in_it():
    seen = {}
    for container in pod_spec()["containers"]:
        mounts = container["volumeMounts"]
        under = {m["subPath"] for m in mounts if m["name"] == "files"}
        assert all(
            m["mountPath"] == f"{kr.KUBERNETES_DIR}/{m['subPath']}"
            for m in mounts
            if m["name"] == "files"
        )
        socket = cpp.UDS_MOUNT in mounts
        seen[container["name"]] = (under, socket)
    assert seen == KAMAJI_FILES


@pytest.mark.upstream("kamaji-control-plane-deployment", "kamaji-apiserver-flags")
def test_the_containers_run_kamajis_commands_at_kamajis_images():
    containers = {c["name"]: c for c in pod_spec()["containers"]}
    expected = kr.control_plane_args(program_tcp(), datastore_endpoints=[sd.ENDPOINT])
    expected[kn.SERVER_CONTAINER] = kn.server_command(program_tcp())
    assert {name: c["command"] for name, c in containers.items()} == expected
    assert {name: c["image"] for name, c in containers.items()} == {
        "kube-apiserver": f"registry.k8s.io/kube-apiserver:{VERSION}",
        "kube-controller-manager": f"registry.k8s.io/kube-controller-manager:{VERSION}",
        "kube-scheduler": f"registry.k8s.io/kube-scheduler:{VERSION}",
        "konnectivity-server": "registry.k8s.io/kas-network-proxy/proxy-server:v0.35.0",
    }
    # Kamaji pulls kube-apiserver and the server `Always`; the harness preloads every image
    # and sets no policy, so nothing is pulled (docs/tenant-stand-in.md)
    assert not any("imagePullPolicy" in c for c in containers.values())


@pytest.mark.upstream("kamaji-control-plane-deployment")
def test_the_socket_is_a_memory_emptydir_and_goes_with_konnectivity():
    volumes = {v["name"]: v for v in pod_spec()["volumes"]}
    assert volumes["konnectivity-uds"] == {
        "name": "konnectivity-uds",
        "emptyDir": {"medium": "Memory"},
    }
    without = pod_spec(konnectivity=False)
    assert [c["name"] for c in without["containers"]] == [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ]
    assert [v["name"] for v in without["volumes"]] == ["files"]


@pytest.mark.upstream("kamaji-etcd-shared-datastore")
def test_the_tenants_etcd_client_certificate_is_kamajis_subject_and_usages():
    pki = sd.make_pki()
    certificate = x509.load_pem_x509_certificate(pki.client(UID)[0])
    subject = {a.oid: a.value for a in certificate.subject}
    assert subject == {NameOID.COMMON_NAME: UID, NameOID.ORGANIZATION_NAME: "system:masters"}
    usages = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [
        ExtendedKeyUsageOID.CLIENT_AUTH,
        ExtendedKeyUsageOID.SERVER_AUTH,
        ExtendedKeyUsageOID.CODE_SIGNING,
    ]
    assert certificate.issuer == x509.load_pem_x509_certificate(pki.ca_cert).subject
