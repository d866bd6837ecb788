"""images.registries: where the running images come from, and with a site's mirrors, that none
would be pulled from a registry no mirror covers."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from builders.labcheck_spec import expected_registry_files
from builders.registry_mirrors import files_environment, install_files_script, registry_files
from labcheck.checks.registries import NOT_TOLD, pod_images, registry_of
from labcheck.node_files import UnreadableAnswer, files_pod, parse_message, termination_message
from labcheck.spec import SpecError, parse_spec
from labconfig.parse import parse_config
from tests.builders.test_registry_mirrors import CA, FAKE_DOCKER_EXEC
from tests.support.fake_tools import fake_tools, tool_env
from tests.support.labcheck_fakes import FakeLab, check_result, standard_lab
from tests.support.pulumi_harness import lab_stack_config

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


@pytest.mark.upstream("containerd-pull-source-is-the-name")
def test_with_mirrors_each_registry_says_its_mirror():
    lab = with_pods(standard_lab())
    lab.spec["registryMirrors"] = {"registry.k8s.io": "harbor/k8s", "*": "harbor/all"}
    result = check_result(lab, "mgmt.registries", tenant="")
    assert result.status == "pass", result
    assert result.detail == (
        "management: docker.io 1 (through harbor/all), registry.k8s.io 2 (through harbor/k8s)",
        NOT_TOLD,  # what no node records: the host an image came from
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


# --- each node's files -------------------------------------------------------------------------

MIRRORS = [
    {"registry": "docker.io", "mirror": "harbor.example/hub"},
    {"registry": "*", "mirror": "cache.example", "ca": CA},
]
AUTH = {"harbor.example": "robot$lab:s3cret"}
TOKEN = "cm9ib3QkbGFiOnMzY3JldA=="  # base64 of AUTH's value, as the hosts.toml carries it
HUB = "/etc/containerd/certs.d/docker.io/hosts.toml"
NODES = ("lab-control-plane", "tenant-a-worker-1", "tenant-b-worker-1")


def install(tmp_path: Path, node: str, files: dict[str, str]) -> Path:
    """A node's root file system with the files the program's own install script put there."""
    root = tmp_path / node
    (root / "etc/containerd").mkdir(parents=True)
    fake_tools(tmp_path, {"docker": FAKE_DOCKER_EXEC})
    env = {**tool_env(tmp_path), **files_environment(files), "NODE": node, "NODE_ROOT": str(root)}
    subprocess.run(["bash", "-c", install_files_script()], env=env, check=True, capture_output=True)
    return root


def mirrored_lab(tmp_path: Path) -> FakeLab:
    """The lab with the site's mirrors (credentials for harbor.example) and its spec as the
    program builds it; every node holds what the program installs there."""
    raw = {
        **lab_stack_config(),
        "managementClusterName": "lab",  # the fake lab's kind node: lab-control-plane
        "registryMirrors": MIRRORS,
        "registryMirrorAuth": json.dumps(AUTH),
    }
    cfg = parse_config(raw)
    lab = with_pods(standard_lab())
    lab.spec["registryMirrors"] = {m.registry: m.mirror for m in cfg.registry_mirrors}
    lab.spec["registryFiles"] = expected_registry_files(cfg)
    files = registry_files(cfg.registry_mirrors, AUTH)
    servers = (lab.mgmt, lab.tenant("tenant-a"), lab.tenant("tenant-b"))
    for server, node in zip(servers, NODES, strict=True):
        server.node_roots[node] = install(tmp_path, node, files)
    return lab


def created_pods(server) -> list[dict]:
    return [args[1] for name, args in server.calls if name == "create_pod"]


def test_every_node_holding_the_files_passes_and_says_what_it_read(tmp_path):
    lab = mirrored_lab(tmp_path)
    management = check_result(lab, "mgmt.registries", tenant="")
    assert management.status == "pass", management
    assert management.evidence == (
        "3 image(s) through the site's mirrors; 1 node(s) hold the mirrors' files"
    )
    assert management.detail[1] == "lab-control-plane: 4 registry file(s) as the stack writes them"
    assert management.detail[2] == NOT_TOLD
    (pod,) = created_pods(lab.mgmt)
    assert pod["spec"]["nodeName"] == "lab-control-plane"
    result = check_result(lab, CHECK, tenant="tenant-b")
    assert result.status == "pass", result
    assert result.detail[1] == "tenant-b-worker-1: 4 registry file(s) as the stack writes them"
    # Each pod is gone once read; the run's namespace goes at cleanup.
    assert not [key for key in lab.tenant("tenant-b").pods if key[0].startswith("labcheck-")]


def test_the_pod_reads_the_node_read_only_wherever_it_is_tainted():
    body = files_pod("p", "n1", "busybox:1.37.0", {"a": "b"}, [HUB])
    spec = body["spec"]
    assert spec["nodeName"] == "n1"  # bound: no scheduler, no nodeSelector to miss
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["volumes"] == [
        {"name": "containerd", "hostPath": {"path": "/etc/containerd", "type": "Directory"}}
    ]
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [
        {"name": "containerd", "mountPath": "/host/etc/containerd", "readOnly": True}
    ]
    assert container["command"][-1] == HUB
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    ("mutate", "seen"),
    [
        (lambda root: (root / HUB[1:]).unlink(), f"tenant-a-worker-1: {HUB} missing"),
        (
            lambda root: (root / HUB[1:]).write_text(
                (root / HUB[1:]).read_text().replace("harbor.example", "other.example")
            ),
            f"tenant-a-worker-1: {HUB}: content differs (",
        ),
        (
            lambda root: (root / HUB[1:]).write_text(
                (root / HUB[1:]).read_text().replace(TOKEN, "b3RoZXI6cHc=")
            ),
            f"tenant-a-worker-1: {HUB}: its Authorization header is not the stack's "
            "(registryMirrorAuth)",
        ),
        (
            lambda root: (root / HUB[1:]).chmod(0o644),
            f"tenant-a-worker-1: {HUB}: mode 644, the stack writes 600 (it holds credentials: "
            "root's alone)",
        ),
        (
            lambda root: shutil.rmtree(root / "etc/containerd/certs.d"),
            "tenant-a-worker-1: /etc/containerd/certs.d/.kamaji-hami-lab-files missing, "
            "/etc/containerd/certs.d/_default/ca.crt missing",
        ),
    ],
    ids=["missing", "content", "credentials", "mode", "no-certs.d"],
)
def test_a_node_that_differs_fails_naming_the_node_the_file_and_the_command(tmp_path, mutate, seen):
    lab = mirrored_lab(tmp_path)
    mutate(lab.tenant("tenant-a").node_roots["tenant-a-worker-1"])
    result = check_result(lab, CHECK, tenant="tenant-a")
    assert result.status == "fail", result
    assert result.seen.startswith(seen), result.seen
    assert "`pulumi up --replace <URN>` of `tenant-a-worker-1-registry-mirrors`" in result.cause
    assert check_result(lab, CHECK, tenant="tenant-b").status == "pass"


def test_no_credential_reaches_the_pod_its_answer_or_the_report(tmp_path):
    lab = mirrored_lab(tmp_path)
    root = lab.tenant("tenant-a").node_roots["tenant-a-worker-1"]
    (root / HUB[1:]).write_text((root / HUB[1:]).read_text().replace(TOKEN, "b3RoZXI6cHc="))
    answers = []
    server = lab.tenant("tenant-a")
    get_pod = server.get_pod

    def keep_answer(namespace, name):
        pod = get_pod(namespace, name)
        answers.append(termination_message(pod))
        return pod

    server.get_pod = keep_answer
    result = check_result(lab, CHECK, tenant="tenant-a")
    assert result.status == "fail"
    shown = json.dumps([result.to_json(), created_pods(server), answers])
    assert any(answers)
    for secret in ("s3cret", TOKEN, "b3RoZXI6cHc="):
        assert secret not in shown


def test_a_node_the_pod_never_runs_on_fails_naming_it(tmp_path):
    lab = mirrored_lab(tmp_path)
    del lab.tenant("tenant-a").node_roots["tenant-a-worker-1"]  # NotReady: the pod waits
    result = check_result(lab, CHECK, tenant="tenant-a")
    assert result.status == "fail"
    assert result.expected == "a pod on tenant-a-worker-1 reads its registry files within 90s"
    assert "NotReady, or does not pull the tools image (busybox:1.37.0)" in result.cause


def test_without_registry_files_no_pod_is_made():
    lab = with_pods(standard_lab())
    lab.spec["registryMirrors"] = {"*": "harbor/all"}
    assert check_result(lab, "mgmt.registries", tenant="").status == "pass"
    assert check_result(lab, CHECK, tenant="tenant-a").status == "pass"
    assert not created_pods(lab.mgmt) and not created_pods(lab.tenant("tenant-a"))


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ("0 600 10 " + "a" * 64 + " " + "b" * 64 + "\n", "does not end with 'end'"),
        ("1 missing\nend\n", "line 1 is not the record of file 0"),
        ("0 missing\nend\n", "1 records for 2 files"),
        ("0 600 x\nend\n", "line 1 has 3 fields"),
    ],
)
def test_an_answer_the_script_did_not_write_is_not_read(message, why):
    with pytest.raises(UnreadableAnswer, match=why):
        parse_message(message, 2 if "records" in why else 1)


def test_a_spec_whose_registry_files_name_no_tenant_is_refused(tmp_path):
    spec = dict(mirrored_lab(tmp_path).spec)
    spec["registryFiles"] = {**spec["registryFiles"], "tenantNodes": {"tenant-x": {"n": "c"}}}
    with pytest.raises(SpecError, match=r"registryFiles\.tenantNodes names no tenant: tenant-x"):
        parse_spec(spec)
