"""What a `docker.Container` reads back after `pulumi up`, modelled from upstream's source.

A second `pulumi up` compares the declared inputs with the state the provider read back; a
difference in a ForceNew input plans a replacement (delete, create, re-join). Two upstream
rules decide what comes back (docs/upstream-facts/workers.md):

- the Docker daemon stores a container's HostConfig as given, except that a privileged
  container (or one sharing the host's IPC/PID namespace) without a `label=...` security
  option gets `label=disable` appended (moby `daemon/create.go` `generateSecurityOpt`, called
  from `adaptContainerSettings` in `daemon/daemon_unix.go`);
- terraform-provider-docker (bridged by pulumi-docker) reads back some inputs from
  `docker inspect` verbatim and keeps others as declared (`resourceDockerContainerRead` in
  `internal/provider/resource_docker_container_funcs.go`; schema flags in
  `resource_docker_container.go`).

Keys are the Python SDK's argument names.
"""

from __future__ import annotations

from typing import Any

# ForceNew inputs of the provider's schema that the lab could set (v4.5.0 schema).
FORCE_NEW = {
    "name", "hostname", "image", "privileged", "security_opts", "volumes", "tty",
    "networks_advanced", "labels", "envs", "cgroupns_mode", "network_mode", "capabilities",
    "log_opts", "dns", "dns_opts", "dns_search", "ports", "sysctls", "working_dir", "user",
    "userns_mode", "devices", "mounts", "stdin_open", "read_only",
}  # fmt: skip
# Read back from `docker inspect` as the daemon stored them (`image`: a `sha256:` ID, as
# RemoteImage.image_id gives it, comes back as the container's image ID, i.e. unchanged).
READ_FROM_DAEMON = {
    "name", "hostname", "image", "privileged", "security_opts", "tty", "restart", "max_retry_count",
    "init", "tmpfs", "dns", "dns_opts", "dns_search", "sysctls", "working_dir", "user",
    "userns_mode", "stdin_open", "read_only", "mounts",
}  # fmt: skip
# Read back only when the configuration sets them (log_opts); networks_advanced only when the
# state has none (import); envs, labels, volumes and cgroupns_mode are never read back.
READ_ONLY_WHEN_SET = {"log_opts"}
SET_TYPED = {"security_opts", "dns", "dns_opts", "dns_search"}


def daemon_security_opts(declared: dict[str, Any]) -> list[str]:
    """HostConfig.SecurityOpt after the daemon created the container."""
    opts = list(declared.get("security_opts") or [])
    if any(opt.split("=")[0] == "label" for opt in opts):
        return opts  # the caller chose its labels: the daemon adds nothing
    if (
        declared.get("privileged")
        or declared.get("ipc_mode") == "host"
        or declared.get("pid_mode") == "host"
    ):
        return [*opts, "label=disable"]
    return opts


def read_back(declared: dict[str, Any]) -> dict[str, Any]:
    """The container's state as the provider records it after create + read."""
    state = dict(declared)
    state["security_opts"] = daemon_security_opts(declared)
    return state


def planned_replacements(declared: dict[str, Any]) -> set[str]:
    """The ForceNew inputs whose read-back state differs from the declaration."""
    state = read_back(declared)

    def normal(key: str, value: Any) -> Any:
        return sorted(value or []) if key in SET_TYPED else value

    return {
        key
        for key in FORCE_NEW & declared.keys()
        if (key in READ_FROM_DAEMON or key in READ_ONLY_WHEN_SET)
        and normal(key, state.get(key)) != normal(key, declared[key])
    }
