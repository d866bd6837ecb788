"""A real Kubernetes control plane on loopback, for tests: etcd, kube-apiserver, and optionally
kube-controller-manager, kube-scheduler and kwok (fake nodes and pod status).

Use it through the fixtures in tests/real/conftest.py (``control_plane``, ``control_planes``), or:

    plane = ControlPlane.start(workdir, users={"alice": ("team-a",)})
    try:
        plane.kubectl("get", "nodes")                         # as admin (system:masters)
        plane.kubectl("auth", "can-i", "list", "pods", user="alice")
        plane.add_token_user("bob", ("team-b",))              # restarts the API server (~3 s)
        plane.create_fake_node("worker-1")                    # kwok turns it Ready
    finally:
        plane.stop()                                          # exactly the processes it started

What a test gets: ``server`` (https://127.0.0.1:<port>), ``ca_path`` (the CA of the serving
certificate), ``admin_token``, ``token(user)``, ``kubeconfig(user)``, ``audit_log`` (JSON lines,
level Metadata, every request), ``logs`` (one file per process). Binaries are the pinned builds
of tests/real/binaries.py: Kubernetes v1.35.4 (the lab's tenants default to v1.35.0; the proxy
serves no other 1.35 patch), etcd v3.6.5, kwok v0.8.0.

A plane started with ``full=False`` has no controller manager: no ServiceAccount tokens
controller, no namespace finalization, and the aggregated ClusterRoles (admin, edit, view) stay
without rules (the clusterrole-aggregation controller fills them); bind your own Role there.

Users are static tokens (``--token-auth-file``, read once at start), authorization is RBAC with
the bootstrap roles: the controller manager and scheduler run as ``system:kube-controller-manager``
and ``system:kube-scheduler``, kwok and admin in ``system:masters``.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import datetime
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from binaries import K8S_VERSION, bin_path, kwok_fast_stage_files
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from builders.control_plane import apiserver_extra_args
from labconfig.model import TenantConfig
from labconfig.node_images import WORKER_IMAGES
from labconfig.versions import minor_series

SERVICE_CIDR = "10.0.0.0/24"


# Every plane stands for a tenant's API server of the binaries' version, so it runs with the
# flags the program gives such a tenant through Kamaji's extraArgs (builders/control_plane.py).
def tenant_apiserver_args(kubernetes: str = K8S_VERSION) -> list[str]:
    return apiserver_extra_args(TenantConfig(name="plane", kubernetes_version=kubernetes))


TENANT_APISERVER_ARGS = tenant_apiserver_args()


def on_the_planes_version(config: dict[str, Any]) -> dict[str, Any]:
    """A stack config whose tenants run the planes' version, so what the program declares for
    them (feature gates, the admission policies' API) is what such a plane serves; their
    workers' image is the one pinned for that minor (a plane has no workers: kwok plays them)."""
    minor = minor_series(K8S_VERSION)
    image = next(i for v, i in WORKER_IMAGES.items() if minor_series(v) == minor)
    tenants = [
        {**tenant, "kubernetesVersion": K8S_VERSION, "workerImage": image}
        for tenant in config["tenants"]
    ]
    return {**config, "tenants": tenants}


PR_SET_PDEATHSIG = 1  # linux/prctl.h
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
COMPONENT_USERS = {
    "admin": ("system:masters",),
    "system:kube-controller-manager": (),
    "system:kube-scheduler": (),
    "kwok-controller": ("system:masters",),
}
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class ControlPlaneError(RuntimeError):
    pass


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range: an outgoing connection (any
    kubectl call) can take an ephemeral port while an API server restarts, and it could not
    listen on its port again."""
    low = _ephemeral_range()[0]
    for port in random.sample(range(low // 2, low), 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ControlPlaneError(f"no free port in {low // 2}-{low - 1} on 127.0.0.1")


def _ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


# --- PKI ---------------------------------------------------------------------------------------


def pem_private_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    extensions: Iterable[tuple[x509.ExtensionType, bool]],
    organization: str | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    name = x509.Name(attributes)
    issuer_name, signing_key = (issuer[0].subject, issuer[1]) if issuer else (name, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    if issuer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer[1].public_key()), False
        )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    return builder.sign(signing_key, hashes.SHA256())


def key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


@dataclasses.dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_pub: Path


def write_pki(directory: Path) -> Pki:
    """A CA and the API server's serving certificate, as strict X.509 verifiers want them.

    Python >= 3.13 (the agent's image) sets VERIFY_X509_STRICT: a CA without keyUsage
    keyCertSign and basicConstraints CA:TRUE (a bare ``openssl req -x509``) is refused.
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate(
        "kamaji-hami-lab-real-ca",
        ca_key,
        None,
        [
            (x509.BasicConstraints(ca=True, path_length=None), True),
            (key_usage(cert_sign=True), True),
        ],
    )
    serving_key = ec.generate_private_key(ec.SECP256R1())
    service_ip = next(ipaddress.ip_network(SERVICE_CIDR).hosts())
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    names.append("kubernetes.default.svc.cluster.local")
    addresses = [ipaddress.ip_address("127.0.0.1"), service_ip]
    serving = certificate(
        "kube-apiserver",
        serving_key,
        (ca, ca_key),
        [
            (x509.BasicConstraints(ca=False, path_length=None), True),
            (key_usage(cert_sign=False), True),
            (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
            (
                x509.SubjectAlternativeName(
                    [x509.DNSName(n) for n in names] + [x509.IPAddress(a) for a in addresses]
                ),
                False,
            ),
        ],
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "apiserver.crt",
        serving_key=directory / "apiserver.key",
        service_account_key=directory / "sa.key",
        service_account_pub=directory / "sa.pub",
    )
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(pem_private_key(serving_key))
    pki.service_account_key.write_bytes(pem_private_key(sa_key))
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


# --- processes ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Process:
    """One program this control plane started; stopped by its own PID, never by name."""

    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of pytest does not reach it first
                preexec_fn=_die_with_parent,
            )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        self.popen = None


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when pytest itself dies (even by SIGKILL), so no
    test run leaves an API server behind (Linux prctl PR_SET_PDEATHSIG). Nobody is left to wait
    for a graceful shutdown; etcd's leftover data is removed by the next run (_tmpfs_dir)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def wait_until(
    condition: Callable[[], bool], what: str, timeout: float, watched: Sequence[Process] = ()
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in watched:
            if not process.running():
                raise ControlPlaneError(f"{process.name} exited:\n{process.log_tail()}")
        if condition():
            return
        time.sleep(0.2)
    logs = "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in watched)
    raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")


def _http_ok(url: str, *, context: ssl.SSLContext | None = None, token: str = "") -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def _insecure_context() -> ssl.SSLContext:
    # Only for the /healthz of the controller manager and scheduler (self-signed serving certs).
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


# --- the control plane -------------------------------------------------------------------------


def _require_binaries(paths: Iterable[Path]) -> None:
    missing = [str(path) for path in paths if not path.exists()]
    if missing:
        raise ControlPlaneError(
            f"not built: {', '.join(missing)}; "
            "run `make test-real` or `.venv/bin/python tests/real/binaries.py`"
        )


@dataclasses.dataclass
class ControlPlane:
    """One real control plane; see the module docstring."""

    name: str
    workdir: Path
    server: str
    pki: Pki
    tokens: dict[str, tuple[str, tuple[str, ...]]]  # user -> (token, groups)
    processes: dict[str, Process]
    audit_log: Path
    tenant_args: tuple[str, ...] = tuple(TENANT_APISERVER_ARGS)
    # The control plane programs' version (kubectl, etcd and kwok are the default set's), and
    # what the program gives the controller manager and scheduler through Kamaji's extraArgs.
    kubernetes: str = K8S_VERSION
    component_args: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    etcd_url: str = ""
    etcd_data: Path | None = None  # on tmpfs; removed by stop()

    @property
    def ca_path(self) -> Path:
        return self.pki.ca_cert

    @property
    def admin_token(self) -> str:
        return self.token("admin")

    @property
    def logs(self) -> dict[str, Path]:
        return {name: process.log for name, process in self.processes.items()}

    def token(self, user: str) -> str:
        return self.tokens[user][0]

    @classmethod
    def start(
        cls,
        workdir: Path,
        *,
        name: str = "plane",
        users: Mapping[str, Sequence[str]] | None = None,
        full: bool = True,
        tenant_args: Sequence[str] | None = None,
        kubernetes: str = K8S_VERSION,
        component_args: Mapping[str, Sequence[str]] | None = None,
    ) -> ControlPlane:
        """Start etcd and the API server; with ``full``, also controller manager, scheduler, kwok.

        ``users``: extra token users, name -> groups. A plane started with ``full=False`` only
        serves the API (enough for dry-runs and RBAC checks) and starts in about 3 s.
        ``tenant_args``: the flags the program gives a tenant's API server of ``kubernetes``
        (the default), or others to show what they change. ``kubernetes``: another built
        version of the control plane programs (binaries.K8S_NEXT_VERSION).
        """
        control = ["kube-apiserver"] + (
            ["kube-controller-manager", "kube-scheduler"] if full else []
        )
        shared = ["etcd", "kubectl", *(["kwok"] if full else [])]
        _require_binaries(
            [bin_path(name, kubernetes) for name in control] + [bin_path(name) for name in shared]
        )
        workdir.mkdir(parents=True, exist_ok=True)
        tokens = {
            user: (secrets.token_hex(16), tuple(groups))
            for user, groups in {**COMPONENT_USERS, **(users or {})}.items()
        }
        port = free_port()
        plane = cls(
            name=name,
            workdir=workdir,
            server=f"https://127.0.0.1:{port}",
            pki=write_pki(workdir / "pki"),
            tokens=tokens,
            processes={},
            audit_log=workdir / "audit.log",
            tenant_args=tuple(
                tenant_apiserver_args(kubernetes) if tenant_args is None else tenant_args
            ),
            kubernetes=kubernetes,
            component_args=dict(component_args or {}),
        )
        try:
            plane._start_etcd()
            plane._start_apiserver(port)
            if full:
                plane._start_controller_manager()
                plane._start_scheduler()
                plane._start_kwok()
        except BaseException:
            plane.stop()
            raise
        return plane

    # -- programs --

    def _launch(self, name: str, args: list[str]) -> Process:
        process = Process(name, args, self.workdir / f"{name}.log")
        self.processes[name] = process
        process.start()
        return process

    def _start_etcd(self) -> None:
        data = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=_tmpfs_dir()))
        self.etcd_data = data
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        etcd = self._launch(
            "etcd",
            [
                str(bin_path("etcd")),
                f"--name={self.name}",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster={self.name}={peer_url}",
                "--log-level=warn",
                "--unsafe-no-fsync",
            ],
        )
        wait_until(lambda: _http_ok(f"{self.etcd_url}/health"), "etcd /health", 30, [etcd])

    def _apiserver_args(self, port: int) -> list[str]:
        token_file = self.workdir / "tokens.csv"
        token_file.write_text(
            "".join(
                f'{token},{user},{user},"{",".join(groups)}"\n'
                for user, (token, groups) in self.tokens.items()
            )
        )
        audit_policy = self.workdir / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        return [
            str(bin_path("kube-apiserver", self.kubernetes)),
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--etcd-servers={self.etcd_url}",
            f"--tls-cert-file={self.pki.serving_cert}",
            f"--tls-private-key-file={self.pki.serving_key}",
            f"--client-ca-file={self.pki.ca_cert}",
            f"--token-auth-file={token_file}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki.service_account_pub}",
            f"--service-account-signing-key-file={self.pki.service_account_key}",
            # The lab's HAMi and agent pods are privileged; the dry-run must judge them as a
            # kubeadm cluster (Kamaji's tenants) would.
            "--allow-privileged=true",
            f"--audit-policy-file={audit_policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false",
            # What the program adds to a tenant's API server of this version through Kamaji.
            *self.tenant_args,
        ]

    def _start_apiserver(self, port: int) -> None:
        apiserver = self._launch("kube-apiserver", self._apiserver_args(port))
        context = ssl.create_default_context(cafile=str(self.ca_path))
        wait_until(
            lambda: _http_ok(f"{self.server}/readyz", context=context, token=self.admin_token),
            "kube-apiserver /readyz",
            90,
            [apiserver],
        )

    def restart_apiserver(self, stop_timeout: float = 15) -> None:
        """Stop and start the API server on the same port and etcd (watches see it go away).

        It stops listening at once on SIGTERM but lingers ~15 s before it exits; a smaller
        ``stop_timeout`` SIGKILLs it sooner (same effect for clients, restarts in ~5 s)."""
        self.processes["kube-apiserver"].stop(stop_timeout)
        self._start_apiserver(int(self.server.rsplit(":", 1)[1]))

    def add_token_user(self, user: str, groups: Sequence[str] = ()) -> str:
        """A new static-token user; the API server reads its token file only at start, so this
        restarts it. Prefer ``users=`` at start when the users are known up front."""
        self.tokens[user] = (secrets.token_hex(16), tuple(groups))
        self.restart_apiserver()
        return self.token(user)

    def _start_component(self, name: str, user: str, extra: list[str]) -> None:
        port = free_port()
        process = self._launch(
            name,
            [
                str(bin_path(name, self.kubernetes)),
                f"--kubeconfig={self.kubeconfig(user)}",
                f"--authentication-kubeconfig={self.kubeconfig(user)}",
                f"--authorization-kubeconfig={self.kubeconfig(user)}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / f'{name}-certs'}",
                "--leader-elect=false",
                *extra,
                *self.component_args.get(name, ()),
            ],
        )
        healthz = f"https://127.0.0.1:{port}/healthz"
        context = _insecure_context()
        wait_until(lambda: _http_ok(healthz, context=context), f"{name} /healthz", 60, [process])

    def _start_controller_manager(self) -> None:
        self._start_component(
            "kube-controller-manager",
            "system:kube-controller-manager",
            [
                # Each controller with its own ServiceAccount: the controller manager's own user
                # holds only system:kube-controller-manager, which lacks e.g. nodes/status
                # for the node lifecycle controller; without this nodes keep the not-ready taint.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        )

    def _start_scheduler(self) -> None:
        self._start_component("kube-scheduler", "system:kube-scheduler", [])

    def _start_kwok(self) -> None:
        address = f"127.0.0.1:{free_port()}"
        kwok = self._launch(
            "kwok",
            [
                str(bin_path("kwok")),
                f"--kubeconfig={self.kubeconfig('kwok-controller')}",
                # Only nodes that ask for it: a test may create nodes that something else
                # (the agent, a test) keeps the status of.
                "--manage-nodes-with-annotation-selector=" + "=".join(FAKE_NODE_ANNOTATION),
                f"--server-address={address}",
                "--node-lease-duration-seconds=40",
                # kwok >= v0.8.0 has no built-in stages: the module's own "fast" set.
                *(f"--config={path}" for path in kwok_fast_stage_files()),
            ],
        )
        # kwok serves /healthz only after its controllers have started.
        wait_until(lambda: _http_ok(f"http://{address}/healthz"), "kwok /healthz", 60, [kwok])

    def stop(self) -> None:
        """Stop what this plane started, newest first, each by its own PID; remove etcd's data."""
        # Nothing is kept (etcd's data goes next), so a graceful shutdown buys nothing: after
        # SIGTERM kube-apiserver stops listening at once but takes 15 s or more to exit.
        for process in reversed(list(self.processes.values())):
            process.stop(timeout=3)
        if self.etcd_data is not None:
            shutil.rmtree(self.etcd_data, ignore_errors=True)

    # -- clients --

    def kubeconfig(self, user: str = "admin") -> Path:
        path = self.workdir / "kubeconfigs" / f"{user.replace(':', '_')}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": self.name,
                            "cluster": {
                                "server": self.server,
                                "certificate-authority": str(self.ca_path),
                            },
                        }
                    ],
                    "users": [{"name": user, "user": {"token": self.token(user)}}],
                    "contexts": [{"name": user, "context": {"cluster": self.name, "user": user}}],
                    "current-context": user,
                }
            )
        )
        return path

    def kubectl(
        self,
        *args: str,
        user: str = "admin",
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl as ``user``; with ``check``, a failure raises with its stderr.

        Its discovery cache is this control plane's own: kubectl keys the cache by host and port
        (10 min), and a port freed by an earlier API server of the run may be handed out again,
        so a shared cache could describe another server's APIs."""
        result = subprocess.run(
            [
                str(bin_path("kubectl")),
                f"--kubeconfig={self.kubeconfig(user)}",
                f"--cache-dir={self.workdir / 'kubectl-cache'}",
                *args,
            ],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def admitted(self, body: dict) -> dict:
        """``body`` as the API server would store it on create: a server-side dry run, so
        mutating admission runs and nothing is made."""
        result = self.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                              input=json.dumps(body))  # fmt: skip
        return json.loads(result.stdout)

    def get_json(self, *args: str, user: str = "admin") -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json", user=user).stdout)

    def create_fake_node(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """A node that kwok plays the kubelet of: it turns Ready and runs the pods bound to it."""
        key, value = FAKE_NODE_ANNOTATION
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {key: value}, "labels": dict(labels or {})},
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(node))

    def wait_for_object(
        self,
        *args: str,
        condition: Callable[[dict], bool],
        what: str,
        timeout: float = 60,
        user: str = "admin",
    ) -> dict:
        """Poll ``kubectl get <args> -o json`` until ``condition`` holds; fail with the last."""
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            result = self.kubectl("get", *args, "-o", "json", user=user, check=False)
            if result.returncode == 0:
                last = json.loads(result.stdout)
                if condition(last):
                    return last
            time.sleep(0.3)
        raise ControlPlaneError(
            f"timed out after {timeout:.0f} s waiting for {what}; last seen:\n"
            + json.dumps(last, indent=1)[:3000]
        )

    def create_namespace(self, name: str) -> None:
        """A namespace pods can be created in: with a full plane, once the controller manager
        has made its `default` ServiceAccount (admission refuses pods before that)."""
        self.kubectl("create", "namespace", name)
        if "kube-controller-manager" in self.processes:
            self.wait_for_object(
                "serviceaccount", "default", "-n", name,
                condition=lambda _: True, what=f"serviceaccount {name}/default",
            )  # fmt: skip

    def can_i(self, user: str, *args: str) -> bool:
        """``kubectl auth can-i <args>`` as ``user``: yes (True) or no (False)."""
        result = self.kubectl("auth", "can-i", *args, user=user, check=False)
        if result.stdout.strip() not in ("yes", "no"):
            raise ControlPlaneError(f"kubectl auth can-i {' '.join(args)}:\n{result.stderr}")
        return result.stdout.strip() == "yes"

    def wait_until_allowed(self, user: str, *args: str, timeout: float = 15) -> None:
        """RBAC decides from informer caches: a new (Cluster)RoleBinding takes effect a moment
        after it is created. Wait for that before a test relies on it."""
        wait_until(lambda: self.can_i(user, *args), f"{user} may {' '.join(args)}", timeout)

    def service_account_token(self, namespace: str, name: str) -> str:
        """A bound token of a real ServiceAccount (TokenRequest), as a pod would get it."""
        return self.kubectl("create", "token", name, "-n", namespace).stdout.strip()


ETCD_DATA_PREFIX = "kamaji-hami-lab-etcd-"


def admin_conf(plane: ControlPlane, user: str = "admin", ca_from: ControlPlane | None = None):
    """The plane's kubeconfig for `user` with the CA inline, as Kamaji's admin.conf has it
    (``ca_from``: another plane's CA instead, for a TLS client that must not trust this one)."""
    doc = yaml.safe_load(plane.kubeconfig(user).read_text())
    cluster = doc["clusters"][0]["cluster"]
    cluster.pop("certificate-authority")
    ca = (ca_from or plane).ca_path.read_bytes()
    cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return doc


def _tmpfs_dir() -> Path:
    """This process's directory for etcd data on tmpfs (etcd fsyncs every write; on tmpfs that
    costs nothing), named by PID. Directories of test runs that no longer exist (killed before
    their teardown) are removed here."""
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path(tempfile.gettempdir())
    for stale in base.glob(f"{ETCD_DATA_PREFIX}*"):
        pid = stale.name.removeprefix(ETCD_DATA_PREFIX)
        if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    own = base / f"{ETCD_DATA_PREFIX}{os.getpid()}"
    own.mkdir(exist_ok=True)
    return own
