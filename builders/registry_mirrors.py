"""A mirrored site's registries as containerd reads them: hosts.toml files for every node (the
kind node and the worker containers), and the scripts that put them there. The node images
themselves are pulled by the host's Docker, under the names the stack gives them."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence

from labconfig.mirrors import ALL_REGISTRIES, RegistryMirror

# containerd 2 reads hosts.toml from here when the CRI config sets no config_path, as the
# kindest/node images of kind v0.27.0 and newer do (upstream fact `containerd-default-config-path`).
CERTS_DIR = "/etc/containerd/certs.d"
DEFAULT_HOST_DIR = "_default"  # containerd's directory for a registry without one of its own
# Where containerd sends a registry's requests when no mirror answers; Docker Hub's API host is
# not its name.
UPSTREAM_SERVERS = {"docker.io": "https://registry-1.docker.io"}
# What the program wrote into a node, one path per line: removed before new files go in, and
# when the node's mirrors Command is deleted (a stack that drops `registryMirrors`).
MARKER = f"{CERTS_DIR}/.kamaji-hami-lab-files"
STRICT = "set -eu\n"


def host_directory(registry: str) -> str:
    return f"{CERTS_DIR}/{DEFAULT_HOST_DIR if registry == ALL_REGISTRIES else registry}"


def mirror_url(mirror: RegistryMirror) -> str:
    """The `[host."…"]` URL: a mirror with a path names its `/v2/<path>` API root itself
    (`override_path`), as a Harbor proxy project is reached."""
    scheme = "http" if mirror.plain_http else "https"
    return f"{scheme}://{mirror.host}" + (f"/v2/{mirror.path}" if mirror.path else "")


def hosts_toml(mirror: RegistryMirror, credentials: str = "") -> str:
    """containerd's hosts.toml for one registry: pull and resolve through the mirror, with the
    mirror's `user:password` as a basic-auth header sent to that host only (hosts.toml has no
    credential field, and the kubelet's credentials reach a mirror only of the image's own
    registry name: upstream fact `containerd-cri-credentials-by-host`).

    containerd tries each `[host]` in order and then `server`, the registry itself when unset
    (also in `_default`: the image's own registry), on any error of the one before (fact
    `containerd-hosts-server-last`). A `mirrorOnly` mirror is the `server`, with no `[host]`:
    the registry is never asked (fact `containerd-hosts-server-only`)."""
    url = mirror_url(mirror)
    if mirror.mirror_only:
        lines, table, indent = [f'server = "{url}"'], "", ""
    else:
        lines = []
        if mirror.registry != ALL_REGISTRIES:
            server = UPSTREAM_SERVERS.get(mirror.registry, f"https://{mirror.registry}")
            lines += [f'server = "{server}"', ""]
        table, indent = f'host."{url}"', "  "
        lines.append(f"[{table}]")
    lines.append(f'{indent}capabilities = ["pull", "resolve"]')
    if mirror.path:
        lines.append(f"{indent}override_path = true")
    if mirror.ca:
        lines.append(f'{indent}ca = "{host_directory(mirror.registry)}/ca.crt"')
    if credentials:
        token = base64.b64encode(credentials.encode()).decode()
        header = f"{indent}[{table}.header]" if table else "\n[header]"
        lines += [header, f'{indent}  Authorization = "Basic {token}"']
    return "\n".join(lines) + "\n"


def holds_credentials(text: str) -> bool:
    """A file with a mirror's credentials: 0600 in the node, a secret in the plan and state."""
    return "Authorization = " in text


def registry_files(
    mirrors: Sequence[RegistryMirror], auth: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Every file a node needs for the mirrors, by absolute path, and the list of them
    (MARKER); none without mirrors."""
    files: dict[str, str] = {}
    for mirror in mirrors:
        directory = host_directory(mirror.registry)
        files[f"{directory}/hosts.toml"] = hosts_toml(mirror, (auth or {}).get(mirror.host, ""))
        if mirror.ca:
            files[f"{directory}/ca.crt"] = mirror.ca.strip() + "\n"
    if files:
        files[MARKER] = "".join(f"{path}\n" for path in sorted([*files, MARKER]))
    return files


def files_environment(files: dict[str, str]) -> dict[str, str]:
    """The files as a Command's environment: REGISTRY_FILES lists the paths, REGISTRY_FILE_<n>
    holds the n-th one's text, so `pulumi preview --diff` shows a change as the lines that
    changed; REGISTRY_PRIVATE_FILES lists those with credentials."""
    paths = sorted(files)
    private = [path for path in paths if holds_credentials(files[path])]
    environment = {"REGISTRY_FILES": "\n".join(paths), "REGISTRY_PRIVATE_FILES": "\n".join(private)}
    environment |= {f"REGISTRY_FILE_{n}": files[path] for n, path in enumerate(paths, 1)}
    return environment


def install_files_script() -> str:
    """Puts the files of `files_environment` into container NODE in place of what an earlier
    run put there: 0600 for a file with credentials (created so, never readable by others even
    while it is written), 0644 for the others. containerd reads hosts.toml on every pull: no
    restart."""
    return (
        STRICT
        + f"""\
docker exec "$NODE" sh -c 'if [ -f {MARKER} ]; then xargs rm -f < {MARKER}; fi'
n=0
for path in $REGISTRY_FILES; do
  n=$((n + 1))
  eval "content=\\$REGISTRY_FILE_$n"
  mode=644
  if printf '%s\\n' "$REGISTRY_PRIVATE_FILES" | grep -qxF -- "$path"; then mode=600; fi
  printf '%s' "$content" | docker exec -i "$NODE" sh -c \\
    'mkdir -p "$(dirname "$1")" && umask 077 && cat > "$1" && chmod "$2" "$1"' sh "$path" "$mode"
done
echo "$NODE pulls through the site's registry mirrors" >&2
"""
    )


def remove_files_script() -> str:
    """Removes what `install_files_script` put into NODE; nothing to do once NODE is gone."""
    return (
        STRICT
        + f"""\
docker inspect "$NODE" >/dev/null 2>&1 || exit 0
docker exec "$NODE" sh -c 'if [ -f {MARKER} ]; then xargs rm -f < {MARKER}; fi'
"""
    )
