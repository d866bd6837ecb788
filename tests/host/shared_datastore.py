"""The tenants' datastore as Kamaji's: one etcd in the management cluster that every tenant shares.

What the program's Kamaji release deploys (kamaji-etcd 0.15.0) and what Kamaji then does per
tenant, read at their pinned versions (docs/upstream-facts/tenant-stand-in.md,
`kamaji-etcd-shared-datastore`):
- a StatefulSet `kamaji-etcd` in `kamaji-system` behind the headless Service `kamaji-etcd`, etcd
  serving TLS with client certificates (`--client-cert-auth=true`), its flags as the chart's;
- the chart's setup job: user `root` (no password) with role `root`, then `auth enable`, run with
  a client certificate CN=root, O=system:masters: from then on etcd takes the user from the
  client certificate's CN;
- Kamaji's DataStore `default` points at
  `kamaji-etcd-0.kamaji-etcd.kamaji-system.svc.cluster.local:2379`; per tenant Kamaji adds a
  user and a role named by the TCP's UID, the role read-write on the keys under `/<UID>/`, and
  signs the tenant's client certificate CN=<UID>, O=system:masters with the
  DataStore's CA; the tenant's API server runs with `--etcd-prefix=/<UID>`.

Differences, all of the harness, none of the program: the data directory is an emptyDir (the chart
asks a PersistentVolumeClaim of the cluster's default storage class); of the chart's flags the
metrics listener, auto-compaction, snapshot count and quota (etcd_sts.yaml:89,99-102) are left at
etcd's defaults; the certificates are made
here with `cryptography` (the chart's job runs cfssl, Kamaji Go's crypto/x509), the serving
certificate also serves the peer port; the image holds etcd and etcdctl v3.6.5 (the tier's build)
and busybox's shell for the setup commands, run with `kubectl exec` instead of a Job.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from controlplane import certificate, key_usage, pem_private_key
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

NAMESPACE = "kamaji-system"
NAME = "kamaji-etcd"
CLIENT_PORT = 2379
PEER_PORT = 2380
POD = f"{NAME}-0"
# The DataStore's endpoint (kamaji-etcd's etcd_datastore.yaml), `host:port` as Kamaji wants it.
ENDPOINT = f"{POD}.{NAME}.{NAMESPACE}.svc.cluster.local:{CLIENT_PORT}"
PKI = "/etc/etcd/pki"
ROOT_PKI = "/opt/certs/root-certs"
MASTERS = "system:masters"
# The extended key usages of Kamaji's datastore client certificate (crypto.go:283-287).
CLIENT_USAGES = (
    ExtendedKeyUsageOID.CLIENT_AUTH,
    ExtendedKeyUsageOID.SERVER_AUTH,
    ExtendedKeyUsageOID.CODE_SIGNING,
)


@dataclass(frozen=True)
class DatastorePki:
    """PEM: the DataStore's CA (certificate and key, as Kamaji's DataStore holds both), etcd's
    serving certificate, and the root client certificate the setup runs with."""

    ca_cert: bytes
    ca_key: bytes
    server_cert: bytes
    server_key: bytes
    root_cert: bytes
    root_key: bytes

    def client(self, user: str) -> tuple[bytes, bytes]:
        """A client certificate as Kamaji signs it for a tenant (internal/crypto/crypto.go:272,
        NewCertificateTemplate): CN=user, O=system:masters, client+server+code-signing usages
        (its key is ECDSA here, RSA 2048 in Kamaji's)."""
        ca = x509.load_pem_x509_certificate(self.ca_cert)
        ca_key = serialization.load_pem_private_key(self.ca_key, None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        return _leaf(user, (ca, ca_key), list(CLIENT_USAGES))


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _leaf(
    subject: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    usages: list[x509.ObjectIdentifier],
    names: list[x509.GeneralName] | None = None,
) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (key_usage(cert_sign=False), True),
        (x509.ExtendedKeyUsage(usages), False),
    ]
    if names:
        extensions.append((x509.SubjectAlternativeName(names), False))
    cert = certificate(subject, key, issuer, extensions, organization=MASTERS)
    return _pem(cert), pem_private_key(key)


def make_pki() -> DatastorePki:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=True, path_length=None), True),
        (key_usage(cert_sign=True), True),
    ]
    ca = certificate("kamaji-etcd-ca", ca_key, None, ca_extensions)
    dns = [f"{POD}.{NAME}.{NAMESPACE}.svc.cluster.local", f"*.{NAME}.{NAMESPACE}.svc", "localhost"]
    server = _leaf(
        POD,
        (ca, ca_key),
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        [*(x509.DNSName(n) for n in dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    root = _leaf("root", (ca, ca_key), [ExtendedKeyUsageOID.CLIENT_AUTH])
    return DatastorePki(_pem(ca), pem_private_key(ca_key), *server, *root)


def etcd_command() -> list[str]:
    """kamaji-etcd 0.15.0's container command (templates/etcd_sts.yaml:79-102) for one member,
    the serving certificate also on the peer port; without the metrics listener, compaction,
    snapshot and quota flags (:89,99-102)."""
    member = f"https://$(POD_NAME).{NAME}.$(POD_NAMESPACE).svc.cluster.local"
    return [
        "etcd",
        "--data-dir=/var/run/etcd",
        "--name=$(POD_NAME)",
        "--initial-cluster-state=new",
        f"--initial-cluster={POD}=https://{POD}.{NAME}.{NAMESPACE}.svc.cluster.local:{PEER_PORT}",
        f"--initial-advertise-peer-urls={member}:{PEER_PORT}",
        f"--advertise-client-urls={member}:{CLIENT_PORT}",
        "--initial-cluster-token=kamaji",
        f"--listen-client-urls=https://0.0.0.0:{CLIENT_PORT}",
        f"--listen-peer-urls=https://0.0.0.0:{PEER_PORT}",
        "--client-cert-auth=true",
        "--peer-client-cert-auth=true",
        f"--trusted-ca-file={PKI}/ca.crt",
        f"--cert-file={PKI}/server.pem",
        f"--key-file={PKI}/server-key.pem",
        f"--peer-trusted-ca-file={PKI}/ca.crt",
        f"--peer-cert-file={PKI}/server.pem",
        f"--peer-key-file={PKI}/server-key.pem",
    ]


def manifests(pki: DatastorePki, image: str) -> list[dict[str, Any]]:
    """The namespace, the certificates' Secrets, the headless Service and the StatefulSet."""
    labels = {"app.kubernetes.io/name": NAME}
    env = [
        {"name": n, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.{f}"}}}
        for n, f in (("POD_NAME", "name"), ("POD_NAMESPACE", "namespace"))
    ]
    container = {
        "name": "etcd",
        "image": image,
        "command": etcd_command(),
        "env": env,
        "ports": [
            {"name": "client", "containerPort": CLIENT_PORT},
            {"name": "peer", "containerPort": PEER_PORT},
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": "/var/run/etcd"},
            {"name": "certs", "mountPath": PKI},
            {"name": "root-certs", "mountPath": ROOT_PKI},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        _secret(
            f"{NAME}-certs",
            {
                "ca.crt": pki.ca_cert,
                "ca.key": pki.ca_key,
                "server.pem": pki.server_cert,
                "server-key.pem": pki.server_key,
            },
        ),
        _secret(f"{NAME}-root-client-certs", {"tls.crt": pki.root_cert, "tls.key": pki.root_key}),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": labels,
                "ports": [
                    {"name": "client", "port": CLIENT_PORT},
                    {"name": "peer", "port": PEER_PORT},
                ],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "serviceName": NAME,
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        "volumes": [
                            {"name": "data", "emptyDir": {}},
                            {"name": "certs", "secret": {"secretName": f"{NAME}-certs"}},
                            {
                                "name": "root-certs",
                                "secret": {"secretName": f"{NAME}-root-client-certs"},
                            },
                        ],
                    },
                },
            },
        },
    ]


def _secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": {key: value.decode() for key, value in data.items()},
    }


ETCDCTL = (
    f"etcdctl --endpoints=https://{ENDPOINT} --cacert={PKI}/ca.crt"
    f" --cert={ROOT_PKI}/tls.crt --key={ROOT_PKI}/tls.key"
)


def root_setup_script() -> str:
    """kamaji-etcd 0.15.0's post-install job 2 (templates/etcd_job_preinstall_2.yaml:33-42),
    once etcd serves (the job retries up to its backoffLimit 12 instead, :13)."""
    return f"""\
set -e
tries=0
until {ETCDCTL} endpoint health >/dev/null 2>&1; do
  tries=$((tries + 1))
  [ "$tries" -lt 60 ] || {{ echo "etcd did not become healthy" >&2; exit 1; }}
  sleep 1
done
if {ETCDCTL} user get root >/dev/null 2>&1; then
  echo "User already exists, nothing to do"
else
  {ETCDCTL} user add --no-password=true root
  {ETCDCTL} role add root
  {ETCDCTL} user grant-role root root
  {ETCDCTL} auth enable
fi
"""


def tenant_setup_script(schema: str, user: str) -> str:
    """What Kamaji's DataStore setup does for a tenant on etcd (internal/datastore/etcd.go:
    CreateUser with NoPassword :44-50, GrantPrivileges :60-77: role `schema` read-write on
    [/<schema>/, its prefix end), granted to the user; buildKey :185-187)."""
    return f"""\
set -e
{ETCDCTL} user add --no-password=true {user}
{ETCDCTL} role add {schema}
{ETCDCTL} role grant-permission {schema} readwrite /{schema}/ --prefix=true
{ETCDCTL} user grant-role {user} {schema}
"""
