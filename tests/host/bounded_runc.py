"""An OCI runtime for dockerd: runc, minus the capabilities this host's bounding set lacks.

Docker gives a privileged container every capability up to the kernel's last one (moby
`oci/caps`), and runc fails with `unable to apply caps: operation not permitted` when one of
them is missing from the bounding set of the process that starts it (here CAP_SYS_RESOURCE:
`CapBnd` 000001fffeffffff). No container can hold a capability its creator's bounding set
lacks anyway, so removing those from the spec changes nothing the container could have had.

containerd's runc shim calls the runtime as `<runtime> <global flags> create --bundle <dir>
... <id>` (the spec is `<dir>/config.json`) and `<runtime> <global flags> exec --process
<file> ... <id>` (the file is one OCI Process). This program edits that JSON in place and then
becomes runc (`BOUNDED_RUNC_RUNC`, else `runc` on PATH) with the same arguments.

Standard library only: dockerd runs it through a launcher as `python -I bounded_runc.py`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

# Linux capability numbers 0..40 (include/uapi/linux/capability.h), as OCI specs name them.
CAPABILITIES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")
# runc's global flags that take a value as the next argument (go-runc `args()`).
GLOBAL_FLAGS_WITH_VALUE = {"--root", "--log", "--log-format", "--criu"}
# Where each command names its JSON: (long flag, short flag).
JSON_FLAGS = {"create": ("--bundle", "-b"), "run": ("--bundle", "-b"), "exec": ("--process", "-p")}


def bounding_set(status: str) -> int:
    """`CapBnd` of a /proc/<pid>/status text, as an integer bit mask."""
    for line in status.splitlines():
        if line.startswith("CapBnd:"):
            return int(line.split()[1], 16)
    raise ValueError("no CapBnd line in the status text")


def missing_capabilities(bounding: int, last_cap: int) -> list[str]:
    """Capabilities the kernel knows (0..last_cap) that the bounding set lacks, `CAP_` names."""
    return [
        f"CAP_{name}"
        for number, name in enumerate(CAPABILITIES[: last_cap + 1])
        if not bounding >> number & 1
    ]


def without_capabilities(process: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    """An OCI Process whose capability sets hold none of `drop`; everything else unchanged."""
    caps = process.get("capabilities")
    if not caps:
        return process
    kept = {
        key: [cap for cap in value if cap not in drop] if key in CAP_SETS and value else value
        for key, value in caps.items()
    }
    return {**process, "capabilities": kept}


def spec_without_capabilities(spec: dict[str, Any], drop: set[str]) -> dict[str, Any]:
    """A bundle's config.json with its process's capabilities bounded."""
    if "process" not in spec:
        return spec
    return {**spec, "process": without_capabilities(spec["process"], drop)}


def json_to_edit(argv: list[str]) -> tuple[str, Path] | None:
    """("spec" | "process", path) for a create/run/exec call, None for any other command."""
    index = 0
    while index < len(argv) and argv[index].startswith("-"):  # global flags
        index += 2 if argv[index] in GLOBAL_FLAGS_WITH_VALUE else 1
    if index >= len(argv) or argv[index] not in JSON_FLAGS:
        return None
    command, rest = argv[index], argv[index + 1 :]
    long_flag, short_flag = JSON_FLAGS[command]
    value = None
    for position, arg in enumerate(rest):
        if arg in (long_flag, short_flag) and position + 1 < len(rest):
            value = rest[position + 1]
        elif arg.startswith(f"{long_flag}=") or arg.startswith(f"{short_flag}="):
            value = arg.split("=", 1)[1]
    if command == "exec":
        # Without --process, runc exec takes the command line: nothing to edit.
        return ("process", Path(value)) if value else None
    bundle = Path(value) if value else Path.cwd()  # runc's default bundle: the working dir
    return "spec", bundle / "config.json"


def bound_file(kind: str, path: Path, drop: set[str]) -> bool:
    """Rewrites the JSON at `path` without `drop`; True when it changed."""
    document = json.loads(path.read_text())
    edited = (
        spec_without_capabilities(document, drop)
        if kind == "spec"
        else without_capabilities(document, drop)
    )
    if edited == document:
        return False
    temporary = path.with_name(f".{path.name}.bounded")
    temporary.write_text(json.dumps(edited))
    temporary.replace(path)
    return True


def real_runc() -> str:
    runc = os.environ.get("BOUNDED_RUNC_RUNC") or shutil.which("runc")
    if not runc:
        raise SystemExit("bounded_runc: no runc (set BOUNDED_RUNC_RUNC or put runc on PATH)")
    return runc


def main(argv: list[str]) -> None:
    target = json_to_edit(argv)
    if target is not None:
        drop = missing_capabilities(
            bounding_set(Path("/proc/self/status").read_text()),
            int(Path("/proc/sys/kernel/cap_last_cap").read_text()),
        )
        if drop:
            bound_file(*target, set(drop))
    runc = real_runc()
    os.execv(runc, [runc, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
