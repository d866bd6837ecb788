"""kubeadm's JoinConfiguration for the lab's workers, and the shell that writes it on a node.

Workers join with `kubeadm join --config <file>`: beside --config kubeadm refuses --token,
--cri-socket and the discovery flags, so all the join needs is in the file and the bootstrap
token is on no command line. The kubelet's labels are `nodeRegistration.kubeletExtraArgs`, as
kind sets them: kubeadm writes them to /var/lib/kubelet/kubeadm-flags.env, which every join
rewrites and `kubeadm reset` empties, so nothing of the node's own files is edited.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

# v1beta4 has kubeletExtraArgs as a list of {name, value} (v1beta3 had a map). kubeadm reads it
# from v1.31 on, and every tenant minor the lab supports is at least that (the kubeadm that
# joins has the tenant's minor: a worker image's or a remote host's package).
JOIN_API_VERSION = "kubeadm.k8s.io/v1beta4"
FIRST_MINOR_WITH_V1BETA4 = (1, 31)
# Private (0600) while it holds the token; the join script removes it on exit.
JOIN_CONFIG_PATH = "/etc/kubernetes/lab-join.yaml"
# The shape of the line `kubeadm token create --print-join-command` prints for a kubeconfig with
# one CA: `kubeadm join <host:port> --token <token> --discovery-token-ca-cert-hash sha256:<hex>`.
JOIN_COMMAND_WORDS = "kubeadm join --token --discovery-token-ca-cert-hash"
DISCOVERY_PATTERN = r"[][0-9A-Za-z.:-]+ [a-z0-9]{6}\.[a-z0-9]{16} sha256:[0-9a-f]{64}"


@dataclass(frozen=True)
class TokenDiscovery:
    """How a node finds and trusts its control plane, from a bootstrap token."""

    api_server_endpoint: str  # host:port
    token: str  # [a-z0-9]{6}.[a-z0-9]{16}
    ca_cert_hash: str  # sha256:<hex> of the CA's public key


class ShellValue(str):
    """A value the script's here-document fills in from a shell variable, at run time."""


def shell_value(variable: str) -> ShellValue:
    return ShellValue("${" + variable + "}")


class _Dumper(yaml.SafeDumper):
    pass


# Double-quoted, so what the shell puts there stays one YAML string (a token of digits alone
# would read as a number); the values it may hold need no escapes (see read_join_command).
_Dumper.add_representer(
    ShellValue,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"'),
)


def join_configuration(
    discovery: TokenDiscovery,
    *,
    node_labels: str = "",
    node_name: str = "",
    cri_socket: str = "",
    ignore_preflight_errors: Sequence[str] = (),
) -> str:
    """A v1beta4 JoinConfiguration; `node_labels` (`key=value,...`) go to the kubelet."""
    registration: dict[str, Any] = {}
    if node_name:
        registration["name"] = node_name
    if cri_socket:
        registration["criSocket"] = cri_socket
    if node_labels:
        registration["kubeletExtraArgs"] = [{"name": "node-labels", "value": node_labels}]
    if ignore_preflight_errors:
        registration["ignorePreflightErrors"] = list(ignore_preflight_errors)
    config = {
        "apiVersion": JOIN_API_VERSION,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": discovery.api_server_endpoint,
                "token": discovery.token,
                "caCertHashes": [discovery.ca_cert_hash],
            }
        },
        "nodeRegistration": registration,
    }
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False)


# What read_join_command sets.
SCRIPT_DISCOVERY = TokenDiscovery(
    shell_value("endpoint"), shell_value("token"), shell_value("ca_hash")
)


def read_join_command(who: str) -> str:
    """Shell: sets $endpoint, $token and $ca_hash from the join command in $join.

    Anything else than one CA's join command stops the script (`who`, a shell word, names
    the node); the message never shows the token.
    """
    return f"""\
set -f
# shellcheck disable=SC2086 # kubeadm's words, split on purpose
set -- $join
set +f
if [ "$#" -ne 7 ] || [ "$1 $2 $4 $6" != "{JOIN_COMMAND_WORDS}" ] \\
    || ! printf '%s\\n' "$3 $5 $7" | grep -Eqx '{DISCOVERY_PATTERN}'; then
  echo {who}": kubeadm token create --print-join-command printed $# words, not the join" \\
    "command of one CA" >&2
  exit 1
fi
endpoint=$3 token=$5 ca_hash=$7
"""


def write_join_configuration(write: str, **registration: Any) -> str:
    """Shell: runs `write` with the JoinConfiguration on stdin, discovery from read_join_command.

    `registration` is join_configuration's; a ShellValue in it is filled in at run time too. The
    here-document expands `$`, backquotes and backslashes: none may be in the rest.
    """
    text = join_configuration(SCRIPT_DISCOVERY, **registration)
    if re.search(r"[$`\\]", re.sub(r'"\$\{[A-Za-z_]+\}"', "", text)):
        raise ValueError(f"the JoinConfiguration holds a character the shell expands: {text!r}")
    return f"{write} <<EOF\n{text}EOF\n"
