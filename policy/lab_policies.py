"""The pack's policies: pulumi-policy arguments turned into plain props for ``lab_rules``.

Secretness. pulumi-policy 1.21 unwraps secrets before ``validate`` runs (Analyze and
AnalyzeStack call ``deserialize_properties`` without ``proxy_secrets``), so a validation
cannot tell a secret from plain text, although the engine sends secrets marked. Only the
remediation pass keeps them: there ``args.props`` holds ``pulumi_policy.Secret`` wrappers, and
the engine runs every remediation of a resource before its analysis. So the credentials
policy runs at enforcement level ``remediate``: its ``remediate`` changes nothing and only
records which paths arrived secret, and its ``validate`` (which the SDK reports as mandatory)
fails on the credentials that did not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lab_rules
from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    Secret,
    StackValidationArgs,
    StackValidationPolicy,
)

# The SDK's proxies hand their raw contents out under "__target" (its own serializer relies on
# it); that is the only way to see unknown sentinels and Secret wrappers without tripping them.
from pulumi_policy.proxy import _DictProxy, _ListProxy
from pulumi_policy.secret import _DictSecretsProxy, _ListSecretsProxy

_PROXIES = (_DictProxy, _ListProxy, _DictSecretsProxy, _ListSecretsProxy)


def plain(value: Any) -> Any:
    """Props as dicts and lists: secrets unwrapped, unknowns left as their sentinel strings."""
    if isinstance(value, _PROXIES):
        return plain(value["__target"])
    if isinstance(value, Secret):
        return plain(value.value)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def secret_paths(value: Any, path: str = "") -> Iterator[str]:
    """Dotted paths of the values that arrived as secrets (remediation props only)."""
    if isinstance(value, _PROXIES):
        value = value["__target"]
    if isinstance(value, Secret):
        yield path
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from secret_paths(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from secret_paths(item, f"{path}[{index}]")


Check = Callable[[str, Mapping[str, Any]], list[str]]


def resource_rule(check: Check) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        for message in check(args.resource_type, plain(args.props)):
            report(message)

    return validate


# URN -> secret paths, filled by the remediation pass and consumed by the analysis that follows.
_observed: dict[str, set[str]] = {}


def observe_secrets(args: ResourceValidationArgs) -> None:
    _observed[args.urn] = set(secret_paths(args.props))
    return None  # never rewrites the resource


def report_plain_credentials(args: ResourceValidationArgs, report: ReportViolation) -> None:
    props = plain(args.props)
    observed = _observed.pop(args.urn, None)
    if observed is None and lab_rules.sensitive_paths(args.resource_type, props):
        # Fail closed: e.g. the enforcement level was configured away from remediate.
        report("secretness was not observed: run this policy at enforcement level 'remediate'")
        return
    for message in lab_rules.secret_violations(
        args.resource_type, props, observed or set(), args.opts.additional_secret_outputs
    ):
        report(message)


def stack_resource(resource: PolicyResource) -> lab_rules.StackResource:
    parent = resource.opts.parent or (resource.parent.urn if resource.parent else "")
    return lab_rules.StackResource(
        type=resource.resource_type,
        name=resource.name,
        urn=resource.urn,
        props=plain(resource.props),
        parent=parent or "",
        provider=resource.provider.urn if resource.provider else "",
    )


def stack_rule(
    check: Callable[[list[lab_rules.StackResource]], list[str]],
) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        for message in check([stack_resource(r) for r in args.resources]):
            report(message)

    return validate


POLICIES = [
    ResourceValidationPolicy(
        name="images-pinned",
        description="kind node images are pinned by digest; no image is untagged or :latest.",
        validate=resource_rule(lab_rules.image_violations),
    ),
    ResourceValidationPolicy(
        name="privileged-only-workers",
        description="Only worker node containers are privileged; no privileged pod.",
        validate=resource_rule(lab_rules.privileged_violations),
    ),
    ResourceValidationPolicy(
        name="credentials-are-secrets",
        description="Kubeconfigs, tokens and keys reach providers and commands only as secrets.",
        enforcement_level=EnforcementLevel.REMEDIATE,
        remediate=observe_secrets,
        validate=report_plain_credentials,
    ),
    StackValidationPolicy(
        name="gpu-tenants-have-quota",
        description="Every tenant with GPUs has a ResourceQuota on limits.nvidia.com/gpumem.",
        validate=stack_rule(lab_rules.gpu_quota_violations),
    ),
    StackValidationPolicy(
        name="metallb-pool-in-subnet",
        description="The MetalLB pool lies inside the lab subnet, outside the container range.",
        validate=stack_rule(lab_rules.pool_violations),
    ),
]
