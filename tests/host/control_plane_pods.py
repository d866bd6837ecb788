"""A tenant control plane where Kamaji runs it: a Deployment in the management cluster, behind the
Service Kamaji makes (kamaji_render.tenant_service), on the shared datastore (shared_datastore.py).

The Deployment carries what Kamaji's deployment builder gives the pod for the program's TCP: its
name and namespace, the pod label Kamaji's Service selects, the replicas, and the three
containers with kamaji_render.control_plane_args' commands, at the images the node preloads
(registry.k8s.io/kube-*:<version>, the names kubeadm and Kamaji use). Its files are kubeadm's
(tenant_stand_in.write_files) with the DataStore's CA and the tenant's client certificate Kamaji
signs (CN = the TCP's UID), in one Secret projected at Kamaji's paths.

Not Kamaji's, and said where it matters: one Secret for all the files (Kamaji keeps one per
certificate pair and kubeconfig); no probes, resources or security context; no Konnectivity
server container (the tenant modules run Konnectivity through the stand-in,
tenant_stand_in.py); Kamaji's reconciliation and certificate rotation are not run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kamaji_render
import shared_datastore
from node_image import REGISTRY
from shared_datastore import DatastorePki
from tenant_stand_in import write_files

FILES_SECRET = "{name}-control-plane-files"


def tenant_files(
    bin_dir: Path, tcp: dict[str, Any], workdir: Path, pki: DatastorePki
) -> dict[str, bytes]:
    """Path under /etc/kubernetes -> content: kubeadm's certificates and the components'
    kubeconfigs, with the etcd client files Kamaji's pod gets from the DataStore."""
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
    return files


def _key(path: str) -> str:
    return path.replace("/", "__")


def manifests(tcp: dict[str, Any], files: dict[str, bytes], version: str) -> list[dict[str, Any]]:
    """The files' Secret and the control plane's Deployment."""
    tcp = kamaji_render.defaulted(tcp)
    name, namespace = tcp["metadata"]["name"], tcp["metadata"]["namespace"]
    secret = FILES_SECRET.format(name=name)
    commands = kamaji_render.control_plane_args(
        tcp, datastore_endpoints=[shared_datastore.ENDPOINT], konnectivity=False
    )
    volume = {
        "name": "files",
        "secret": {
            "secretName": secret,
            "items": [{"key": _key(path), "path": path} for path in sorted(files)],
        },
    }
    containers = [
        {
            "name": program,
            "image": f"{REGISTRY}/{program}:{version}",
            "command": command,
            "volumeMounts": [
                {"name": "files", "mountPath": kamaji_render.PKI_DIR, "subPath": "pki"},
                *(
                    {
                        "name": "files",
                        "mountPath": f"{kamaji_render.KUBERNETES_DIR}/{conf}",
                        "subPath": conf,
                    }
                    for conf in ("controller-manager.conf", "scheduler.conf")
                    if program != "kube-apiserver"
                ),
            ],
        }
        for program, command in commands.items()
    ]
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
                    "spec": {"containers": containers, "volumes": [volume]},
                },
            },
        },
    ]
