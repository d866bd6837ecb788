"""Scripts for remote GPU hosts, run over SSH by pulumi-command's remote Command.

Values are baked in with shlex quoting (an SSH server usually refuses client environment
variables); the one secret, the tenant's admin kubeconfig, arrives on stdin. The NVIDIA
driver and container toolkit are checked and reported, never installed: that is the host
owner's decision. Debian/Ubuntu hosts only, where kubeadm's packages come from pkgs.k8s.io.
"""

from __future__ import annotations

import shlex

from builders.kubeadm import JOIN_CONFIG_PATH, read_join_command, write_join_configuration
from builders.scripts import KUBECONFIG_PRELUDE, STRICT
from labconfig.versions import kubernetes_minor, minor_series

# Root or passwordless sudo: a prompt would hang a non-interactive SSH session.
AS_ROOT = 'SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"\n'
# Named on every kubeadm call: with a second runtime (cri-dockerd, CRI-O) kubeadm refuses to guess.
CRI_SOCKET = "unix:///run/containerd/containerd.sock"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
# What the host preflight reads too (preflight/host_facts.py): only the cgroup v2 root has it.
CGROUP_V2_MARKER = "/sys/fs/cgroup/cgroup.controllers"
# Kubernetes v1.35 is the last minor that supports containerd 1.x.
FIRST_MINOR_WITHOUT_CONTAINERD_1 = (1, 36)


def required_containerd_major(kubernetes_version: str) -> int:
    return 2 if kubernetes_minor(kubernetes_version) >= FIRST_MINOR_WITHOUT_CONTAINERD_1 else 1


def prepare_script(node_name: str, kubernetes_version: str, gpu_mode: str) -> str:
    """Kernel settings, containerd and kubeadm/kubelet at the tenant's exact version; GPU report."""
    version = kubernetes_version.lstrip("v")
    minor = minor_series(kubernetes_version)
    node = shlex.quote(node_name)
    return (
        STRICT
        + AS_ROOT
        + f"""\
command -v apt-get >/dev/null || {{
  echo {node}": only Debian/Ubuntu hosts are prepared automatically" >&2; exit 1; }}
if [ ! -e {CGROUP_V2_MARKER} ]; then
  echo {node}": the host runs cgroup v1; the kubelet config Kamaji gives the tenant keeps" \\
    "failCgroupV1: true, so the kubelet would not start after kubeadm join. Boot with" \\
    "systemd.unified_cgroup_hierarchy=1 (GRUB_CMDLINE_LINUX in /etc/default/grub, then" \\
    "update-grub and a reboot), then run pulumi up again" >&2
  exit 1
fi
printf 'overlay\\nbr_netfilter\\n' | $SUDO tee /etc/modules-load.d/kamaji-hami-lab.conf >/dev/null
$SUDO modprobe overlay
$SUDO modprobe br_netfilter
printf 'net.bridge.bridge-nf-call-iptables=1\\nnet.ipv4.ip_forward=1\\n' \\
  | $SUDO tee /etc/sysctl.d/99-kamaji-hami-lab.conf >/dev/null
$SUDO sysctl --system >/dev/null
export DEBIAN_FRONTEND=noninteractive
if ! command -v containerd >/dev/null; then
  $SUDO apt-get update -q
  $SUDO apt-get install -yq containerd
fi
"""
        + _containerd_version_check(node, kubernetes_version)
        + _containerd_config_reconcile(node)
        + f"""\
if [ "$(kubeadm version -o short 2>/dev/null || true)" != "v{version}" ]; then
  $SUDO apt-get update -q
  $SUDO apt-get install -yq apt-transport-https ca-certificates curl gpg
  $SUDO mkdir -p -m 755 /etc/apt/keyrings
  repo=https://pkgs.k8s.io/core:/stable:/v{minor}/deb/
  keyring=/etc/apt/keyrings/kubernetes-apt-keyring.gpg
  curl -fsSL "${{repo}}Release.key" | $SUDO gpg --batch --yes --dearmor -o "$keyring"
  echo "deb [signed-by=$keyring] $repo /" \\
    | $SUDO tee /etc/apt/sources.list.d/kubernetes.list >/dev/null
  $SUDO apt-get update -q
  $SUDO apt-get install -yq --allow-change-held-packages \\
    'kubelet={version}-*' 'kubeadm={version}-*' 'kubectl={version}-*'
  $SUDO apt-mark hold kubelet kubeadm kubectl >/dev/null
fi
$SUDO systemctl enable --now kubelet >/dev/null 2>&1 || true
"""
        + (_gpu_report(node) if gpu_mode == "real" else "")
        + f'echo {node}": prepared for Kubernetes v{version}" >&2\n'
    )


def _containerd_version_check(node: str, kubernetes_version: str) -> str:
    """Stops on a containerd the tenant's kubelet no longer supports, with the fix."""
    required = required_containerd_major(kubernetes_version)
    if required == 1:
        return ""
    # `containerd --version` prints: containerd <package> <version> <revision>
    return f"""\
containerd_version=$(containerd --version | awk '{{print $3}}')
containerd_version=${{containerd_version#v}}
if [ "${{containerd_version%%.*}}" -lt {required} ]; then
  echo {node}": containerd $containerd_version is too old for Kubernetes {kubernetes_version}," \\
    "which needs containerd {required}.x (v1.35 was the last minor for containerd 1.x):" \\
    "install containerd {required}.x (e.g. the containerd.io package from Docker's apt" \\
    "repository), then run pulumi up again" >&2
  exit 1
fi
"""


# The CRI plugin's runc options table, by the config file's `version`: containerd 1.x writes
# version 2, containerd 2.x version 3 (and migrates a version 2 file when it loads it).
RUNC_OPTIONS_TABLES = {
    2: 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options',
    3: "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options",
}
# The top-level `version` of a containerd config (TOML top-level keys come before any table).
CONFIG_VERSION_AWK = r"""/^[ \t]*\[/ { exit }
$1 ~ /^[ \t]*version[ \t]*$/ { gsub(/[ \t]/, "", $2); print $2; exit }"""
# Adds `SystemdCgroup = true` as the first key of the runc options table `table`, indented
# as its header; headers compare without quotes and blanks, as TOML reads them.
ADD_SYSTEMD_CGROUP_AWK = r"""function bare(text) { gsub("[\"" q " \t]", "", text); return text }
{ print }
!added && bare($0) == "[" bare(table) "]" {
  match($0, /^[ \t]*/); print substr($0, 1, RLENGTH) "  SystemdCgroup = true"; added = 1
}"""


def _containerd_config_reconcile(node: str) -> str:
    """Makes containerd serve CRI with the systemd cgroup driver the kubelet is set up with.

    An existing config is merged, not skipped: Docker's containerd.io package ships one with
    `disabled_plugins = ["cri"]` and no CRI section (then containerd's defaults are the base,
    the old file kept as .bak), and older defaults say `SystemdCgroup = false`. containerd
    2.0.0-2.0.6 and 2.1.0-2.1.4 leave the key out of their defaults altogether: it is added
    to the runc options table of the file's config version, with awk (POSIX, on every
    Debian/Ubuntu image; python3 is not on minimal ones). containerd restarts only when the
    file changed.
    """
    config = CONTAINERD_CONFIG
    tables = "\n".join(
        f"    {version}) runc_options={shlex.quote(table)} ;;"
        for version, table in RUNC_OPTIONS_TABLES.items()
    )
    return f"""\
$SUDO mkdir -p /etc/containerd
before=$($SUDO cat {config} 2>/dev/null | cksum)
if ! $SUDO grep -q 'SystemdCgroup' {config} 2>/dev/null; then
  if $SUDO test -f {config}; then $SUDO cp {config} {config}.bak; fi
  containerd config default | $SUDO tee {config} >/dev/null
fi
if ! $SUDO grep -q 'SystemdCgroup' {config}; then
  case "$($SUDO awk -F= {shlex.quote(CONFIG_VERSION_AWK)} {config})" in
{tables}
    *) runc_options="" ;;
  esac
  if [ -n "$runc_options" ]; then
    # an assignment: a failing awk stops the script (set -e) before the file is rewritten
    merged=$($SUDO awk -v q="'" -v table="$runc_options" {shlex.quote(ADD_SYSTEMD_CGROUP_AWK)} \\
      {config})
    printf '%s\\n' "$merged" | $SUDO tee {config} >/dev/null
  fi
fi
drop_cri="s/[\\"'][^\\"']*cri[^\\"']*[\\"'] *,\\{{0,1\\}} *//g; s/, *]/]/"
$SUDO sed -i -e "/^ *disabled_plugins *=/{{$drop_cri}}" \\
  -e 's/SystemdCgroup = false/SystemdCgroup = true/' {config}
if $SUDO grep -Eq "^ *disabled_plugins *=.*cri" {config} \\
    || ! $SUDO grep -q 'SystemdCgroup = true' {config}; then
  echo {node}": could not enable CRI with SystemdCgroup = true in {config}: fix it by hand" >&2
  exit 1
fi
if [ "$($SUDO cat {config} | cksum)" != "$before" ]; then
  $SUDO systemctl restart containerd
fi
"""


def _gpu_report(node: str) -> str:
    return f"""\
if ! nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader >&2; then
  echo {node}": no working NVIDIA driver (nvidia-smi failed): install the driver first" >&2
  exit 1
fi
if ! command -v nvidia-ctk >/dev/null; then
  echo {node}": NVIDIA Container Toolkit missing: install nvidia-container-toolkit first" >&2
  exit 1
fi
if ! grep -q 'nvidia' {CONTAINERD_CONFIG} 2>/dev/null; then
  $SUDO nvidia-ctk runtime configure --runtime=containerd >&2
  $SUDO systemctl restart containerd
fi
echo {node}": NVIDIA driver and container toolkit present" >&2
"""


def remote_join_script(
    node_name: str, node_labels: str = "", join_timeout_seconds: int = 120
) -> str:
    """Joins the host once, registering it with `node_labels` (`key=value,...`).

    The tenant's admin kubeconfig is read from stdin and removed again; the token reaches
    kubeadm in the JoinConfiguration, never on a command line.
    """
    node = shlex.quote(node_name)
    write_config = write_join_configuration(
        f"$SUDO sh -c 'umask 077 && cat > {JOIN_CONFIG_PATH}'",
        node_labels=node_labels,
        node_name=node_name,
        cri_socket=CRI_SOCKET,
    )
    return (
        STRICT
        + AS_ROOT
        + f"""\
if $SUDO test -f /etc/kubernetes/kubelet.conf; then
  cat >/dev/null; echo {node}" already joined" >&2; exit 0
fi
$SUDO install -d -m 700 /etc/kubernetes
# Armed before the write: a write that fails half-way leaves no copy of the admin credential.
trap '$SUDO rm -f /etc/kubernetes/lab-admin.conf {JOIN_CONFIG_PATH}' EXIT
$SUDO sh -c 'umask 077 && cat > /etc/kubernetes/lab-admin.conf'
deadline=$(( $(date +%s) + {join_timeout_seconds} ))
until join=$($SUDO kubeadm token create --print-join-command --ttl 30m \\
    --kubeconfig /etc/kubernetes/lab-admin.conf 2>/dev/null); do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo {node}": no bootstrap token from the tenant within {join_timeout_seconds}s" >&2; exit 1
  fi
  sleep 3
done
$SUDO rm -f /etc/kubernetes/lab-admin.conf
"""
        + read_join_command(node)
        + write_config
        + f"""\
$SUDO kubeadm join --config {JOIN_CONFIG_PATH} >&2
echo {node}" joined" >&2
"""
    )


def remote_reset_script(node_name: str) -> str:
    """Undoes the join on destroy, so the host can join again later, clean.

    `kubeadm reset` empties /var/lib/kubelet, the kubelet's labels (kubeadm-flags.env)
    included, but leaves the CNI configuration and network devices behind (it says so):
    flannel's config and its VXLAN device go too.
    """
    node = shlex.quote(node_name)
    return (
        STRICT
        + AS_ROOT
        + f"""\
$SUDO kubeadm reset -f --cri-socket {CRI_SOCKET} >&2 || echo {node}": kubeadm reset failed" >&2
$SUDO rm -f /etc/cni/net.d/10-flannel.conflist
$SUDO ip link del flannel.1 2>/dev/null || true
"""
    )


def node_registered_script(timeout_seconds: int = 180) -> str:
    """Waits (locally) for the node object in the tenant. Needs NODE_NAME and LAB_KUBECONFIG."""
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + f"""\
deadline=$(( $(date +%s) + {timeout_seconds} ))
until kubectl get node "$NODE_NAME" >/dev/null 2>&1; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$NODE_NAME did not register within {timeout_seconds}s" >&2; exit 1
  fi
  sleep 3
done
"""
    )


def remote_upgrade_node_script(node_name: str) -> str:
    """kubeadm's worker upgrade on a joined host, after its packages moved to the new version:
    `kubeadm upgrade node` (the kubelet configuration of the cluster's new version), then the
    kubelet restarted. A host not joined yet is left to the join (fact
    `kubeadm-upgrade-node-on-a-worker`)."""
    node = shlex.quote(node_name)
    return (
        STRICT
        + AS_ROOT
        + f"""\
if ! $SUDO test -f /etc/kubernetes/kubelet.conf; then
  echo {node}": not joined yet: nothing to upgrade" >&2; exit 0
fi
$SUDO kubeadm upgrade node >&2
$SUDO systemctl daemon-reload
$SUDO systemctl restart kubelet
echo {node}": kubeadm upgrade node done, kubelet restarted" >&2
"""
    )
