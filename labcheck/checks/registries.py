"""Where the lab's running images come from: each image's registry, read as containerd reads a
name, and the site mirror its nodes pull it through (the stack's `registryMirrors`). With
mirrors set, an image of a registry no mirror covers is a failure: that node would pull it from
upstream, which a mirrored or air-gapped site does not reach."""

from __future__ import annotations

from collections import Counter

from ..cluster import Cluster, Obj
from ..context import RunContext
from ..result import CheckFailed, Evidence
from ..spec import Tenant

DOCKER_HUB = "docker.io"
ALL_REGISTRIES = "*"


def registry_of(image: str) -> str:
    """An image name's registry, by the reference rule containerd and Docker share: the first
    part when it has a dot or a port, is `localhost` or has upper case; else Docker Hub, also
    under its legacy name."""
    first, sep, _ = image.partition("/")
    if not sep or first == "index.docker.io":
        return DOCKER_HUB
    if first == "localhost" or "." in first or ":" in first or first.lower() != first:
        return first
    return DOCKER_HUB


def pod_images(pods: list[Obj]) -> set[str]:
    """The images of the pods that run or ran (their containers and init containers)."""
    images: set[str] = set()
    for pod in pods:
        if pod.get("status", {}).get("phase") not in ("Running", "Succeeded"):
            continue
        spec = pod.get("spec", {})
        for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
            images.add(container["image"])
    return images


def _through(registry: str, mirrors: dict[str, str]) -> str:
    mirror = mirrors.get(registry) or mirrors.get(ALL_REGISTRIES)
    return f"through {mirror}" if mirror else "upstream"


def _registries(ctx: RunContext, name: str, cl: Cluster) -> Evidence:
    mirrors = ctx.spec.registry_mirrors
    images = pod_images(cl.list_pods())
    counts = Counter(registry_of(image) for image in images)
    parts = [f"{r} {n} ({_through(r, mirrors)})" for r, n in sorted(counts.items())]
    line = f"{name}: " + (", ".join(parts) or "no running pods")
    uncovered = [
        image for image in sorted(images) if _through(registry_of(image), mirrors) == "upstream"
    ]
    if mirrors and uncovered:
        raise CheckFailed(
            "every running image's registry has a mirror (registryMirrors)",
            "; ".join(uncovered),
            "no mirror for that registry: add one to registryMirrors, or a `*` mirror",
        )
    how = "through the site's mirrors" if mirrors else "from upstream (no registryMirrors)"
    return Evidence(f"{len(images)} image(s) {how}", (line,))


def management_registries(ctx: RunContext) -> Evidence:
    return _registries(ctx, "management", ctx.mgmt())


def tenant_registries(ctx: RunContext, t: Tenant) -> Evidence:
    return _registries(ctx, t.name, ctx.tenant(t))
