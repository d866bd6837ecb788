"""Konnectivity as Kamaji wires it into a tenant, for the stand-in (issue 19, item 7).

Builds: `proxy-server` and `proxy-agent` from sigs.k8s.io/apiserver-network-proxy (cmd/server,
cmd/agent) as a BinarySet, the agent as a docker archive under the name Kamaji's DaemonSet
gives its image (loadable with workload_images.load_images), the server binary kept for the
stand-in pod (its containers run bind-mounted binaries in busybox).

Renders (pure functions of the TCP manifest, read in clastix/kamaji at
kamaji_render.KAMAJI_COMMIT, docs/upstream-facts/tenant-stand-in.md):
- `image_version`: Kamaji's default server/agent tag for the tenant's version;
- `agent_objects`: the ServiceAccount, the ClusterRoleBinding and the agent DaemonSet the
  soot controllers apply in the tenant (internal/resources/konnectivity/);
- `server_kubeconfig`: konnectivity-server.conf (kubeconfig_resource.go), from a client
  certificate the real kubeadm signs with the tenant CA (`kubeadm kubeconfig user`).
The server's args and the egress selector are kamaji_render's (konnectivity_server_args,
egress_selector_configuration).
"""

from __future__ import annotations

import base64
import copy
import io
import json
import subprocess
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kamaji_render
import node_image
import workload_images
import yaml
from node_image import binaries  # tests/real/binaries.py, on the path node_image sets

MODULE = "sigs.k8s.io/apiserver-network-proxy"
# Kamaji's default tag for a v1.35 tenant is v0.35.0 (image_version), which the Go module proxy
# does not serve (403); v0.34.0 is the newest it serves. The image keeps Kamaji's name.
BUILT_VERSION = "v0.34.0"
PROXY_SET = binaries.BinarySet(
    name="apiserver-network-proxy",
    module=MODULE,
    version=BUILT_VERSION,
    packages=(f"{MODULE}/cmd/server", f"{MODULE}/cmd/agent"),
    # its go.mod replaces konnectivity-client with ./konnectivity-client: the same release
    local_replace_version=BUILT_VERSION,
)
# Kamaji's paths: the command of the server container and of the agent's
SERVER_COMMAND = "/proxy-server"
AGENT_COMMAND = "/proxy-agent"
# CRD defaults (api/v1alpha1/tenantcontrolplane_types.go:401,421,430,440,451,453)
DEFAULT_SERVER_IMAGE = "registry.k8s.io/kas-network-proxy/proxy-server"
DEFAULT_AGENT_IMAGE = "registry.k8s.io/kas-network-proxy/proxy-agent"
DEFAULT_SERVER_PORT = 8132
DEFAULT_AGENT_TOLERATIONS = [{"key": "CriticalAddonsOnly", "operator": "Exists"}]
DEFAULT_AGENT_MODE = "DaemonSet"


def build_binaries(tier_cache_dir: Path) -> dict[str, Path]:
    """`proxy-server` / `proxy-agent` -> the built binary (cmd/server, cmd/agent), built once
    per spec under `<tier cache>/workload-images/go/apiserver-network-proxy/bin/`."""
    env, go_version = node_image.go_env()
    root = workload_images.set_root(tier_cache_dir, PROXY_SET.name)
    binaries.build_set(PROXY_SET, root, env, go_version)
    return {"proxy-server": root / "bin" / "server", "proxy-agent": root / "bin" / "agent"}


# Kamaji's names (internal/resources/konnectivity/constants.go)
AGENT_NAME = "konnectivity-agent"
AGENT_NAMESPACE = "kube-system"
CERT_COMMON_NAME = "system:konnectivity-server"  # the server's user, the agents' audience
AGENT_TOKEN_NAME = "konnectivity-agent-token"
AGENT_TOKEN_DIR = "/var/run/secrets/tokens"
SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
KUBECONFIG_CLUSTER = "kubernetes"  # defaultClusterName
SERVER_CONTAINER = "konnectivity-server"


# --- versions and images -----------------------------------------------------------------------


def image_version(tcp: dict[str, Any], component: str = "agent") -> str:
    """The tag Kamaji gives the server's or the agent's image: the addon's version if set, else
    `v0.<tenant minor>.0` (konnectivity_server.go serverVersion, agent.go agentVersion)."""
    addon = tcp["spec"]["addons"]["konnectivity"]
    if addon.get(component, {}).get("version"):
        return addon[component]["version"]
    minor = int(tcp["spec"]["kubernetes"]["version"].lstrip("v").split(".")[1])
    return f"v0.{minor}.0"


def _addon(tcp: dict[str, Any]) -> dict[str, Any]:
    """spec.addons.konnectivity with the CRD's defaults."""
    addon = copy.deepcopy(tcp["spec"]["addons"]["konnectivity"])
    server, agent = addon.setdefault("server", {}), addon.setdefault("agent", {})
    server.setdefault("image", DEFAULT_SERVER_IMAGE)
    server.setdefault("port", DEFAULT_SERVER_PORT)
    agent.setdefault("image", DEFAULT_AGENT_IMAGE)
    agent.setdefault("mode", DEFAULT_AGENT_MODE)
    agent.setdefault("tolerations", copy.deepcopy(DEFAULT_AGENT_TOLERATIONS))
    agent.setdefault("hostNetwork", False)
    return addon


def server_image(tcp: dict[str, Any]) -> str:
    return f"{_addon(tcp)['server']['image']}:{image_version(tcp, 'server')}"


def agent_image(tcp: dict[str, Any]) -> str:
    return f"{_addon(tcp)['agent']['image']}:{image_version(tcp, 'agent')}"


# --- the agent's objects in the tenant -----------------------------------------------------------


def kamaji_labels(tcp: dict[str, Any], component: str) -> dict[str, str]:
    """utilities.KamajiLabels (internal/constants/labels.go)."""
    return {
        "kamaji.clastix.io/project": "kamaji",
        "kamaji.clastix.io/name": tcp["metadata"]["name"],
        "kamaji.clastix.io/component": component,
    }


def proxy_server_host(tcp: dict[str, Any]) -> str:
    """AdvertisedControlPlaneAddress: networkProfile.advertiseAddress, else the host of
    status.controlPlaneEndpoint, which for a LoadBalancer TCP is its address (MetalLB's)."""
    net = tcp["spec"]["networkProfile"]
    return net.get("advertiseAddress") or net["address"]


def agent_args(tcp: dict[str, Any]) -> list[str]:
    """agent.go mutate's args map, no ExtraArgs, through ArgsFromMapToSlice (sorted)."""
    args = {
        "-v": "8",
        "--logtostderr": "true",
        "--ca-cert": SERVICE_ACCOUNT_CA,
        "--proxy-server-host": proxy_server_host(tcp),
        "--proxy-server-port": str(_addon(tcp)["server"]["port"]),
        "--admin-server-port": str(kamaji_render.KONNECTIVITY_ADMIN_PORT),
        "--health-server-port": str(kamaji_render.KONNECTIVITY_HEALTH_PORT),
        "--service-account-token-path": f"{AGENT_TOKEN_DIR}/{AGENT_TOKEN_NAME}",
    }
    return sorted(flag if value == "" else f"{flag}={value}" for flag, value in args.items())


def service_account(tcp: dict[str, Any]) -> dict[str, Any]:
    """service_account_resource.go: kube-system/konnectivity-agent."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": AGENT_NAME,
            "namespace": AGENT_NAMESPACE,
            "labels": kamaji_labels(tcp, "konnectivity-sa"),
        },
    }


def cluster_role_binding(tcp: dict[str, Any]) -> dict[str, Any]:
    """cluster_role_binding_resource.go: user system:konnectivity-server (the server's
    kubeconfig) -> system:auth-delegator, for its TokenReviews of the agents' tokens."""
    labels = {
        **kamaji_labels(tcp, "konnectivity-clusterrolebinding"),
        "kubernetes.io/cluster-service": "true",
        "addonmanager.kubernetes.io/mode": "Reconcile",
    }
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": CERT_COMMON_NAME, "labels": labels},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "system:auth-delegator",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": CERT_COMMON_NAME}
        ],
    }


def agent_daemon_set(tcp: dict[str, Any]) -> dict[str, Any]:
    """agent.go mutate for mode DaemonSet. The token's audience is the ClusterRoleBinding's
    name from the TCP status (system:konnectivity-server once that resource reconciled)."""
    agent = _addon(tcp)["agent"]
    if agent["mode"] != "DaemonSet":
        raise NotImplementedError(f"agent mode {agent['mode']!r}")
    selector = {"k8s-app": AGENT_NAME}
    token = {
        "path": AGENT_TOKEN_NAME,
        "audience": CERT_COMMON_NAME,
        "expirationSeconds": 3600,
    }
    container = {
        "name": AGENT_NAME,
        "image": agent_image(tcp),
        "command": [AGENT_COMMAND],
        "args": agent_args(tcp),
        "volumeMounts": [{"mountPath": AGENT_TOKEN_DIR, "name": AGENT_TOKEN_NAME}],
        "livenessProbe": {
            "httpGet": {
                "path": "/healthz",
                "port": kamaji_render.KONNECTIVITY_HEALTH_PORT,
                "scheme": "HTTP",
            },
            "initialDelaySeconds": 15,
            "timeoutSeconds": 15,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
    }
    pod_spec = {
        "priorityClassName": "system-cluster-critical",
        "tolerations": copy.deepcopy(agent["tolerations"]),
        "hostNetwork": agent["hostNetwork"],
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "serviceAccountName": AGENT_NAME,
        "volumes": [
            {
                "name": AGENT_TOKEN_NAME,
                "projected": {
                    "sources": [{"serviceAccountToken": token}],
                    "defaultMode": 420,
                },
            }
        ],
        "containers": [container],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": AGENT_NAME,
            "namespace": AGENT_NAMESPACE,
            "labels": kamaji_labels(tcp, "konnectivity-agent"),
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
        },
    }


def agent_objects(tcp: dict[str, Any]) -> list[dict[str, Any]]:
    """What the soot controller's konnectivity-agent resources create in the tenant
    (controllers/soot/manager.go: Agent, ServiceAccountResource, ClusterRoleBindingResource)."""
    return [service_account(tcp), cluster_role_binding(tcp), agent_daemon_set(tcp)]


def agent_manifests(tcp: dict[str, Any]) -> str:
    return yaml.safe_dump_all(agent_objects(tcp), sort_keys=False)


# --- the server's kubeconfig ---------------------------------------------------------------------


def server_kubeconfig(kubeadm_kubeconfig: str, tcp: dict[str, Any]) -> str:
    """konnectivity-server.conf as kubeconfig_resource.go lays it out (cluster `kubernetes`,
    user system:konnectivity-server, server https://localhost:<port>), with the CA and the
    client certificate of a kubeconfig kubeadm made for that user."""
    made = yaml.safe_load(kubeadm_kubeconfig)
    ca = made["clusters"][0]["cluster"]["certificate-authority-data"]
    user = made["users"][0]["user"]
    port = kamaji_render.defaulted(tcp)["spec"]["networkProfile"]["port"]
    context = f"{CERT_COMMON_NAME}@{KUBECONFIG_CLUSTER}"
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": KUBECONFIG_CLUSTER,
                    "cluster": {
                        "server": f"https://localhost:{port}",
                        "certificate-authority-data": ca,
                    },
                }
            ],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": KUBECONFIG_CLUSTER, "user": CERT_COMMON_NAME},
                }
            ],
            "current-context": context,
            "users": [
                {
                    "name": CERT_COMMON_NAME,
                    "user": {
                        "client-certificate-data": user["client-certificate-data"],
                        "client-key-data": user["client-key-data"],
                    },
                }
            ],
            "preferences": {},
        },
        sort_keys=False,
    )


def kubeadm_user_kubeconfig(kubeadm: Path, certs_config: Path) -> str:
    """`kubeadm kubeconfig user` for system:konnectivity-server in system:masters (Kamaji's
    certificate's subject, crypto.NewCertificateTemplate), signed by the tenant CA of the
    configuration's certificatesDir."""
    found = subprocess.run(
        [
            str(kubeadm), "kubeconfig", "user", f"--config={certs_config}",
            f"--client-name={CERT_COMMON_NAME}", "--org=system:masters",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if found.returncode != 0:
        raise RuntimeError(f"kubeadm kubeconfig user: {found.stderr}")
    return found.stdout


# --- the server in the stand-in's pod ------------------------------------------------------------


@dataclass(frozen=True)
class ServerFiles:
    """The stand-in pod's Konnectivity files on the host: what Kamaji mounts (the egress
    selector ConfigMap, the kubeconfig Secret, the emptyDir for the socket) and the binary."""

    workdir: Path
    binary: Path

    @property
    def egress_selector(self) -> Path:
        return self.workdir / "egress-selector-configuration.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "konnectivity-server.conf"

    @property
    def uds_dir(self) -> Path:  # Kamaji: an emptyDir (medium Memory) in both containers
        return self.workdir / "konnectivity-uds"

    def docker_options(self, role: str) -> list[str]:
        """`docker run` options of the pod's container `role` (kube-apiserver, the server)."""
        uds = ["-v", f"{self.uds_dir}:{kamaji_render.KONNECTIVITY_UDS_DIR}"]
        if role == "kube-apiserver":
            return [*uds, "-v", f"{self.egress_selector}:{kamaji_render.EGRESS_SELECTOR_CONFIG}:ro"]
        if role == SERVER_CONTAINER:
            return [
                *uds,
                "-v", f"{self.kubeconfig}:{kamaji_render.KONNECTIVITY_SERVER_KUBECONFIG}:ro",
                "-v", f"{self.binary}:{SERVER_COMMAND}:ro",
            ]  # fmt: skip
        return []


def write_server_files(
    kubeadm: Path, tcp: dict[str, Any], workdir: Path, binary: Path
) -> ServerFiles:
    """The files after tenant_stand_in.write_files made the pki (workdir/kubeadm-certs.yaml)."""
    files = ServerFiles(workdir, binary)
    files.egress_selector.write_text(kamaji_render.egress_selector_configuration())
    made = kubeadm_user_kubeconfig(kubeadm, workdir / "kubeadm-certs.yaml")
    files.kubeconfig.write_text(server_kubeconfig(made, tcp))
    files.kubeconfig.chmod(0o600)
    files.uds_dir.mkdir(exist_ok=True)
    return files


def server_command(tcp: dict[str, Any]) -> list[str]:
    """The server container's command + args: Kamaji's (kamaji_render.konnectivity_server_args)."""
    return kamaji_render.konnectivity_server_args(tcp)


def apply_agent(kubectl: Path, kubeconfig: Path, tcp: dict[str, Any]) -> str:
    """The agent's objects into the tenant (server-side apply, as Kamaji's CreateOrUpdate)."""
    found = subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-f", "-"],
        input=agent_manifests(tcp), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if found.returncode != 0:
        raise RuntimeError(f"applying the Konnectivity agent: {found.stderr}")
    return found.stdout


# --- the agent's image ---------------------------------------------------------------------------


def program_layer(binary: bytes, command: str = AGENT_COMMAND) -> bytes:
    """One layer: the static program at `command` and /tmp, as upstream's distroless images
    hold /proxy-agent and /proxy-server."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        node_image._tar_add(tar, "tmp", mode=0o1777)
        node_image._tar_add(tar, command.lstrip("/"), binary, 0o755)
    return buffer.getvalue()


def agent_archive(reference: str, agent_binary: bytes) -> bytes:
    return node_image.docker_archive(reference, program_layer(agent_binary), (AGENT_COMMAND,))


def server_archive(tier_cache_dir: Path, tcp: dict[str, Any]) -> Path:
    """The server's image under the name Kamaji gives it (server_image), for a control plane
    that runs as pods."""
    built = build_binaries(tier_cache_dir)
    reference = server_image(tcp)
    layer = program_layer(built["proxy-server"].read_bytes(), SERVER_COMMAND)
    return _archive(
        tier_cache_dir, reference, node_image.docker_archive(reference, layer, (SERVER_COMMAND,))
    )


def _archive(tier_cache_dir: Path, reference: str, data: bytes) -> Path:
    """`data` in the tier's cache under the image's file name (rewritten only when changed)."""
    target = workload_images.workload_paths(tier_cache_dir).root / "konnectivity"
    archive = target / node_image.image_file_name(reference)
    if not archive.exists() or archive.read_bytes() != data:
        target.mkdir(parents=True, exist_ok=True)
        archive.write_bytes(data)
    return archive


@dataclass(frozen=True)
class Artifacts:
    server_binary: Path  # for the stand-in pod (ServerFiles.binary)
    agent_archive: Path  # docker archive named agent_image(tcp)
    reference: str


def artifacts(tier_cache_dir: Path, tcp: dict[str, Any]) -> Artifacts:
    """The binaries (built once) and the agent's archive for the TCP's image name."""
    built = build_binaries(tier_cache_dir)
    reference = agent_image(tcp)
    archive = _archive(
        tier_cache_dir, reference, agent_archive(reference, built["proxy-agent"].read_bytes())
    )
    return Artifacts(built["proxy-server"], archive, reference)


# --- a webhook served on a worker: what only the tunnel reaches ----------------------------------

PROBE_LABEL = {"konnectivity-probe": "true"}  # the webhook sees only objects carrying it
DENY_PREFIX = "deny-"  # a probe ConfigMap named so is refused, with the serving node's name
WEBHOOK_PORT = 8443
# A ValidatingWebhook's server: allows, or refuses a `deny-*` object naming the node it runs on
# (proof the answer came from that pod); logs every review.
WEBHOOK_SERVER = """\
import http.server, json, os, ssl
node = os.environ["NODE_NAME"]
class Review(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        request = review["request"]
        name = request.get("name") or request["object"]["metadata"].get("name", "")
        allowed = not name.startswith("@DENY@")
        print("review", request["uid"], request["operation"], name, allowed,
              "from", self.client_address[0], flush=True)
        response = {"uid": request["uid"], "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": "refused by the webhook on " + node}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.HTTPServer(("0.0.0.0", @PORT@), Review)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/tls/tls.crt", "/tls/tls.key")
server.socket = context.wrap_socket(server.socket, server_side=True)
print("serving on", node, flush=True)
server.serve_forever()
""".replace("@DENY@", DENY_PREFIX).replace("@PORT@", str(WEBHOOK_PORT))


def self_signed(dns_name: str) -> tuple[str, str]:
    """(certificate, key) PEM for `dns_name`, its own CA (the webhook's caBundle)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode(), key_pem.decode()


def webhook_objects(
    name: str,
    node: str,
    image: str,
    tls: tuple[str, str],
    namespace: str = "default",
    host_network: bool = True,
) -> list[dict[str, Any]]:
    """A Secret with the TLS pair, the server's pod pinned to `node` (tolerating a NotReady
    node; on the host's network it needs no CNI, on the pod network its address is one the
    control plane has no route to), its Service and a ValidatingWebhookConfiguration for
    ConfigMaps labelled PROBE_LABEL, failing closed."""
    certificate, key = tls
    labels = {"app": name}
    not_ready = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": effect}
        for effect in ("NoSchedule", "NoExecute")
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node,
            "hostNetwork": host_network,
            "tolerations": not_ready,
            "containers": [
                {
                    "name": "webhook",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python", "-c", WEBHOOK_SERVER],
                    "env": [
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        }
                    ],
                    "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "tls", "secret": {"secretName": name}}],
        },
    }
    webhook = {
        "name": f"{name}.{namespace}.svc",
        "clientConfig": {
            "service": {"name": name, "namespace": namespace, "port": 443, "path": "/"},
            "caBundle": base64.b64encode(certificate.encode()).decode(),
        },
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE"],
                "resources": ["configmaps"],
            }
        ],
        "objectSelector": {"matchLabels": dict(PROBE_LABEL)},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"tls.crt": certificate, "tls.key": key},
        },
        pod,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "selector": labels,
                "ports": [{"port": 443, "targetPort": WEBHOOK_PORT, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [webhook],
        },
    ]


def probe_config_map(name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PROBE_LABEL)},
        "data": {"probe": name},
    }


# --- checks against a running tenant (its kubectl: args, input= -> CompletedProcess) ----------

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
TUNNEL_DOWN = "No agent available"  # the server's answer when no agent is connected


def wait_for(what: str, check: Callable[[], Any], timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(1)
    return found


def ready_agents(kubectl: Kubectl) -> list[str]:
    """The nodes of the agent pods whose container is ready."""
    found = kubectl(
        "get", "pods", "-n", AGENT_NAMESPACE, "-l", f"k8s-app={AGENT_NAME}", "-o", "json"
    )  # fmt: skip
    if found.returncode != 0:
        return []
    pods = json.loads(found.stdout)["items"]
    return sorted(
        pod["spec"].get("nodeName", "")
        for pod in pods
        if any(c.get("ready") for c in pod["status"].get("containerStatuses", []))
    )


def admit(kubectl: Kubectl, name: str) -> subprocess.CompletedProcess[str]:
    """Creates a probe ConfigMap: the API server asks the webhook first."""
    return kubectl("create", "-f", "-", input=json.dumps(probe_config_map(name)))


def admitted(kubectl: Kubectl, name: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`admit` until the API server creates the probe (the first call may find the Service's
    rules not yet on the agent's node); the last refusal in the error."""
    deadline = time.monotonic() + timeout
    while (found := admit(kubectl, name)).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not admitted in {timeout:.0f}s: {found.stderr}")
        time.sleep(1)
    return found


def remove_agents(kubectl: Kubectl, timeout: float = 120) -> None:
    """The DaemonSet deleted and its pods gone: no agent left to carry node traffic."""
    kubectl("delete", "daemonset", "-n", AGENT_NAMESPACE, AGENT_NAME, "--wait=true")

    def gone() -> bool:
        found = kubectl(
            "get", "pods", "-n", AGENT_NAMESPACE, "-l", f"k8s-app={AGENT_NAME}", "-o", "json"
        )  # fmt: skip
        return found.returncode == 0 and not json.loads(found.stdout)["items"]

    wait_for("agent pods gone", gone, timeout)
