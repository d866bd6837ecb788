"""Fixtures of the real tier (``make test-real``): real control planes on loopback.

- ``control_plane``: one full plane (etcd, API server, controller manager, scheduler, kwok),
  shared by the session. Tests that change cluster-wide state should start their own.
- ``start_control_plane(name, users=..., full=..., kubernetes=...)``: a new plane; every plane
  started this way is stopped at the end of the session, also when a test fails or pytest is
  interrupted.

See controlplane.py for the ``ControlPlane`` API (server, ca_path, admin_token, token(user),
add_token_user, kubectl, kubeconfig, create_fake_node, restart_apiserver, audit_log).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest
from binaries import K8S_VERSION
from controlplane import ControlPlane

StartControlPlane = Callable[..., ControlPlane]


@pytest.fixture(scope="session")
def start_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartControlPlane]:
    planes: list[ControlPlane] = []

    def start(
        name: str,
        *,
        users: Mapping[str, Sequence[str]] | None = None,
        full: bool = True,
        tenant_args: Sequence[str] | None = None,
        kubernetes: str = K8S_VERSION,
        component_args: Mapping[str, Sequence[str]] | None = None,
    ) -> ControlPlane:
        plane = ControlPlane.start(
            tmp_path_factory.mktemp(f"plane-{name}"),
            name=name,
            users=users,
            full=full,
            tenant_args=tenant_args,
            kubernetes=kubernetes,
            component_args=component_args,
        )
        planes.append(plane)
        return plane

    try:
        yield start
    finally:
        for plane in reversed(planes):
            plane.stop()


@pytest.fixture(scope="session")
def control_plane(start_control_plane: StartControlPlane) -> ControlPlane:
    return start_control_plane("shared")
