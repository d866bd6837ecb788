"""A Pulumi program that registers a recorded resource graph again (graph.json beside it).

The graph is what the lab's program registers under the test harness's mocks: each resource
with its type token, name, inputs, secret input paths, additional secret outputs, parent and
explicit provider. Registered here in the same order with the same options, the real engine
builds the same tree and sends the analyzers the same resources as it would for the lab, with
the providers that stand in for docker, command and kubernetes (stand_in_provider.py).
Reads (``Resource.get``) are left out: no policy judges them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pulumi


def with_secrets(inputs: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """The inputs with the value at each dotted path made a secret, as the program made it."""
    props = copy.deepcopy(inputs)
    for path in paths:
        *parents, last = path.split(".")
        target = props
        for key in parents:
            target = target[key]
        target[last] = pulumi.Output.secret(target[last])
    return props


def replay(graph: list[dict[str, Any]]) -> None:
    registered: dict[str, pulumi.Resource] = {}  # recorded URN -> resource
    for r in graph:
        if r["read"]:
            continue
        opts = pulumi.ResourceOptions(
            parent=registered.get(r["parent"]),
            # "<provider urn>::<provider id>"
            provider=registered.get(r["provider"].rsplit("::", 1)[0]),
            additional_secret_outputs=r["secret_outputs"] or None,
        )
        props = with_secrets(r["inputs"], r["secret_inputs"])
        if r["type"].startswith("pulumi:providers:"):
            package = r["type"].removeprefix("pulumi:providers:")
            resource = pulumi.ProviderResource(package, r["name"], props, opts)
        elif r["custom"]:
            resource = pulumi.CustomResource(r["type"], r["name"], props, opts)
        else:
            resource = pulumi.ComponentResource(r["type"], r["name"], None, opts)
        registered[r["urn"]] = resource


replay(json.loads((Path(__file__).parent / "graph.json").read_text()))
