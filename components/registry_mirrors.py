"""The site's registry mirrors inside one node container (the kind node, a worker): containerd's
hosts.toml files, put there by a Command that exists only when the stack sets mirrors, so a
stack without them keeps the graph it had."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_command as command

from builders.registry_mirrors import (
    files_environment,
    holds_credentials,
    install_files_script,
    registry_files,
    remove_files_script,
)
from labconfig.mirrors import RegistryMirror


def mirror_files(
    name: str,
    node: str,
    mirrors: Sequence[RegistryMirror],
    container: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    auth: Mapping[str, str] | None = None,
) -> command.local.Command | None:
    """The Command that keeps `node`'s mirror files as the stack's `registryMirrors` say;
    `container` (its ID) makes a new container get them again. None without mirrors."""
    files = registry_files(mirrors, auth)
    if not files:
        return None
    environment: dict[str, pulumi.Input[str]] = {"NODE": node}
    for key, text in files_environment(files).items():
        # A file with a mirror's credentials is a secret in the state and the plan.
        environment[key] = pulumi.Output.secret(text) if holds_credentials(text) else text
    return command.local.Command(
        name,
        create=install_files_script(),
        delete=remove_files_script(),
        environment=environment,
        triggers=[container],
        opts=opts,
    )
