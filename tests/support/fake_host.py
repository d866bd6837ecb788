"""A fake Linux host on which the lab's generated shell scripts run for real.

`FakeHost` puts fake `docker`, `kind`, `kubectl`, `kubeadm`, `systemctl`, `apt-get`, `containerd`,
... on a hermetic PATH (no real tool of the machine leaks in). Each fake appends its command line
to `calls.log` (one JSON list per call) and acts on state kept under one directory, so what a
script did is observable:

- docker: containers with a running/stopped state, an image, networks, logs and a root
  filesystem; `docker exec` really runs the command inside that root (paths under `/etc/` are
  mapped into it), so `umask`, `test -f` and `cat >` behave as in a container;
- a tenant API server (`kubectl`, `kubeadm token create`): nodes with labels, an admin kubeconfig
  that must match, reachable or not, bootstrap tokens refused a number of times, the join
  command `--print-join-command` prints (JOIN_COMMAND unless set), a join that fails;
  each authenticated call logs an `auth` entry with the kubeconfig file it used and its mode;
- `kubeadm join --config` reads the v1beta4 JoinConfiguration (kept for the tests), refuses
  the flags kubeadm refuses beside it, writes `kubeletExtraArgs` to the node's
  `/var/lib/kubelet/kubeadm-flags.env` and registers the node the way the kubelet does, with
  the labels of every `--node-labels` there and in `/etc/default/kubelet`;
- kind: clusters whose control-plane container lands in the docker state; it writes its
  kubeconfig where `--kubeconfig` says, else to `$HOME/.kube/config`, as kind does;
- a remote GPU host (`run_remote`): the script runs as the SSH user would, with `/etc/` mapped
  into the host's root, containerd and kubeadm installed by the fake `apt-get`.

The executables are thin `sh` wrappers around this module (`python fake_host.py TOOL ARGS`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOST_TOOLS = ("docker", "kind", "kubectl")
# A remote host's own tools; the packages below appear only once `apt-get install` put them there.
REMOTE_TOOLS = (
    "id", "sudo", "systemctl", "apt-get", "apt-mark", "curl", "gpg", "modprobe", "sysctl", "ip",
    "nvidia-smi", "nvidia-ctk",
)  # fmt: skip
PACKAGE_TOOLS = ("containerd", "kubeadm", "kubelet", "kubectl")
NODE_TOOLS = ("kubeadm", "kubectl", "modprobe")
SYSTEM_TOOLS = (
    "sh", "bash", "cat", "sed", "grep", "mktemp", "rm", "date", "tr", "tail", "head", "mv", "cp",
    "id", "install", "mkdir", "tee", "sleep", "awk", "cut", "env", "chmod", "stat", "ls", "cksum",
    "printf", "test", "true", "false", "dirname", "basename", "wc", "sort", "touch", "uname",
)  # fmt: skip

JOIN_COMMAND = (
    "kubeadm join 172.30.255.205:6443 --token abcdef.0123456789abcdef "
    "--discovery-token-ca-cert-hash sha256:" + "0" * 64
)
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
V1BETA4 = "kubeadm.k8s.io/v1beta4"
SYSTEMD_LOG = "[  OK  ] Reached target multi-user.target - Multi-User System.\n"
# What `containerd config default` prints around the runc options, as each release lays it out:
# 1.x writes config version 2; 2.x version 3, whose runc options lack `SystemdCgroup` until
# 2.0.7 / 2.1.5 / 2.2.0 (containerd#12101, fixed by #12244).
RUNC_OPTIONS_DEFAULTS = (
    "BinaryName = ''\n", "CriuImagePath = ''\n", "CriuWorkPath = ''\n", "IoGid = 0\n",
    "IoUid = 0\n", "NoNewKeyring = false\n", "Root = ''\n", "ShimCgroup = ''\n",
)  # fmt: skip
CONTAINERD_1_DEFAULT = (
    'version = 2\nroot = "/var/lib/containerd"\ndisabled_plugins = []\n\n[plugins]\n'
    '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    '    runtime_type = "io.containerd.runc.v2"\n'
    '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
    '      BinaryName = ""\n      SystemdCgroup = false\n'
    '  [plugins."io.containerd.grpc.v1.cri".cni]\n    bin_dir = "/opt/cni/bin"\n'
)


def containerd_2_default(with_systemd_cgroup: bool) -> str:
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    fixed = ["SystemdCgroup = false\n"] if with_systemd_cgroup else []
    options = [*RUNC_OPTIONS_DEFAULTS, *fixed]
    return (
        "version = 3\nroot = '/var/lib/containerd'\ndisabled_plugins = []\n\n[plugins]\n"
        f"  [{runtime}.containerd.runtimes.runc]\n    runtime_type = 'io.containerd.runc.v2'\n"
        f"    [{runtime}.containerd.runtimes.runc.options]\n"
        + "".join(f"      {line}" for line in sorted(options))
        + f"  [{runtime}.cni]\n    bin_dir = '/opt/cni/bin'\n"
    )


def containerd_default_config(version: str) -> str:
    major, minor, patch = (int(part) for part in version.split("~")[0].split(".")[:3])
    if major == 1:
        return CONTAINERD_1_DEFAULT
    fixed_from = {0: 7, 1: 5}  # the patch releases that got #12244's backport
    return containerd_2_default(minor >= 2 or patch >= fixed_from[minor])


# --------------------------------------------------------------------------- state


class State:
    """The fake world, as JSON files and directories under one root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, name: str, default: Any) -> Any:
        path = self.root / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else default

    def save(self, name: str, value: Any) -> None:
        (self.root / f"{name}.json").write_text(json.dumps(value, indent=1, sort_keys=True))

    def counter(self, name: str) -> int:
        """Returns how often it was called before (0 the first time)."""
        counts = self.load("counters", {})
        seen = counts.get(name, 0)
        counts[name] = seen + 1
        self.save("counters", counts)
        return seen

    def container_root(self, name: str) -> Path:
        return self.root / "containers" / name

    @property
    def host_root(self) -> Path:
        return self.root / "remote-host"


def map_paths(text: str, root: Path) -> str:
    """A path under /etc/ or /sys/fs/cgroup/ as seen inside a container or remote host whose
    root is `root`."""
    for prefix in ("/etc/", "/sys/fs/cgroup/"):
        text = text.replace(prefix, f"{root}{prefix}")
    return text


# --------------------------------------------------------------------------- tools


def fail(message: str, code: int = 1) -> int:
    print(message, file=sys.stderr)
    return code


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def docker(state: State, args: list[str]) -> int:
    containers = state.load("containers", {})
    if args[0] == "inspect":
        fmt = option(args, "-f") or option(args, "--format")
        name = args[-1]
        if name not in containers:
            return fail(f"Error: No such object: {name}")
        print(docker_format(fmt, containers[name]))
        return 0
    if args[0] == "logs":
        name = args[-1]
        if name not in containers:
            return fail(f"Error response from daemon: No such container: {name}")
        print(containers[name]["logs"], end="")
        return 0
    if args[0] == "exec":
        return docker_exec(state, containers, args[1:])
    return fail(f"fake docker: unsupported command {args!r}", 2)


def docker_format(fmt: str | None, container: dict[str, Any]) -> str:
    formats = {
        "{{.State.Running}}": lambda c: "true" if c["running"] else "false",
        "{{.Config.Image}}": lambda c: c["image"],
        "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}": lambda c: "".join(
            f"{n} " for n in sorted(c["networks"])
        ),
    }
    if fmt is None:
        return json.dumps(container)
    if fmt not in formats:
        raise SystemExit(fail(f"fake docker: unsupported inspect format {fmt!r}", 2))
    return formats[fmt](container)


def docker_exec(state: State, containers: dict[str, Any], args: list[str]) -> int:
    interactive = args[0] == "-i"
    if interactive:
        args = args[1:]
    name, command = args[0], args[1:]
    if name not in containers:
        return fail(f"Error response from daemon: No such container: {name}")
    if not containers[name]["running"]:
        return fail(f"Error response from daemon: container {name} is not running")
    root = state.container_root(name)
    env = {
        "PATH": f"{state.root}/node-bin:{state.root}/sys-bin",
        "FAKE_HOST": str(state.root),
        "FAKE_ROOT": str(root),
        "FAKE_HOSTNAME": name,
    }
    return subprocess.run(
        [map_paths(arg, root) for arg in command],
        env=env,
        stdin=None if interactive else subprocess.DEVNULL,
        check=False,
    ).returncode


def kind(state: State, args: list[str]) -> int:
    clusters = state.load("kind", {})
    if args[:2] == ["get", "clusters"]:
        for name in sorted(clusters):
            print(name)
        return 0
    name = option(args, "--name") or "kind"
    if args[:2] == ["get", "kubeconfig"]:
        if name not in clusters:
            return fail(
                f'ERROR: could not locate any control plane nodes for cluster named "{name}"'
            )
        print(clusters[name]["kubeconfig"], end="")
        return 0
    if args[:2] == ["create", "cluster"]:
        return kind_create(state, clusters, name, args)
    if args[:2] == ["delete", "cluster"]:
        clusters.pop(name, None)
        state.save("kind", clusters)
        containers = state.load("containers", {})
        containers.pop(f"{name}-control-plane", None)
        state.save("containers", containers)
        touch_user_kubeconfig(option(args, "--kubeconfig"), f"removed kind-{name}")
        return 0
    return fail(f"fake kind: unsupported command {args!r}", 2)


def kind_create(state: State, clusters: dict[str, Any], name: str, args: list[str]) -> int:
    import site  # the wrappers start Python with -S (faster); kind alone needs PyYAML

    site.main()
    import yaml

    if name in clusters:
        return fail(f'ERROR: failed to create cluster: node(s) already exist for "{name}"')
    if os.environ.get("FAKE_KIND_CREATE_FAILS"):
        return fail("ERROR: failed to create cluster: could not find a log line that matches")
    config_path = option(args, "--config")
    config = yaml.safe_load(Path(config_path).read_text()) if config_path else {}
    image = (config.get("nodes") or [{}])[0].get("image", "kindest/node:default")
    network = os.environ.get("KIND_EXPERIMENTAL_DOCKER_NETWORK", "kind")
    kubeconfig = f"apiVersion: v1\nkind: Config\ncurrent-context: kind-{name}\n"
    clusters[name] = {"kubeconfig": kubeconfig, "ip_family": config["networking"]["ipFamily"]}
    state.save("kind", clusters)
    containers = state.load("containers", {})
    containers[f"{name}-control-plane"] = new_container(image, [network])
    state.save("containers", containers)
    touch_user_kubeconfig(option(args, "--kubeconfig"), kubeconfig)
    return 0


def touch_user_kubeconfig(explicit: str | None, content: str) -> None:
    """kind writes (or edits) the kubeconfig it is pointed at, by default the user's own."""
    path = Path(
        explicit or os.environ.get("KUBECONFIG") or Path(os.environ["HOME"]) / ".kube/config"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(content)


def new_container(image: str, networks: list[str], running: bool = True) -> dict[str, Any]:
    return {"image": image, "networks": networks, "running": running, "logs": SYSTEMD_LOG}


def read_kubeconfig(args: list[str], state: State) -> tuple[str | None, str]:
    """The kubeconfig a kubectl/kubeadm call authenticates with, and a note of its file mode."""
    path = option(args, "--kubeconfig") or os.environ.get("KUBECONFIG")
    if not path or not Path(path).exists():
        return None, f"kubeconfig={path} missing"
    mode = stat.S_IMODE(Path(path).stat().st_mode)
    return Path(path).read_text().strip(), f"kubeconfig={path} mode={mode:o}"


def tenant_auth(state: State, args: list[str]) -> int | None:
    """None when the call reaches the tenant as its admin, else the exit code of the failure."""
    tenant = state.load("tenant", {})
    content, note = read_kubeconfig(args, state)
    record(state, "auth", [note])
    if tenant.get("unreachable"):
        return fail(
            "Unable to connect to the server: dial tcp 172.30.255.205:6443: no route to host"
        )
    if content != tenant.get("kubeconfig"):
        return fail("error: You must be logged in to the server (Unauthorized)")
    return None


def kubectl(state: State, args: list[str]) -> int:
    if "--dry-run=server" in args:
        failures = int(os.environ.get("FAKE_WEBHOOK_FAILS", "0"))
        if state.counter("dry-run") < failures:
            return fail('failed calling webhook "ipaddresspoolvalidationwebhook.metallb.io"')
        return 0
    if "rollout" in args:
        if os.environ.get("FAKE_ROLLOUT_FAILS"):
            return fail(
                "error: timed out waiting for the condition on deployments/metallb-controller"
            )
        return 0
    denied = tenant_auth(state, args)
    if denied is not None:
        return denied
    tenant = state.load("tenant", {})
    nodes = tenant.setdefault("nodes", {})
    words = [a for a in args if not a.startswith("--")]
    if words[:2] == ["get", "node"]:
        if words[2] not in nodes:
            return fail(f'Error from server (NotFound): nodes "{words[2]}" not found')
        node = nodes[words[2]]
        output = option(args, "-o") or ""
        if "kubeletVersion" in output:  # what a tenant's Node reports, set by the test
            print(node.get("kubeletVersion", ""), end="")
        elif "Ready" in output:  # the Ready condition's status
            print(node.get("ready", "True"), end="")
        elif "unschedulable" in output:
            print("true" if node.get("unschedulable") else "", end="")
        return 0
    if words[0] == "uncordon":
        nodes[words[1]].pop("unschedulable", None)
        state.save("tenant", tenant)
        return 0
    if words[:2] == ["get", "pods"]:
        return 0
    if words[0] == "drain":
        if tenant.get("drain_fails"):
            return fail(f'error: unable to drain node "{words[1]}" due to error: timed out')
        nodes[words[1]]["unschedulable"] = True
        state.save("tenant", tenant)
        return 0
    if words[:2] == ["delete", "node"]:
        if words[2] not in nodes and "--ignore-not-found" not in args:
            return fail(f'Error from server (NotFound): nodes "{words[2]}" not found')
        nodes.pop(words[2], None)
        state.save("tenant", tenant)
        return 0
    return fail(f"fake kubectl: unsupported command {args!r}", 2)


def kubeadm(state: State, args: list[str]) -> int:
    root = Path(os.environ["FAKE_ROOT"])
    host = state.load("host", {})
    if args[:3] == ["version", "-o", "short"]:
        print(host.get("kubeadm_version", ""))
        return 0
    if args[:2] == ["token", "create"]:
        denied = tenant_auth(state, args)
        if denied is not None:
            return denied
        tenant = state.load("tenant", {})
        if state.counter("token") < tenant.get("token_failures", 0):
            return fail("failed to create or update bootstrap token: secrets is forbidden")
        print(tenant.get("join_command", JOIN_COMMAND))
        return 0
    if args[0] == "join":
        return kubeadm_join(state, root, host, args)
    if args[:2] == ["upgrade", "node"]:
        return 0
    if args[0] == "reset":
        refused = no_cri_socket_among_several(host, option(args, "--cri-socket"))
        if refused:
            return refused
        if host.get("reset_fails"):
            return fail("[reset] failed to remove containers: rpc error: code = Unavailable")
        (root / "etc/kubernetes/kubelet.conf").unlink(missing_ok=True)
        shutil.rmtree(root / "var/lib/kubelet", ignore_errors=True)  # its contents, in kubeadm
        return 0
    return fail(f"fake kubeadm: unsupported command {args!r}", 2)


def no_cri_socket_among_several(host: dict[str, Any], socket: str | None) -> int:
    """kubeadm's refusal to guess among several CRI endpoints (1), or 0."""
    if socket or len(host.get("cri_sockets", [CONTAINERD_SOCKET])) < 2:
        return 0
    return fail(
        "found multiple CRI endpoints on the host. Please define which one do you wish to "
        "use by setting the 'criSocket' field in the kubeadm configuration file: "
        + ", ".join(host["cri_sockets"])
    )


# The flags kubeadm accepts beside --config (its validation.go, isAllowedFlag), as far as used.
FLAGS_WITH_CONFIG = ("config", "ignore-preflight-errors", "dry-run", "kubeconfig", "node-name", "v")


def kubeadm_join(state: State, root: Path, host: dict[str, Any], args: list[str]) -> int:
    """`kubeadm join --config FILE`, the only join the lab runs: the v1beta4 file holds all."""
    import site  # the wrappers start Python with -S (faster); the config needs PyYAML

    site.main()
    import yaml

    path = option(args, "--config")
    if path is None:
        return fail(f"fake kubeadm: the lab joins with --config only: {args!r}")
    flags = [a[2:].split("=")[0] for a in args if a.startswith("--")]
    mixed = [f for f in flags if f not in FLAGS_WITH_CONFIG and not f.startswith("skip-")]
    if mixed:
        return fail(f"can not mix '--config' with arguments {mixed}")
    mode = stat.S_IMODE(Path(path).stat().st_mode)
    record(state, "join-config", [f"{path} mode={mode:o}"])
    config = yaml.safe_load(Path(path).read_text())
    state.save("join-configurations", [*state.load("join-configurations", []), config])
    if (config.get("apiVersion"), config.get("kind")) != (V1BETA4, "JoinConfiguration"):
        return fail(f"fake kubeadm: not a {V1BETA4} JoinConfiguration: {config!r}")
    registration = config.get("nodeRegistration") or {}
    extra_args = registration.get("kubeletExtraArgs") or []
    if not isinstance(extra_args, list):  # v1beta3's map, which strict decoding refuses
        return fail(
            "json: cannot unmarshal object into Go struct field "
            "NodeRegistrationOptions.nodeRegistration.kubeletExtraArgs of type []v1beta4.Arg"
        )
    refused = no_cri_socket_among_several(host, registration.get("criSocket"))
    if refused:
        return refused
    if state.load("tenant", {}).get("join_fails"):
        return fail("error execution phase kubelet-start: timed out waiting for the condition")
    words = state.load("tenant", {}).get("join_command", JOIN_COMMAND).split()
    wanted = {
        "apiServerEndpoint": words[2],
        "token": words[4],
        "caCertHashes": [
            w for w, flag in zip(words[1:], words[:-1], strict=True) if flag.endswith("-hash")
        ],
    }
    if (config.get("discovery") or {}).get("bootstrapToken") != wanted:
        return fail(f"fake kubeadm: join with an unknown token or endpoint: {config!r}")
    containerd_config = root / "etc/containerd/config.toml"
    if containerd_config.exists() and (
        '"cri"' in containerd_config.read_text() or "'cri'" in containerd_config.read_text()
    ):
        return fail("[ERROR CRI]: container runtime is not running: unknown service RuntimeService")
    node_name = registration.get("name") or os.environ["FAKE_HOSTNAME"]
    # kubeadm's kubelet-start phase: the extra arguments, in the order given, as a flags file.
    flags_file = root / "var/lib/kubelet/kubeadm-flags.env"
    flags_file.parent.mkdir(parents=True, exist_ok=True)
    line = " ".join(f"--{arg['name']}={arg['value']}" for arg in extra_args)
    flags_file.write_text(f"KUBELET_KUBEADM_ARGS={json.dumps(line)}\n")
    (root / "etc/kubernetes").mkdir(parents=True, exist_ok=True)
    (root / "etc/kubernetes/kubelet.conf").write_text("kubelet credentials\n")
    tenant = state.load("tenant", {})
    tenant.setdefault("nodes", {})[node_name] = registered_labels(root)
    state.save("tenant", tenant)
    return 0


def registered_labels(root: Path) -> dict[str, str]:
    """What the kubelet registers: every --node-labels of its command line, in order.

    kubeadm's drop-in starts it with `$KUBELET_KUBEADM_ARGS` (EnvironmentFile
    /var/lib/kubelet/kubeadm-flags.env, written by `kubeadm join`) then `$KUBELET_EXTRA_ARGS`
    (/etc/default/kubelet); systemd removes the quotes and splits the values at whitespace.
    Each --node-labels adds its pairs to the ones before; an empty one adds none.
    """
    sources = (
        ("var/lib/kubelet/kubeadm-flags.env", "KUBELET_KUBEADM_ARGS="),
        ("etc/default/kubelet", "KUBELET_EXTRA_ARGS="),
    )
    labels: dict[str, str] = {}
    for name, variable in sources:
        path = root / name
        lines = path.read_text().splitlines() if path.exists() else []
        for line in (line for line in lines if line.startswith(variable)):
            for arg in " ".join(shlex.split(line.split("=", 1)[1])).split():
                if arg.startswith("--node-labels="):
                    for pair in filter(None, arg.split("=", 1)[1].split(",")):
                        key, _, value = pair.partition("=")
                        labels[key] = value
    return labels


def sudo(state: State, args: list[str]) -> int:
    """Passwordless sudo, unless the host asks for a password (then -n makes it fail)."""
    if state.load("host", {}).get("sudo_password") or args[0] != "-n":
        return fail("sudo: a password is required")
    return subprocess.run(args[1:], check=False).returncode


def id_(state: State, args: list[str]) -> int:
    """The SSH user of a remote host is not root (uid 1000) unless the host says so."""
    if args != ["-u"]:
        return fail(f"fake id: unsupported command {args!r}", 2)
    print(state.load("host", {}).get("uid", 1000))
    return 0


def apt_get(state: State, args: list[str]) -> int:
    host = state.load("host", {})
    if host.get("offline"):
        return fail("E: Failed to fetch https://pkgs.k8s.io/  Temporary failure resolving", 100)
    if "install" not in args:
        return 0
    for package in (a for a in args[args.index("install") + 1 :] if not a.startswith("-")):
        name, _, version = package.partition("=")
        if name == "containerd":
            host["containerd_version"] = host.get("distro_containerd", "1.6.20~ds1")
            install(state, "containerd")
        if name in ("kubeadm", "kubelet", "kubectl"):
            host["kubeadm_version"] = "v" + version.rstrip("-*")
            install(state, name)
    state.save("host", host)
    return 0


def install(state: State, tool: str) -> None:
    link = state.root / "host-bin" / tool
    if not link.exists():
        link.symlink_to(state.root / "bin" / tool)


def containerd(state: State, args: list[str]) -> int:
    version = state.load("host", {})["containerd_version"]
    if args == ["--version"]:
        # containerd's own format: name, package, version, revision
        package = "github.com/containerd/containerd" + ("/v2" if version.startswith("2") else "")
        prefix = "v" if version.startswith("2") else ""
        print(f"containerd {package} {prefix}{version} 0123abcd")
        return 0
    if args == ["config", "default"]:
        print(containerd_default_config(version), end="")
        return 0
    return fail(f"fake containerd: unsupported command {args!r}", 2)


def curl(state: State, args: list[str]) -> int:
    print("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    return 0


def gpg(state: State, args: list[str]) -> int:
    Path(option(args, "-o") or "/dev/null").write_text(sys.stdin.read())
    return 0


def ip(state: State, args: list[str]) -> int:
    host = state.load("host", {})
    links = host.setdefault("links", [])
    if args[:2] == ["link", "del"]:
        if args[2] not in links:
            return fail(f'Cannot find device "{args[2]}"')
        links.remove(args[2])
        state.save("host", host)
        return 0
    return fail(f"fake ip: unsupported command {args!r}", 2)


def nvidia_smi(state: State, args: list[str]) -> int:
    gpus = state.load("host", {}).get("gpus", [])
    if not gpus:
        return fail(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9
        )
    for index, name in enumerate(gpus):
        print(f"{index}, {name}, 81920 MiB, 580.65.06")
    return 0


def nvidia_ctk(state: State, args: list[str]) -> int:
    config = Path(
        option(args, "--config") or map_paths("/etc/containerd/config.toml", state.host_root)
    )
    with config.open("a") as out:
        out.write('\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n')
    return 0


def systemctl(state: State, args: list[str]) -> int:
    """Restarting containerd loads its config: a file that is not valid TOML stops it."""
    if args == ["restart", "containerd"]:
        import tomllib

        config = map_paths("/etc/containerd/config.toml", state.host_root)
        try:
            tomllib.loads(Path(config).read_text())
        except tomllib.TOMLDecodeError as error:
            return fail(
                "Job for containerd.service failed because the control process exited with "
                f"error code (containerd: failed to load TOML: {error})"
            )
    return 0


def no_op(state: State, args: list[str]) -> int:
    return 0


TOOLS = {
    "docker": docker, "kind": kind, "kubectl": kubectl, "kubeadm": kubeadm, "sudo": sudo,
    "apt-get": apt_get, "containerd": containerd, "curl": curl, "gpg": gpg, "ip": ip,
    "nvidia-smi": nvidia_smi, "nvidia-ctk": nvidia_ctk, "systemctl": systemctl, "apt-mark": no_op,
    "modprobe": no_op, "sysctl": no_op, "kubelet": no_op, "id": id_,
}  # fmt: skip


def record(state: State, tool: str, args: list[str]) -> None:
    with (state.root / "calls.log").open("a") as log:
        log.write(json.dumps([tool, *args]) + "\n")


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    state = State(Path(os.environ["FAKE_HOST"]))
    record(state, tool, args)
    return TOOLS[tool](state, args)


# --------------------------------------------------------------------------- test API


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


class FakeHost:
    """The fake world plus a way to run a script in it and read back what happened."""

    def __init__(self, root: Path) -> None:
        self.state = State(root)
        root.mkdir(parents=True, exist_ok=True)
        for directory in (
            "bin",
            "node-bin",
            "remote-bin",
            "host-bin",
            "sys-bin",
            "home",
            "containers",
        ):
            (root / directory).mkdir(exist_ok=True)
        for tool in {*HOST_TOOLS, *REMOTE_TOOLS, *PACKAGE_TOOLS, *NODE_TOOLS}:
            wrapper = root / "bin" / tool
            python, module = shlex.quote(sys.executable), shlex.quote(__file__)
            wrapper.write_text(f'#!/bin/sh\nexec {python} -S {module} {tool} "$@"\n')
            wrapper.chmod(0o755)
        for tool in NODE_TOOLS:
            (root / "node-bin" / tool).symlink_to(root / "bin" / tool)
        for tool in REMOTE_TOOLS:
            (root / "remote-bin" / tool).symlink_to(root / "bin" / tool)
        for tool in SYSTEM_TOOLS:
            found = shutil.which(tool)
            if found:
                (root / "sys-bin" / tool).symlink_to(found)
        for directory in (
            "etc/default",
            "etc/apt/sources.list.d",
            "etc/modules-load.d",
            "etc/sysctl.d",
        ):
            (self.state.host_root / directory).mkdir(parents=True)
        self.set_remote_cgroup_v2(True)
        self.state.save("tenant", {"nodes": {}, "kubeconfig": "tenant-admin-kubeconfig"})

    def set_remote_cgroup_v2(self, unified: bool) -> None:
        """The remote host's cgroup hierarchy: v2 (the root's cgroup.controllers) or v1."""
        marker = self.state.host_root / "sys/fs/cgroup/cgroup.controllers"
        marker.parent.mkdir(parents=True, exist_ok=True)
        if unified:
            marker.write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
        else:
            marker.unlink(missing_ok=True)

    # -- running scripts

    @property
    def path(self) -> str:
        return ":".join(str(self.state.root / d) for d in ("bin", "sys-bin"))

    def run(self, script: str, stdin: str = "", **env: str) -> Result:
        """Runs a host script (what pulumi-command's local Command runs) with `env` set."""
        return self._run(script, stdin, {"PATH": self.path, **env})

    def run_remote(self, script: str, stdin: str = "", **env: str) -> Result:
        """Runs a remote script as a non-root SSH user with sudo, on the remote host's root.

        On PATH: the host's own tools, and containerd/kubeadm/kubelet/kubectl only once installed.
        """
        root = self.state.host_root
        path = ":".join(str(self.state.root / d) for d in ("host-bin", "remote-bin", "sys-bin"))
        return self._run(
            map_paths(script, root), stdin, {"PATH": path, "FAKE_ROOT": str(root), **env}
        )

    def _run(self, script: str, stdin: str, env: dict[str, str]) -> Result:
        # Scripts poll with `sleep 3`; the fakes answer at once, so the waits are shortened.
        fast = script.replace("sleep 3", "sleep 0").replace("sleep 1\n", "sleep 0\n")
        done = subprocess.run(
            ["bash", "-c", fast],
            input=stdin,
            env={"FAKE_HOST": str(self.state.root), "HOME": str(self.state.root / "home"), **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    # -- the world

    def calls(self, tool: str | None = None) -> list[list[str]]:
        log = self.state.root / "calls.log"
        lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [line for line in lines if tool is None or line[0] == tool]

    def add_container(
        self, name: str, image: str = "kindest/node:v1.35.0", networks: tuple[str, ...] = ("lab",),
        running: bool = True,
    ) -> Path:  # fmt: skip
        containers = self.state.load("containers", {})
        containers[name] = new_container(image, list(networks), running)
        self.state.save("containers", containers)
        root = self.state.container_root(name)
        (root / "etc/kubernetes").mkdir(parents=True, exist_ok=True)
        (root / "etc/default").mkdir(parents=True, exist_ok=True)
        # kindest/node's own file (kind images/base/files/etc/default/kubelet), no final newline
        (root / "etc/default/kubelet").write_text(
            "KUBELET_EXTRA_ARGS=--runtime-cgroups=/system.slice/containerd.service"
        )
        return root

    def containers(self) -> dict[str, Any]:
        return self.state.load("containers", {})

    def add_kind_cluster(self, name: str, image: str, network: str) -> None:
        clusters = self.state.load("kind", {})
        clusters[name] = {"kubeconfig": f"kubeconfig-of-{name}\n", "ip_family": "ipv4"}
        self.state.save("kind", clusters)
        self.add_container(f"{name}-control-plane", image=image, networks=(network,))

    @property
    def tenant_kubeconfig(self) -> str:
        return self.state.load("tenant", {})["kubeconfig"]

    def tenant_nodes(self) -> dict[str, dict[str, str]]:
        return self.state.load("tenant", {})["nodes"]

    def join_configurations(self) -> list[dict[str, Any]]:
        """The config file of each `kubeadm join --config`, as kubeadm read it."""
        return self.state.load("join-configurations", [])

    def set_tenant(self, **fields: Any) -> None:
        tenant = self.state.load("tenant", {})
        tenant.update(fields)
        self.state.save("tenant", tenant)

    def set_remote(self, **fields: Any) -> None:
        """Remote host facts: containerd_version, distro_containerd, kubeadm_version, gpus,
        cri_sockets, links (network devices), offline (apt-get fails), uid (of the SSH user,
        1000), sudo_password (sudo asks for one), reset_fails (kubeadm reset fails)."""
        host = self.state.load("host", {})
        host.update(fields)
        self.state.save("host", host)
        for tool, key in (("containerd", "containerd_version"), ("kubeadm", "kubeadm_version")):
            if key in fields:
                install(self.state, tool)

    def remote(self) -> dict[str, Any]:
        return self.state.load("host", {})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
