"""konnectivity.py: the Konnectivity objects and files Kamaji (26.8.2-edge, ddbabd87) renders
for the program's TCP (pure tests, no fixture of the tier). test_tenant_konnectivity.py runs
them for real on the tier's tenants: the agents on real workers, a webhook served on the pod
network that the API server reaches only through the tunnel.
docs/upstream-facts/tenant-stand-in.md says how each fact was checked.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import kamaji_render as kr
import konnectivity as kn
import pytest
import workload_images
import yaml

from builders.control_plane import KONNECTIVITY_AGENT_TOLERATIONS, tenant_control_plane_manifest
from labconfig.model import TenantConfig

ADDRESS = "172.31.255.10"


# The tenant version the expectations below were read for (the default is newer).
TENANT_VERSION = "v1.35.0"


def program_tcp(**tenant: object) -> dict:
    tenant = {"kubernetes_version": TENANT_VERSION, **tenant}
    return tenant_control_plane_manifest(TenantConfig(name="tenant-a", **tenant), ADDRESS)


# agent.go mutate's args for the program's TCP, in ArgsFromMapToSlice's order
KAMAJI_AGENT_ARGS = [
    "--admin-server-port=8133",
    "--ca-cert=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    "--health-server-port=8134",
    "--logtostderr=true",
    f"--proxy-server-host={ADDRESS}",
    "--proxy-server-port=8132",
    "--service-account-token-path=/var/run/secrets/tokens/konnectivity-agent-token",
    "-v=8",
]


@pytest.mark.upstream("kamaji-konnectivity-image-version")
@pytest.mark.parametrize(
    ("version", "tag"), [("v1.35.4", "v0.35.0"), ("v1.34.1", "v0.34.0"), ("v1.33.0", "v0.33.0")]
)
def test_the_images_are_tagged_v0_minor_0_of_the_tenant(version: str, tag: str):
    tcp = program_tcp(kubernetes_version=version)
    assert kn.image_version(tcp, "agent") == kn.image_version(tcp, "server") == tag
    assert kn.agent_image(tcp) == f"registry.k8s.io/kas-network-proxy/proxy-agent:{tag}"
    assert kn.server_image(tcp) == f"registry.k8s.io/kas-network-proxy/proxy-server:{tag}"


@pytest.mark.upstream("kamaji-konnectivity-image-version")
def test_an_addon_version_wins_and_the_module_proxy_lacks_v0_35():
    tcp = program_tcp(kubernetes_version="v1.35.4")
    tcp["spec"]["addons"]["konnectivity"]["agent"]["version"] = "v0.34.0"
    assert kn.agent_image(tcp).endswith(":v0.34.0")
    assert kn.server_image(tcp).endswith(":v0.35.0")  # each its own
    # the program leaves both unset: Kamaji asks v0.35.0, the build is the newest served
    assert "version" not in program_tcp()["spec"]["addons"]["konnectivity"]["agent"]
    assert kn.PROXY_SET.version == kn.BUILT_VERSION == "v0.34.0"
    assert kn.PROXY_SET.binaries == ("server", "agent")


@pytest.mark.upstream("kamaji-konnectivity-agent-objects")
def test_the_agent_args_are_kamajis_for_the_programs_tcp():
    assert kn.agent_args(program_tcp()) == KAMAJI_AGENT_ARGS


@pytest.mark.upstream("kamaji-konnectivity-agent-objects")
def test_the_agent_dials_the_advertise_address_when_there_is_one():
    tcp = program_tcp()
    tcp["spec"]["networkProfile"]["advertiseAddress"] = "192.0.2.7"
    assert "--proxy-server-host=192.0.2.7" in kn.agent_args(tcp)
    tcp["spec"]["addons"]["konnectivity"]["server"]["port"] = 9132
    assert "--proxy-server-port=9132" in kn.agent_args(tcp)


@pytest.mark.upstream("kamaji-konnectivity-agent-objects")
def test_the_daemon_set_is_kamajis_with_the_programs_tolerations_and_host_network():
    daemon_set = kn.agent_daemon_set(program_tcp())
    assert daemon_set["metadata"] == {
        "name": "konnectivity-agent",
        "namespace": "kube-system",
        "labels": {
            "kamaji.clastix.io/project": "kamaji",
            "kamaji.clastix.io/name": "tenant-a",
            "kamaji.clastix.io/component": "konnectivity-agent",
        },
    }
    assert daemon_set["spec"]["selector"] == {"matchLabels": {"k8s-app": "konnectivity-agent"}}
    template = daemon_set["spec"]["template"]
    assert template["metadata"]["labels"] == {"k8s-app": "konnectivity-agent"}
    spec = template["spec"]
    assert spec["hostNetwork"] is True
    assert spec["tolerations"] == KONNECTIVITY_AGENT_TOLERATIONS
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["serviceAccountName"] == "konnectivity-agent"
    (volume,) = spec["volumes"]
    assert volume == {
        "name": "konnectivity-agent-token",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "path": "konnectivity-agent-token",
                        "audience": "system:konnectivity-server",
                        "expirationSeconds": 3600,
                    }
                }
            ],
            "defaultMode": 420,
        },
    }
    (container,) = spec["containers"]
    assert container["image"] == "registry.k8s.io/kas-network-proxy/proxy-agent:v0.35.0"
    assert container["command"] == ["/proxy-agent"]
    assert container["args"] == KAMAJI_AGENT_ARGS
    assert container["volumeMounts"] == [
        {"mountPath": "/var/run/secrets/tokens", "name": "konnectivity-agent-token"}
    ]
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": 8134,
        "scheme": "HTTP",
    }
    # no pull policy: the kubelet's default for a tagged image, IfNotPresent (loaded images)
    assert "imagePullPolicy" not in container


@pytest.mark.upstream("kamaji-konnectivity-agent-objects")
def test_without_the_programs_agent_settings_the_crd_defaults_apply():
    tcp = program_tcp()
    tcp["spec"]["addons"]["konnectivity"] = {"server": {"port": 8132}}
    spec = kn.agent_daemon_set(tcp)["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is False
    assert spec["tolerations"] == [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
    tcp["spec"]["addons"]["konnectivity"]["agent"] = {"mode": "Deployment"}
    with pytest.raises(NotImplementedError):
        kn.agent_daemon_set(tcp)


@pytest.mark.upstream("kamaji-konnectivity-agent-objects")
def test_the_service_account_and_the_binding_to_auth_delegator():
    service_account, binding, daemon_set = kn.agent_objects(program_tcp())
    assert (service_account["kind"], service_account["metadata"]["name"]) == (
        "ServiceAccount",
        "konnectivity-agent",
    )
    assert service_account["metadata"]["namespace"] == "kube-system"
    assert service_account["metadata"]["labels"]["kamaji.clastix.io/component"] == (
        "konnectivity-sa"
    )
    assert binding["metadata"]["name"] == "system:konnectivity-server"
    assert binding["metadata"]["labels"] == {
        "kamaji.clastix.io/project": "kamaji",
        "kamaji.clastix.io/name": "tenant-a",
        "kamaji.clastix.io/component": "konnectivity-clusterrolebinding",
        "kubernetes.io/cluster-service": "true",
        "addonmanager.kubernetes.io/mode": "Reconcile",
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:auth-delegator",
    }
    assert binding["subjects"] == [
        {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "User",
            "name": "system:konnectivity-server",
        }
    ]
    # the server's authentication audience is what the agents' tokens are issued for
    audience = daemon_set["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"][0]
    assert "--authentication-audience=" + audience["serviceAccountToken"]["audience"] in (
        kr.konnectivity_server_args(program_tcp())
    )
    assert list(yaml.safe_load_all(kn.agent_manifests(program_tcp()))) == kn.agent_objects(
        program_tcp()
    )


def _kubeadm_kubeconfig() -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tenant-a",
                    "cluster": {
                        "server": f"https://{ADDRESS}:6443",
                        "certificate-authority-data": "Q0E=",
                    },
                }
            ],
            "contexts": [{"name": "x@tenant-a", "context": {"cluster": "tenant-a", "user": "x"}}],
            "current-context": "x@tenant-a",
            "users": [
                {
                    "name": "x",
                    "user": {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"},
                }
            ],
        }
    )


@pytest.mark.upstream("kamaji-konnectivity-server-kubeconfig")
def test_the_server_kubeconfig_is_kamajis_layout_with_kubeadms_credentials():
    config = yaml.safe_load(kn.server_kubeconfig(_kubeadm_kubeconfig(), program_tcp()))
    assert config["current-context"] == "system:konnectivity-server@kubernetes"
    assert config["clusters"] == [
        {
            "name": "kubernetes",
            "cluster": {"server": "https://localhost:6443", "certificate-authority-data": "Q0E="},
        }
    ]
    assert config["contexts"] == [
        {
            "name": "system:konnectivity-server@kubernetes",
            "context": {"cluster": "kubernetes", "user": "system:konnectivity-server"},
        }
    ]
    (user,) = config["users"]
    assert user["name"] == "system:konnectivity-server"
    assert base64.b64decode(user["user"]["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["user"]["client-key-data"]) == b"KEY"


@pytest.mark.upstream("kamaji-konnectivity-egress-selector")
def test_the_server_files_go_where_kamajis_pod_mounts_them(tmp_path: Path):
    files = kn.ServerFiles(tmp_path, tmp_path / "server")
    apiserver = files.docker_options("kube-apiserver")
    server = files.docker_options(kn.SERVER_CONTAINER)
    uds = f"{tmp_path / 'konnectivity-uds'}:/run/konnectivity"
    assert apiserver == [
        "-v",
        uds,
        "-v",
        f"{tmp_path / 'egress-selector-configuration.yaml'}:"
        "/etc/kubernetes/konnectivity/configurations/egress-selector-configuration.yaml:ro",
    ]
    assert server == [
        "-v",
        uds,
        "-v",
        f"{tmp_path / 'konnectivity-server.conf'}:/etc/kubernetes/konnectivity-server.conf:ro",
        "-v",
        f"{tmp_path / 'server'}:/proxy-server:ro",
    ]
    assert files.docker_options("kube-scheduler") == []
    # the socket the egress selector names is in the directory both share
    selector = yaml.safe_load(kr.egress_selector_configuration())
    socket = selector["egressSelections"][0]["connection"]["transport"]["uds"]["udsName"]
    assert socket.startswith(kr.KONNECTIVITY_UDS_DIR + "/")
    assert f"--uds-name={socket}" in kn.server_command(program_tcp())
    assert kn.server_command(program_tcp())[0] == kn.SERVER_COMMAND


def test_the_agent_image_is_the_static_binary_at_kamajis_command():
    archive = kn.agent_archive("registry.k8s.io/kas-network-proxy/proxy-agent:v0.35.0", b"\x7fELF")
    assert workload_images.archive_references(archive) == [
        "registry.k8s.io/kas-network-proxy/proxy-agent:v0.35.0"
    ]
    members = workload_images._members(archive)
    (manifest,) = json.loads(members["manifest.json"])
    config = json.loads(members[manifest["Config"]])
    assert config["config"]["Entrypoint"] == ["/proxy-agent"]
    with tarfile.open(fileobj=io.BytesIO(members[manifest["Layers"][0]])) as layer:
        binary = layer.getmember("proxy-agent")
        assert binary.mode == 0o755
        assert layer.extractfile(binary).read() == b"\x7fELF"  # type: ignore[union-attr]
    # deterministic: the same bytes give the same digest containerd records
    again = kn.agent_archive("registry.k8s.io/kas-network-proxy/proxy-agent:v0.35.0", b"\x7fELF")
    assert workload_images.containerd_digest(archive) == workload_images.containerd_digest(again)
