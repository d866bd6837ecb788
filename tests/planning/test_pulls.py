"""What a stack pulls (planning/pulls.py): the list a mirrored site fills its mirror from, kept
equal to docs/mirrored-site.md and to the values the program itself sets."""

from __future__ import annotations

import re

import pytest

from builders.hami import hami_values
from builders.labcheck_spec import GPU_TEST_IMAGE, TOOLS_IMAGE
from labconfig.parse import parse_config
from planning.pulls import (
    HOST_DOCKER,
    LABCHECK_IMAGES,
    MANAGEMENT,
    chart_table,
    full_reference,
    image_table,
    main,
    stack_pulls,
    through,
    unique_images,
)
from tests.support.pulumi_harness import PROJECT_DIR, lab_stack_config, stack_config

DOC = PROJECT_DIR / "docs/mirrored-site.md"


def lab():
    return parse_config(lab_stack_config())


@pytest.mark.upstream("kamaji-etcd-chart-images", "flannel-chart-images")
def test_the_doc_lists_exactly_what_the_lab_stack_pulls():
    text = DOC.read_text()
    pulls = stack_pulls(lab())
    assert "\n".join(image_table(pulls)) in text
    assert "\n".join(chart_table(pulls)) in text
    images, charts = len(unique_images(pulls)), len(chart_table(pulls)) - 2
    host = {p.image for p in pulls.images if p.puller == HOST_DOCKER}
    assert f"pulls {images} images (the node image by the host's Docker, {images - len(host)} " in (
        " ".join(text.split())
    )
    assert f"and {charts} charts: 5 from Helm repositories and Kamaji's two" in " ".join(
        text.split()
    )
    assert pulls.unread == ()


@pytest.mark.upstream("containerd-hosts-toml")
@pytest.mark.parametrize(
    ("image", "full"),
    [
        ("busybox:1.37.0", "docker.io/library/busybox:1.37.0"),
        ("clastix/kamaji:26.8.2-edge", "docker.io/clastix/kamaji:26.8.2-edge"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("127.0.0.1:5000/x:1", "127.0.0.1:5000/x:1"),
    ],
)
def test_images_are_named_with_their_registry_as_containerd_resolves_them(image, full):
    assert full_reference(image) == full


def test_the_program_s_own_images_come_from_its_config_and_builders():
    cfg = lab()
    images = unique_images(stack_pulls(cfg))
    assert full_reference(cfg.management_node_image) == images[0]
    assert full_reference(cfg.gpu_agent_image) in images
    scheduler = hami_values(cfg.tenants[0], 10, "5m")["scheduler"]["kubeScheduler"]["image"]
    assert f"{scheduler['registry']}/{scheduler['repository']}:{scheduler['tag']}" in images
    assert (GPU_TEST_IMAGE, full_reference(TOOLS_IMAGE)) == LABCHECK_IMAGES


@pytest.mark.upstream("kamaji-tcp-default-images")
def test_a_tenant_on_another_version_adds_its_control_plane_and_addons():
    config = lab_stack_config()
    config["tenants"][1] = {**config["tenants"][1], "kubernetesVersion": "v1.36.0",
                            "workerImage": None}  # fmt: skip
    config["tenants"][1].pop("workerImage")
    config["tenants"][1]["workerImage"] = "kindest/node:v1.36.0@sha256:" + "0" * 64
    pulls = stack_pulls(parse_config(config))
    by_puller = {(p.image, p.puller) for p in pulls.images}
    assert ("registry.k8s.io/kube-apiserver:v1.36.0", MANAGEMENT) in by_puller
    assert ("registry.k8s.io/kas-network-proxy/proxy-server:v0.36.0", MANAGEMENT) in by_puller
    assert ("registry.k8s.io/kas-network-proxy/proxy-agent:v0.36.0", "tenant-b") in by_puller
    assert ("registry.k8s.io/kube-proxy:v1.36.0", "tenant-b") in by_puller
    assert ("registry.k8s.io/kube-proxy:v1.35.0", "tenant-b") not in by_puller


@pytest.mark.upstream("hami-dra-chart-images", "hami-chart-default-images")
def test_a_dra_tenant_pulls_hami_dra_and_its_cert_manager_instead_of_hami():
    pulls = stack_pulls(parse_config(stack_config("dra")))
    dra = {p.image for p in pulls.images if p.puller == "tenant-dra"}
    hami = {p.image for p in pulls.images if p.puller == "tenant-hami"}
    assert "ghcr.io/project-hami/hami-dra-webhook:v0.2.0" in dra
    assert "ghcr.io/project-hami/hami-dra-monitor:v0.2.0" in dra
    assert "quay.io/jetstack/cert-manager-controller:v1.18.3" in dra
    assert "ghcr.io/project-hami/hami-dra-fake-driver:v0.2.0" in dra
    assert "docker.io/projecthami/hami:v2.10.0" in hami - dra
    # The dra stack installs no platform: the lab stack's kind cluster already runs it.
    assert not [c for c in pulls.charts if c.name == "metallb"]


def test_a_chart_source_and_a_mirror_show_in_the_list():
    config = {
        **lab_stack_config(),
        "chartSources": {"hami": "oci://harbor.example/charts"},
        "registryMirrors": [{"registry": "ghcr.io", "mirror": "harbor.example/ghcr"}],
    }
    cfg = parse_config(config)
    pulls = stack_pulls(cfg)
    assert {c.source for c in pulls.charts if c.name == "hami"} == {
        "oci://harbor.example/charts/hami"
    }
    table = "\n".join(image_table(pulls, cfg.registry_mirrors))
    row = "| `ghcr.io/flannel-io/flannel:v0.28.9` | tenant-a, tenant-b | flannel chart |"
    assert f"{row} harbor.example/ghcr |" in table
    assert through("registry.k8s.io/pause:3.10", cfg.registry_mirrors) == "upstream"


def test_make_pulls_prints_one_image_per_line(capsys):
    assert main([str(PROJECT_DIR / "Pulumi.lab.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == unique_images(stack_pulls(lab()))
    assert all(re.fullmatch(r"[a-z0-9.:-]+/[^\s]+", line) for line in lines)


def test_a_bad_stack_file_is_one_line(tmp_path, capsys):
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("config:\n  kamaji-hami-lab:tenants: []\n")
    assert main([str(stack)]) == 2
    assert capsys.readouterr().err.startswith("pulls: tenants: ")


def test_a_stack_file_with_encrypted_mirror_credentials_is_read_without_them(tmp_path, capsys):
    """Host tools never decrypt: the secret is known to be set, its value is not read."""
    stack = tmp_path / "Pulumi.site.yaml"
    stack.write_text(
        (PROJECT_DIR / "Pulumi.lab.yaml").read_text()
        + "  kamaji-hami-lab:registryMirrors:\n"
        + "    - {registry: '*', mirror: harbor.example/all}\n"
        + "  kamaji-hami-lab:registryMirrorAuth:\n"
        + "    secure: v1:abc:def\n"
    )
    assert main([str(stack), "--table"]) == 0
    assert "| harbor.example/all |" in capsys.readouterr().out
