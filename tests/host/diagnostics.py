"""What a failing host-tier test shows besides its assertion: the state of the containers.

For every kind node and worker container on the tier's daemon (kind's entrypoint runs systemd
there): the kubelet's journal, systemd's failed units and the container's own output (kind's
entrypoint and systemd's console); for the other containers the tier runs (the tenant control
planes' programs) their output; and the tail of the tier's own dockerd log. Each part is cut
short, and each command has a timeout, so a hung container cannot hang the report.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from docker_host import Docker

NODE_ENTRYPOINT = "/usr/local/bin/entrypoint"  # kind's, in every node image
JOURNAL_LINES = 40
LOG_LINES = 25
DOCKERD_LOG_BYTES = 4000
COMMAND_TIMEOUT_SECONDS = 15


@dataclass(frozen=True, order=True)
class Container:
    name: str
    command: str  # as `docker ps --no-trunc` shows it

    @property
    def is_node(self) -> bool:
        return NODE_ENTRYPOINT in self.command


def running_containers(docker: Docker) -> list[Container]:
    listed = docker.run(
        "ps", "--no-trunc", "--format", "{{.Names}}\t{{.Command}}",
        check=False, timeout=COMMAND_TIMEOUT_SECONDS,
    )  # fmt: skip
    rows = (line.split("\t", 1) for line in listed.stdout.splitlines() if "\t" in line)
    return sorted(Container(name, command) for name, command in rows)


def _output(docker: Docker, *args: str) -> str:
    try:
        done = docker.run(*args, check=False, timeout=COMMAND_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return f"(docker {' '.join(args)} did not answer in {COMMAND_TIMEOUT_SECONDS} s)"
    return (done.stdout + done.stderr).strip() or "(nothing)"


def node_report(docker: Docker, name: str) -> str:
    journal = _output(docker, "exec", name, "journalctl", "-u", "kubelet", "--no-pager",
                      "-o", "short-precise", "-n", str(JOURNAL_LINES))  # fmt: skip
    failed = _output(docker, "exec", name, "systemctl", "--failed", "--no-legend", "--plain")
    logs = _output(docker, "logs", "--tail", str(LOG_LINES), name)
    return (
        f"=== {name}: kubelet journal (last {JOURNAL_LINES})\n{journal}\n"
        f"=== {name}: failed systemd units\n{failed}\n"
        f"=== {name}: container output (last {LOG_LINES})\n{logs}"
    )


def container_report(docker: Docker, name: str) -> str:
    return f"=== {name}: container output (last {LOG_LINES})\n" + _output(
        docker, "logs", "--tail", str(LOG_LINES), name
    )


def dockerd_tail(log: Path | None) -> str:
    if log is None or not log.exists():
        return "=== dockerd log: not the tier's own daemon"
    with log.open("rb") as handle:
        handle.seek(max(0, log.stat().st_size - DOCKERD_LOG_BYTES))
        tail = handle.read().decode(errors="replace")
    return f"=== dockerd log ({log}, last {DOCKERD_LOG_BYTES} bytes)\n{tail.strip()}"


def report(docker: Docker, dockerd_log: Path | None) -> str:
    """The whole report for a failed test, from what runs at the moment of the failure; a
    report that cannot be made says why instead of failing the test session."""
    try:
        return _report(docker, dockerd_log)
    except Exception as error:  # the test's own failure must still be shown
        return f"=== no diagnostics: {type(error).__name__}: {error}"


def _report(docker: Docker, dockerd_log: Path | None) -> str:
    containers = running_containers(docker)
    parts = [node_report(docker, c.name) for c in containers if c.is_node]
    parts += [container_report(docker, c.name) for c in containers if not c.is_node]
    if not containers:
        parts.append("=== no container is running on the tier's daemon")
    parts.append(dockerd_tail(dockerd_log))
    return "\n".join(parts)
