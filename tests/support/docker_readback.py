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


# --- docker_network (pulumi-docker 5.2.0 = terraform-provider-docker v4.5.0) -----------------
#
# What the provider sends to create a network and what its Read records, from
# `internal/provider/resource_docker_network_funcs.go` (`resourceDockerNetworkCreate`,
# `resourceDockerNetworkReadRefreshFunc`) and the schema in `resource_docker_network.go`;
# docs/upstream-facts/host-tier.md, `docker-provider-network-create-request` and
# `docker-provider-network-read`. Attributes are the provider's (snake_case) names.

# Pulumi's input names where they differ from the provider's (the bridge pluralizes the
# `ipam_config` set and camel-cases the rest).
NETWORK_INPUT_NAMES = {"ipamConfigs": "ipam_config", "ipamDriver": "ipam_driver",
                       "ipamOptions": "ipam_options"}  # fmt: skip
IPAM_CONFIG_INPUT_NAMES = {"ipRange": "ip_range", "auxAddress": "aux_address"}
# Schema defaults the SDK fills in before Create sees the configuration.
NETWORK_DEFAULTS = {"ipam_driver": "default"}
# ForceNew attributes (every one but the computed `scope`); Optional+Computed ones keep the
# state's value when the configuration leaves them out.
NETWORK_FORCE_NEW = {"name", "labels", "driver", "options", "internal", "attachable", "ingress",
                     "ipv6", "ipam_driver", "ipam_options", "ipam_config"}  # fmt: skip
NETWORK_COMPUTED = {"driver", "options", "internal", "ipam_config"}
# The docker client's API version when the daemon does not ask for an older one
# (github.com/docker/docker v28.5.2, the provider's go.mod: `api.DefaultVersion`).
CLIENT_API_VERSION = "1.51"


def network_attributes(inputs: dict[str, Any]) -> dict[str, Any]:
    """A docker.Network's Pulumi inputs as the provider's configuration, defaults filled in."""
    attributes = dict(NETWORK_DEFAULTS)
    for key, value in inputs.items():
        name = NETWORK_INPUT_NAMES.get(key, key)
        if name == "ipam_config":
            value = [
                {IPAM_CONFIG_INPUT_NAMES.get(k, k): v for k, v in entry.items()} for entry in value
            ]
        attributes[name] = value
    return attributes


def _set(value: Any) -> bool:
    """terraform-plugin-sdk's `GetOk`: set and not the zero value of its type."""
    return value not in (None, False, "", 0) and value != [] and value != {}


def _api_less_than(version: str, other: str) -> bool:
    return tuple(map(int, version.split("."))) < tuple(map(int, other.split(".")))


def negotiated_api_version(daemon_api_version: str) -> str:
    """The client's API version after its ping: the daemon's when that is older (client.go,
    `negotiateAPIVersionPing`)."""
    if _api_less_than(daemon_api_version, CLIENT_API_VERSION):
        return daemon_api_version
    return CLIENT_API_VERSION


def network_create_request(attributes: dict[str, Any], api_version: str) -> dict[str, Any]:
    """The JSON body of `POST /v<api_version>/networks/create` the provider sends.

    Only attributes GetOk sees are copied: a declared `ipv6 = false` (or `internal`,
    `attachable`, `ingress`) is never sent, so the daemon's default decides; the docker client
    adds `CheckDuplicate: true` for daemons older than API 1.44 (client/network_create.go).
    """
    get = attributes.get
    ipam: dict[str, Any] | None = None
    if any(_set(get(key)) for key in ("ipam_driver", "ipam_config", "ipam_options")):
        ipam = {
            "Driver": get("ipam_driver") if _set(get("ipam_driver")) else "",
            "Options": dict(get("ipam_options")) if _set(get("ipam_options")) else None,
            "Config": [
                {
                    key: value
                    for key, value in (
                        ("Subnet", entry.get("subnet") or ""),
                        ("IPRange", entry.get("ip_range") or ""),
                        ("Gateway", entry.get("gateway") or ""),
                        ("AuxiliaryAddresses", dict(entry.get("aux_address") or {})),
                    )
                    if value  # `json:",omitempty"` on every IPAMConfig field
                }
                for entry in (get("ipam_config") or [])
            ]
            or None,
        }
    body: dict[str, Any] = {
        "Driver": get("driver") if _set(get("driver")) else "",
        "Scope": "",
        "IPAM": ipam,
        "Internal": bool(get("internal")),
        "Attachable": bool(get("attachable")),
        "Ingress": bool(get("ingress")),
        "ConfigOnly": False,
        "ConfigFrom": None,
        "Options": dict(get("options")) if _set(get("options")) else None,
        "Labels": (
            {entry["label"]: entry["value"] for entry in get("labels")}
            if _set(get("labels"))
            else None
        ),
        "Name": get("name"),
    }
    if get("ipv6"):
        body["EnableIPv6"] = True
    if _api_less_than(api_version, "1.44"):
        body["CheckDuplicate"] = True
    return body


def network_state(inspect: dict[str, Any]) -> dict[str, Any]:
    """What the provider's Read records from `docker network inspect` (GET /networks/<id>)."""
    ipam = inspect.get("IPAM") or {}
    return {
        "name": inspect["Name"],
        "labels": [{"label": k, "value": v} for k, v in (inspect.get("Labels") or {}).items()],
        "driver": inspect["Driver"],
        "internal": inspect.get("Internal", False),
        "attachable": inspect.get("Attachable", False),
        "ingress": inspect.get("Ingress", False),
        "ipv6": inspect.get("EnableIPv6", False),
        "ipam_driver": ipam.get("Driver", ""),
        "ipam_options": dict(ipam.get("Options") or {}),
        "scope": inspect.get("Scope", ""),
        "options": dict(inspect.get("Options") or {}),
        # flattenIpamConfigSpec: only the non-empty fields of each entry
        "ipam_config": [
            {
                name: value
                for name, value in (
                    ("subnet", entry.get("Subnet")),
                    ("ip_range", entry.get("IPRange")),
                    ("gateway", entry.get("Gateway")),
                    ("aux_address", entry.get("AuxiliaryAddresses")),
                )
                if value
            }
            for entry in (ipam.get("Config") or [])
        ],
    }


def _network_value(name: str, value: Any) -> Any:
    """A value as the provider compares it: sets as sets, an unset value as its zero."""
    if name == "labels":
        return {(entry["label"], entry["value"]) for entry in value or []}
    if name == "ipam_config":
        return {
            frozenset((k, str(sorted(v.items())) if isinstance(v, dict) else v)
                      for k, v in entry.items() if v)
            for entry in value or []
        }  # fmt: skip
    if name in ("options", "ipam_options"):
        return dict(value or {})
    if name in ("internal", "attachable", "ingress", "ipv6"):
        return bool(value)
    return value or ""


def network_planned_replacements(attributes: dict[str, Any], state: dict[str, Any]) -> set[str]:
    """The ForceNew attributes whose read-back state differs from the configuration: what a
    refresh followed by `pulumi preview` would replace the network for. An Optional+Computed
    attribute the configuration leaves out keeps the state's value."""
    return {
        name
        for name in NETWORK_FORCE_NEW
        if not (name in NETWORK_COMPUTED and name not in attributes)
        and _network_value(name, attributes.get(name)) != _network_value(name, state.get(name))
    }


# --- what the daemon makes of a network create request (moby/moby) --------------------------
#
# docs/upstream-facts/host-tier.md, `docker-network-enable-ipv6-option`: only the IPv6 switch
# and the driver options, for a request without ConfigFrom.

IPV6_OPTION = "com.docker.network.enable_ipv6"
# Go's strconv.ParseBool, which the daemon and the bridge driver use for the option.
GO_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
            "0": False, "f": False, "F": False, "FALSE": False, "false": False,
            "False": False}  # fmt: skip


def daemon_network(
    request: dict[str, Any],
    engine: tuple[int, int],
    default_network_opts: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """`EnableIPv6` and `Options` of the network Docker Engine `engine` (major, minor) creates
    for `request`, with daemon.json's `default-network-opts` (read from 24.0 on). Raises
    ValueError where the daemon refuses the request (the option is not a Go bool)."""
    options = dict(request.get("Options") or {})
    if engine >= (24, 0):  # the defaults fill only the keys the request leaves out
        driver = request.get("Driver") or "bridge"
        for key, value in (default_network_opts or {}).get(driver, {}).items():
            options.setdefault(key, value)
    if IPV6_OPTION in options and options[IPV6_OPTION] not in GO_BOOLS:
        raise ValueError(f"{IPV6_OPTION}: {options[IPV6_OPTION]!r} is not a valid bool")
    if engine < (27, 0):  # a plain bool in the request: left out is false, the option unused
        return {"EnableIPv6": bool(request.get("EnableIPv6")), "Options": options}
    if "EnableIPv6" in request:  # a *bool from 27 on: a value given wins, the option is dropped
        options.pop(IPV6_OPTION, None)
        return {"EnableIPv6": bool(request["EnableIPv6"]), "Options": options}
    return {"EnableIPv6": GO_BOOLS.get(options.get(IPV6_OPTION, "false")), "Options": options}


def pulumi_ignore_changes(
    inputs: dict[str, Any], old_inputs: dict[str, Any], ignore_changes: list[str]
) -> dict[str, Any]:
    """The inputs the engine diffs for a resource already in the state: each top-level
    `ignore_changes` property takes its old value (pulumi/pulumi `processIgnoreChanges`)."""
    ignored = dict(inputs)
    for name in ignore_changes:
        if name in old_inputs:
            ignored[name] = old_inputs[name]
        else:
            ignored.pop(name, None)
    return ignored


# --- docker_container: the create request and the Read, for the inputs the lab's workers set --
#
# `resourceDockerContainerCreate` / `resourceDockerContainerRead` of terraform-provider-docker
# v4.5.0 (docs/upstream-facts/host-tier.md, `docker-provider-container-create-request`). Keys
# are the provider's attribute names; only what a worker declares is modelled.

CONTAINER_INPUT_NAMES = {"envs": "env"}  # the bridge pluralizes `env`; the rest is snake_case
# Schema defaults the SDK fills in (resource_docker_container.go).
CONTAINER_DEFAULTS = {"restart": "no", "network_mode": "bridge", "tty": False,
                      "stdin_open": False, "start": True, "must_run": True}  # fmt: skip


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _snake_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {_snake(k): _snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    return value


def container_attributes(inputs: dict[str, Any]) -> dict[str, Any]:
    """A docker.Container's Pulumi inputs as the provider's configuration, defaults filled in.
    Map-typed inputs (tmpfs) keep their keys."""
    attributes = dict(CONTAINER_DEFAULTS)
    for key, value in inputs.items():
        name = CONTAINER_INPUT_NAMES.get(key, _snake(key))
        attributes[name] = value if name in ("tmpfs", "sysctls", "log_opts") else _snake_keys(value)
    return attributes


def _binds(volumes: list[dict[str, Any]]) -> tuple[dict[str, dict], list[str]]:
    """`volumeSetToDockerVolumes`: Config.Volumes for every path, a bind for host paths."""
    declared: dict[str, dict] = {}
    binds: list[str] = []
    for volume in volumes:
        path = volume["container_path"]
        declared[path] = {}
        source = volume.get("host_path") or volume.get("volume_name")
        if source:
            binds.append(f"{source}:{path}:{'ro' if volume.get('read_only') else 'rw'}")
    return declared, binds


def container_create_request(attributes: dict[str, Any]) -> dict[str, Any]:
    """The body of `POST /containers/create?name=<name>` (Config fields at the top level,
    HostConfig, an empty NetworkingConfig): the container starts on `network_mode`, and the
    provider then disconnects it from `bridge` and connects each `networks_advanced` entry."""
    get = attributes.get
    volumes, binds = _binds(get("volumes") or [])
    body: dict[str, Any] = {
        "Image": get("image"),
        "Hostname": get("hostname") or "",
        "Domainname": get("domainname") or "",
        "Tty": bool(get("tty")),
        "OpenStdin": bool(get("stdin_open")),
        "StopSignal": get("stop_signal") or "",
    }
    if _set(get("env")):
        body["Env"] = list(get("env"))
    if volumes:
        body["Volumes"] = volumes
    if _set(get("labels")):
        body["Labels"] = {entry["label"]: entry["value"] for entry in get("labels")}
    host: dict[str, Any] = {
        "Privileged": bool(get("privileged")),
        "PublishAllPorts": False,
        "RestartPolicy": {
            "Name": get("restart"),
            "MaximumRetryCount": int(get("max_retry_count") or 0),  # a TypeInt; Pulumi sends 1.0
        },
        "Runtime": get("runtime") or "",
        "Mounts": [],
        "AutoRemove": bool(get("rm")),
        "ReadonlyRootfs": bool(get("read_only")),
        "LogConfig": {"Type": get("log_driver") or ""},
        "NetworkMode": get("network_mode"),
        "Init": bool(get("init")),
    }
    if _set(get("tmpfs")):
        host["Tmpfs"] = dict(get("tmpfs"))
    if binds:
        host["Binds"] = binds
    if _set(get("security_opts")):
        host["SecurityOpt"] = list(get("security_opts"))
    if _set(get("cgroupns_mode")):
        host["CgroupnsMode"] = get("cgroupns_mode")
    body["HostConfig"] = host
    body["NetworkingConfig"] = {}
    return body


def container_state(inspect: dict[str, Any], declared_image: str) -> dict[str, Any]:
    """What the provider's Read records from `docker inspect` for the inputs a worker sets
    (labels, env, volumes, cgroupns_mode and networks_advanced are never read back)."""
    config, host = inspect["Config"], inspect["HostConfig"]
    return {
        "name": inspect["Name"].lstrip("/"),
        "image": inspect["Image"] if declared_image.startswith("sha256:") else config["Image"],
        "hostname": config["Hostname"],
        "privileged": host["Privileged"],
        "security_opts": host.get("SecurityOpt") or [],
        "tty": config["Tty"],
        "stdin_open": config["OpenStdin"],
        "restart": host["RestartPolicy"]["Name"],
        "max_retry_count": host["RestartPolicy"]["MaximumRetryCount"],
        "init": bool(host.get("Init")),
        "tmpfs": host.get("Tmpfs") or {},
        "network_mode": host["NetworkMode"],
        "working_dir": config.get("WorkingDir") or "",
        "user": config.get("User") or "",
        "read_only": host["ReadonlyRootfs"],
        "rm": host["AutoRemove"],
        "must_run": inspect["State"]["Running"],  # a stopped container reads must_run = false
    }


def container_differences(attributes: dict[str, Any], state: dict[str, Any]) -> set[str]:
    """The attributes whose read-back differs from the configuration (ForceNew ones replace
    the container; `restart`, `max_retry_count`, `tmpfs`, `must_run` are updates)."""

    def normal(key: str, value: Any) -> Any:
        if key == "security_opts":
            return sorted(value or [])
        if key in ("tmpfs",):
            return dict(value or {})
        if key in ("privileged", "tty", "stdin_open", "init", "read_only", "rm", "must_run"):
            return bool(value)
        return value if value is not None else ""

    return {
        key
        for key in state
        if normal(key, attributes.get(key)) != normal(key, state[key])
        and not (key == "max_retry_count" and not attributes.get(key) and not state[key])
    }
