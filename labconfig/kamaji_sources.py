"""Data only: the clastix/kamaji commits whose charts the lab installs, one per image tag.

Both the config model (which rejects a tag without a pin) and the chart fetch read it, so the
config layer needs nothing that builds scripts or runs tools.
"""

from __future__ import annotations

from dataclasses import dataclass

# Upstream; a stack's `kamajiGitUrl` names a mirror of it, or a local clone.
KAMAJI_GIT_URL = "https://github.com/clastix/kamaji.git"


@dataclass(frozen=True)
class KamajiSource:
    tag: str
    commit: str  # what the tag pointed to when it was checked
    # git tree ids of charts/kamaji and charts/kamaji-crds at `commit`: content digests
    chart_tree: str
    crds_chart_tree: str
    etcd_chart_version: str  # kamaji-etcd in charts/kamaji/Chart.lock
    # `KubeadmVersion` in internal/upgrade/kubeadm_version.go: Kamaji's webhook refuses a
    # TenantControlPlane whose minor is above it (upstream fact `kamaji-kubeadm-ceiling`).
    kubeadm_version: str


# Checked in clastix/kamaji: `git rev-parse <tag>^{commit} <tag>:charts/kamaji ...`.
KAMAJI_SOURCES: dict[str, KamajiSource] = {
    "26.8.2-edge": KamajiSource(
        tag="26.8.2-edge",
        commit="ddbabd87ed0e8d7c319414383e153c46f21733a9",
        chart_tree="844f16ac9d4eaf0532b47f263f3ce2556d5633e5",
        crds_chart_tree="492465f5b4df1d06c3db5b3d444ecd11a32456a9",
        etcd_chart_version="0.15.0",
        kubeadm_version="v1.36.0",
    ),
}


def kamaji_source(image_tag: str) -> KamajiSource:
    try:
        return KAMAJI_SOURCES[image_tag]
    except KeyError:
        known = ", ".join(sorted(KAMAJI_SOURCES))
        raise ValueError(
            f"no pinned chart source for Kamaji {image_tag!r} (known: {known}); add the tag's "
            "commit to KAMAJI_SOURCES in labconfig/kamaji_sources.py"
        ) from None
