"""What a node holds of the files the program writes for a site's registry mirrors, read by a
short pod on that node, and how it differs from what the stack writes.

labcheck reaches a cluster only through its API server, so a node's files are read by a pod:
`nodeName` set (no scheduler, and no taint keeps it off: it tolerates every one), the node's
`/etc/containerd` mounted read-only (it is there on every containerd node, so a missing
`certs.d` shows as missing files rather than as a pod that cannot start), the tools image,
which the node pulls through the same mirrors. The pod reads only the paths the stack writes,
and gives back per file its mode, its size and two SHA-256 digests: of its bytes, and of its
lines with every Authorization header's value redacted (`sed -E`, as
builders/labcheck_spec.py:redact redacts the expected text). It writes them into its
termination message, which the kubelet copies into the pod's status: nothing is logged, the
answer needs no log read through Konnectivity, and no file's text (a hosts.toml may hold a
mirror's credentials) leaves the node. A digest of a file with credentials goes no further
than the pod's status, which only an admin of that cluster reads, who could read the file
itself; labcheck's output names what differs, never a digest."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Obj
from .spec import RegistryFile

# The node's containerd directory, mounted read-only at the same path under ROOT.
CONTAINERD_DIR = "/etc/containerd"
ROOT = "/host"
TERMINATION_LOG = "/dev/termination-log"
# The kubelet keeps at most this much of a termination message (4 KiB); a record is ~150 bytes.
MESSAGE_LIMIT = 4096
END = "end"
PRIVATE_MODE = "600"
MISSING = "missing"

# sh -c SCRIPT sh <message file> <root> <path>...: one line per path, in order, then `end`.
SCRIPT = """\
set -eu
out=$1 root=$2
shift 2
{
  i=0
  for path in "$@"; do
    file=$root$path
    if [ -f "$file" ]; then
      mode=$(stat -c %a "$file")
      size=$(wc -c < "$file")
      full=$(sha256sum < "$file")
      redacted=$(sed -E \
        's/([Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn][^=]*=).*/\\1 "<redacted>"/' \
        "$file" | sha256sum)
      echo "$i $mode $size ${full%% *} ${redacted%% *}"
    else
      echo "$i missing"
    fi
    i=$((i + 1))
  done
  echo end
} > "$out"
"""


def files_pod(name: str, node: str, image: str, labels: dict[str, str], paths: list[str]) -> Obj:
    """The pod that reads `paths` on `node` and ends (Succeeded) with its records in its
    termination message."""
    container = {
        "name": "files",
        "image": image,
        "command": ["sh", "-c", SCRIPT, "sh", TERMINATION_LOG, ROOT, *paths],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        "securityContext": {"runAsUser": 0},  # the files with credentials are root's alone
        "volumeMounts": [
            {"name": "containerd", "mountPath": ROOT + CONTAINERD_DIR, "readOnly": True}
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [container],
            "volumes": [
                {
                    "name": "containerd",
                    "hostPath": {"path": CONTAINERD_DIR, "type": "Directory"},
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
        },
    }


def termination_message(pod: Obj) -> str:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if "message" in terminated:
            return str(terminated["message"])
    return ""


@dataclass(frozen=True)
class Seen:
    mode: str
    size: int
    sha256: str
    redacted_sha256: str


class UnreadableAnswer(Exception):
    """The pod's message is not what its script writes (cut short, or another program's)."""


def parse_message(message: str, count: int) -> list[Seen | None]:
    """The pod's records, one per path it was given (None: no file there)."""
    lines = message.splitlines()
    if not lines or lines[-1] != END:
        raise UnreadableAnswer(
            f"its message does not end with '{END}' ({len(message.encode())} bytes; the "
            f"kubelet keeps {MESSAGE_LIMIT})"
        )
    records: list[Seen | None] = []
    for index, line in enumerate(lines[:-1]):
        fields = line.split()
        if fields[:1] != [str(index)]:
            raise UnreadableAnswer(f"line {index + 1} is not the record of file {index}")
        if fields[1:] == [MISSING]:
            records.append(None)
        elif len(fields) == 5 and fields[2].isdigit():
            records.append(Seen(fields[1], int(fields[2]), fields[3], fields[4]))
        else:
            raise UnreadableAnswer(f"line {index + 1} has {len(fields)} fields")
    if len(records) != count:
        raise UnreadableAnswer(f"{len(records)} records for {count} files")
    return records


def differences(expected: list[RegistryFile], seen: list[Seen | None]) -> list[str]:
    """What differs in one node, a phrase per file; empty when it holds what the stack
    writes. Never a digest or a line of a file."""
    found = []
    for want, have in zip(expected, seen, strict=True):
        if have is None:
            found.append(f"{want.path} missing")
            continue
        if have.sha256 != want.sha256:
            if have.redacted_sha256 == want.redacted_sha256:
                what = "its Authorization header is not the stack's (registryMirrorAuth)"
            else:
                what = f"content differs ({have.size} bytes; the stack writes {want.size})"
            found.append(f"{want.path}: {what}")
        if int(have.mode, 8) != int(want.mode, 8):
            why = " (it holds credentials: root's alone)" if want.mode == PRIVATE_MODE else ""
            found.append(f"{want.path}: mode {have.mode}, the stack writes {want.mode}{why}")
    return found
