"""What a stack pulls (planning/pulls.py): the list a mirrored site fills its mirror from, kept
equal to docs/mirrored-site.md and to the values the program itself sets."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from builders.hami import hami_values
from builders.labcheck_spec import GPU_TEST_IMAGE, TOOLS_IMAGE
from labconfig.parse import parse_config
from planning.pulls import (
    HOST_DOCKER,
    LABCHECK_IMAGES,
    MANAGEMENT,
    UNPINNED_WHY,
    ImagePull,
    chart_table,
    copy_list,
    full_reference,
    image_table,
    is_pinned,
    main,
    stack_pulls,
    through,
    unique_images,
)
from tests.support.fake_tools import fake_tools, tool_env
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
    said = (
        f"pulls {images} images (the two node images, kind's and the workers', by the host's "
        f"Docker, {images - len(host)} "
    )
    assert said in " ".join(text.split())
    assert f"and {charts} charts: {charts - 2} from Helm repositories and Kamaji's two" in " ".join(
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


def test_with_mirrors_the_kind_node_pulls_labchecks_tools_image_too():
    """labcheck reads the kind node's mirror files with a pod of its tools image: a mirror that
    only holds what is copied into it must have it for the management cluster as well."""
    tools = full_reference(TOOLS_IMAGE)
    mirrored = stack_pulls(
        parse_config({**lab_stack_config(), "registryMirrors": [{"registry": "*", "mirror": "m"}]})
    )
    assert ImagePull(tools, MANAGEMENT, "labcheck") in mirrored.images
    plain = stack_pulls(lab())  # no pod reads a node without mirrors
    assert [p.puller for p in plain.images if p.image == tools] == ["tenant-a", "tenant-b"]


def test_make_pulls_prints_one_image_per_line(capsys):
    assert main([str(PROJECT_DIR / "Pulumi.lab.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == copy_list(stack_pulls(lab()))
    assert all(re.fullmatch(r"[a-z0-9.:-]+/[^\s]+", line) for line in lines)


def test_a_bad_stack_file_is_one_line(tmp_path, capsys):
    stack = tmp_path / "Pulumi.x.yaml"
    stack.write_text("config:\n  kamaji-hami-lab:tenants: []\n")
    assert main([str(stack)]) == 2
    assert capsys.readouterr().err.startswith("pulls: tenants: ")


def site_stack_file(tmp_path, stack: str = "lab", **config) -> Path:
    """A copy of Pulumi.<stack>.yaml with `config` added, as the Pulumi CLI leaves a stack file
    after the first `make up` (its `encryptionsalt` after the config); the checkout's own file
    is only read, whatever the CLI or the user added to it."""
    data = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())
    data["config"] |= {f"kamaji-hami-lab:{key}": value for key, value in config.items()}
    data["encryptionsalt"] = "v1:sGRF0bUS6co=:v1:icRrznmcw9aq/3yK:/IQTB2H8R6zhMDaE6hSXMaEGtGa=="
    path = tmp_path / f"Pulumi.site-{stack}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_stack_file_with_encrypted_mirror_credentials_is_read_without_them(tmp_path, capsys):
    """Host tools never decrypt: the secret is known to be set, its value is not read."""
    stack = site_stack_file(
        tmp_path,
        registryMirrors=[{"registry": "*", "mirror": "harbor.example/all"}],
        registryMirrorAuth={"secure": "v1:abc:def"},
    )
    assert main([str(stack), "--table"]) == 0
    assert "| harbor.example/all |" in capsys.readouterr().out


def test_the_gpu_stack_is_listed_before_its_secrets_are_set(capsys):
    """Pulumi.gpu.yaml as checked out: the kubeconfig and SSH key are set later, and neither
    changes what the stack pulls."""
    assert main([str(PROJECT_DIR / "Pulumi.gpu.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04" in out.splitlines()
    assert "managementKubeconfig" not in err and "sshPrivateKey" not in err


def test_listing_a_stack_still_refuses_what_its_secrets_cannot_fix(tmp_path, capsys):
    stack = site_stack_file(
        tmp_path, "gpu", managementStack="organization/kamaji-hami-lab/lab",
        managementKubeconfig={"secure": "v1:abc:def"},
    )  # fmt: skip
    assert main([str(stack)]) == 2
    assert "exactly one of managementKubeconfig (secret) or managementStack" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        ("docker.io/cfssl/cfssl:latest", False),
        ("docker.io/library/busybox", False),
        ("127.0.0.1:5000/x", False),
        ("127.0.0.1:5000/x:1", True),
        ("docker.io/library/busybox:1.37.0", True),
        ("docker.io/x/y@sha256:" + "0" * 64, True),
        ("docker.io/x/y:latest@sha256:" + "0" * 64, True),
    ],
)
def test_an_image_is_pinned_by_a_tag_other_than_latest_or_by_a_digest(image, pinned):
    assert is_pinned(image) is pinned


def test_unpinned_images_are_flagged_in_both_forms(capsys):
    """cfssl is `latest` in kamaji-etcd's chart: a mirror holds what it was when copied."""
    assert main([str(PROJECT_DIR / "Pulumi.lab.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "docker.io/cfssl/cfssl:latest" in out.splitlines()  # still copied
    assert err.splitlines() == [f"pulls: not pinned: docker.io/cfssl/cfssl:latest {UNPINNED_WHY}"]
    assert main([str(PROJECT_DIR / "Pulumi.lab.yaml"), "--table"]) == 0
    rows = [row for row in capsys.readouterr().out.splitlines() if "(not pinned)" in row]
    flagged = [row.split(" | ")[0] for row in rows]
    assert flagged == ["| `docker.io/cfssl/cfssl:latest` (not pinned)"]


def test_an_image_pinned_by_tag_and_digest_is_listed_by_its_digest(capsys):
    """skopeo (containers/image) refuses a reference with both; the digest is what a node pulls
    anyway (upstream fact `skopeo-tag-and-digest`)."""
    assert main([str(PROJECT_DIR / "Pulumi.lab.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    digest = "sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"
    assert f"docker.io/kindest/node@{digest}" in lines
    assert not [line for line in lines if re.search(r":[^/@]+@sha256:", line)]
    assert len(lines) == len(unique_images(stack_pulls(lab())))


def copy_recipe() -> str:
    """The shell block of docs/mirrored-site.md that copies the list with skopeo."""
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    (recipe,) = [block for block in blocks if "skopeo copy" in block]
    return recipe


# skopeo's own answer to `name:tag@digest` (containers/image docker/docker_transport.go).
# Only what it copied is in $CALLS.
FAKE_SKOPEO = """\
for ref in "$@"; do
  case "${ref##*/}" in
    *:*@sha256:*)
      echo "Docker references with both a tag and digest are currently not supported" >&2
      exit 1 ;;
  esac
done
[ "${FAIL_ON:-}" = "" ] || case "$*" in *"$FAIL_ON"*) exit 1 ;; esac
echo "skopeo $*" >> "$CALLS"
"""


def run_copy_recipe(
    tmp_path, capsys, stack: str, fail_on: str = ""
) -> tuple[int, list[str], list[str]]:
    """The docs' recipe with a `make` that prints `make pulls STACK=<stack>`'s list and a
    skopeo that records what it copied: (exit status, the list, the calls of both)."""
    assert main([str(PROJECT_DIR / f"Pulumi.{stack}.yaml")]) == 0
    listed = capsys.readouterr().out
    (tmp_path / "list").write_text(listed)
    log = fake_tools(
        tmp_path,
        {
            "make": f'echo "make $*" >> "$CALLS"\ncat "{tmp_path}/list"\n',
            "skopeo": FAKE_SKOPEO,
        },
    )
    recipe = copy_recipe().replace("STACK=lab", f"STACK={stack}")
    done = subprocess.run(
        ["bash", "-c", recipe], env={**tool_env(tmp_path), "FAIL_ON": fail_on}, check=False
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return done.returncode, listed.splitlines(), calls


@pytest.mark.upstream("skopeo-tag-and-digest")
@pytest.mark.parametrize("stack", ["lab", "dra"])
def test_the_documented_copy_recipe_copies_the_whole_list(tmp_path, capsys, stack):
    status, images, calls = run_copy_recipe(tmp_path, capsys, stack)
    assert status == 0
    # -s: on a fresh checkout make would print the commands that create .venv into the list.
    assert calls == [f"make -s pulls STACK={stack}"] + [
        f"skopeo copy --all docker://{image} docker://registry.example.com/{image.split('/', 1)[1]}"
        for image in images
    ]


def test_the_documented_copy_recipe_stops_at_the_first_failure(tmp_path, capsys):
    status, images, calls = run_copy_recipe(tmp_path, capsys, "lab", fail_on=LABCHECK_IMAGES[0])
    assert status != 0
    copied = [call.split()[3] for call in calls[1:]]
    assert copied == [f"docker://{image}" for image in images[: images.index(LABCHECK_IMAGES[0])]]


def test_a_node_image_on_a_mirror_with_a_port_names_its_minor():
    """kamaji-etcd's kubectl image is tagged with the management cluster's minor, read from the
    node image, which a mirrored site pins on its own registry (host:port)."""
    mirrored = "127.0.0.1:5001/kindest/node:v1.35.4@sha256:" + "1" * 64
    cfg = parse_config({**lab_stack_config(), "managementNodeImage": mirrored})
    images = {p.image for p in stack_pulls(cfg).images}
    assert "docker.io/clastix/kubectl:v1.35" in images
