"""kamaji_render.py, pure: what Kamaji (26.8.2-edge, ddbabd87) renders for the program's TCP.

The expected lists are what Kamaji's own builders printed for the same TCP (see
docs/upstream-facts/tenant-stand-in.md). No Docker: these tests request no fixture of the tier.
"""

from __future__ import annotations

import copy

import kamaji_render as kr
import pytest
import yaml

from builders.control_plane import tenant_control_plane_manifest
from labconfig.model import TenantConfig
from planning.pulls import KAMAJI_COREDNS

ADDRESS = "172.31.255.10"
UID = "0b7c3a5e-1111-4222-8333-944455556666"
ETCD = ["kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379"]


# The tenant version the expectations below were read for (the default is newer).
TENANT_VERSION = "v1.35.0"


def program_tcp(**tenant: object) -> dict:
    tenant = {"kubernetes_version": TENANT_VERSION, **tenant}
    tcp = tenant_control_plane_manifest(TenantConfig(name="tenant-a", **tenant), ADDRESS)
    tcp["metadata"]["uid"] = UID
    return tcp


# Kamaji's Deployment builder, run twice with the Konnectivity builder in between (a settled
# Deployment), on program_tcp() with the DataStore endpoints ETCD; then the TCP's
# extraArgs.apiServer verbatim (the program's, for a v1.35 tenant), as mergeAPIServerArgs
# appends them (deployment.go:753-824; Kamaji's own test deployment_test.go:180-195).
KAMAJI_APISERVER = [
    "kube-apiserver",
    f"--advertise-address={ADDRESS}",
    "--allow-privileged=true",
    "--authorization-mode=Node,RBAC",
    "--client-ca-file=/etc/kubernetes/pki/ca.crt",
    "--egress-selector-config-file=/etc/kubernetes/konnectivity/configurations/"
    "egress-selector-configuration.yaml",
    "--enable-admission-plugins=CertificateApproval,CertificateSigning,"
    "CertificateSubjectRestriction,DefaultIngressClass,DefaultStorageClass,"
    "DefaultTolerationSeconds,LimitRanger,MutatingAdmissionWebhook,NamespaceLifecycle,"
    "PersistentVolumeClaimResize,Priority,ResourceQuota,RuntimeClass,ServiceAccount,"
    "StorageObjectInUseProtection,TaintNodesByCondition,ValidatingAdmissionWebhook",
    "--enable-bootstrap-token-auth=true",
    "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt",
    "--etcd-certfile=/etc/kubernetes/pki/etcd/server.crt",
    "--etcd-compaction-interval=0",
    "--etcd-keyfile=/etc/kubernetes/pki/etcd/server.key",
    f"--etcd-prefix=/{UID}",
    f"--etcd-servers=https://{ETCD[0]}",
    "--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt",
    "--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key",
    "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
    "--proxy-client-cert-file=/etc/kubernetes/pki/front-proxy-client.crt",
    "--proxy-client-key-file=/etc/kubernetes/pki/front-proxy-client.key",
    "--requestheader-allowed-names=front-proxy-client",
    "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-username-headers=X-Remote-User",
    "--secure-port=6443",
    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
    "--service-account-key-file=/etc/kubernetes/pki/sa.pub",
    "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key",
    "--service-cluster-ip-range=10.96.0.0/16",
    "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt",
    "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key",
    "--feature-gates=MutatingAdmissionPolicy=true",
    "--runtime-config=admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicies=true,"
    "admissionregistration.k8s.io/v1beta1/mutatingadmissionpolicybindings=true",
]
KAMAJI_CONTROLLER_MANAGER = [
    "kube-controller-manager",
    "--allocate-node-cidrs=true",
    "--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf",
    "--authorization-kubeconfig=/etc/kubernetes/controller-manager.conf",
    "--bind-address=0.0.0.0",
    "--client-ca-file=/etc/kubernetes/pki/ca.crt",
    "--cluster-cidr=10.244.0.0/16",
    "--cluster-name=tenant-a",
    "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt",
    "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key",
    "--controllers=*,bootstrapsigner,tokencleaner",
    "--kubeconfig=/etc/kubernetes/controller-manager.conf",
    "--leader-elect=true",
    "--requestheader-client-ca-file=/etc/kubernetes/pki/front-proxy-ca.crt",
    "--root-ca-file=/etc/kubernetes/pki/ca.crt",
    "--service-account-private-key-file=/etc/kubernetes/pki/sa.key",
    "--service-cluster-ip-range=10.96.0.0/16",
    "--use-service-account-credentials=true",
]
KAMAJI_SCHEDULER = [
    "kube-scheduler",
    "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
    "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf",
    "--bind-address=0.0.0.0",
    "--kubeconfig=/etc/kubernetes/scheduler.conf",
    "--leader-elect=true",
]
KAMAJI_KONNECTIVITY_SERVER = [
    "/proxy-server",
    "--admin-port=8133",
    "--agent-namespace=kube-system",
    "--agent-port=8132",
    "--agent-service-account=konnectivity-agent",
    "--authentication-audience=system:konnectivity-server",
    "--cluster-cert=/etc/kubernetes/pki/apiserver.crt",
    "--cluster-key=/etc/kubernetes/pki/apiserver.key",
    "--health-port=8134",
    "--kubeconfig=/etc/kubernetes/konnectivity-server.conf",
    "--mode=grpc",
    "--server-count=1",
    "--server-port=0",
    "--uds-name=/run/konnectivity/konnectivity-server.socket",
]


@pytest.mark.upstream("kamaji-apiserver-flags", "kamaji-etcd-datastore-flags")
def test_apiserver_args_are_kamajis_for_the_programs_tcp():
    args = kr.control_plane_args(program_tcp(), datastore_endpoints=ETCD)
    assert args["kube-apiserver"] == KAMAJI_APISERVER


@pytest.mark.upstream("kamaji-apiserver-extra-args-appended")
def test_extra_args_come_last_a_managed_one_is_dropped_a_safe_default_is_replaced():
    tcp = program_tcp()
    tcp["spec"]["controlPlane"]["deployment"]["extraArgs"] = {
        "apiServer": ["--v=4", "--secure-port=1", "--allow-privileged=false", "--v=5"]
    }
    args = kr.apiserver_args(tcp, datastore_endpoints=ETCD)
    assert args[-3:] == ["--v=4", "--allow-privileged=false", "--v=5"]  # verbatim, in order
    assert "--secure-port=6443" in args and "--secure-port=1" not in args
    assert "--allow-privileged=true" not in args
    owned = args[1:-3]
    assert owned == sorted(owned)


@pytest.mark.upstream("kamaji-controller-manager-and-scheduler-flags")
def test_controller_manager_and_scheduler_args_are_kamajis():
    args = kr.control_plane_args(program_tcp(), datastore_endpoints=ETCD)
    assert args["kube-controller-manager"] == KAMAJI_CONTROLLER_MANAGER
    assert args["kube-scheduler"] == KAMAJI_SCHEDULER
    assert set(args) == {"kube-apiserver", "kube-controller-manager", "kube-scheduler"}


@pytest.mark.upstream("kamaji-controller-manager-and-scheduler-flags")
def test_a_dra_tenants_gate_reaches_its_scheduler_and_controller_manager():
    tcp = program_tcp(gpu_sharing="dra", gpus=({"model": "L4"},))
    tcp["spec"]["controlPlane"]["deployment"]["extraArgs"]["scheduler"].append(
        "--leader-elect=false"
    )
    args = kr.control_plane_args(tcp, datastore_endpoints=ETCD)
    gate = "--feature-gates=DRAConsumableCapacity=true"
    assert gate in args["kube-controller-manager"]
    assert gate in args["kube-scheduler"]
    assert "--leader-elect=true" in args["kube-scheduler"]  # Kamaji's own flag wins there
    assert args["kube-scheduler"][1:] == sorted(args["kube-scheduler"][1:])


@pytest.mark.upstream("kamaji-controller-manager-and-scheduler-flags")
def test_the_component_kubeconfigs_go_through_the_pods_loopback():
    assert kr.component_kubeconfig_server(program_tcp()) == "https://127.0.0.1:6443"


@pytest.mark.upstream("kamaji-tcp-admission-defaults", "kamaji-apiserver-flags")
def test_the_tenants_cidrs_and_address_reach_the_flags():
    tcp = program_tcp(service_cidr="10.112.0.0/16", pod_cidr="10.128.0.0/16")
    args = kr.control_plane_args(tcp, datastore_endpoints=["a:2379", "b:2379"])
    assert "--service-cluster-ip-range=10.112.0.0/16" in args["kube-apiserver"]
    assert "--etcd-servers=https://a:2379,https://b:2379" in args["kube-apiserver"]
    assert "--cluster-cidr=10.128.0.0/16" in args["kube-controller-manager"]
    assert "--service-cluster-ip-range=10.112.0.0/16" in args["kube-controller-manager"]
    advertised = copy.deepcopy(tcp)
    advertised["spec"]["networkProfile"]["advertiseAddress"] = "10.0.0.9"
    apiserver = kr.apiserver_args(advertised, datastore_endpoints=ETCD)
    assert "--advertise-address=10.0.0.9" in apiserver


@pytest.mark.upstream("kamaji-etcd-datastore-flags", "kamaji-tcp-admission-defaults")
def test_the_etcd_prefix_is_the_schema_else_the_uid_else_the_name():
    tcp = program_tcp()
    assert kr.datastore_schema(tcp) == UID
    del tcp["metadata"]["uid"]
    assert kr.datastore_schema(tcp) == "tenant-a"
    tcp["spec"]["dataStoreSchema"] = "tenant_a"
    assert kr.datastore_schema(tcp) == "tenant_a"
    assert "--etcd-prefix=/tenant_a" in kr.apiserver_args(tcp, datastore_endpoints=ETCD)


@pytest.mark.upstream("kamaji-konnectivity-egress-selector")
def test_without_konnectivity_only_the_egress_selector_flag_goes():
    with_it = kr.apiserver_args(program_tcp(), datastore_endpoints=ETCD)
    without = kr.apiserver_args(program_tcp(), datastore_endpoints=ETCD, konnectivity=False)
    assert sorted(set(with_it) - set(without)) == [
        f"--egress-selector-config-file={kr.EGRESS_SELECTOR_CONFIG}"
    ]
    assert set(without) < set(with_it)
    no_addon = program_tcp()
    del no_addon["spec"]["addons"]["konnectivity"]
    assert kr.apiserver_args(no_addon, datastore_endpoints=ETCD) == without


@pytest.mark.upstream("kamaji-konnectivity-egress-selector")
def test_the_egress_selector_sends_cluster_traffic_to_the_servers_socket():
    config = yaml.safe_load(kr.egress_selector_configuration())
    assert config["apiVersion"] == "apiserver.k8s.io/v1beta1"
    assert config["kind"] == "EgressSelectorConfiguration"
    [selection] = config["egressSelections"]
    assert selection == {
        "name": "cluster",
        "connection": {
            "proxyProtocol": "GRPC",
            "transport": {"uds": {"udsName": "/run/konnectivity/konnectivity-server.socket"}},
        },
    }
    assert kr.konnectivity_server_args(program_tcp()) == KAMAJI_KONNECTIVITY_SERVER


@pytest.mark.upstream("kamaji-apiserver-flags", "kamaji-konnectivity-egress-selector")
def test_every_file_the_args_name_is_described():
    args = kr.control_plane_args(program_tcp(), datastore_endpoints=ETCD)
    named = {
        value
        for argv in args.values()
        for arg in argv[1:]
        for value in [arg.partition("=")[2]]
        if value.startswith("/etc/")
    }
    files = kr.pod_files()
    assert named <= set(files), sorted(named - set(files))
    assert kr.EGRESS_SELECTOR_CONFIG not in kr.pod_files(konnectivity=False)


@pytest.mark.upstream("kamaji-tcp-admission-defaults")
def test_admission_defaults():
    tcp = program_tcp()
    del tcp["spec"]["networkProfile"]["dnsServiceIPs"]
    del tcp["spec"]["controlPlane"]["deployment"]["replicas"]
    spec = kr.defaulted(tcp)["spec"]
    assert spec["networkProfile"]["dnsServiceIPs"] == ["10.96.0.10"]
    assert spec["networkProfile"]["clusterDomain"] == "cluster.local"
    assert spec["networkProfile"]["serviceCidrs"] == ["10.96.0.0/16"]
    assert spec["controlPlane"]["deployment"]["replicas"] == 2
    assert len(spec["kubernetes"]["admissionControllers"]) == 17
    assert "dnsServiceIPs" not in tcp["spec"]["networkProfile"]  # the input is left alone
    assert kr._tenth_address("fd00:10::/108") == "fd00:10::10"


@pytest.mark.upstream(
    "kamaji-kubeadm-configuration", "kubeadm-cli-config-differs-from-kamaji-library"
)
def test_kubeadm_configuration_is_kamajis_in_v1beta4():
    init, cluster, proxy = yaml.safe_load_all(
        kr.kubeadm_configuration(program_tcp(), datastore_endpoints=ETCD)
    )
    assert init["kind"] == "InitConfiguration"
    assert init["localAPIEndpoint"] == {"advertiseAddress": ADDRESS, "bindPort": 6443}
    assert init["nodeRegistration"]["name"] == "node"
    assert cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert cluster["clusterName"] == "tenant-a"
    assert cluster["kubernetesVersion"] == "v1.35.0"
    assert cluster["controlPlaneEndpoint"] == f"{ADDRESS}:6443"
    assert cluster["networking"] == {
        "dnsDomain": "cluster.local",
        "podSubnet": "10.244.0.0/16",
        "serviceSubnet": "10.96.0.0/16",
    }
    # kamaji-etcd's hostname:port as Kamaji uploads it (no TLS files: not https); an IP:port,
    # which kubeadm's CLI refuses, gets https://
    assert cluster["etcd"] == {"external": {"endpoints": [ETCD[0]]}}
    local = kr.cluster_configuration(program_tcp(), datastore_endpoints=["127.0.0.1:2379"])
    assert local["etcd"] == {"external": {"endpoints": ["https://127.0.0.1:2379"]}}
    assert cluster["apiServer"]["certSANs"] == [
        "127.0.0.1",
        "localhost",
        "tenant-a",
        "tenant-a.tenant-a.svc",
        "tenant-a.tenant-a.svc.cluster.local",
        ADDRESS,
        ADDRESS,
    ]
    assert cluster["apiServer"]["extraArgs"] == [
        {"name": "etcd-compaction-interval", "value": "0s"},
        {"name": "etcd-prefix", "value": "/tenant-a"},
    ]
    assert proxy["kind"] == "KubeProxyConfiguration"


@pytest.mark.upstream("kamaji-soot-phases")
def test_phases_in_the_order_kamaji_triggers_them():
    phases = kr.phases()
    assert [p.kubeadm for p in phases] == [
        None,
        "kubeadm init phase addon kube-proxy",
        "kubeadm init phase addon coredns",
        "kubeadm init phase upload-config kubeadm",
        "kubeadm init phase upload-config kubelet",
        "kubeadm init phase bootstrap-token",
        None,
    ]
    assert "kubeadm:cluster-admins" in phases[-1].kamaji
    assert "token" in phases[5].note


@pytest.mark.upstream("kubeadm-v1.36-apiserver-kubelet-client", "kamaji-tcp-default-images")
def test_where_the_v1_35_cli_phases_differ_from_kamajis_v1_36_library():
    """What the whole-lab run's tenant held and the stand-in's kubeadm v1.35.4 makes otherwise:
    the kubelet API binding of the bootstrap-token phase and CoreDNS's image."""
    by_name = {p.name: p for p in kr.phases()}
    assert "kubeadm:apiserver-kubelet-client" in by_name["bootstrap-token"].note
    assert "system:kubelet-api-admin" in by_name["bootstrap-token"].note
    assert "v1.13.1" in by_name["addon coredns"].note
    assert KAMAJI_COREDNS in by_name["addon coredns"].note
    files = kr.pod_files()
    assert "CN=kube-apiserver-kubelet-client" in files[kr.APISERVER_KUBELET_CLIENT_CERT]
    assert "codeSigning" in files[kr.ETCD_CLIENT_CERT]


@pytest.mark.upstream("kamaji-soot-phases")
def test_kube_proxy_gets_no_cluster_cidr_from_kamaji():
    proxy = kr.kube_proxy_configuration(program_tcp())
    assert proxy["bindAddress"] == "0.0.0.0"
    assert proxy["clientConnection"] == {"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"}
    assert "clusterCIDR" not in proxy


@pytest.mark.upstream("kamaji-tcp-service")
def test_the_tenant_service_is_kamajis_for_the_programs_tcp():
    service = kr.tenant_service(program_tcp())
    assert service["metadata"]["name"] == service["metadata"]["namespace"] == "tenant-a"
    assert service["metadata"]["labels"] == {
        "kamaji.clastix.io/project": "kamaji",
        "kamaji.clastix.io/name": "tenant-a",
        "kamaji.clastix.io/component": "service",
        "kamaji-hami-lab/tenant": "tenant-a",
    }
    # the address reaches MetalLB through the program's annotation alone
    assert service["metadata"]["annotations"] == {"metallb.io/loadBalancerIPs": ADDRESS}
    assert "loadBalancerIP" not in service["spec"]
    assert service["spec"]["selector"] == {"kamaji.clastix.io/name": "tenant-a"}
    # the API server's port, then the one Kamaji's Konnectivity addon adds for its agents
    ports = [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]]
    assert ports == [("kube-apiserver", 6443, 6443), ("konnectivity-server", 8132, 8132)]
    without = program_tcp()
    del without["spec"]["addons"]["konnectivity"]
    assert [p["name"] for p in kr.tenant_service(without)["spec"]["ports"]] == ["kube-apiserver"]
