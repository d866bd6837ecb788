"""A worker container created on the real daemon exactly as WorkerPool declares it.

The declaration is the program's (`tenant-a-worker-1` of the lab stack); the requests are
what terraform-provider-docker v4.5.0 makes of it (create, disconnect `bridge`, connect the
lab network, start; tests/support/docker_readback.py). The image is the tier's busybox, which
starts in a second: this checks what Docker stores and what the provider reads back. The same
worker from the kind node image built here, booting systemd and containerd, is
test_node_image.py's; the leave script is test_management_cluster.py's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import docker_host
import pytest
from docker_host import Docker, NotMadeHere
from host_cgroups import thaw_frozen
from program import CreatedNetwork, assert_only_on_the_lab_network, declared

from tests.support.docker_readback import (
    container_attributes,
    container_create_request,
    container_differences,
    container_state,
    daemon_security_opts,
    negotiated_api_version,
    read_back,
)

WORKER = "tenant-a-worker-1"
STAND_IN = "the tier's busybox image stands in for the node image: declaration and read-back only"


def create_as_the_provider(docker: Docker, attributes: dict[str, Any]) -> str:
    """resourceDockerContainerCreate's calls, in its order; returns the container ID."""
    version = negotiated_api_version(docker.api_version())
    name = attributes["name"]
    status, _, body = docker.api(
        "POST", f"/v{version}/containers/create?name={name}", container_create_request(attributes)
    )
    assert status == 201, f"the daemon refused the container ({status}): {body}"
    container = body["Id"]
    for network in attributes.get("networks_advanced") or []:
        status, _, body = docker.api(
            "POST", f"/v{version}/networks/bridge/disconnect", {"Container": container}
        )
        assert status == 200 or "is not connected" in str(body), body
        status, _, body = docker.api(
            "POST",
            f"/v{version}/networks/{network['name']}/connect",
            {"Container": container, "EndpointConfig": {"IPAMConfig": {}}},
        )
        assert status == 200, f"connect to {network['name']} ({status}): {body}"
    if attributes.get("start"):
        status, _, body = docker.api("POST", f"/v{version}/containers/{container}/start")
        assert status == 204, f"start ({status}): {body}"
    return container


REMOVE_TIMEOUT_SECONDS = 90


def remove_as_the_provider(docker: Docker, container: str) -> None:
    """Delete with `remove_volumes` (the worker's anonymous /var volume goes with it), until
    the container is gone: under load a forced delete of a booted node can answer 409
    ("removal ... already in progress") or 500 (its kill not yet seen, or never: a cgroup of
    the node's left frozen, which the tier's own daemon's containers get thawed), and a new
    container of the same name would then meet the old one."""
    deadline = time.monotonic() + REMOVE_TIMEOUT_SECONDS
    while True:
        status, _, body = docker.api("DELETE", f"/containers/{container}?v=1&force=1")
        found, _, details = docker.api("GET", f"/containers/{container}/json")
        if status in (204, 404) and found == 404:
            return
        if found == 200 and docker.own:  # a cgroup left frozen stops the kill (host_cgroups)
            thaw_frozen(details["Id"])
        assert time.monotonic() < deadline, (
            f"{container} not removed: {status} {body} (a daemon stopped during a removal "
            "leaves the container removing for good: with the tier's dockerd stopped, delete "
            "its data root, ${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/host/docker)"
        )
        time.sleep(1)


def remove_made_here(docker: Docker) -> list[str]:
    """Removes what the session made on a daemon it shares (containers first: a network in use
    cannot go); one line per object it could not remove."""
    made = docker.made_here()
    for container in made["container"]:
        remove_as_the_provider(docker, container)
    for kind in ("network", "volume"):
        for name in made[kind]:
            docker.api("DELETE", f"/{kind}s/{name}")
    left = docker.made_here()
    return [f"left on {docker.host}: {kind} {name}" for kind in left for name in left[kind]]


def inspect(docker: Docker, container: str) -> dict[str, Any]:
    return json.loads(docker.run("inspect", container).stdout)[0]


def leftover(docker: Docker, name: str) -> None:
    """Removes the container of that name if the tier made it (this session, or an earlier
    one cut off before its cleanup); one it did not make stays, and the test fails naming it."""
    found = claimed(docker, "container", name)
    if found is not None:
        remove_as_the_provider(docker, found["Id"])


def claimed(docker: Docker, kind: str, name: str, hint: str = "") -> dict[str, Any] | None:
    """`Docker.claim`, a refusal failing the test with its message alone."""
    try:
        return docker.claim(kind, name)
    except NotMadeHere as error:
        refused = f"{error}{hint}"
    pytest.fail(refused, pytrace=False)


@pytest.fixture(scope="module")
def worker(
    docker: Docker, busybox: str, lab_network: CreatedNetwork
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(the provider's configuration, `docker inspect`) of the running worker."""
    docker.require_privileged()
    inputs = declared(WORKER)
    assert inputs["networksAdvanced"] == [{"name": lab_network.name}]
    image_id = json.loads(docker.run("image", "inspect", busybox).stdout)[0]["Id"]
    attributes = {**container_attributes(inputs), "image": image_id}  # STAND_IN
    leftover(docker, attributes["name"])
    container = create_as_the_provider(docker, attributes)
    try:
        yield attributes, inspect(docker, container)
    finally:
        remove_as_the_provider(docker, container)


@pytest.mark.upstream("docker-provider-container-create-request")
def test_the_worker_is_stored_as_declared(worker):
    attributes, found = worker
    host, config = found["HostConfig"], found["Config"]
    assert found["State"]["Running"], found["State"]
    assert host["Privileged"] is True
    assert host["CgroupnsMode"] == "private"
    assert host["Tmpfs"] == {"/tmp": "", "/run": ""}
    assert host["Binds"] == ["/lib/modules:/lib/modules:ro"]
    assert set(config["Volumes"]) == {"/var", "/lib/modules"}
    assert host["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 1}
    assert host["SecurityOpt"] == attributes["security_opts"]
    assert host["Init"] is False and config["Tty"] is True
    declared_labels = {entry["label"]: entry["value"] for entry in attributes["labels"]}
    assert declared_labels.items() <= config["Labels"].items()
    assert config["Hostname"] == WORKER


def test_the_worker_is_only_on_the_lab_network_in_the_container_range(
    worker, lab_network: CreatedNetwork
):
    _, found = worker
    assert_only_on_the_lab_network(found, lab_network)


@pytest.mark.upstream("docker-provider-container-readback", "docker-privileged-label-disable")
def test_what_docker_reads_back_gives_the_provider_no_diff(worker):
    """T2 on the real daemon: every attribute the provider reads back equals the declaration
    (network_mode included, `bridge` after the disconnect), and the model of the hermetic
    tests predicted Docker's security options."""
    attributes, found = worker
    state = container_state(found, attributes["image"])
    assert container_differences(attributes, state) == set(), state
    assert state["network_mode"] == "bridge"
    assert found["HostConfig"]["SecurityOpt"] == read_back(attributes)["security_opts"]


@pytest.mark.upstream("docker-privileged-label-disable")
def test_the_daemon_appends_label_disable_to_kinds_security_options(
    docker: Docker, busybox: str, lab_network: CreatedNetwork
):
    """Why the worker declares `label=disable`: with kind's two options alone, the real
    daemon appends it, and the provider would replace every worker at each `up`."""
    inputs = declared(WORKER)
    image_id = json.loads(docker.run("image", "inspect", busybox).stdout)[0]["Id"]
    kinds = {
        **container_attributes(inputs),
        "image": image_id,
        "name": f"{WORKER}-kind-flags",
        "security_opts": ["seccomp=unconfined", "apparmor=unconfined"],
        "start": False,
    }
    leftover(docker, kinds["name"])
    container = create_as_the_provider(docker, kinds)
    try:
        stored = inspect(docker, container)["HostConfig"]["SecurityOpt"]
    finally:
        remove_as_the_provider(docker, container)
    assert stored == [*kinds["security_opts"], "label=disable"]
    assert stored == daemon_security_opts(kinds)
    assert container_differences(kinds, {"security_opts": stored}) == {"security_opts"}


def test_on_a_daemon_the_tier_shares_it_removes_what_it_made_and_only_that(
    docker: Docker, busybox: str
):
    """The session's daemon seen as one a contributor runs: a container and a network made
    without the tier (no label, not recorded) under names the tier uses stay, and the tier's
    clash with them fails naming them; what the tier made there goes at the session's end."""
    shared = Docker(docker.host, False, docker.default_runtime, session=f"{os.getpid()}-shared")
    foreign = network = f"host-tier-foreign-{os.getpid()}"
    ours = f"host-tier-ours-{os.getpid()}"
    made = {}
    for kind, path, body in (
        ("containers", f"/containers/create?name={foreign}", {"Image": busybox, "Cmd": ["true"]}),
        ("networks", "/networks/create", {"Name": network}),
    ):
        status, _, created = docker_host.api(docker.socket, "POST", path, body)  # no label
        assert status == 201, created
        made[kind] = created["Id"]
    try:
        with pytest.raises(pytest.fail.Exception, match=f"container '{foreign}' .*did not make"):
            leftover(shared, foreign)
        with pytest.raises(NotMadeHere, match=f"network '{network}'"):
            shared.claim("network", network)
        shared.run("create", "--name", ours, busybox, "true")
        shared.run("network", "create", ours)
        assert remove_made_here(shared) == []
        assert shared.inspect("container", ours) is None and shared.inspect("network", ours) is None
        assert shared.inspect("container", foreign)["Id"] == made["containers"]
        assert shared.inspect("network", network)["Id"] == made["networks"]
    finally:
        for kind, ident in made.items():
            docker_host.api(docker.socket, "DELETE", f"/{kind}/{ident}?force=1")
        docker.run("rm", "-f", ours, check=False)
        docker.run("network", "rm", ours, check=False)
