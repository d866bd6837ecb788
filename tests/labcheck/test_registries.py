"""images.registries: where the running images come from, and with a site's mirrors, that none
would be pulled from a registry no mirror covers."""

from __future__ import annotations

import pytest

from labcheck.checks.registries import pod_images, registry_of
from tests.support.labcheck_fakes import FakeLab, check_result, standard_lab

CHECK = "images.registries"


def running(namespace: str, name: str, *images: str, init: str = "", phase: str = "Running"):
    """A pod as the fake API server stores it (bound, so its placement loop leaves it alone)."""
    spec = {
        "nodeName": "n",
        "containers": [{"name": f"c{i}", "image": image} for i, image in enumerate(images)],
    }
    if init:
        spec["initContainers"] = [{"name": "init", "image": init}]
    return {
        "metadata": {"namespace": namespace, "name": name, "annotations": {}},
        "spec": spec,
        "status": {"phase": phase},
        "_seq": 0,
    }


def with_pods(lab: FakeLab) -> FakeLab:
    lab.mgmt.pods[("kamaji-system", "kamaji")] = running(
        "kamaji-system", "kamaji", "clastix/kamaji:26.8.2-edge"
    )
    lab.mgmt.pods[("t", "apiserver")] = running(
        "t", "apiserver", "registry.k8s.io/kube-apiserver:v1.35.0",
        init="registry.k8s.io/kas-network-proxy/proxy-server:v0.35.0",
    )  # fmt: skip
    tenant_a = next(s for s in lab.servers.values() if s.name == "tenant-a")
    tenant_a.pods[("kube-flannel", "f")] = running(
        "kube-flannel", "f", "ghcr.io/flannel-io/flannel:v0.28.9"
    )
    # Not running: never pulled, or gone.
    tenant_a.pods[("x", "p")] = running("x", "p", "quay.io/x:1", phase="Pending")
    return lab


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("registry.k8s.io/pause:3.10", "registry.k8s.io"),
        ("clastix/kamaji:26.8.2-edge", "docker.io"),
        ("busybox:1.37.0", "docker.io"),
        ("localhost/x:1", "localhost"),
        ("127.0.0.1:5000/kindest/node:v1.35.0", "127.0.0.1:5000"),
        ("index.docker.io/kindest/node:v1.35.0", "docker.io"),
        ("Mirror/x:1", "Mirror"),
    ],
)
@pytest.mark.upstream("containerd-hosts-toml")
def test_an_images_registry_is_read_as_containerd_reads_the_name(image, registry):
    assert registry_of(image) == registry


def test_the_images_of_running_pods_with_their_init_containers():
    pods = [
        running("a", "p", "x:1", init="y:1"),
        running("a", "q", "z:1", phase="Failed"),
        running("a", "r", "w:1", phase="Succeeded"),
    ]
    assert pod_images(pods) == {"x:1", "y:1", "w:1"}


def test_without_mirrors_it_reports_each_clusters_registries_as_upstream():
    lab = with_pods(standard_lab())
    management = check_result(lab, "mgmt.registries", tenant="")
    assert management.status == "pass", management
    assert management.evidence == "3 image(s) from upstream (no registryMirrors)"
    assert management.detail == (
        "management: docker.io 1 (upstream), registry.k8s.io 2 (upstream)",
    )
    tenant = check_result(lab, CHECK, tenant="tenant-a")
    assert tenant.detail == ("tenant-a: ghcr.io 1 (upstream)",)


def test_with_mirrors_each_registry_says_its_mirror():
    lab = with_pods(standard_lab())
    lab.spec["registryMirrors"] = {"registry.k8s.io": "harbor/k8s", "*": "harbor/all"}
    result = check_result(lab, "mgmt.registries", tenant="")
    assert result.status == "pass", result
    assert result.detail == (
        "management: docker.io 1 (through harbor/all), registry.k8s.io 2 (through harbor/k8s)",
    )


def test_an_image_no_mirror_covers_fails_naming_it():
    lab = with_pods(standard_lab())
    lab.spec["registryMirrors"] = {"registry.k8s.io": "harbor/k8s", "docker.io": "harbor/hub"}
    assert check_result(lab, "mgmt.registries", tenant="").status == "pass"
    result = check_result(lab, CHECK, tenant="tenant-a")
    assert result.status == "fail"
    assert result.seen == "ghcr.io/flannel-io/flannel:v0.28.9"
    assert "add one to registryMirrors" in result.cause
    assert check_result(lab, CHECK, tenant="tenant-b").status == "pass"  # no pods there
