"""Where the lab's images come from, read in two places.

On the nodes: with the stack's `registryMirrors`, every node the program gives the mirrors'
files (the kind node, each container worker) is read by a short pod (labcheck/node_files.py):
a file missing, with other content (its credentials told apart by a redacted digest, never
shown) or another mode (0600 for one with credentials) fails, naming the node, the file and
the Command that re-installs it. These files are what makes a node pull through a mirror; a
node without them pulls from upstream.

In the API: each running image's registry, read as containerd reads a name, and the mirror the
stack gives it; an image of a registry no mirror covers fails (its nodes would pull it from
upstream, which a mirrored or air-gapped site does not reach).

What neither can tell: whether a node did pull an image around its mirror (the mirror failed
and containerd went on to the registry itself). A node keeps no record of the host that served
an image: containerd labels its blobs `containerd.io/distribution.source.<registry>` with the
registry of the image's own name, and the kubelet reports the image by that name (upstream
fact `containerd-pull-source-is-the-name`); only containerd's log names a mirror it passed
over, and labcheck reads no node log. The check says so in its evidence. A registry's
`mirrorOnly` keeps its nodes from going around the mirror at all."""

from __future__ import annotations

from collections import Counter

from ..cluster import Cluster, Obj
from ..context import RunContext
from ..node_files import (
    UnreadableAnswer,
    differences,
    files_pod,
    parse_message,
    termination_message,
)
from ..objects import run_labels
from ..result import CheckFailed, Evidence
from ..spec import RegistryFile, Tenant
from ..waiting import WaitTimeout

DOCKER_HUB = "docker.io"
ALL_REGISTRIES = "*"
NOT_TOLD = (
    "whether a node pulled around its mirror is not on the node: containerd records an "
    "image's registry name, not the host that served it (mirrorOnly keeps nodes from it)"
)


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


def _succeeded(pod: Obj) -> bool:
    return pod.get("status", {}).get("phase") == "Succeeded"


def _read_node(
    ctx: RunContext, cl: Cluster, namespace: str, node: str, name: str, files: list[RegistryFile]
) -> list[str]:
    """What differs on `node` from `files`, read by its pod `name` (created already)."""
    try:
        pod = ctx.wait_pod(
            cl, namespace, name, _succeeded, f"pod {name} reads {node}'s registry files",
            ctx.timeouts.pod_seconds,
        )  # fmt: skip
    except WaitTimeout as exc:
        raise CheckFailed(
            f"a pod on {node} reads its registry files within {exc.timeout:g}s",
            exc.last,
            f"{node} is NotReady, or does not pull the tools image ({ctx.spec.tools_image}) "
            "through its mirrors",
        ) from None
    try:
        seen = parse_message(termination_message(pod), len(files))
    except UnreadableAnswer as exc:
        raise CheckFailed(
            f"pod {name} on {node} gives one record per registry file", str(exc),
            "the tools image's sh lacks stat, sha256sum or sed -E, or too many files",
        ) from None  # fmt: skip
    return differences(files, seen)


def _node_files(ctx: RunContext, cl: Cluster, namespace: str, nodes: dict[str, str]) -> str:
    """Reads the cluster's nodes' files at once (a pod each); fails naming every node that
    differs, what differs there and the Command that re-installs its files."""
    spec = ctx.spec.registry_files
    assert spec is not None
    paths = [f.path for f in spec.files]
    pods = {}
    for index, node in enumerate(sorted(nodes)):
        name = ctx.pod_name("files", index)
        body = files_pod(name, node, ctx.spec.tools_image, run_labels(ctx.run_id, ctx.check), paths)
        ctx.create_pod(cl, namespace, body)
        pods[node] = name
    found = {
        node: _read_node(ctx, cl, namespace, node, name, spec.files) for node, name in pods.items()
    }
    ctx.delete_pods(cl, namespace, list(pods.values()))
    differ = {node: problems for node, problems in found.items() if problems}
    if differ:
        raise CheckFailed(
            "every node holds the registry files the stack writes (registryMirrors), a file "
            "with credentials root's alone (600)",
            "; ".join(f"{node}: {', '.join(problems)}" for node, problems in differ.items()),
            "changed or removed in the node since it got them. A plain `pulumi up` does not "
            "re-run an unchanged Command: re-install them with `pulumi up --replace <URN>` of "
            + ", ".join(f"`{nodes[node]}`" for node in differ)
            + " (`pulumi stack --show-urns` lists the URNs)",
        )
    return f"{', '.join(sorted(nodes))}: {len(paths)} registry file(s) as the stack writes them"


def _registries(
    ctx: RunContext, name: str, cl: Cluster, nodes: dict[str, str], namespace: str = ""
) -> Evidence:
    mirrors = ctx.spec.registry_mirrors
    held = _node_files(ctx, cl, namespace, nodes) if nodes else ""
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
    text = f"{len(images)} image(s) {how}"
    if held:
        text += f"; {len(nodes)} node(s) hold the mirrors' files"
    detail = (line, *([held] if held else ()), *([NOT_TOLD] if mirrors else ()))
    return Evidence(text, detail)


def management_registries(ctx: RunContext) -> Evidence:
    files = ctx.spec.registry_files
    nodes = files.management_nodes if files else {}
    namespace = ctx.management_namespace() if nodes else ""
    return _registries(ctx, "management", ctx.mgmt(), nodes, namespace)


def tenant_registries(ctx: RunContext, t: Tenant) -> Evidence:
    files = ctx.spec.registry_files
    nodes = files.tenant_nodes.get(t.name, {}) if files else {}
    namespace = ctx.namespace(t) if nodes else ""
    return _registries(ctx, t.name, ctx.tenant(t), nodes, namespace)
