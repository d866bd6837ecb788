"""A tenant control plane where Kamaji runs it: a Deployment in the management cluster, behind the
Service Kamaji makes (kamaji_render.tenant_service), on the shared datastore (shared_datastore.py).

The Deployment carries what Kamaji's deployment builder gives the pod for the program's TCP: its
name and namespace, the pod label Kamaji's Service selects, the replicas, and the three
containers with kamaji_render.control_plane_args' commands, at the images the node preloads
(registry.k8s.io/kube-*:<version>, the names kubeadm and Kamaji use). Its files are kubeadm's
(tenant_stand_in.write_files) with the DataStore's CA and the tenant's client certificate Kamaji
signs (CN = the TCP's UID), in one Secret projected at Kamaji's paths.

Each container mounts the files Kamaji's builder mounts in it, at the same paths (kube-scheduler
only its kubeconfig; upstream fact `kamaji-control-plane-deployment`).

Not Kamaji's, and said where it matters (docs/tenant-stand-in.md): one Secret for all the files
(Kamaji keeps one per certificate pair and kubeconfig, and the egress selector in a ConfigMap);
no probes, resources, rollout strategy or image pull policy (Kamaji pulls kube-apiserver and the
Konnectivity server `Always`; here every image is preloaded and none is pulled); the Konnectivity
server, when there is one, at the version the Go module proxy serves under the image name Kamaji
gives it (konnectivity.py); Kamaji's reconciliation and certificate rotation are not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kamaji_render
import konnectivity
import shared_datastore
from node_image import REGISTRY
from shared_datastore import DatastorePki
from tenant_stand_in import write_files

FILES_SECRET = "{name}-control-plane-files"


def tenant_files(
    bin_dir: Path,
    tcp: dict[str, Any],
    workdir: Path,
    pki: DatastorePki,
    konnectivity_server: Path | None = None,
) -> dict[str, bytes]:
    """Path under /etc/kubernetes -> content: kubeadm's certificates and the components'
    kubeconfigs, with the etcd client files Kamaji's pod gets from the DataStore; with
    `konnectivity_server` (a proxy-server binary) also the egress selector and the server's
    kubeconfig."""
    write_files(bin_dir, tcp, workdir, datastore_endpoint=shared_datastore.ENDPOINT)
    client_cert, client_key = pki.client(kamaji_render.datastore_schema(tcp))
    etcd = workdir / "pki" / "etcd"
    (etcd / "ca.crt").write_bytes(pki.ca_cert)
    (etcd / "server.crt").write_bytes(client_cert)
    (etcd / "server.key").write_bytes(client_key)
    files = {
        f"pki/{path.relative_to(workdir / 'pki')}": path.read_bytes()
        for path in sorted((workdir / "pki").rglob("*"))
        if path.is_file()
    }
    for kubeconfig in ("controller-manager.conf", "scheduler.conf"):
        files[kubeconfig] = (workdir / kubeconfig).read_bytes()
    if konnectivity_server is not None:
        server = konnectivity.write_server_files(
            bin_dir / "kubeadm", tcp, workdir, konnectivity_server
        )
        files[_relative(kamaji_render.EGRESS_SELECTOR_CONFIG)] = server.egress_selector.read_bytes()
        files[_relative(kamaji_render.KONNECTIVITY_SERVER_KUBECONFIG)] = (
            server.kubeconfig.read_bytes()
        )
    return files


def _relative(path: str) -> str:
    return path.removeprefix(f"{kamaji_render.KUBERNETES_DIR}/")


def _key(path: str) -> str:
    return path.replace("/", "__")


def _mounts(paths: list[str]) -> list[dict[str, Any]]:
    """The files volume at each of `paths` under /etc/kubernetes (`pki` is the directory)."""
    return [
        {"name": "files", "mountPath": f"{kamaji_render.KUBERNETES_DIR}/{path}", "subPath": path}
        for path in paths
    ]


UDS_MOUNT = {"name": "konnectivity-uds", "mountPath": kamaji_render.KONNECTIVITY_UDS_DIR}


def manifests(tcp: dict[str, Any], files: dict[str, bytes], version: str) -> list[dict[str, Any]]:
    """The files' Secret and the control plane's Deployment; the Konnectivity server container
    when the files carry its kubeconfig."""
    tcp = kamaji_render.defaulted(tcp)
    name, namespace = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    secret = FILES_SECRET.format(name=name)
    server_kubeconfig = _relative(kamaji_render.KONNECTIVITY_SERVER_KUBECONFIG)
    tunnel = server_kubeconfig in files
    commands = kamaji_render.control_plane_args(
        tcp, datastore_endpoints=[shared_datastore.ENDPOINT], konnectivity=tunnel
    )
    mounts = {
        "kube-apiserver": _mounts(["pki"]),
        "kube-controller-manager": _mounts(["pki", "controller-manager.conf"]),
        # Kamaji mounts only the scheduler's kubeconfig Secret at /etc/kubernetes: its flags name
        # nothing else, and kubeadm's scheduler.conf embeds its certificate.
        "kube-scheduler": _mounts(["scheduler.conf"]),
    }
    images = {program: f"{REGISTRY}/{program}:{version}" for program in commands}
    if tunnel:
        egress = _relative(kamaji_render.EGRESS_SELECTOR_CONFIG)
        mounts["kube-apiserver"] += [*_mounts([egress]), UDS_MOUNT]
        commands[konnectivity.SERVER_CONTAINER] = konnectivity.server_command(tcp)
        mounts[konnectivity.SERVER_CONTAINER] = [*_mounts(["pki", server_kubeconfig]), UDS_MOUNT]
        images[konnectivity.SERVER_CONTAINER] = konnectivity.server_image(tcp)
    containers = [
        {
            "name": program,
            "image": images[program],
            "command": command,
            "volumeMounts": mounts[program],
        }
        for program, command in commands.items()
    ]
    volumes: list[dict[str, Any]] = [
        {
            "name": "files",
            "secret": {
                "secretName": secret,
                "items": [{"key": _key(path), "path": path} for path in sorted(files)],
            },
        }
    ]
    if tunnel:  # Kamaji: an emptyDir of medium Memory in both containers
        volumes.append({"name": "konnectivity-uds", "emptyDir": {"medium": "Memory"}})
    labels = {kamaji_render.NAME_LABEL: name}
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": namespace},
            "stringData": {_key(path): content.decode() for path, content in files.items()},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": int(tcp["spec"]["controlPlane"]["deployment"]["replicas"]),
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": containers, "volumes": volumes},
                },
            },
        },
    ]
