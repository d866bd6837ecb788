"""The site's registry mirrors inside one node container (the kind node, a worker): containerd's
hosts.toml files, put there by a Command that exists only when the stack sets mirrors, so a
stack without them keeps the graph it had."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pulumi
import pulumi_command as command

from builders.registry_mirrors import (
    files_tar,
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
) -> command.local.Command | None:
    """The Command that keeps `node`'s mirror files as the stack's `registryMirrors` say;
    `container` (its ID) makes a new container get them again. None without mirrors."""
    files = registry_files(mirrors)
    if not files:
        return None
    return command.local.Command(
        name,
        create=install_files_script(),
        delete=remove_files_script(),
        environment={
            "NODE": node,
            "REGISTRY_FILES": base64.b64encode(files_tar(files)).decode(),
        },
        triggers=[container],
        opts=opts,
    )
