"""The lab graph the policy pack judges, and one mutation per violation.

The graph is a mock run of the lab stack (``tests.support.pulumi_harness``): every
registration with its inputs, secret paths, parent and provider. ``tests/policy`` sends it
through pulumi-policy's servicer; ``tests/real/test_policy_pack.py`` replays it through the real
CLI and engine. Both use these mutations, so each names the violation it must give.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.support.pulumi_harness import ProgramRun, Registration

Change = Callable[[Registration], Any]


def mutated(run: ProgramRun, name: str, change: Change) -> ProgramRun:
    """A copy of the run where one registration was changed in place by `change`."""
    copied = copy.deepcopy(run)
    change(copied.named(name))
    return copied


def without(run: ProgramRun, name: str) -> ProgramRun:
    copied = copy.deepcopy(run)
    copied.resources = [r for r in copied.resources if r.name != name]
    return copied


def set_to(path: list[str], value: Any) -> Change:
    def change(r: Registration) -> None:
        target = r.inputs
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def agent_container(r: Registration) -> dict[str, Any]:
    return r.inputs["spec"]["template"]["spec"]["containers"][0]


def kind_config_unpinned(r: Registration) -> None:
    env = r.inputs["environment"]
    env["KIND_CONFIG"] = env["KIND_CONFIG"].split("@sha256:")[0] + "\n"


def drop_worker_label(r: Registration) -> None:
    r.inputs["labels"] = [x for x in r.inputs["labels"] if x["label"] != "kamaji-hami-lab/tenant"]


def not_secret(path: str) -> Change:
    def change(r: Registration) -> None:
        assert path in r.secret_inputs
        r.secret_inputs.discard(path)

    return change


def plain_token(r: Registration) -> None:
    r.inputs["environment"]["API_TOKEN"] = "t0ken"


RESOURCE_MUTATIONS = [
    (
        "tenant-a-workers-image",
        set_to(["name"], "kindest/node:v1.35.0"),
        "images-pinned",
        "name: image 'kindest/node:v1.35.0' is not pinned by digest (@sha256:…)",
    ),
    (
        "tenant-a-worker-1",
        set_to(["image"], "kindest/node:v1.35.0"),
        "images-pinned",
        "image: image 'kindest/node:v1.35.0' is not pinned by digest (@sha256:…)",
    ),
    (
        "management-kind",
        kind_config_unpinned,
        "images-pinned",
        "environment.KIND_CONFIG node image: image 'kindest/node:v1.37.0' is not pinned "
        "by digest (@sha256:…)",
    ),
    (
        "tenant-a-simulated-gpus-agent",
        lambda r: agent_container(r).update(image="python:latest"),
        "images-pinned",
        "container 'agent': image 'python:latest' uses the :latest tag",
    ),
    (
        "tenant-a-simulated-gpus-agent",
        lambda r: agent_container(r).update(image="registry:5000/python"),
        "images-pinned",
        "container 'agent': image 'registry:5000/python' has no tag",
    ),
    (
        "tenant-b-worker-1",
        drop_worker_label,
        "privileged-only-workers",
        "privileged container without the kamaji-hami-lab/tenant label of a worker node",
    ),
    (
        "tenant-b-simulated-gpus-agent",
        lambda r: agent_container(r)["securityContext"].update(privileged=True),
        "privileged-only-workers",
        "container 'agent' is privileged",
    ),
    (
        "tenant-a-provider",
        not_secret("kubeconfig"),
        "credentials-are-secrets",
        "kubeconfig holds a credential but is not a secret",
    ),
    (
        "tenant-a-worker-1-join",
        not_secret("environment.LAB_KUBECONFIG"),
        "credentials-are-secrets",
        "environment.LAB_KUBECONFIG holds a credential but is not a secret",
    ),
    (
        "validation-labcheck",
        not_secret("environment.LABCHECK_SPEC"),
        "credentials-are-secrets",
        "environment.LABCHECK_SPEC holds a credential but is not a secret",
    ),
    (
        "metallb-webhook-ready",
        plain_token,
        "credentials-are-secrets",
        "environment.API_TOKEN holds a credential but is not a secret",
    ),
]
