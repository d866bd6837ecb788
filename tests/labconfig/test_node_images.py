"""The kindest/node images the lab pins, and the default tenant version they and Kamaji allow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labconfig.kamaji_sources import KAMAJI_SOURCES
from labconfig.model import (
    DEFAULT_KAMAJI_TAG,
    DEFAULT_TENANT_VERSION,
    PINNED_NODE_IMAGE,
    SUPPORTED_TENANT_MINORS,
    tenant_ceiling,
)
from labconfig.node_images import KIND_NODE_IMAGE, KIND_RELEASE, WORKER_IMAGES
from labconfig.versions import kubernetes_minor

FACTS = Path(__file__).resolve().parents[2] / "docs" / "upstream-facts"


def fact(path: str, fact_id: str) -> str:
    """The text of one entry of an upstream-facts file, up to the next entry."""
    text = (FACTS / path).read_text()
    return text.split(f"### `{fact_id}`\n", 1)[1].split("\n### ", 1)[0]


@pytest.mark.upstream("kind-release-node-images")
@pytest.mark.parametrize("version", sorted(WORKER_IMAGES))
def test_each_worker_image_is_its_versions_image_as_a_kind_release_lists_it(version: str):
    image = WORKER_IMAGES[version]
    match = PINNED_NODE_IMAGE.fullmatch(image)
    assert match and match.group(1) == version
    digest = image.split("@sha256:")[1]
    # the digest is the one the fact quotes from the release notes, next to the same version
    assert f"{version}@sha256:{digest}" in fact("workers.md", "kind-release-node-images")


@pytest.mark.upstream("kind-release-node-images", "kind-release-vouches-for-its-images")
def test_the_management_image_is_the_default_of_the_kind_release_the_lab_asks_for():
    assert KIND_RELEASE == "v0.33.0"
    entry = fact("workers.md", "kind-release-node-images")
    assert f"{KIND_RELEASE} (module `sigs.k8s.io/kind@{KIND_RELEASE}`" in entry
    assert KIND_NODE_IMAGE.split(":", 1)[1].replace("kindest/node:", "") in entry.replace("\n", "")
    assert KIND_NODE_IMAGE not in WORKER_IMAGES.values()  # v1.37: above Kamaji's ceiling


@pytest.mark.upstream("kamaji-kubeadm-ceiling")
def test_the_default_tenant_is_the_newest_pinned_version_the_pinned_kamaji_admits():
    """Kamaji 26.8.2-edge's kubeadm is v1.36.0: v1.36.x is the newest tenant minor; kind
    v0.33.0 lists v1.36.4 for it, so that is the default. Before: v1.35.0."""
    assert KAMAJI_SOURCES[DEFAULT_KAMAJI_TAG].kubeadm_version == "v1.36.0"
    assert tenant_ceiling(DEFAULT_KAMAJI_TAG) == (1, 36)
    assert DEFAULT_TENANT_VERSION == "v1.36.4"
    assert range(31, 37) == SUPPORTED_TENANT_MINORS
    newest = max(
        (v for v in WORKER_IMAGES if kubernetes_minor(v) <= (1, 36)),
        key=lambda v: [int(n) for n in re.findall(r"\d+", v)],
    )
    assert newest == DEFAULT_TENANT_VERSION


def test_the_versions_page_lists_exactly_the_pinned_images_and_the_default():
    text = (FACTS.parent / "versions.md").read_text()
    rows = re.findall(
        r"^\| `(v[\d.]+)`( \(default\))? \| `kindest/node:(v[\d.]+)@sha256:(\w+)…`", text, re.M
    )
    assert {version for version, *_ in rows} == set(WORKER_IMAGES)
    for version, default, tag, digest in rows:
        assert tag == version
        assert WORKER_IMAGES[version].split("@sha256:")[1].startswith(digest)
        assert bool(default) == (version == DEFAULT_TENANT_VERSION)
    assert f"kind **{KIND_RELEASE}**" in text
    assert "`kindest/node:v1.37.0@sha256:" + KIND_NODE_IMAGE.split("@sha256:")[1][:8] in text


def test_the_versions_page_quotes_the_configs_refusal():
    from labconfig.model import ConfigError
    from labconfig.parse import parse_config

    with pytest.raises(ConfigError) as info:
        parse_config({"tenants": [{"name": "tenant-a", "kubernetesVersion": "v1.37.0"}]})
    quoted = re.search(
        r"```\n(tenants\[0\]\.kubernetesVersion:.*?) \.\.\.\n```",
        (FACTS.parent / "versions.md").read_text(),
        re.S,
    )
    assert quoted and str(info.value).startswith(" ".join(quoted.group(1).split()))
