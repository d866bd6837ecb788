"""labcheck's files pod (labcheck/node_files.py) in a real worker: its command, as the kubelet
would run the pod's container, in a container of the tier's busybox that the worker's containerd
pulls through the site mirror under its registry.k8s.io name, with the node's /etc/containerd
mounted read-only where the pod mounts it, on the files the program's own install script put
there. The worker and the site mirror are test_registry_mirror.py's fixtures (module-scoped:
this module gets its own worker)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from docker_host import Docker
from management_cluster import run_script
from site_mirror import SiteMirror

# The fixtures `mirror` and `worker` are test_registry_mirror.py's: imported, they serve here.
from test_registry_mirror import IMAGE, crictl, mirror, worker  # noqa: F401
from test_workers import WORKER

from builders.labcheck_spec import expected_registry_files
from builders.registry_mirrors import (
    CERTS_DIR,
    files_environment,
    install_files_script,
    registry_files,
    remove_files_script,
)
from labcheck.node_files import differences, files_pod, parse_message
from labcheck.spec import RegistryFiles
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config


def run_to_exit(docker: Docker, node: str, name: str, image: str, command: list[str],
                mounts: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """`crictl run` of one container of `image` (pulled through the node's mirrors) with
    `mounts`, as the kubelet runs a pod's container; its status once it exited."""
    pod = {
        "metadata": {"name": name, "namespace": "default", "uid": name, "attempt": 0},
        "log_directory": f"/tmp/{name}",
        "linux": {"cgroup_parent": "system.slice", "security_context": {
            "namespace_options": {"network": 2}}},
    }  # fmt: skip
    container = {"metadata": {"name": name}, "image": {"image": image}, "log_path": "log",
                 "command": command, "mounts": mounts}  # fmt: skip
    for kind, spec in (("pod", pod), ("container", container)):
        write = f"mkdir -p /tmp/{name} && cat > /tmp/{name}-{kind}.json"
        docker.run("exec", "-i", node, "sh", "-c", write, input=json.dumps(spec))
    ran = crictl(docker, node, "run", f"/tmp/{name}-container.json", f"/tmp/{name}-pod.json")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    container_id = ran.stdout.split()[-1]
    for _ in range(60):
        state = json.loads(crictl(docker, node, "inspect", container_id).stdout)["status"]
        if state["state"] == "CONTAINER_EXITED":
            return state
        time.sleep(0.5)
    raise AssertionError(f"{name} still {state['state']} after 30 s")


def test_labchecks_files_pod_reads_what_the_install_script_put_in_the_node(
    docker: Docker, tier_cache_dir: Path, request: pytest.FixtureRequest
):
    """labcheck's files pod (labcheck/node_files.py) run in the worker as the kubelet runs it:
    its command, in a container of the tier's busybox pulled through the mirror under its
    registry.k8s.io name, the node's /etc/containerd mounted read-only where the pod mounts it.
    On the files the program's install script put there (quay.io's hosts.toml with credentials,
    so 0600), its answer matches the spec the program builds, file by file; once that file is 0644
    and has one more line, labcheck names both; the credentials are in no answer."""
    node: str = request.getfixturevalue("worker")
    site: SiteMirror = request.getfixturevalue("mirror")
    entries = [
        {"registry": "registry.k8s.io", "mirror": site.address, "plainHttp": True},
        # credentials only over HTTPS: a mirror nothing here pulls from, for its 0600 file
        {"registry": "quay.io", "mirror": "secure.example/quay"},
    ]
    auth = {"secure.example": "robot:s3cret"}
    cfg = parse_config(
        {**lab_stack_config(), "registryMirrors": entries, "registryMirrorAuth": json.dumps(auth)}
    )
    files = registry_files(cfg.registry_mirrors, auth)
    env = {"NODE": WORKER, **files_environment(files)}
    installed = run_script(docker, tier_cache_dir, install_files_script(), env)
    assert installed.returncode == 0, installed.stderr
    expected = RegistryFiles.model_validate(expected_registry_files(cfg)).files
    assert [f.mode for f in expected].count("600") == 1
    command = files_pod("p", WORKER, IMAGE, {}, [f.path for f in expected])["spec"]
    argv = list(command["containers"][0]["command"])
    (mount,) = command["containers"][0]["volumeMounts"]
    (volume,) = command["volumes"]
    argv[4] = "/out/message"  # the kubelet's termination-log file, here a directory of the node
    mounts = [
        {"container_path": mount["mountPath"], "host_path": volume["hostPath"]["path"],
         "readonly": True},
        {"container_path": "/out", "host_path": "/tmp/lc-files-out"},
    ]  # fmt: skip
    hub = f"{CERTS_DIR}/quay.io/hosts.toml"
    answers = []
    for attempt, change in enumerate(("", f"chmod 644 {hub} && echo '#' >> {hub}")):
        if change:
            docker.run("exec", node, "sh", "-c", change)
        docker.run("exec", node, "mkdir", "-p", "/tmp/lc-files-out")
        state = run_to_exit(docker, node, f"lc-files-{attempt}", IMAGE, argv, mounts)
        assert state["exitCode"] == 0, state
        answers.append(docker.run("exec", node, "cat", "/tmp/lc-files-out/message").stdout)
        seen = parse_message(answers[-1], len(expected))
        assert differences(expected, seen) == (
            [] if not change else [
                f"{hub}: content differs ({len(files[hub]) + 2} bytes; the stack writes "
                f"{len(files[hub])})",
                f"{hub}: mode 644, the stack writes 600 (it holds credentials: root's alone)",
            ]
        )  # fmt: skip
    crictl(docker, node, "rmp", "--force", "--all")
    token = base64.b64encode(b"robot:s3cret").decode()
    assert not [a for a in answers if "s3cret" in a or token in a]
    removed = run_script(docker, tier_cache_dir, remove_files_script(), env)
    assert removed.returncode == 0, removed.stderr
