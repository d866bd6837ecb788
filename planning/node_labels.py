"""The labels a worker's kubelet registers its Node with: plain data, no Pulumi resources.

HAMi's real device plugin runs only on nodes labelled `gpu=on`. The kubelet sets that label
when it registers the Node (`--node-labels`), so a node that registers again after a leave, a
reset or a new container is a GPU node at once; a patch applied once by Pulumi would be lost
with the first re-registration. Container and remote workers both use this module.
"""

from __future__ import annotations

# What HAMi's device plugin selects (`devicePlugin.nvidiaNodeSelector`). Unprefixed, so the
# kubelet may set it itself: NodeRestriction and the kubelet's flag check refuse only
# kubernetes.io / k8s.io keys outside their allowed set and node-restriction.kubernetes.io.
GPU_NODE_LABELS = {"gpu": "on"}


def registration_labels(gpu_mode: str) -> dict[str, str]:
    """The labels a worker's kubelet registers its Node with, by GPU mode.

    Simulated GPUs need none: the agent labels the nodes it simulates cards on.
    """
    return {} if gpu_mode == "simulated" else dict(GPU_NODE_LABELS)


def kubelet_node_labels(labels: dict[str, str]) -> str:
    """The value of the kubelet's `--node-labels` flag: `key=value,...`, stable order."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
