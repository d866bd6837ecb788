"""The Kubernetes objects the program declares in a tenant, applied to a real one.

pulumi-kubernetes sends a resource's inputs to the API server as the object (its type token
names the group, version and kind); here the same inputs go through `kubectl apply
--server-side`, in the order the program registered them (pulumi_harness.kubernetes_object).
Helm releases are not objects: the chart's rendering goes through `helm` (workload_images.py
renders flannel's).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.support.pulumi_harness import ProgramRun, Registration, kubernetes_object

KUBERNETES = "kubernetes:"
RELEASE = "kubernetes:helm.sh/v3:Release"


def on_tenant(run: ProgramRun, tenant: str) -> list[Registration]:
    """The program's registrations through the tenant's provider, in registration order."""
    provider = f"::{tenant}-provider::"
    return [
        r
        for r in run.resources
        if r.type.startswith(KUBERNETES) and provider in r.provider and not r.read
    ]


def objects(registrations: Iterable[Registration], *, parents: tuple[str, ...]) -> list[dict]:
    """Manifests of the registrations whose component (parent URN) ends with one of `parents`."""
    return [
        kubernetes_object(r)
        for r in registrations
        if r.type != RELEASE and r.parent.rsplit("::", 1)[-1] in parents
    ]


def apply(kubectl: Path, kubeconfig: str, items: list[dict[str, Any]]) -> str:
    """`kubectl apply --server-side` of `items` as one List, as the program's field manager."""
    document = {"apiVersion": "v1", "kind": "List", "items": items}
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "kubeconfig"
        config.write_text(kubeconfig)
        found = subprocess.run(
            [
                str(kubectl),
                f"--kubeconfig={config}",
                "apply",
                "--server-side",
                "--field-manager=pulumi-kubernetes",
                "-f",
                "-",
            ],
            input=json.dumps(document),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if found.returncode != 0:
        raise RuntimeError(f"kubectl apply failed:\n{found.stderr}")
    return found.stdout
