"""A tenant control plane as Kamaji builds one, without Kamaji (issue 19).

Kamaji runs, per TenantControlPlane, one pod of kube-apiserver, kube-controller-manager and
kube-scheduler at the tenant's version behind the LoadBalancer address, then calls kubeadm's
phase code against that API server. Here: the same three programs (the real tier's v1.35.4
builds) with the flags kamaji_render.py reads off Kamaji's deployment builder, each in a
container of the tier's busybox image; they share the network namespace of a first container
that holds the tenant's address on the lab network (a pod's sandbox, and where MetalLB would
announce the address). The certificates and kubeconfigs are kubeadm's (`kubeadm init phase
certs/kubeconfig`, as Kamaji's builders call kubeadm's certs code), and the phases after it are
the real kubeadm's (`kubeadm init phase ...`) with the configuration Kamaji would build. The
differences are listed in docs/tenant-stand-in.md.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kamaji_kubelet_config
import kamaji_render
import konnectivity
import yaml
from docker_host import Docker

READY_TIMEOUT_SECONDS = 120
# Inside every container: the real tier's static binaries, and the pod's /etc/kubernetes.
BIN_MOUNT = "/opt/kube/bin"
PROCESSES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
LABEL = "kamaji-hami-lab-host/stand-in="


def _container(tenant: str, role: str) -> str:
    return f"kamaji-stand-in-{tenant}-{role}"


@dataclass
class StandIn:
    """One tenant's control plane: its containers, files and admin kubeconfig."""

    tenant: str
    address: str
    workdir: Path
    containers: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    # `docker run` options of each process's container (role -> options up to the image)
    options: dict[str, list[str]] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"https://{self.address}:{kamaji_render.DEFAULT_PORT}"

    @property
    def admin_kubeconfig(self) -> str:
        """What Kamaji stores in `<tenant>-admin-kubeconfig` under `admin.conf`."""
        return (self.workdir / "admin.conf").read_text()

    @property
    def admin_path(self) -> Path:
        return self.workdir / "admin.conf"

    @property
    def kubeadm_config(self) -> Path:
        return self.workdir / "kubeadm.yaml"

    def logs(self, docker: Docker, tail: int = 40) -> str:
        found = []
        for name in self.containers:
            logs = docker.run("logs", "--tail", str(tail), name, check=False)
            found.append(f"--- {name}\n{logs.stdout}{logs.stderr}")
        return "\n".join(found)


def kubeadm(bin_dir: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "kubeadm"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _checked(found: subprocess.CompletedProcess[str], what: str) -> str:
    if found.returncode != 0:
        raise RuntimeError(f"{what} failed ({found.returncode}):\n{found.stdout}{found.stderr}")
    return found.stdout


# The datastore: one etcd per tenant in the pod's network namespace (Kamaji shares one
# kamaji-etcd among tenants); its own serving certificate and CA are kubeadm's local-etcd ones.
DATASTORE = "127.0.0.1:2379"
DATASTORE_PKI = "/etc/datastore/pki"


def _datastore_configuration(tcp: dict[str, Any], certificates_dir: Path) -> str:
    """kubeadm's configuration with a local etcd, only to make the datastore's certificates."""
    documents = list(
        yaml.safe_load_all(kamaji_render.kubeadm_configuration(tcp, datastore_endpoints=[]))
    )
    cluster = next(d for d in documents if d["kind"] == "ClusterConfiguration")
    cluster["certificatesDir"] = str(certificates_dir)
    cluster["etcd"] = {"local": {"serverCertSANs": ["127.0.0.1"]}}
    return yaml.safe_dump_all(documents[:2], sort_keys=False)


def write_files(
    bin_dir: Path, tcp: dict[str, Any], workdir: Path, datastore_endpoint: str = DATASTORE
) -> None:
    """kubeadm's certificates and kubeconfigs for the TCP, where Kamaji's pod reads them
    (kamaji_render.pod_files), and the datastore's under datastore-pki/."""
    pki, datastore = workdir / "pki", workdir / "datastore-pki"
    phases = kamaji_render.kubeadm_configuration(tcp, datastore_endpoints=[datastore_endpoint])
    (workdir / "kubeadm.yaml").write_text(phases)  # the pod's paths: the phases upload them
    documents = list(yaml.safe_load_all(phases))
    next(d for d in documents if d["kind"] == "ClusterConfiguration")["certificatesDir"] = str(pki)
    certs = workdir / "kubeadm-certs.yaml"
    certs.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    _checked(kubeadm(bin_dir, "init", "phase", "certs", "all", f"--config={certs}"), "certs")
    datastore_config = workdir / "kubeadm-datastore.yaml"
    datastore_config.write_text(_datastore_configuration(tcp, datastore))
    for cert in ("etcd-ca", "etcd-server", "apiserver-etcd-client"):
        found = kubeadm(bin_dir, "init", "phase", "certs", cert, f"--config={datastore_config}")
        _checked(found, f"certs {cert}")
    # Kamaji's names for the datastore's CA and the tenant's client certificate
    (pki / "etcd").mkdir(exist_ok=True)
    shutil.copy(datastore / "etcd" / "ca.crt", pki / "etcd" / "ca.crt")
    shutil.copy(datastore / "apiserver-etcd-client.crt", pki / "etcd" / "server.crt")
    shutil.copy(datastore / "apiserver-etcd-client.key", pki / "etcd" / "server.key")
    for kubeconfig in ("admin", "super-admin", "controller-manager", "scheduler"):
        found = kubeadm(
            bin_dir, "init", "phase", "kubeconfig", kubeconfig,
            f"--config={certs}", f"--kubeconfig-dir={workdir}",
        )  # fmt: skip
        _checked(found, f"kubeconfig {kubeconfig}")
    # Kamaji's component kubeconfigs reach the API server through the pod's loopback
    for component in ("controller-manager", "scheduler"):
        path = workdir / f"{component}.conf"
        config = yaml.safe_load(path.read_text())
        config["clusters"][0]["cluster"]["server"] = kamaji_render.component_kubeconfig_server(tcp)
        path.write_text(yaml.safe_dump(config))


def datastore_args() -> list[str]:
    """etcd v3.6 serving the tenant's API server over TLS with client certificates."""
    return [
        "etcd",
        "--name=datastore",
        "--data-dir=/var/lib/etcd",
        f"--listen-client-urls=https://{DATASTORE}",
        f"--advertise-client-urls=https://{DATASTORE}",
        f"--cert-file={DATASTORE_PKI}/etcd/server.crt",
        f"--key-file={DATASTORE_PKI}/etcd/server.key",
        f"--trusted-ca-file={DATASTORE_PKI}/etcd/ca.crt",
        "--client-cert-auth=true",
        "--listen-peer-urls=http://127.0.0.1:2380",
        "--initial-advertise-peer-urls=http://127.0.0.1:2380",
        "--initial-cluster=datastore=http://127.0.0.1:2380",
        "--log-level=warn",
    ]


def healthy(endpoint: str, path: str = "/readyz") -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(f"{endpoint}{path}", timeout=5, context=context) as answer:
            return answer.read() == b"ok"
    except (urllib.error.URLError, OSError):
        return False


def start(
    docker: Docker,
    *,
    tcp: dict[str, Any],
    network: str,
    image: str,
    bin_dir: Path,
    cache: Path,
    konnectivity_server: Path | None = None,
) -> StandIn:
    """Starts the tenant's control plane on `network` at the TCP's address; ready on return.

    Without `konnectivity_server` (the default) the stand-in runs no Konnectivity server: the
    API server reaches the kubelets directly on the lab network, as Kamaji renders it for a TCP
    without the addon. With it (a proxy-server binary, konnectivity.artifacts), a fifth
    container runs it as Kamaji's pod does, and kube-apiserver gets the egress selector: every
    request to nodes goes through the agents (konnectivity.apply_agent after run_phases).
    """
    tenant = tcp["metadata"]["name"]
    address = tcp["spec"]["networkProfile"]["address"]
    workdir = Path(tempfile.mkdtemp(prefix=f"{tenant}-", dir=cache))
    stand_in = StandIn(tenant, address, workdir)
    started = time.monotonic()
    write_files(bin_dir, tcp, workdir)
    server = None
    if konnectivity_server is not None:
        server = konnectivity.write_server_files(
            bin_dir / "kubeadm", tcp, workdir, konnectivity_server
        )
    stand_in.timings["certificates and kubeconfigs"] = time.monotonic() - started
    mounts = [
        "-v", f"{bin_dir}:{BIN_MOUNT}:ro",
        "-v", f"{workdir / 'pki'}:{kamaji_render.PKI_DIR}:ro",
        "-v", f"{workdir / 'datastore-pki'}:{DATASTORE_PKI}:ro",
        *(
            option
            for name in ("controller-manager.conf", "scheduler.conf")
            for option in ("-v", f"{workdir / name}:{kamaji_render.KUBERNETES_DIR}/{name}:ro")
        ),
    ]  # fmt: skip
    sandbox = _container(tenant, "sandbox")
    roles = ("etcd", *PROCESSES, konnectivity.SERVER_CONTAINER)
    remove(docker, [sandbox, *(_container(tenant, p) for p in roles)], claim=True)
    docker.run(
        "run", "-d", "--name", sandbox, "--network", network, "--ip", address,
        "--label", LABEL + tenant, "--entrypoint", "sleep", image, "infinity",
    )  # fmt: skip
    stand_in.containers.append(sandbox)
    args = kamaji_render.control_plane_args(
        tcp, datastore_endpoints=[DATASTORE], konnectivity=server is not None
    )
    if server is not None:
        args[konnectivity.SERVER_CONTAINER] = konnectivity.server_command(tcp)
    for role, command in (("etcd", datastore_args()), *args.items()):
        name = _container(tenant, role)
        extra = server.docker_options(role) if server is not None else []
        # the server's command is Kamaji's absolute /proxy-server, bind-mounted there
        entrypoint = command[0] if command[0].startswith("/") else f"{BIN_MOUNT}/{command[0]}"
        stand_in.options[role] = [
            "run", "-d", "--name", name, "--network", f"container:{sandbox}",
            "--label", LABEL + tenant, "--tmpfs", "/var/lib/etcd", *mounts, *extra,
            "--entrypoint", entrypoint, image,
        ]  # fmt: skip
        docker.run(*stand_in.options[role], *command[1:])
        stand_in.containers.append(name)
    _wait_ready(docker, stand_in)
    stand_in.timings["control plane ready"] = time.monotonic() - started
    return stand_in


def _wait_ready(docker: Docker, stand_in: StandIn) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not healthy(stand_in.endpoint):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{stand_in.tenant}: {stand_in.endpoint}/readyz\n"
                               f"{stand_in.logs(docker)}")  # fmt: skip
        time.sleep(1)


def upgrade(docker: Docker, stand_in: StandIn, tcp: dict[str, Any], bin_dir: Path) -> float:
    """Kamaji's part of an upgrade, modelled: the TCP's new version rolls its Deployment, whose
    pod runs kube-apiserver, kube-controller-manager and kube-scheduler of that version. Here
    the three containers are replaced by ones running `bin_dir`'s builds with the flags Kamaji
    renders for `tcp`; the datastore and the address stay (Kamaji's rolling update keeps the
    Service up, this one stops the old processes first). Returns the seconds until /readyz."""
    started = time.monotonic()
    args = kamaji_render.control_plane_args(
        tcp,
        datastore_endpoints=[DATASTORE],
        konnectivity=konnectivity.SERVER_CONTAINER in stand_in.options,
    )
    for role in PROCESSES:
        name = _container(stand_in.tenant, role)
        docker.run("rm", "-f", name)
        options = [
            f"{bin_dir}:{BIN_MOUNT}:ro" if option.endswith(f":{BIN_MOUNT}:ro") else option
            for option in stand_in.options[role]
        ]
        stand_in.options[role] = options
        docker.run(*options, *args[role][1:])
    _wait_ready(docker, stand_in)
    return time.monotonic() - started


def kubelet_config_map(tcp: dict[str, Any]) -> dict[str, Any]:
    """kube-system/kubelet-config as Kamaji's upload-config writes it (key `kubelet`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kubelet-config", "namespace": "kube-system"},
        "data": {"kubelet": kamaji_kubelet_config.content(tcp)},
    }


def run_phases(bin_dir: Path, stand_in: StandIn, tcp: dict[str, Any]) -> list[str]:
    """What Kamaji does once the API server answers (kamaji_render.phases), by the real
    kubeadm, then what Kamaji does differently: its kubelet-config, no bootstrap token, and,
    when the TCP asks for Kamaji's kube-proxy addon, kube-proxy's empty clusterCIDR (the
    program's TCP does not: it runs its own kube-proxy, TenantLab.apply_kube_proxy). Returns
    what ran, in order."""
    done = []
    started = time.monotonic()
    admin, super_admin = stand_in.workdir / "admin.conf", stand_in.workdir / "super-admin.conf"

    def run(what: str, found: subprocess.CompletedProcess[str]) -> None:
        _checked(found, what)
        done.append(what)

    kamajis_kube_proxy = "kubeProxy" in tcp["spec"].get("addons", {})
    for phase in kamaji_render.phases():
        if phase.kubeadm is None:
            continue  # Konnectivity's (not run here); the cluster-admin binding, below
        if phase.name == "addon kube-proxy" and not kamajis_kube_proxy:
            continue  # Kamaji's addon is off (kube_proxy.go: nothing when spec is nil)
        argv = [*phase.kubeadm.split()[1:], f"--config={stand_in.kubeadm_config}"]
        run(phase.kubeadm, kubeadm(bin_dir, *argv, f"--kubeconfig={super_admin}"))
    run(
        "kubectl create clusterrolebinding kubeadm:cluster-admins",
        kubectl(
            bin_dir, super_admin, "create", "clusterrolebinding", "kubeadm:cluster-admins",
            "--clusterrole=cluster-admin", "--group=kubeadm:cluster-admins",
        ),
    )  # fmt: skip
    run(
        "kubectl replace kube-system/kubelet-config (Kamaji's)",
        kubectl(bin_dir, admin, "replace", "-f", "-", input=json.dumps(kubelet_config_map(tcp))),
    )
    tokens = kubectl(
        bin_dir, admin, "delete", "secrets", "-n", "kube-system",
        "--field-selector", "type=bootstrap.kubernetes.io/token",
    )  # fmt: skip
    run("kubectl delete the bootstrap token kubeadm made (Kamaji makes none)", tokens)
    if kamajis_kube_proxy:
        _kamajis_kube_proxy_config(bin_dir, admin, run)
    stand_in.timings["kubeadm phases"] = time.monotonic() - started
    return done


def _kamajis_kube_proxy_config(bin_dir: Path, admin: Path, run: Any) -> None:
    found = kubectl(bin_dir, admin, "get", "-n", "kube-system", "cm", "kube-proxy", "-o", "json")
    proxy = json.loads(_checked(found, "kube-proxy ConfigMap"))
    config = yaml.safe_load(proxy["data"]["config.conf"])
    config["clusterCIDR"] = ""
    proxy["data"]["config.conf"] = yaml.safe_dump(config)
    run(
        "kubectl replace kube-system/kube-proxy (clusterCIDR empty, as Kamaji's)",
        kubectl(bin_dir, admin, "replace", "-f", "-", input=json.dumps(proxy)),
    )


def remove(docker: Docker, names: Sequence[str], claim: bool = False) -> None:
    """Removes the containers; with `claim`, names the tier may not have used yet: one of them
    the tier did not make stops it (NotMadeHere) and stays."""
    for name in reversed(names):
        if not claim or docker.claim("container", name) is not None:
            docker.run("rm", "-f", "-v", name, check=False)


def stop(docker: Docker, stand_in: StandIn) -> None:
    remove(docker, stand_in.containers)
    shutil.rmtree(stand_in.workdir, ignore_errors=True)


def kubectl(
    bin_dir: Path, kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
