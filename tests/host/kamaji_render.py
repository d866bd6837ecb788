"""What Kamaji renders for the program's TenantControlPlane, for a stand-in run without Kamaji.

Pure functions of the TCP manifest (builders/control_plane.py `tenant_control_plane_manifest`),
read in clastix/kamaji at the commit of the image tag the program pins (labconfig/kamaji_sources.py:
26.8.2-edge = ddbabd87ed0e8d7c319414383e153c46f21733a9) and checked against Kamaji's own builders
run on the same TCP (docs/upstream-facts/tenant-stand-in.md):

- `control_plane_args`: command + args of the pod's kube-apiserver, kube-controller-manager and
  kube-scheduler containers (internal/builders/controlplane/deployment.go), with or without the
  Konnectivity egress selector; `konnectivity_server_args` and `egress_selector_configuration`.
- `pod_files`: what each path those args name must hold, in kubeadm's terms.
- `kubeadm_configuration`: the InitConfiguration + ClusterConfiguration (+ KubeProxyConfiguration)
  Kamaji builds (internal/kubeadm/configuration.go), as v1beta4 YAML the real kubeadm accepts.
- `phases`: what Kamaji does once the API server answers, as `kubeadm init phase` commands.
- `tenant_service`: the Service in front of the control plane pods
  (internal/resources/k8s_service_resource.go).
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any

import yaml

KAMAJI_TAG = "26.8.2-edge"
KAMAJI_COMMIT = "ddbabd87ed0e8d7c319414383e153c46f21733a9"
# Kamaji links kubeadm and kubelet's defaults as Go libraries (go.mod), not the tenant's version.
KAMAJI_KUBERNETES_LIBRARY = "k8s.io/kubernetes v1.36.3"

# --- paths inside Kamaji's pod ------------------------------------------------------------------
KUBERNETES_DIR = "/etc/kubernetes"
PKI_DIR = "/etc/kubernetes/pki"  # kubeadm's v1beta3.DefaultCertificatesDir, a projected volume
CA_CERT = f"{PKI_DIR}/ca.crt"
CA_KEY = f"{PKI_DIR}/ca.key"
APISERVER_CERT = f"{PKI_DIR}/apiserver.crt"
APISERVER_KEY = f"{PKI_DIR}/apiserver.key"
APISERVER_KUBELET_CLIENT_CERT = f"{PKI_DIR}/apiserver-kubelet-client.crt"
APISERVER_KUBELET_CLIENT_KEY = f"{PKI_DIR}/apiserver-kubelet-client.key"
FRONT_PROXY_CA_CERT = f"{PKI_DIR}/front-proxy-ca.crt"
FRONT_PROXY_CA_KEY = f"{PKI_DIR}/front-proxy-ca.key"
FRONT_PROXY_CLIENT_CERT = f"{PKI_DIR}/front-proxy-client.crt"
FRONT_PROXY_CLIENT_KEY = f"{PKI_DIR}/front-proxy-client.key"
SA_PUBLIC_KEY = f"{PKI_DIR}/sa.pub"
SA_PRIVATE_KEY = f"{PKI_DIR}/sa.key"
# The datastore Secret, projected under pki/etcd/ (deployment.go buildPKIVolume).
ETCD_CA_CERT = f"{PKI_DIR}/etcd/ca.crt"
ETCD_CLIENT_CERT = f"{PKI_DIR}/etcd/server.crt"
ETCD_CLIENT_KEY = f"{PKI_DIR}/etcd/server.key"
# Each a Secret mounted at /etc/kubernetes in its own container only.
CONTROLLER_MANAGER_KUBECONFIG = f"{KUBERNETES_DIR}/controller-manager.conf"
SCHEDULER_KUBECONFIG = f"{KUBERNETES_DIR}/scheduler.conf"
# Konnectivity (internal/builders/controlplane/konnectivity_server.go).
KONNECTIVITY_SERVER_KUBECONFIG = f"{KUBERNETES_DIR}/konnectivity-server.conf"
EGRESS_SELECTOR_CONFIG = (
    f"{KUBERNETES_DIR}/konnectivity/configurations/egress-selector-configuration.yaml"
)
KONNECTIVITY_UDS_DIR = "/run/konnectivity"  # an emptyDir shared by kube-apiserver and the server
KONNECTIVITY_UDS = f"{KONNECTIVITY_UDS_DIR}/konnectivity-server.socket"

# --- defaults the TCP gets on admission ------------------------------------------------------
# CRD defaults (api/v1alpha1/tenantcontrolplane_types.go kubebuilder markers).
DEFAULT_ADMISSION_CONTROLLERS = (
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "DefaultStorageClass",
    "DefaultTolerationSeconds",
    "LimitRanger",
    "MutatingAdmissionWebhook",
    "NamespaceLifecycle",
    "PersistentVolumeClaimResize",
    "Priority",
    "ResourceQuota",
    "RuntimeClass",
    "ServiceAccount",
    "StorageObjectInUseProtection",
    "TaintNodesByCondition",
    "ValidatingAdmissionWebhook",
)
DEFAULT_CLUSTER_DOMAIN = "cluster.local"
DEFAULT_PORT = 6443
DEFAULT_SERVICE_CIDR = "10.96.0.0/16"
DEFAULT_POD_CIDR = "10.244.0.0/16"
DEFAULT_PREFERRED_ADDRESS_TYPES = ("InternalIP", "ExternalIP", "Hostname")
DEFAULT_REPLICAS = 2  # the defaulting webhook (internal/webhook/handlers/tcp_defaults.go)
KONNECTIVITY_ADMIN_PORT = 8133
DEFAULT_KONNECTIVITY_PORT = 8132  # api/v1alpha1/tenantcontrolplane_types.go (CRD default)
KONNECTIVITY_HEALTH_PORT = 8134


def defaulted(tcp: dict[str, Any]) -> dict[str, Any]:
    """The TCP as the API server stores it: CRD defaults, then Kamaji's defaulting webhook."""
    out = copy.deepcopy(tcp)
    spec = out["spec"]
    net = spec.setdefault("networkProfile", {})
    net.setdefault("clusterDomain", DEFAULT_CLUSTER_DOMAIN)
    net.setdefault("port", DEFAULT_PORT)
    net.setdefault("serviceCidr", DEFAULT_SERVICE_CIDR)
    net.setdefault("podCidr", DEFAULT_POD_CIDR)
    k8s = spec["kubernetes"]
    k8s.setdefault("admissionControllers", list(DEFAULT_ADMISSION_CONTROLLERS))
    k8s.setdefault("kubelet", {}).setdefault(
        "preferredAddressTypes", list(DEFAULT_PREFERRED_ADDRESS_TYPES)
    )
    deployment = spec.setdefault("controlPlane", {}).setdefault("deployment", {})
    deployment.setdefault("replicas", DEFAULT_REPLICAS)
    # The webhook copies the deprecated single CIDRs into the list fields.
    if not net.get("serviceCidrs") and net.get("serviceCidr"):
        net["serviceCidrs"] = [net["serviceCidr"]]
    if not net.get("podCidrs") and net.get("podCidr"):
        net["podCidrs"] = [net["podCidr"]]
    if not net.get("dnsServiceIPs"):
        net["dnsServiceIPs"] = [_tenth_address(cidr) for cidr in net["serviceCidrs"]]
    return out


# internal/constants/labels.go:7-11, internal/utilities/utilities.go:23 (KamajiLabels)
PROJECT_LABEL = ("kamaji.clastix.io/project", "kamaji")
NAME_LABEL = "kamaji.clastix.io/name"
COMPONENT_LABEL = "kamaji.clastix.io/component"


def tenant_service(tcp: dict[str, Any]) -> dict[str, Any]:
    """The Service Kamaji makes for a LoadBalancer TCP (k8s_service_resource.go): named and
    placed as the TCP (Define, :65-73), Kamaji's labels then the TCP's additionalMetadata labels
    and annotations (:86-95), selecting the control plane pods by name (:97-99), one port
    `kube-apiserver` on networkProfile.port to the same target port (:105-113), node ports
    allocated (:137-143: nil means the Kubernetes default, true)."""
    tcp = defaulted(tcp)
    name, namespace = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    service = tcp["spec"]["controlPlane"].get("service", {})
    assert service.get("serviceType") == "LoadBalancer", "the program's TCPs are LoadBalancers"
    extra = service.get("additionalMetadata", {})
    port = int(tcp["spec"]["networkProfile"]["port"])
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                PROJECT_LABEL[0]: PROJECT_LABEL[1],
                NAME_LABEL: name,
                COMPONENT_LABEL: "service",
                **extra.get("labels", {}),
            },
            "annotations": dict(extra.get("annotations", {})),
        },
        "spec": {
            "type": "LoadBalancer",
            "selector": {NAME_LABEL: name},
            "ports": [
                {"name": "kube-apiserver", "protocol": "TCP", "port": port, "targetPort": port},
                *_konnectivity_ports(tcp),
            ],
            "allocateLoadBalancerNodePorts": True,
        },
    }


def _konnectivity_ports(tcp: dict[str, Any]) -> list[dict[str, Any]]:
    """The second port Kamaji's Konnectivity addon puts on the Service
    (internal/resources/konnectivity/service_resource.go mutate): the server's agent port."""
    addon = tcp["spec"].get("addons", {}).get("konnectivity")
    if addon is None:
        return []
    port = int(addon.get("server", {}).get("port", DEFAULT_KONNECTIVITY_PORT))
    return [{"name": "konnectivity-server", "protocol": "TCP", "port": port, "targetPort": port}]


def _tenth_address(cidr: str) -> str:
    # tcp_defaults.go adds 10 (IPv4) or 16 (IPv6) to the network address's last byte.
    network = ipaddress.ip_network(cidr, strict=False)
    return str(network.network_address + (10 if network.version == 4 else 16))


def _cidrs(net: dict[str, Any], field: str) -> list[str]:
    """utilities.GetEffectiveCIDRs: the list field wins (unique, sorted), else the old one."""
    if net.get(f"{field}s"):
        return sorted(set(net[f"{field}s"]))
    return [net[field]] if net.get(field) else []


def datastore_schema(tcp: dict[str, Any]) -> str:
    """The etcd key prefix (without slashes) Kamaji gives the tenant: spec.dataStoreSchema, which
    its webhook defaults to the TCP's UID. A manifest that was never created has no UID; its
    name stands in."""
    spec, meta = tcp["spec"], tcp["metadata"]
    return spec.get("dataStoreSchema") or meta.get("uid") or meta["name"]


# --- container arguments -----------------------------------------------------------------------


def _flags(args: dict[str, str]) -> list[str]:
    """utilities.ArgsFromMapToSlice and mergeAPIServerArgs: `--flag=value`, bare when empty,
    sorted as strings."""
    return sorted(flag if value == "" else f"{flag}={value}" for flag, value in args.items())


def apiserver_args(
    tcp: dict[str, Any],
    *,
    datastore_endpoints: list[str],
    konnectivity: bool = True,
    datastore_schema_override: str | None = None,
) -> list[str]:
    """deployment.go buildKubeAPIServerCommand for the etcd driver (:670-750), merged as
    mergeAPIServerArgs does (:753-824): Kamaji's safe defaults and managed flags sorted, a safe
    default the TCP's extraArgs.apiServer sets left out, then those extras verbatim except the
    ones that name a managed flag. With Konnectivity, the addon appends
    --egress-selector-config-file and the next reconciliation sorts it in with the rest
    (mergeAPIServerArgs keeps flags it does not own)."""
    tcp = defaulted(tcp)
    spec = tcp["spec"]
    net = spec["networkProfile"]
    address = net.get("advertiseAddress") or net["address"]
    schema = datastore_schema_override or datastore_schema(tcp)
    safe_defaults = {
        "--allow-privileged": "true",
        "--authorization-mode": "Node,RBAC",
        "--enable-bootstrap-token-auth": "true",
        "--requestheader-extra-headers-prefix": "X-Remote-Extra-",
        "--requestheader-group-headers": "X-Remote-Group",
        "--requestheader-username-headers": "X-Remote-User",
        "--service-account-issuer": "https://kubernetes.default.svc.cluster.local",
    }
    managed = {
        "--advertise-address": address,
        "--client-ca-file": CA_CERT,
        "--enable-admission-plugins": ",".join(spec["kubernetes"]["admissionControllers"]),
        "--service-cluster-ip-range": ",".join(_cidrs(net, "serviceCidr")),
        "--kubelet-client-certificate": APISERVER_KUBELET_CLIENT_CERT,
        "--kubelet-client-key": APISERVER_KUBELET_CLIENT_KEY,
        "--kubelet-preferred-address-types": ",".join(
            spec["kubernetes"]["kubelet"]["preferredAddressTypes"]
        ),
        "--proxy-client-cert-file": FRONT_PROXY_CLIENT_CERT,
        "--proxy-client-key-file": FRONT_PROXY_CLIENT_KEY,
        "--requestheader-allowed-names": "front-proxy-client",
        "--requestheader-client-ca-file": FRONT_PROXY_CA_CERT,
        "--secure-port": str(net["port"]),
        "--service-account-key-file": SA_PUBLIC_KEY,
        "--service-account-signing-key-file": SA_PRIVATE_KEY,
        "--tls-cert-file": APISERVER_CERT,
        "--tls-private-key-file": APISERVER_KEY,
        # the etcd driver
        "--etcd-compaction-interval": "0",
        "--etcd-prefix": f"/{schema}",
        "--etcd-servers": ",".join(f"https://{endpoint}" for endpoint in datastore_endpoints),
        "--etcd-cafile": ETCD_CA_CERT,
        "--etcd-certfile": ETCD_CLIENT_CERT,
        "--etcd-keyfile": ETCD_CLIENT_KEY,
    }
    extras = [
        arg
        for arg in (spec["controlPlane"]["deployment"].get("extraArgs") or {}).get("apiServer", [])
        if arg.split("=", 1)[0] not in managed
    ]
    user_flags = {arg.split("=", 1)[0] for arg in extras}
    owned = {k: v for k, v in safe_defaults.items() if k not in user_flags} | managed
    if konnectivity and spec.get("addons", {}).get("konnectivity") is not None:
        owned["--egress-selector-config-file"] = EGRESS_SELECTOR_CONFIG
    return ["kube-apiserver", *_flags(owned), *extras]


def _extra_args(tcp: dict[str, Any], component: str) -> dict[str, str]:
    """spec.controlPlane.deployment.extraArgs.<component> as utilities.ArgsFromSliceToMap
    reads it (internal/utilities/args.go:13-23): `--flag=value` split at the first `=`."""
    extra = tcp["spec"].get("controlPlane", {}).get("deployment", {}).get("extraArgs") or {}
    return {
        flag: value for flag, _, value in (arg.partition("=") for arg in extra.get(component, []))
    }


def controller_manager_args(tcp: dict[str, Any]) -> list[str]:
    """deployment.go buildControllerManager: Kamaji's flags, then the TCP's extraArgs over them
    (utilities.MergeMaps, deployment.go:492-494)."""
    tcp = defaulted(tcp)
    net = tcp["spec"]["networkProfile"]
    kubeconfig = CONTROLLER_MANAGER_KUBECONFIG
    args = {
        "--allocate-node-cidrs": "true",
        "--authentication-kubeconfig": kubeconfig,
        "--authorization-kubeconfig": kubeconfig,
        "--bind-address": "0.0.0.0",
        "--client-ca-file": CA_CERT,
        "--cluster-name": tcp["metadata"]["name"],
        "--cluster-signing-cert-file": CA_CERT,
        "--cluster-signing-key-file": CA_KEY,
        "--controllers": "*,bootstrapsigner,tokencleaner",
        "--kubeconfig": kubeconfig,
        "--leader-elect": "true",
        "--service-cluster-ip-range": ",".join(_cidrs(net, "serviceCidr")),
        "--cluster-cidr": ",".join(_cidrs(net, "podCidr")),
        "--requestheader-client-ca-file": FRONT_PROXY_CA_CERT,
        "--root-ca-file": CA_CERT,
        "--service-account-private-key-file": SA_PRIVATE_KEY,
        "--use-service-account-credentials": "true",
    }
    return ["kube-controller-manager", *_flags(args | _extra_args(tcp, "controllerManager"))]


def scheduler_args(tcp: dict[str, Any]) -> list[str]:
    """deployment.go buildScheduler: the TCP's extraArgs, then Kamaji's flags over them
    (deployment.go:401-412)."""
    kubeconfig = SCHEDULER_KUBECONFIG
    args = _extra_args(tcp, "scheduler") | {
        "--authentication-kubeconfig": kubeconfig,
        "--authorization-kubeconfig": kubeconfig,
        "--bind-address": "0.0.0.0",
        "--kubeconfig": kubeconfig,
        "--leader-elect": "true",
    }
    return ["kube-scheduler", *_flags(args)]


def control_plane_args(
    tcp: dict[str, Any],
    *,
    datastore_endpoints: list[str],
    konnectivity: bool = True,
    datastore_schema_override: str | None = None,
) -> dict[str, list[str]]:
    """Command + args of the three containers, as Kamaji's Deployment holds them once settled.

    `datastore_endpoints` are `host:port` like a DataStore's spec.endpoints (Kamaji adds
    https://). `konnectivity=False` leaves out --egress-selector-config-file: what Kamaji renders
    for the same TCP without `addons.konnectivity`. With it, kube-apiserver sends every request
    to nodes (logs, exec, port-forward, webhooks and aggregated APIs served on the tenant's pods)
    through the Konnectivity server's socket, so it needs that server running.
    """
    return {
        "kube-apiserver": apiserver_args(
            tcp,
            datastore_endpoints=datastore_endpoints,
            konnectivity=konnectivity,
            datastore_schema_override=datastore_schema_override,
        ),
        "kube-controller-manager": controller_manager_args(tcp),
        "kube-scheduler": scheduler_args(tcp),
    }


def konnectivity_server_args(tcp: dict[str, Any]) -> list[str]:
    """konnectivity_server.go buildKonnectivityContainer, no ExtraArgs."""
    tcp = defaulted(tcp)
    spec = tcp["spec"]
    server = spec["addons"]["konnectivity"]["server"]
    args = {
        "--uds-name": KONNECTIVITY_UDS,
        "--cluster-cert": APISERVER_CERT,
        "--cluster-key": APISERVER_KEY,
        "--mode": "grpc",
        "--server-port": "0",
        "--agent-port": str(server.get("port", DEFAULT_KONNECTIVITY_PORT)),
        "--admin-port": str(KONNECTIVITY_ADMIN_PORT),
        "--health-port": str(KONNECTIVITY_HEALTH_PORT),
        "--agent-namespace": "kube-system",
        "--agent-service-account": "konnectivity-agent",
        "--kubeconfig": KONNECTIVITY_SERVER_KUBECONFIG,
        "--authentication-audience": "system:konnectivity-server",
        "--server-count": str(spec["controlPlane"]["deployment"]["replicas"]),
    }
    return ["/proxy-server", *_flags(args)]


def egress_selector_configuration() -> str:
    """The ConfigMap file behind --egress-selector-config-file (konnectivity/
    egress_selector_configuration_resource.go): cluster traffic over gRPC on the UDS."""
    return yaml.safe_dump(
        {
            "apiVersion": "apiserver.k8s.io/v1beta1",
            "kind": "EgressSelectorConfiguration",
            "egressSelections": [
                {
                    "name": "cluster",
                    "connection": {
                        "proxyProtocol": "GRPC",
                        "transport": {"uds": {"udsName": KONNECTIVITY_UDS}},
                    },
                }
            ],
        },
        sort_keys=False,
    )


# --- files the args name -----------------------------------------------------------------------


def pod_files(*, konnectivity: bool = True) -> dict[str, str]:
    """Path in Kamaji's pod -> what it holds, in kubeadm's terms (`kubeadm init phase certs ...`
    and `kubeadm init phase kubeconfig ...` with `kubeadm_configuration`'s file make them)."""
    files = {
        CA_CERT: "kubeadm's cluster CA certificate (certs ca)",
        CA_KEY: "kubeadm's cluster CA key (certs ca); the controller manager signs CSRs with it",
        APISERVER_CERT: "kubeadm's apiserver serving certificate (certs apiserver): SANs from "
        "ClusterConfiguration.apiServer.certSANs, the service IP, localAPIEndpoint",
        APISERVER_KEY: "its key (certs apiserver)",
        APISERVER_KUBELET_CLIENT_CERT: "kubeadm's apiserver-kubelet-client certificate "
        "(certs apiserver-kubelet-client, CN=kube-apiserver-kubelet-client; the v1.35 CLI adds "
        "O=kubeadm:cluster-admins, Kamaji's v1.36 library no organization)",
        APISERVER_KUBELET_CLIENT_KEY: "its key",
        FRONT_PROXY_CA_CERT: "kubeadm's front-proxy CA certificate (certs front-proxy-ca)",
        FRONT_PROXY_CA_KEY: "its key (projected too, unused by the flags)",
        FRONT_PROXY_CLIENT_CERT: "kubeadm's front-proxy-client certificate "
        "(certs front-proxy-client, CN=front-proxy-client)",
        FRONT_PROXY_CLIENT_KEY: "its key",
        SA_PUBLIC_KEY: "kubeadm's service account public key (certs sa)",
        SA_PRIVATE_KEY: "kubeadm's service account private key (certs sa)",
        ETCD_CA_CERT: "the datastore's CA (DataStore tlsConfig.certificateAuthority), not a "
        "kubeadm etcd-ca: kubeadm skips etcd certs for external etcd",
        ETCD_CLIENT_CERT: "an etcd client certificate Kamaji signs with the datastore CA: "
        "CN=<tenant's datastore user, the TCP UID>, O=system:masters, EKU "
        "client+server+codeSigning",
        ETCD_CLIENT_KEY: "its key (RSA)",
        CONTROLLER_MANAGER_KUBECONFIG: "kubeadm's controller-manager.conf (kubeconfig "
        "controller-manager) made with localAPIEndpoint.advertiseAddress 127.0.0.1: "
        "server https://127.0.0.1:<port>",
        SCHEDULER_KUBECONFIG: "kubeadm's scheduler.conf (kubeconfig scheduler), also "
        "https://127.0.0.1:<port>",
    }
    if konnectivity:
        files[EGRESS_SELECTOR_CONFIG] = "egress_selector_configuration()"
        files[KONNECTIVITY_SERVER_KUBECONFIG] = (
            "a kubeconfig for user system:konnectivity-server (client cert signed by the "
            "cluster CA), no kubeadm phase makes it"
        )
        files[KONNECTIVITY_UDS] = "created by the Konnectivity server in a shared emptyDir"
    return files


# --- kubeadm configuration ---------------------------------------------------------------------
KUBEADM_API = "kubeadm.k8s.io/v1beta4"
# DefaultedStaticInitConfiguration (kubeadm's util/config), which Kamaji starts from.
STATIC_NODE_NAME = "node"
STATIC_CRI_SOCKET = "unix:///var/run/containerd/containerd.sock"


def cert_sans(tcp: dict[str, Any]) -> list[str]:
    """configuration.go: loopback, the Service's in-cluster names, the address, then certSANs
    (and advertiseAddress when it differs, kubeadm_config.go)."""
    tcp = defaulted(tcp)
    name, namespace = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    net = tcp["spec"]["networkProfile"]
    sans = [
        "127.0.0.1",
        "localhost",
        name,
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.cluster.local",
        net["address"],
        *net.get("certSANs", []),
    ]
    if net.get("advertiseAddress") and net["advertiseAddress"] != net["address"]:
        sans.append(net["advertiseAddress"])
    return sans


def init_configuration(tcp: dict[str, Any]) -> dict:
    net = defaulted(tcp)["spec"]["networkProfile"]
    return {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": net["address"], "bindPort": net["port"]},
        "nodeRegistration": {"name": STATIC_NODE_NAME, "criSocket": STATIC_CRI_SOCKET},
    }


def cluster_configuration(tcp: dict[str, Any], *, datastore_endpoints: list[str]) -> dict:
    tcp = defaulted(tcp)
    name = tcp["metadata"]["name"]
    net = tcp["spec"]["networkProfile"]
    endpoint_host = net.get("advertiseAddress") or net["address"]
    return {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": name,
        "kubernetesVersion": tcp["spec"]["kubernetes"]["version"],
        "controlPlaneEndpoint": f"{endpoint_host}:{net['port']}",
        "certificatesDir": PKI_DIR,
        "networking": {
            "dnsDomain": net["clusterDomain"],
            "podSubnet": ",".join(_cidrs(net, "podCidr")),
            "serviceSubnet": ",".join(_cidrs(net, "serviceCidr")),
        },
        "etcd": {"external": {"endpoints": [_cli_endpoint(e) for e in datastore_endpoints]}},
        "apiServer": {
            "certSANs": cert_sans(tcp),
            # Only in the uploaded kubeadm-config: the pod's real flags are control_plane_args.
            "extraArgs": [
                {"name": "etcd-compaction-interval", "value": "0s"},
                {"name": "etcd-prefix", "value": f"/{name}"},
            ],
        },
    }


def _cli_endpoint(endpoint: str) -> str:
    """A DataStore endpoint as the kubeadm CLI takes it. Kamaji passes the `host:port`
    endpoints unchanged, with no TLS files unless they start with https (configuration.go:38-50);
    the CLI parses each as a URL and refuses an IP:port, so only that form gets https:// (a
    hostname:port, like kamaji-etcd's, stays as Kamaji uploads it)."""
    try:
        ipaddress.ip_address(endpoint.rsplit(":", 1)[0])
    except ValueError:
        return endpoint
    return f"https://{endpoint}"


def component_kubeconfig_server(tcp: dict[str, Any]) -> str:
    """The server of Kamaji's controller-manager.conf and scheduler.conf: the API server through
    the pod's loopback (internal/resources/kubeconfig.go localhostAsAdvertiseAddress)."""
    return f"https://127.0.0.1:{defaulted(tcp)['spec']['networkProfile']['port']}"


def kubeadm_configuration(
    tcp: dict[str, Any],
    *,
    datastore_endpoints: list[str],
    kube_proxy: bool = True,
) -> str:
    """The configuration Kamaji builds (internal/kubeadm/configuration.go), for
    `kubeadm init phase <phase> --config <file>`. Kamaji makes controller-manager.conf and
    scheduler.conf with localAPIEndpoint 127.0.0.1, which kubeadm's CLI refuses ("unable to select
    an IP from lo network interface"): make them with this file, then point them at
    `component_kubeconfig_server(tcp)`."""
    documents = [
        init_configuration(tcp),
        cluster_configuration(tcp, datastore_endpoints=datastore_endpoints),
    ]
    if kube_proxy:
        documents.append(kube_proxy_configuration(tcp))
    return yaml.safe_dump_all(documents, sort_keys=False)


# --- after the control plane is up -------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    name: str
    kamaji: str  # what Kamaji does (controllers/soot, internal/kubeadm, internal/resources)
    kubeadm: str | None  # the `kubeadm init phase` command doing the same, None if there is none
    note: str = ""  # where the real kubeadm phase does something else


def phases() -> list[Phase]:
    """What Kamaji's per-tenant ("soot") controllers do once the TCP's API server answers, in the
    order controllers/soot/manager.go triggers them (they run concurrently and retry)."""
    return [
        Phase(
            "konnectivity-agent",
            "ServiceAccount kube-system/konnectivity-agent, ClusterRoleBinding "
            "system:konnectivity-server -> system:auth-delegator, the agent DaemonSet "
            "(internal/resources/konnectivity/)",
            None,
        ),
        Phase(
            "addon kube-proxy",
            "kubeadm's proxy.EnsureProxyAddon manifests (printed, not applied), applied by Kamaji "
            "with its managed labels (internal/resources/addons/kube_proxy.go)",
            "kubeadm init phase addon kube-proxy",
            "kubeadm defaults KubeProxyConfiguration.clusterCIDR to the pod subnet; Kamaji's "
            "stays empty (its component configs are the static defaults)",
        ),
        Phase(
            "addon coredns",
            "kubeadm's dns.EnsureDNSAddon manifests applied by Kamaji "
            "(internal/resources/addons/coredns.go)",
            "kubeadm init phase addon coredns",
            "the same objects, but the v1.35 CLI's image is coredns/coredns:v1.13.1 where "
            "Kamaji's v1.36 library deploys registry.k8s.io/coredns/coredns:v1.14.2",
        ),
        Phase(
            "upload-config kubeadm",
            "uploadconfig.UploadConfiguration: ConfigMap kube-system/kubeadm-config and its RBAC",
            "kubeadm init phase upload-config kubeadm",
        ),
        Phase(
            "upload-config kubelet",
            "ConfigMap kube-system/kubelet-config (kamaji_kubelet_config.content), Role and "
            "RoleBinding kubeadm:kubelet-config for system:nodes and system:bootstrappers:"
            "kubeadm:default-node-token (internal/kubeadm/uploadconfig.go)",
            "kubeadm init phase upload-config kubelet",
            "kubeadm uploads its own defaulted KubeletConfiguration (resolvConf detected on the "
            "host, no JSON patches): create the ConfigMap from kamaji_kubelet_config instead",
        ),
        Phase(
            "bootstrap-token",
            "with BootstrapTokens = nil (no token): the node bootstrap RBAC (get nodes, post "
            "CSRs, auto-approve, certificate rotation, apiserver -> kubelet API) and "
            "kube-public/cluster-info with its RBAC (internal/kubeadm/bootstraptoken.go)",
            "kubeadm init phase bootstrap-token",
            "kubeadm also creates a bootstrap token (a random one when the configuration names "
            "none); cluster-info's server comes from the --kubeconfig file. The v1.35 CLI makes "
            "no kubeadm:apiserver-kubelet-client binding (kube-apiserver-kubelet-client -> "
            "system:kubelet-api-admin, new in the v1.36 library Kamaji links): the API server "
            "reaches the kubelets through its certificate's O=kubeadm:cluster-admins instead",
        ),
        Phase(
            "cluster-admin RBAC",
            "ClusterRoleBinding kubeadm:cluster-admins (group kubeadm:cluster-admins -> "
            "cluster-admin), kubeconfig.EnsureAdminClusterRoleBinding "
            "(internal/resources/kubeadm_phases.go)",
            None,
            "kubeadm makes it only when its --kubeconfig is the default "
            "/etc/kubernetes/admin.conf; otherwise `kubectl create clusterrolebinding "
            "kubeadm:cluster-admins --clusterrole=cluster-admin "
            "--group=kubeadm:cluster-admins` as super-admin",
        ),
    ]


# --- component configurations ------------------------------------------------------------------
KUBE_PROXY_KUBECONFIG = "/var/lib/kube-proxy/kubeconfig.conf"


def kube_proxy_configuration(tcp: dict[str, Any]) -> dict:
    """The KubeProxyConfiguration Kamaji's kube-proxy addon renders: kubeadm's component config
    defaulted against DefaultedStaticInitConfiguration (internal/kubeadm/configuration.go
    GetKubeadmInitConfigurationFromMap): its config.conf has clusterCIDR "". The real
    `kubeadm init phase addon kube-proxy` fills an empty clusterCIDR with the pod subnet."""
    del tcp  # nothing of the TCP reaches it
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "bindAddress": "0.0.0.0",
        "clientConnection": {"kubeconfig": KUBE_PROXY_KUBECONFIG},
    }
