"""Fixtures of the host tier (`.venv/bin/python -m pytest tests/host`): a real Docker Engine.

- ``docker``: the session's daemon (docker_host.py). One that already answers (DOCKER_HOST,
  else /var/run/docker.sock) is shared: the tier removes from it what it made and only that
  (labels and recorded IDs, docker_host.Docker), and fails naming any object of a name it needs
  that it did not make. Else the tier installs docker.io when dockerd is missing and starts
  its own under ``${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/host/``, stopped by PID at the
  end of the session, also when it fails. ``LAB_HOST_DOCKER=own`` starts the tier's own even
  when another daemon answers (run it alone: both would use docker0 and the same iptables
  chains). DOCKER_HOST points at it for the whole session, so the program's own `docker`
  commands reach it too. The cgroup hierarchies the tier mounts first (host_cgroups.py) are
  unmounted after the daemon stops.
- ``busybox``: a tiny image the tier builds (images.py); no registry is reachable.
- ``lab_network``: the lab network, created as pulumi-docker's provider creates what the
  program declares (program.py, tests/support/docker_readback.py), removed at the end.
- ``tier_cache_dir``: the tier's cache directory.
- ``node_image``: the kind node image built here (node_image.py), its local tag; and
  ``mirrored_node_image``: the same image pushed to a registry on loopback, as the
  digest-pinned name a stack config gives a site mirror's image.

The hermetic tier's trap (tests/conftest.py) does not apply here: this tier is about the host.
The session's timings are printed at the end (cold and cached runs differ there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diagnostics
import pytest
from docker_host import SESSION_ENV, Docker, start_docker, tier_cache
from footprint_report import FOOTPRINT, MEASURED, footprint_lines
from host_cgroups import (
    cgroup_counts,
    cgroup_mounts,
    make_like_systemd,
    read_mountinfo,
    read_proc_cgroups,
    undo,
)
from images import busybox_image
from node_image import Timings, build_node_image, publish
from program import NETWORK_RESOURCE, CreatedNetwork, declared, lab_run
from tenant_lab import TenantLab, tenant_lab
from test_workers import claimed, remove_as_the_provider, remove_made_here

from tests.support.docker_readback import (
    negotiated_api_version,
    network_attributes,
    network_create_request,
)

TIMINGS: dict[str, float] = {}
# What the tier changed on the host to make it like a user's, and took back at the end of the
# session (or why not), and what it could not remove from a daemon it shares: shown at the end.
HOST_CHANGES: list[str] = []
# The session's daemon and its log once the `docker` fixture runs: what a failure report reads.
ACTIVE: dict[str, Any] = {}
# Full reports per session: a broken session fixture fails every test that uses it alike.
DIAGNOSED_AT_MOST = 3


@pytest.fixture(scope="session")
def host_trap() -> None:
    """Overrides the hermetic tier's trap (tests/conftest.py): this tier uses the real host."""
    return None


@pytest.fixture(scope="session")
def tier_cache_dir() -> Path:
    path = tier_cache(SESSION_ENV)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    found = cgroup_mounts(read_mountinfo()), unbound(read_proc_cgroups())
    cgroups = make_like_systemd()  # before any dockerd: docker reads the mounts
    HOST_CHANGES.extend(cgroups.lines)
    try:
        yield from _session_daemon()
    finally:  # the daemon has stopped: its cgroups are gone from what the tier mounted
        HOST_CHANGES.extend(undo(cgroups))
        mounts, controllers = cgroup_mounts(read_mountinfo()), unbound(read_proc_cgroups())
        deadline = time.monotonic() + 5  # the kernel frees a hierarchy after its umount
        while controllers != found[1] and time.monotonic() < deadline:
            time.sleep(0.2)
            controllers = unbound(read_proc_cgroups())
        if mounts != found[0]:
            changed = {e.mount_point for e in mounts} ^ {e.mount_point for e in found[0]}
            HOST_CHANGES.append(f"cgroup mounts differ from the session's start: {changed}")
        if controllers != found[1]:  # a hierarchy unmounted too early lives on, unseen
            HOST_CHANGES.append(
                f"controllers in no cgroup v1 hierarchy: {sorted(found[1])} at the session's "
                f"start, {sorted(controllers)} at its end (/proc/cgroups)"
            )


def unbound(proc_cgroups: str) -> set[str]:
    return {name for name, (hierarchy, _) in cgroup_counts(proc_cgroups).items() if not hierarchy}


def _session_daemon() -> Iterator[Docker]:
    docker, daemon = start_docker(SESSION_ENV, SESSION_ENV.get("LAB_HOST_DOCKER", "auto"))
    TIMINGS.update(docker.timings)
    ACTIVE.update(docker=docker, log=daemon.paths.log if daemon else None, diagnosed=0)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DOCKER_HOST", docker.host)
            yield docker
    finally:
        ACTIVE.clear()
        if daemon is None:  # a daemon the tier shares: what this session made goes, only that
            HOST_CHANGES.extend(remove_made_here(docker))
        else:
            try:  # before the stop: a removal the stop cuts off never completes
                for container in docker.api("GET", "/containers/json?all=1")[2] or []:
                    remove_as_the_provider(docker, container["Id"])
            finally:
                started = time.monotonic()
                daemon.stop()
            TIMINGS["dockerd stop"] = time.monotonic() - started


@pytest.fixture(scope="session")
def busybox(docker: Docker, tier_cache_dir: Path) -> str:
    started = time.monotonic()
    tag = busybox_image(docker, tier_cache_dir)
    TIMINGS["busybox image"] = time.monotonic() - started
    return tag


@pytest.fixture(scope="session")
def node_image(docker: Docker, tier_cache_dir: Path) -> str:
    timings = Timings()
    started = time.monotonic()
    tag = build_node_image(docker, tier_cache_dir, timings)
    TIMINGS.update(timings.steps)
    TIMINGS["node image"] = time.monotonic() - started
    return tag


@pytest.fixture(scope="session")
def mirrored_node_image(docker: Docker, tier_cache_dir: Path, node_image: str) -> str:
    started = time.monotonic()
    reference = publish(docker, tier_cache_dir, node_image)
    TIMINGS["node image: push to the loopback mirror"] = time.monotonic() - started
    return reference


@pytest.fixture(scope="session")
def lab_network(docker: Docker) -> Iterator[CreatedNetwork]:
    inputs = declared(NETWORK_RESOURCE)
    name = inputs["name"]
    # a lab deployed on that daemon has this network: never removed here
    found = claimed(docker, "network", name, " (`make destroy` a lab deployed there)")
    if found is not None:
        docker.api("DELETE", f"/networks/{found['Id']}")  # left by an interrupted session
    version = negotiated_api_version(docker.api_version())
    request = network_create_request(network_attributes(inputs), version)
    started = time.monotonic()
    status, _, body = docker.api("POST", f"/v{version}/networks/create", request)
    assert status == 201, f"the daemon refused the provider's request ({status}): {body}"
    TIMINGS["lab network create"] = time.monotonic() - started
    try:
        inspect = json.loads(docker.run("network", "inspect", body["Id"]).stdout)[0]
        yield CreatedNetwork(inputs, request, inspect, lab_run()[1])
    finally:
        docker.api("DELETE", f"/networks/{body['Id']}")


# The tenant modules share the session's `tenants` (two tenants, four workers named as the
# program names them): they run last, so no other module meets their containers, in an order
# where what a module does to the workers (restarts, a leave) comes after what others check.
TENANT_MODULES = (
    "test_tenant_join.py",
    "test_tenant_lock_wait_policy.py",  # before labcheck, which applies the policy it shows
    "test_tenant_labcheck.py",
    "test_tenant_konnectivity.py",
    "test_tenant_agent.py",
    "test_tenant_lifecycle.py",
    "test_tenant_upgrade.py",  # replaces tenant-b's control plane and workers: after all else
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def order(item: pytest.Item) -> int:
        name = item.path.name
        return TENANT_MODULES.index(name) if name in TENANT_MODULES else -1

    unknown = {i.path.name for i in items if i.path.name.startswith("test_tenant_")}
    assert unknown <= set(TENANT_MODULES), f"place {unknown - set(TENANT_MODULES)} in the order"
    items.sort(key=order)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used the daemon carries the containers' state in its report
    (diagnostics.py): the kubelets' journals, failed units, the containers' and dockerd's logs."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    docker = ACTIVE.get("docker")
    if not report.failed or docker is None or "docker" not in getattr(item, "fixturenames", ()):
        return
    ACTIVE["diagnosed"] += 1
    if ACTIVE["diagnosed"] > DIAGNOSED_AT_MOST:
        text = f"(shown for the first {DIAGNOSED_AT_MOST} failures of the session only)"
    else:
        text = diagnostics.report(docker, ACTIVE["log"])
    report.sections.append(("host diagnostics", text))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    measured = terminalreporter.config.stash.get(FOOTPRINT, None)
    if measured:
        terminalreporter.section("host tier footprint (cgroups: CPU over 6 s, memory as docker)")
        for line in footprint_lines(measured):
            terminalreporter.write_line(line)
    if HOST_CHANGES:
        terminalreporter.section("host tier: what it changed on the host, and took back")
        for line in HOST_CHANGES:
            terminalreporter.write_line(line)
    timings = {**TIMINGS, **terminalreporter.config.stash.get(MEASURED, {})}
    if timings:
        terminalreporter.section("host tier timings")
        for what, seconds in timings.items():
            terminalreporter.write_line(f"{what}: {seconds:.1f} s")


@pytest.fixture(scope="session")
def tenants(
    docker: Docker, tier_cache_dir: Path, mirrored_node_image: str, lab_network: CreatedNetwork
) -> Iterator[TenantLab]:
    """Two tenants, each a control plane as Kamaji builds it and two joined workers with
    flannel (tenant_lab.py). Session-wide: the tests of the joins, the agent, labcheck,
    the workers' lifecycle and tenant-b's upgrade share it (the upgrade's module comes last)."""
    docker.require_privileged()
    started = time.monotonic()
    with tenant_lab(docker, tier_cache_dir, mirrored_node_image, lab_network.name) as lab:
        TIMINGS["tenants: up"] = time.monotonic() - started
        try:
            yield lab
        finally:  # with what the tenant modules timed (a leave, a re-join, an upgrade)
            TIMINGS.update({f"tenants: {what}": seconds for what, seconds in lab.timings.items()})
