"""Shell scripts the lab runs on the host through pulumi-command, built as plain strings.

Values reach the scripts through environment variables, never by pasting them into the text,
so a secret (a kubeconfig) never appears in a command line or in Pulumi's diff, and quoting
cannot break. Every script is idempotent: re-running it after success changes nothing.
"""

from __future__ import annotations

import yaml

from builders.kubeadm import (
    JOIN_CONFIG_PATH,
    read_join_command,
    shell_value,
    write_join_configuration,
)

STRICT = "set -eu\n"
# kindest/node is a container, not a machine: kubeadm's kernel-config check, the tools it
# looks for and the swap check do not apply (kind's own nodes skip the whole preflight phase).
CONTAINER_PREFLIGHT_IGNORED = ("SystemVerification", "FileExisting", "Swap")

# Writes $LAB_KUBECONFIG (secret contents) to a private temp file for kubectl, removed on exit.
KUBECONFIG_PRELUDE = """\
kubeconfig_file=$(mktemp)
trap 'rm -f "$kubeconfig_file"' EXIT
printf '%s\\n' "$LAB_KUBECONFIG" > "$kubeconfig_file"
export KUBECONFIG="$kubeconfig_file"
"""


def kind_cluster_config(name: str, node_image: str) -> str:
    """kind's cluster config: one IPv4 control-plane node from a digest-pinned image."""
    config = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": name,
        "networking": {"ipFamily": "ipv4"},
        "nodes": [{"role": "control-plane", "image": node_image}],
    }
    return yaml.safe_dump(config, sort_keys=False)


def kind_create_script() -> str:
    """Creates the cluster unless it exists, then prints its kubeconfig (the only stdout).

    Needs KIND_CLUSTER_NAME, KIND_CONFIG, KIND_NODE_IMAGE and KIND_EXPERIMENTAL_DOCKER_NETWORK,
    which points kind at the lab's own IPv4-only network instead of the dual-stack one it would
    create. A cluster of that name is reused only if its node runs the pinned image on the lab
    network: anything else (a leftover on kind's own `kind` network, another image) stops here.
    kind writes its context to a temp file, not to the user's ~/.kube/config.
    """
    return (
        STRICT
        + """\
kind_kubeconfig=$(mktemp)
config_file=$(mktemp)
trap 'rm -f "$kind_kubeconfig" "$config_file"' EXIT
node="$KIND_CLUSTER_NAME-control-plane"
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
  image=$(docker inspect -f '{{.Config.Image}}' "$node" 2>/dev/null || true)
  network_names='{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}'
  networks=$(docker inspect -f "$network_names" "$node" 2>/dev/null || true)
  if [ "$image" != "$KIND_NODE_IMAGE" ]; then
    echo "kind cluster $KIND_CLUSTER_NAME exists, but $node runs '${image:-no container}'," \\
      "not $KIND_NODE_IMAGE: remove it (kind delete cluster --name $KIND_CLUSTER_NAME)" \\
      "or set another managementClusterName" >&2
    exit 1
  fi
  case " $networks" in
    *" $KIND_EXPERIMENTAL_DOCKER_NETWORK "*) ;;
    *)
      echo "kind cluster $KIND_CLUSTER_NAME exists, but $node is on the network(s)" \\
        "'${networks% }', not $KIND_EXPERIMENTAL_DOCKER_NETWORK: remove it" \\
        "(kind delete cluster --name $KIND_CLUSTER_NAME) or set another managementClusterName" >&2
      exit 1 ;;
  esac
  echo "kind cluster $KIND_CLUSTER_NAME exists on $KIND_EXPERIMENTAL_DOCKER_NETWORK; reusing it" >&2
else
  printf '%s\\n' "$KIND_CONFIG" > "$config_file"
  kind create cluster --name "$KIND_CLUSTER_NAME" --config "$config_file" \\
    --kubeconfig "$kind_kubeconfig" --wait 300s >&2
fi
kind get kubeconfig --name "$KIND_CLUSTER_NAME"
"""
    )


def kind_delete_script() -> str:
    """Deletes the cluster; kind edits a temp kubeconfig, not the user's ~/.kube/config."""
    return (
        STRICT
        + """\
kind_kubeconfig=$(mktemp)
trap 'rm -f "$kind_kubeconfig"' EXIT
kind delete cluster --name "$KIND_CLUSTER_NAME" --kubeconfig "$kind_kubeconfig"
"""
    )


def server_dry_run_wait(manifest_env: str, what: str, timeout_seconds: int) -> str:
    """Retries a server-side dry run of $<manifest_env> until the API server admits it.

    A dry run goes through the admission webhooks without creating anything, so success means
    the real create cannot race a webhook that does not serve yet or lacks its CA.
    Runs after KUBECONFIG_PRELUDE.
    """
    return f"""\
manifest=$(mktemp)
errors=$(mktemp)
trap 'rm -f "$kubeconfig_file" "$manifest" "$errors"' EXIT
printf '%s\\n' "${manifest_env}" > "$manifest"
deadline=$(( $(date +%s) + {timeout_seconds} ))
until kubectl apply --dry-run=server -f "$manifest" >/dev/null 2>"$errors"; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "the API server still rejects {what} after {timeout_seconds}s:" >&2
    cat "$errors" >&2
    exit 1
  fi
  sleep 3
done
echo "the API server admits {what}" >&2
"""


def metallb_webhook_wait_script(timeout_seconds: int = 300) -> str:
    """Waits until MetalLB's webhook admits the real pool manifest (server-side dry run).

    The controller turns Ready before its webhook serves. Needs LAB_KUBECONFIG and
    METALLB_MANIFEST.
    """
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + "kubectl -n metallb-system rollout status deployment/metallb-controller"
        + f" --timeout={timeout_seconds}s\n"
        + server_dry_run_wait("METALLB_MANIFEST", "the MetalLB pool", timeout_seconds)
    )


def control_plane_admission_wait_script(timeout_seconds: int = 300) -> str:
    """Waits until Kamaji's webhooks admit the TenantControlPlane (server-side dry run).

    Kamaji's webhooks and CRD get their CA from cert-manager's injector, which may lag behind
    the Kamaji release turning Ready. Needs LAB_KUBECONFIG and TCP_MANIFEST.
    """
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + server_dry_run_wait("TCP_MANIFEST", "the TenantControlPlane", timeout_seconds)
    )


def api_server_healthz_wait_script(timeout_seconds: int = 300) -> str:
    """Waits until the tenant API server answers `ok` on its MetalLB address, from this host.

    Kamaji reports the control plane Ready from the address in its spec, whether or not MetalLB
    announces it; the joins and the tenant provider talk to that address next. /healthz is
    readable without credentials. Needs API_ENDPOINT (https://<address>:<port>).
    """
    return (
        STRICT
        + f"""\
if ! command -v curl >/dev/null; then
  echo "curl is needed to check $API_ENDPOINT from this host; install it" >&2
  exit 1
fi
deadline=$(( $(date +%s) + {timeout_seconds} ))
until [ "$(curl -ks --max-time 5 "$API_ENDPOINT/healthz" 2>/dev/null)" = ok ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$API_ENDPOINT/healthz did not answer ok from this host within {timeout_seconds}s:" >&2
    curl -ksS --max-time 5 "$API_ENDPOINT/healthz" >&2 || true
    echo "check that MetalLB announces the address and that this host reaches the lab network" >&2
    exit 1
  fi
  sleep 3
done
echo "$API_ENDPOINT answers" >&2
"""
    )


def _consecutive_wait_script(
    check: str,
    give_up: str,
    show: str,
    done: str,
    timeout_seconds: int,
    consecutive: int,
    interval_seconds: int,
    before: str = "",
) -> str:
    """Waits until the shell condition `check` holds `consecutive` times in a row: a Service in
    front of a control plane that is rolling may answer from either pod. After `timeout_seconds`
    it prints `give_up` (shell words for echo) and what `show` prints, and exits 1. `before`
    runs first (after `set -eu`)."""
    return (
        STRICT
        + before
        + KUBECONFIG_PRELUDE
        + f"""deadline=$(( $(date +%s) + {timeout_seconds} ))
held=0
while [ "$held" -lt {consecutive} ]; do
  if {check}; then
    held=$((held + 1))
  else
    held=0
  fi
  if [ "$held" -lt {consecutive} ] && [ "$(date +%s)" -ge "$deadline" ]; then
    echo {give_up} >&2
    {show} >&2 || true
    exit 1
  fi
  [ "$held" -ge {consecutive} ] || sleep {interval_seconds}
done
echo {done} >&2
"""
    )


def tenant_admin_authorized_wait_script(
    timeout_seconds: int = 300, consecutive: int = 3, interval_seconds: int = 2
) -> str:
    """Waits until the tenant's admin kubeconfig may do everything (`kubectl auth can-i '*' '*'`),
    `consecutive` times in a row.

    Kamaji reports the control plane Ready, and /healthz answers, a few seconds before its
    kubeadm phase has bound the admin user's group (`kubeadm:cluster-admins`) to cluster-admin:
    the first objects the program creates in the tenant were refused as forbidden in a whole
    lab's run (docs/upstream-facts/tenant.md, kamaji-admin-rbac-after-ready). Needs
    LAB_KUBECONFIG (the tenant's admin kubeconfig).
    """
    can_i = "kubectl --request-timeout=10s auth can-i '*' '*' --all-namespaces"
    return _consecutive_wait_script(
        check=f'[ "$({can_i} 2>/dev/null || true)" = yes ]',
        give_up=(
            f"\"the tenant's admin kubeconfig was not granted cluster-admin within "
            f'{timeout_seconds}s;" "Kamaji binds kubeadm:cluster-admins to it once the control'
            ' plane is set up:"'
        ),
        show=can_i,
        done='"the tenant\'s admin kubeconfig is cluster-admin"',
        timeout_seconds=timeout_seconds,
        consecutive=consecutive,
        interval_seconds=interval_seconds,
    )


def kamaji_rollout_wait(timeout_seconds: int, interval_seconds: int, then: str = "") -> str:
    """Shell that waits, on the management cluster, until Kamaji has reconciled the
    TenantControlPlane's current spec (`status.observedGeneration` equals its generation) and
    the control plane's Deployment (named after it) has rolled out: from then on only API
    server pods with the spec's flags are behind the Service.

    Needs MANAGEMENT_KUBECONFIG, TCP_NAME and TCP_NAMESPACE (upstream fact
    `kamaji-observed-generation-after-reconcile`). `then` runs after the rollout, while
    `on_management` and `$tcp` still work."""
    return f"""\
management_kubeconfig=$(mktemp)
trap 'rm -f "$management_kubeconfig"' EXIT
printf '%s\\n' "$MANAGEMENT_KUBECONFIG" > "$management_kubeconfig"
on_management() {{ kubectl --kubeconfig "$management_kubeconfig" -n "$TCP_NAMESPACE" "$@"; }}
tcp="tenantcontrolplane/$TCP_NAME"
deadline=$(( $(date +%s) + {timeout_seconds} ))
until on_management get "$tcp" --request-timeout=10s \\
    -o 'jsonpath={{.metadata.generation}} {{.status.observedGeneration}}' 2>/dev/null \\
    | awk '$1 != "" && $1 == $2 {{ found = 1 }} END {{ exit !found }}'; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "Kamaji did not reconcile $TCP_NAMESPACE/$TCP_NAME's spec within {timeout_seconds}s" \\
      "(status.observedGeneration behind metadata.generation); see its conditions:" >&2
    on_management get "$tcp" --request-timeout=10s -o yaml >&2 || true
    exit 1
  fi
  sleep {interval_seconds}
done
left=$(( deadline - $(date +%s) ))
if [ "$left" -lt 1 ]; then left=1; fi
if ! on_management rollout status "deployment/$TCP_NAME" --timeout="${{left}}s" >&2; then
  echo "Kamaji's Deployment $TCP_NAMESPACE/$TCP_NAME did not finish rolling out" \\
    "within {timeout_seconds}s" >&2
  exit 1
fi
{then}rm -f "$management_kubeconfig"
"""


def kamaji_kube_proxy_gone_wait_script(
    timeout_seconds: int = 300, interval_seconds: int = 2
) -> str:
    """Waits until the tenant holds none of the kube-proxy objects Kamaji's addon made (those
    named as kubeadm names them and labelled `kamaji.clastix.io/project: kamaji`).

    A lab deployed with Kamaji's addon turns it off when it moves to the program's own
    kube-proxy; Kamaji then deletes its labelled objects, while the program creates its own
    under the same names. Creating one first would fail (`already exists`); taking it over
    would leave it to Kamaji's cleanup (fact kamaji-kube-proxy-addon-is-kubeadms-default).
    On a new tenant it passes at once. Needs LAB_KUBECONFIG (the tenant's admin kubeconfig).
    """
    label = "-l kamaji.clastix.io/project=kamaji"
    namespaced = (
        "kubectl --request-timeout=10s get -n kube-system "
        f"daemonsets,configmaps,serviceaccounts,roles,rolebindings {label} "
        "--field-selector metadata.name=kube-proxy -o name"
    )
    binding = (
        f"kubectl --request-timeout=10s get clusterrolebindings {label} "
        "--field-selector metadata.name=kubeadm:node-proxier -o name"
    )
    return _consecutive_wait_script(
        check=f'{{ left=$({namespaced}) && left="$left$({binding})" && [ -z "$left" ]; }}',
        give_up=(
            f"\"Kamaji's kube-proxy addon objects are still in the tenant after "
            f'{timeout_seconds}s;" "Kamaji deletes them once the TenantControlPlane has no '
            'kubeProxy addon:"'
        ),
        show=f"{{ {namespaced}; {binding}; }}",
        done='"no kube-proxy object of Kamaji\'s addon in the tenant"',
        timeout_seconds=timeout_seconds,
        consecutive=1,
        interval_seconds=interval_seconds,
    )


def admission_policy_api_wait_script(
    timeout_seconds: int = 300, consecutive: int = 3, interval_seconds: int = 2
) -> str:
    """Waits until the tenant API server serves MutatingAdmissionPolicies under POLICY_API
    (e.g. admissionregistration.k8s.io/v1beta1), `consecutive` times in a row.

    On v1.34-v1.35 a tenant serves them only with the flags the program passes through Kamaji;
    after those flags change, Kamaji rolls the API server while the control plane still reports
    Ready. So the gate first waits for that rollout itself (`kamaji_rollout_wait`), then for the
    answers in a row (the Service's endpoints follow the rollout a moment later). Needs
    LAB_KUBECONFIG (the tenant's admin kubeconfig), POLICY_API and what `kamaji_rollout_wait`
    needs.
    """
    get = 'kubectl --request-timeout=10s get --raw "/apis/$POLICY_API"'
    return _consecutive_wait_script(
        check=f'{get} 2>/dev/null | grep -q \'"name":"mutatingadmissionpolicies"\'',
        give_up=(
            '"the tenant API server did not serve mutatingadmissionpolicies in $POLICY_API"'
            f' "within {timeout_seconds}s; on v1.34-v1.35 it needs"'
            ' "--feature-gates=MutatingAdmissionPolicy=true and --runtime-config in the"'
            ' "TenantControlPlane\'s spec.controlPlane.deployment.extraArgs.apiServer"'
        ),
        show=get,
        done='"mutatingadmissionpolicies served in $POLICY_API"',
        timeout_seconds=timeout_seconds,
        consecutive=consecutive,
        interval_seconds=interval_seconds,
        before=kamaji_rollout_wait(timeout_seconds, interval_seconds),
    )


def control_plane_version_wait_script(
    timeout_seconds: int = 900, consecutive: int = 3, interval_seconds: int = 2
) -> str:
    """Waits until the tenant's control plane runs VERSION: Kamaji has reconciled the spec and
    rolled its Deployment out (`kamaji_rollout_wait`), reports VERSION as its status version
    with the version status Ready (fact `kamaji-status-version-follows-spec-when-ready`), and
    the API server's /version says VERSION `consecutive` times in a row.

    The workers wait for it: kubeadm's order upgrades the control plane before any kubelet,
    and a kubelet may never be newer than its API server (fact `kubernetes-kubelet-skew`). On a
    new tenant it passes as soon as the control plane serves. Needs LAB_KUBECONFIG (the
    tenant's admin kubeconfig), VERSION and what `kamaji_rollout_wait` needs.
    """
    status = (
        "{.status.kubernetesResources.version.version} {.status.kubernetesResources.version.status}"
    )
    at_version = f"""\
deadline=$(( $(date +%s) + {timeout_seconds} ))
until [ "$(on_management get "$tcp" --request-timeout=10s -o 'jsonpath={status}' \\
    2>/dev/null || true)" = "$VERSION Ready" ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "Kamaji did not report $TCP_NAMESPACE/$TCP_NAME at $VERSION and Ready within" \\
      "{timeout_seconds}s (status version and state: $(on_management get "$tcp" \\
      --request-timeout=10s -o 'jsonpath={status}' 2>/dev/null || true)); its conditions:" >&2
    on_management get "$tcp" --request-timeout=10s -o yaml >&2 || true
    exit 1
  fi
  sleep {interval_seconds}
done
"""
    # The server's /version alone: `kubectl version` also prints the client's own.
    version = "kubectl --request-timeout=10s get --raw /version"
    return _consecutive_wait_script(
        check=f'{version} 2>/dev/null | grep -q "\\"gitVersion\\": *\\"$VERSION\\""',
        give_up=(
            f'"the tenant API server did not answer /version with $VERSION within'
            f' {timeout_seconds}s:"'
        ),
        show=version,
        done='"the control plane runs $VERSION"',
        timeout_seconds=timeout_seconds,
        consecutive=consecutive,
        interval_seconds=interval_seconds,
        before=kamaji_rollout_wait(timeout_seconds, interval_seconds, then=at_version),
    )


def worker_join_script(join_timeout_seconds: int = 120) -> str:
    """Joins a kindest/node container to its tenant with kubeadm, once.

    Needs NODE_NAME, NODE_LABELS (`key=value,...` the kubelet registers the node with; may be
    empty) and LAB_KUBECONFIG (the tenant's admin kubeconfig). The token is created inside the
    node with the node's own kubeadm (the host needs none), retried because Kamaji's bootstrap
    RBAC lands in the tenant a little after the control plane reports Ready. It reaches the
    node in the JoinConfiguration, on stdin, never on a command line.
    """
    write_config = write_join_configuration(
        f"docker exec -i \"$NODE_NAME\" sh -c 'umask 077 && cat > {JOIN_CONFIG_PATH}'",
        node_labels=shell_value("NODE_LABELS"),
        ignore_preflight_errors=CONTAINER_PREFLIGHT_IGNORED,
    )
    return (
        STRICT
        + f"""\
deadline=$(( $(date +%s) + 60 ))
until docker logs "$NODE_NAME" 2>&1 | grep -qE 'Reached target .*Multi-User System'; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$NODE_NAME: systemd did not reach multi-user within 60s" >&2; exit 1
  fi
  sleep 1
done
if docker exec "$NODE_NAME" test -f /etc/kubernetes/kubelet.conf; then
  echo "$NODE_NAME already joined" >&2; exit 0
fi
# The labels go inside the config's double quotes: only what a label list may hold.
case "$NODE_LABELS" in
  *[!A-Za-z0-9._/=,-]*)
    echo "$NODE_NAME: NODE_LABELS is not a list of labels: $NODE_LABELS" >&2; exit 1 ;;
esac
docker exec "$NODE_NAME" modprobe br_netfilter 2>/dev/null || true
# Armed before the write: a write that fails half-way leaves no copy of the admin credential.
trap 'docker exec "$NODE_NAME" rm -f /etc/kubernetes/lab-admin.conf {JOIN_CONFIG_PATH}' EXIT
printf '%s\\n' "$LAB_KUBECONFIG" | docker exec -i "$NODE_NAME" \\
  sh -c 'umask 077 && cat > /etc/kubernetes/lab-admin.conf'
deadline=$(( $(date +%s) + {join_timeout_seconds} ))
until join=$(docker exec "$NODE_NAME" kubeadm token create --print-join-command --ttl 30m \\
    --kubeconfig /etc/kubernetes/lab-admin.conf 2>/dev/null); do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$NODE_NAME: no bootstrap token from the tenant within {join_timeout_seconds}s" >&2
    exit 1
  fi
  sleep 3
done
docker exec "$NODE_NAME" rm -f /etc/kubernetes/lab-admin.conf
"""
        + read_join_command('"$NODE_NAME"')
        + write_config
        + f"""\
docker exec "$NODE_NAME" kubeadm join --config {JOIN_CONFIG_PATH} >&2
echo "$NODE_NAME joined" >&2
"""
    )


def kamaji_datastores_delete_script(timeout_seconds: int = 180) -> str:
    """Deletes the DataStores of Kamaji's release while Kamaji still runs, on destroy, before the
    release goes.

    A DataStore carries Kamaji's finalizer, which only Kamaji's own controller removes once no
    TenantControlPlane uses it; `helm uninstall` deletes the DataStore and the controller at once,
    so the DataStore stayed Terminating and the release's delete waited on it (a whole lab's
    destroy; fact kamaji-datastore-finalizer). Only the release's own DataStores (its instance
    label): others on an existing cluster are not the lab's. Needs LAB_KUBECONFIG (the management
    cluster's) and RELEASE; an unreachable cluster (a broken lab) only warns.
    """
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + f"""datastores="datastores.kamaji.clastix.io"
selector="app.kubernetes.io/instance=$RELEASE"
if ! kubectl --request-timeout=10s get "$datastores" -l "$selector" >/dev/null 2>&1; then
  echo "warning: cannot list Kamaji's DataStores (cluster unreachable or Kamaji gone)" >&2
  exit 0
fi
if ! kubectl --request-timeout=20s delete "$datastores" -l "$selector" --wait \\
    --timeout={timeout_seconds}s >&2; then
  echo "Kamaji's DataStores were not deleted within {timeout_seconds}s: a TenantControlPlane" \\
    "of another stack still uses one; destroy that stack first:" >&2
  kubectl --request-timeout=10s get "$datastores" -l "$selector" \\
    -o custom-columns=NAME:.metadata.name,USED-BY:.status.usedBy >&2 || true
  exit 1
fi
"""
    )


# One line per pod a drain takes away (not DaemonSet pods: the drain leaves them), saying
# whether anything re-creates it and which GPU share it held (HAMi's allocation, or DRA claims);
# a pod that has finished says so (its Job does not run it again). Its owner is the drain's:
# the owner reference marked `controller` (facts kubectl-drain-force-deletes-unowned-pods,
# kubectl-drain-ignore-daemonsets-leaves-them).
LEAVING_PODS_TEMPLATE = (
    '{{range .items}}{{$owner := "nothing"}}'
    "{{range .metadata.ownerReferences}}{{if .controller}}{{$owner = .kind}}{{end}}{{end}}"
    '{{if ne $owner "DaemonSet"}}  {{.metadata.namespace}}/{{.metadata.name}}: '
    '{{if or (eq .status.phase "Succeeded") (eq .status.phase "Failed")}}'
    "finished ({{.status.phase}}), nothing to keep"
    '{{else}}{{if eq $owner "nothing"}}no controller owns it, it is not re-created'
    "{{else}}its {{$owner}} re-creates it{{end}}"
    '{{with .metadata.annotations}}{{with index . "hami.io/vgpu-devices-allocated"}}'
    "; GPU slices {{.}}{{end}}{{end}}"
    "{{with .spec.resourceClaims}}; DRA claims{{end}}{{end}}\n{{end}}{{end}}"
)


def _drain(timeout_seconds: int, not_drained: str, fail: bool) -> str:
    """Shell that lists the pods a drain of $NODE_NAME takes away (LEAVING_PODS_TEMPLATE),
    then drains it: pods a controller owns are evicted (PodDisruptionBudgets respected), pods
    nothing owns deleted (`--force`), DaemonSet pods left. A drain that does not finish prints
    `not_drained` and, with `fail`, exits 1. Needs KUBECONFIG set (KUBECONFIG_PRELUDE)."""
    give_up = "exit 1" if fail else "true"
    return f"""\
kubectl --request-timeout=20s get pods --all-namespaces \\
  --field-selector "spec.nodeName=$NODE_NAME" -o go-template='{LEAVING_PODS_TEMPLATE}' >&2 \\
  || true
if ! kubectl --request-timeout=20s drain "$NODE_NAME" --ignore-daemonsets \\
    --delete-emptydir-data --force --timeout={timeout_seconds}s >&2; then
  echo "{not_drained}" >&2
  {give_up}
fi
"""


# The Ready condition's status of a Node: True, False, Unknown (kubelet silent), or empty.
NODE_READY = '{.status.conditions[?(@.type=="Ready")].status}'


def node_delete_script(drain_timeout_seconds: int = 120) -> str:
    """Takes the node out of its tenant with kubectl on the host: drains it, then deletes the
    Node object. Runs on destroy and before a worker is replaced (an upgrade to a new image).

    The drain is kubeadm's first step for a node that leaves or is upgraded: pods a controller
    owns are evicted (PodDisruptionBudgets respected) and come back elsewhere; pods no controller
    owns are evicted too (`--force`) and do not, so the script first lists what goes and what
    comes back, with each pod's GPU share. Needs NODE_NAME and LAB_KUBECONFIG. It needs nothing
    from the node itself, so a worker container that is stopped or already gone, or a remote
    host that is down, does not stop `pulumi destroy`; a tenant that is unreachable (or already
    gone) only yields warnings, and a drain that does not finish within `drain_timeout_seconds`
    too; a Node that is not Ready is not drained (nothing would end its pods). LAB_KUBECONFIG
    is the copy stored at the last `pulumi up`: its client certificate stays valid until it
    expires (Kamaji issues it for a year and renews it a day before), so reading the Secret
    afresh would buy nothing.
    """
    not_drained = (
        f"warning: $NODE_NAME was not drained within {drain_timeout_seconds}s;"
        " the pods left on it go with it"
    )
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + f"""\
ready=$(kubectl --request-timeout=10s get node "$NODE_NAME" -o 'jsonpath={NODE_READY}' \\
  2>/dev/null || true)
if [ "$ready" = True ]; then
  echo "draining $NODE_NAME; the pods it runs:" >&2
"""
        + _drain(drain_timeout_seconds, not_drained, fail=False)
        + """\
elif [ -n "$ready" ]; then
  # No kubelet to end the pods: a drain would only wait out its timeout.
  echo "$NODE_NAME is not Ready (its kubelet is stopped or gone): not drained" >&2
fi
"""
        + 'kubectl --request-timeout=20s delete node "$NODE_NAME" --ignore-not-found \\\n'
        + '  || echo "warning: could not delete node $NODE_NAME from its tenant" >&2\n'
    )


KUBELET_VERSION = "{.status.nodeInfo.kubeletVersion}"


def drain_for_upgrade_script(drain_timeout_seconds: int = 300) -> str:
    """Drains a remote host before its packages move to VERSION (kubeadm's order for a worker),
    with kubectl on the host. Needs NODE_NAME, VERSION and LAB_KUBECONFIG.

    A host not in the tenant yet (a first `pulumi up`), or whose kubelet already runs VERSION,
    is left alone. A drain that does not finish stops the upgrade there: the host stays
    cordoned with its pods, and the message says what held it (a PodDisruptionBudget, a pod
    that does not end); `pulumi up` tries again.
    """
    not_drained = (
        f"$NODE_NAME was not drained within {drain_timeout_seconds}s, so its upgrade stops"
        " here: the node stays cordoned. See what holds it (kubectl get pdb -A), then run"
        " pulumi up again"
    )
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + f"""\
kubelet=$(kubectl --request-timeout=10s get node "$NODE_NAME" \\
  -o 'jsonpath={KUBELET_VERSION}' 2>/dev/null || true)
if [ -z "$kubelet" ]; then
  echo "$NODE_NAME is not in the tenant yet: nothing to drain" >&2; exit 0
fi
if [ "$kubelet" = "$VERSION" ]; then
  echo "$NODE_NAME already runs $VERSION: nothing to drain" >&2; exit 0
fi
echo "draining $NODE_NAME for its upgrade from $kubelet to $VERSION; the pods it runs:" >&2
"""
        + _drain(drain_timeout_seconds, not_drained, fail=True)
    )


def node_upgraded_script(timeout_seconds: int = 300, interval_seconds: int = 3) -> str:
    """Waits until the Node's kubelet reports VERSION, then uncordons it: the last step of
    kubeadm's order for a worker (after a first join it only waits). Not Ready: on a first
    `pulumi up` the CNI comes after the workers. Needs NODE_NAME, VERSION and LAB_KUBECONFIG."""
    return (
        STRICT
        + KUBECONFIG_PRELUDE
        + f"""\
deadline=$(( $(date +%s) + {timeout_seconds} ))
until [ "$(kubectl --request-timeout=10s get node "$NODE_NAME" \\
    -o 'jsonpath={KUBELET_VERSION}' 2>/dev/null || true)" = "$VERSION" ]; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "$NODE_NAME's kubelet does not report $VERSION after {timeout_seconds}s; it reports:" >&2
    kubectl --request-timeout=10s get node "$NODE_NAME" -o wide >&2 || true
    exit 1
  fi
  sleep {interval_seconds}
done
if [ "$(kubectl --request-timeout=10s get node "$NODE_NAME" \\
    -o 'jsonpath={{.spec.unschedulable}}')" = true ]; then
  kubectl --request-timeout=20s uncordon "$NODE_NAME" >&2
fi
echo "$NODE_NAME runs $VERSION, schedulable" >&2
"""
    )
