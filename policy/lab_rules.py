"""The lab's policies as plain functions: resource type + props in, violation messages out.

No Pulumi import here, so every rule is unit-tested on plain dicts. ``lab_policies`` adapts
pulumi-policy's arguments to these functions. Props are what pulumi-policy hands a policy:
camelCase keys, secrets already unwrapped, values not known during preview left as Pulumi's
unknown sentinels (``is_unknown``); a rule never judges an unknown value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Props = Mapping[str, Any]

# pulumi_policy.proxy's sentinels for values unknown during preview (a test keeps them in step).
UNKNOWN_VALUES = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
        "030794c1-ac77-496b-92df-f27374a8bd58",
        "e48ece36-62e2-4504-bad9-02848725956a",
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
    }
)

REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
CONTAINER = "docker:index/container:Container"
NETWORK = "docker:index/network:Network"
COMMAND = "command:local:Command"
K8S_PROVIDER = "pulumi:providers:kubernetes"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
RESOURCE_QUOTA = "kubernetes:core/v1:ResourceQuota"
IP_ADDRESS_POOL = "kubernetes:metallb.io/v1beta1:IPAddressPool"
TENANT = "kamaji-hami-lab:index:Tenant"
GPU_NODES = "kamaji-hami-lab:index:GpuNodes"
SIMULATED_GPUS = "kamaji-hami-lab:index:SimulatedGpus"
WORKLOADS = {
    "kubernetes:apps/v1:Deployment",
    "kubernetes:apps/v1:DaemonSet",
    "kubernetes:apps/v1:StatefulSet",
    "kubernetes:apps/v1:ReplicaSet",
    "kubernetes:batch/v1:Job",
    "kubernetes:batch/v1:CronJob",
    "kubernetes:core/v1:Pod",
}

TENANT_LABEL = "kamaji-hami-lab/tenant"
GPU_MEMORY_QUOTA = "limits.nvidia.com/gpumem"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
IMAGE_ID = re.compile(r"^sha256:[0-9a-f]{64}$")  # what RemoteImage.image_id gives a Container
KIND_CONFIG_IMAGE = re.compile(r"^\s*-?\s*image:\s*['\"]?([^\s'\"]+)", re.MULTILINE)
# Environment keys that carry credentials, beyond the lab's own two.
SENSITIVE_ENV = re.compile(r"KUBECONFIG|TOKEN|KEY", re.IGNORECASE)
SENSITIVE_ENV_KEYS = ("LAB_KUBECONFIG", "LABCHECK_SPEC")


def is_unknown(value: Any) -> bool:
    return isinstance(value, str) and value in UNKNOWN_VALUES


def _get(props: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(props, Mapping):
            return None
        props = props.get(key)
    return props


# --- images pinned -------------------------------------------------------------------------


def image_problem(image: str, *, digest: bool) -> str | None:
    """Why an image reference is not acceptable, or None. Tags live after the last '/'."""
    if DIGEST.search(image):
        return None
    if digest:
        return "is not pinned by digest (@sha256:…)"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag"
    if last.rsplit(":", 1)[1] == "latest":
        return "uses the :latest tag"
    return None


def _pod_specs(resource_type: str, props: Props) -> Iterator[Props]:
    spec = _get(props, "spec")
    if resource_type == "kubernetes:core/v1:Pod":
        yield from [spec] if isinstance(spec, Mapping) else []
    elif resource_type == "kubernetes:batch/v1:CronJob":
        pod = _get(spec, "jobTemplate", "spec", "template", "spec")
        yield from [pod] if isinstance(pod, Mapping) else []
    else:
        pod = _get(spec, "template", "spec")
        yield from [pod] if isinstance(pod, Mapping) else []


def _containers(resource_type: str, props: Props) -> Iterator[Props]:
    for pod in _pod_specs(resource_type, props):
        for key in ("initContainers", "containers", "ephemeralContainers"):
            items = pod.get(key)
            if isinstance(items, list):
                yield from (c for c in items if isinstance(c, Mapping))


def image_violations(resource_type: str, props: Props) -> list[str]:
    """kind node images pinned by digest; no untagged or :latest image anywhere."""
    checks: list[tuple[str, str, bool]] = []  # (where, image, digest required)
    if resource_type == REMOTE_IMAGE:
        # The lab pulls only kindest/node images this way, and kind wants them by digest.
        checks.append(("name", _get(props, "name"), True))
    elif resource_type == CONTAINER:
        image = _get(props, "image")
        if isinstance(image, str) and not IMAGE_ID.match(image):
            checks.append(("image", image, True))
    elif resource_type == COMMAND:
        kind_config = _get(props, "environment", "KIND_CONFIG")
        if isinstance(kind_config, str) and not is_unknown(kind_config):
            # managementNodeImage reaches kind only through this config.
            for image in KIND_CONFIG_IMAGE.findall(kind_config):
                checks.append(("environment.KIND_CONFIG node image", image, True))
    elif resource_type in WORKLOADS:
        for container in _containers(resource_type, props):
            checks.append((f"container {container.get('name')!r}", container.get("image"), False))
    problems = []
    for where, image, digest in checks:
        if not isinstance(image, str) or is_unknown(image):
            continue
        problem = image_problem(image, digest=digest)
        if problem:
            problems.append(f"{where}: image {image!r} {problem}")
    return problems


# --- privileged containers -----------------------------------------------------------------


def _labels(props: Props) -> dict[str, Any]:
    labels = _get(props, "labels")
    if not isinstance(labels, list):
        return {}
    return {item.get("label"): item.get("value") for item in labels if isinstance(item, Mapping)}


# A node's own kube-proxy, as kubeadm makes it (the tenant's: builders/kube_proxy.py): it
# programs the node's iptables and its network namespace's conntrack timeouts.
NODE_PROXY = ("kubernetes:apps/v1:DaemonSet", "kube-system", "kube-proxy")


def privileged_violations(resource_type: str, props: Props) -> list[str]:
    """Only worker node containers (labelled with their tenant), and the nodes' own kube-proxy
    (kubeadm's DaemonSet), may be privileged."""
    if resource_type == CONTAINER:
        if _get(props, "privileged") is True and not _labels(props).get(TENANT_LABEL):
            return [f"privileged container without the {TENANT_LABEL} label of a worker node"]
        return []
    if resource_type in WORKLOADS:
        workload = (resource_type, *(_get(props, "metadata", k) for k in ("namespace", "name")))
        return [
            f"container {c.get('name')!r} is privileged"
            for c in _containers(resource_type, props)
            if _get(c, "securityContext", "privileged") is True
            and not (workload == NODE_PROXY and c.get("name") == NODE_PROXY[2])
        ]
    return []


# --- kubeconfigs, tokens and keys are secrets ----------------------------------------------


def sensitive_paths(resource_type: str, props: Props) -> list[str]:
    """Dotted paths of known, non-empty credential values in these props."""
    candidates: list[tuple[str, Any]] = []
    if resource_type == K8S_PROVIDER:
        candidates.append(("kubeconfig", _get(props, "kubeconfig")))
    elif resource_type == COMMAND:
        environment = _get(props, "environment")
        if isinstance(environment, Mapping):
            candidates += [
                (f"environment.{key}", value)
                for key, value in environment.items()
                if key in SENSITIVE_ENV_KEYS or SENSITIVE_ENV.search(key)
            ]
    return [path for path, value in candidates if value and not is_unknown(value)]


def _is_covered(path: str, secret_paths: Iterable[str]) -> bool:
    # A secret object makes everything inside it secret.
    return any(path == s or path.startswith(f"{s}.") for s in secret_paths)


def secret_violations(
    resource_type: str,
    props: Props,
    secret_paths: Iterable[str],
    additional_secret_outputs: Iterable[str] = (),
) -> list[str]:
    """Credentials in these props must be secret; kind's stdout (a kubeconfig) too."""
    secret_paths = list(secret_paths)
    problems = [
        f"{path} holds a credential but is not a secret"
        for path in sensitive_paths(resource_type, props)
        if not _is_covered(path, secret_paths)
    ]
    if (
        resource_type == COMMAND
        and _get(props, "environment", "KIND_CONFIG") is not None
        and "stdout" not in set(additional_secret_outputs)
    ):
        problems.append("kind prints its kubeconfig on stdout: stdout must be a secret output")
    return problems


# --- stack-wide rules ----------------------------------------------------------------------


@dataclass(frozen=True)
class StackResource:
    """What a stack validation needs of one resource; URNs link parents and providers."""

    type: str
    name: str
    urn: str
    props: Props = field(default_factory=dict)
    parent: str = ""
    provider: str = ""  # the provider resource's URN


def tenant_of(resource: StackResource, index: Mapping[str, StackResource]) -> str | None:
    """The URN of the Tenant component a resource belongs to, via parents or its provider."""
    for start in (resource.urn, resource.provider):
        urn, seen = start, set()
        while urn and urn in index and urn not in seen:
            seen.add(urn)
            if index[urn].type == TENANT:
                return urn
            urn = index[urn].parent
    return None


def _runs_gpus(resource: StackResource) -> bool:
    """Simulated cards (the agent), GPU nodes (nvml-mock or real), or HAMi's real plugin.

    HAMi's scheduler and webhook alone are not a GPU: a simulated tenant without cards has them.
    """
    if resource.type in (SIMULATED_GPUS, GPU_NODES):
        return True
    if resource.type == HELM_RELEASE and _get(resource.props, "chart") == "hami":
        return _get(resource.props, "values", "devicePlugin", "enabled") is True
    return False


def _has_gpu_quota(resource: StackResource) -> bool:
    hard = _get(resource.props, "spec", "hard")
    return (
        resource.type == RESOURCE_QUOTA and isinstance(hard, Mapping) and GPU_MEMORY_QUOTA in hard
    )


def gpu_quota_violations(resources: Iterable[StackResource]) -> list[str]:
    """Every tenant with GPUs (simulated, or HAMi's device plugins on) has a gpumem quota."""
    resources = list(resources)
    index = {r.urn: r for r in resources}
    with_quota = {tenant_of(r, index) for r in resources if _has_gpu_quota(r)}
    problems: dict[str, str] = {}
    for resource in resources:
        if not _runs_gpus(resource):
            continue
        tenant = tenant_of(resource, index)
        key = tenant or resource.urn
        if (tenant is None or tenant not in with_quota) and key not in problems:
            owner = index[tenant].name if tenant else f"(no tenant found for {resource.name})"
            problems[key] = (
                f"tenant {owner} runs GPUs ({resource.name}) but has no ResourceQuota "
                f"on {GPU_MEMORY_QUOTA}: set gpuQuotaMb"
            )
    return list(problems.values())


def _address_range(text: str) -> tuple[ipaddress.IPv4Address, ipaddress.IPv4Address] | None:
    try:
        if "-" in text:
            first, last = (ipaddress.ip_address(p.strip()) for p in text.split("-", 1))
        else:
            net = ipaddress.ip_network(text.strip(), strict=False)
            first, last = net.network_address, net.broadcast_address
    except ValueError:
        return None
    if not isinstance(first, ipaddress.IPv4Address) or not isinstance(last, ipaddress.IPv4Address):
        return None
    return first, last


def _ipv4_network(text: Any) -> ipaddress.IPv4Network | None:
    if not isinstance(text, str) or not text or is_unknown(text):
        return None
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    return net if isinstance(net, ipaddress.IPv4Network) else None


def pool_violations(resources: Iterable[StackResource]) -> list[str]:
    """MetalLB pool ranges lie inside the lab network's subnet and outside its container range."""
    resources = list(resources)
    subnets: list[tuple[ipaddress.IPv4Network, ipaddress.IPv4Network | None]] = []
    for network in (r for r in resources if r.type == NETWORK):
        for ipam in _get(network.props, "ipamConfigs") or []:
            subnet = _ipv4_network(_get(ipam, "subnet"))
            if subnet is not None:
                subnets.append((subnet, _ipv4_network(_get(ipam, "ipRange"))))
    problems = []
    for pool in (r for r in resources if r.type == IP_ADDRESS_POOL):
        for text in _get(pool.props, "spec", "addresses") or []:
            if not isinstance(text, str) or is_unknown(text):
                continue
            bounds = _address_range(text)
            if bounds is None:
                problems.append(f"{pool.name}: {text!r} is not an IPv4 range or CIDR")
                continue
            first, last = bounds
            inside = [rng for net, rng in subnets if first in net and last in net]
            if not inside:
                found = ", ".join(str(net) for net, _ in subnets) or "none"
                problems.append(f"{pool.name}: {text} is not inside the lab subnet ({found})")
            elif all(rng and first <= rng.broadcast_address and last >= rng[0] for rng in inside):
                problems.append(f"{pool.name}: {text} overlaps the docker container range")
    return problems
