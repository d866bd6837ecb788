"""Data only: the kind release the lab runs and the kindest/node images it pins, by digest.

kind vouches for a node image only with the release it was built for, and only by digest (its
release notes: "You must use the @sha256 digest"), so every image here is one that a kind
release's notes list, with that release named (upstream fact `kind-release-node-images`).
"""

from __future__ import annotations

# The management cluster: kind v0.33.0 and its default node image (Kubernetes v1.37.0).
KIND_RELEASE = "v0.33.0"
KIND_NODE_IMAGE = (
    "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
)

# Tenant worker images by Kubernetes version: the newest patch of each minor that kind v0.33.0
# publishes within Kamaji's ceiling, and the earlier releases' defaults (v0.31.0: v1.35.0,
# v0.32.0: v1.36.1) that stacks made before them name. A worker is a container the program
# runs and joins with kubeadm (kind does not create it), so an image of an earlier kind release
# serves as well. A tenant on another version names its own `workerImage`.
WORKER_IMAGES: dict[str, str] = {
    "v1.34.11": (
        "kindest/node:v1.34.11"
        "@sha256:44e222ee2132dab25ff87301682f89eb82c7880ea3a1bf543bfe9708fd08d67d"
    ),
    "v1.35.0": (
        "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f"
    ),
    "v1.35.8": (
        "kindest/node:v1.35.8@sha256:07b2536e30b803ed61d1677a79df6115f798ce64c80f9e22f6ed45afd09323c0"
    ),
    "v1.36.1": (
        "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5"
    ),
    "v1.36.4": (
        "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
    ),
}
