"""Shell scripts the lab runs on the host through pulumi-command, built as plain strings.

Values reach the scripts through environment variables, never by pasting them into the text,
so a secret (a kubeconfig) never appears in a command line or in Pulumi's diff, and quoting
cannot break. Every script is idempotent: re-running it after success changes nothing.
"""

from __future__ import annotations

import yaml

STRICT = "set -eu\n"

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

    Needs KIND_CLUSTER_NAME, KIND_CONFIG and KIND_EXPERIMENTAL_DOCKER_NETWORK, which points
    kind at the lab's own IPv4-only network instead of the dual-stack one it would create.
    """
    return (
        STRICT
        + """\
if kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER_NAME"; then
  echo "kind cluster $KIND_CLUSTER_NAME exists; reusing it" >&2
else
  config_file=$(mktemp)
  trap 'rm -f "$config_file"' EXIT
  printf '%s\\n' "$KIND_CONFIG" > "$config_file"
  kind create cluster --name "$KIND_CLUSTER_NAME" --config "$config_file" --wait 300s >&2
fi
kind get kubeconfig --name "$KIND_CLUSTER_NAME"
"""
    )


def kind_delete_script() -> str:
    return STRICT + 'kind delete cluster --name "$KIND_CLUSTER_NAME"\n'


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


def worker_join_script(join_timeout_seconds: int = 120) -> str:
    """Joins a kindest/node container to its tenant with kubeadm, once.

    Needs NODE_NAME and LAB_KUBECONFIG (the tenant's admin kubeconfig). The token is created
    inside the node with the node's own kubeadm (the host needs none), retried because Kamaji's
    bootstrap RBAC lands in the tenant a little after the control plane reports Ready.
    """
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
docker exec "$NODE_NAME" modprobe br_netfilter 2>/dev/null || true
printf '%s\\n' "$LAB_KUBECONFIG" | docker exec -i "$NODE_NAME" \\
  sh -c 'umask 077 && cat > /etc/kubernetes/lab-admin.conf'
trap 'docker exec "$NODE_NAME" rm -f /etc/kubernetes/lab-admin.conf' EXIT
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
# shellcheck disable=SC2086 # the join command is split into its arguments on purpose
docker exec "$NODE_NAME" $join \\
  --ignore-preflight-errors=SystemVerification,FileExisting,Swap >&2
echo "$NODE_NAME joined" >&2
"""
    )


def worker_leave_script() -> str:
    """Removes the node object from its tenant before the container goes.

    Best effort with a bound: a tenant that is already gone must not block `pulumi destroy`.
    """
    return (
        STRICT
        + """\
if ! docker inspect "$NODE_NAME" >/dev/null 2>&1; then exit 0; fi
printf '%s\\n' "$LAB_KUBECONFIG" | docker exec -i "$NODE_NAME" \\
  sh -c 'umask 077 && cat > /etc/kubernetes/lab-admin.conf'
docker exec "$NODE_NAME" kubectl --kubeconfig /etc/kubernetes/lab-admin.conf \\
  --request-timeout=20s delete node "$NODE_NAME" --ignore-not-found \\
  || echo "warning: could not delete node $NODE_NAME from its tenant" >&2
docker exec "$NODE_NAME" rm -f /etc/kubernetes/lab-admin.conf
"""
    )
