"""Worker names: one docker container / node name each, never kind's own node container."""

from __future__ import annotations

import pytest

from components.config import ConfigError, TenantConfig, kind_node_container, parse_config

SSH = {"sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n"}


def remote(name: str, *hosts: str) -> dict:
    workers = [{"name": host, "host": f"{host}.example"} for host in hosts]
    return {"name": name, "workerMode": "remote", "gpuMode": "real", "remoteWorkers": workers}


def error_for(raw: dict) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return info.value


def test_remote_worker_names_are_unique_across_tenants():
    error = error_for({"tenants": [remote("a", "gpu-1"), remote("b", "gpu-2", "gpu-1")], **SSH})
    assert error.key == "tenants[1].name"
    assert str(error) == "tenants[1].name: worker 'gpu-1' is also a worker of tenants[0]"


def test_a_remote_worker_cannot_take_a_container_workers_name():
    error = error_for({"tenants": [{"name": "a", "workers": 2}, remote("b", "a-worker-2")], **SSH})
    assert error.key == "tenants[1].name"
    assert "'a-worker-2' is also a worker of tenants[0]" in str(error)


def test_worker_cannot_be_named_like_kinds_node_container(monkeypatch: pytest.MonkeyPatch):
    # The current naming (<tenant>-worker-<n>) cannot collide; this guards a change of it.
    monkeypatch.setattr(
        TenantConfig, "worker_names", property(lambda self: [f"{self.name}-control-plane"])
    )
    error = error_for({"tenants": [{"name": "lab"}], "managementClusterName": "lab"})
    assert error.key == "tenants[0].name"
    assert "'lab-control-plane' would take the name of kind's node container" in str(error)
    assert kind_node_container("lab") == "lab-control-plane"


def test_distinct_names_pass_even_when_they_look_alike():
    cfg = parse_config(
        {
            "tenants": [
                {"name": "a", "workers": 11},
                {"name": "a-worker-1"},
                {"name": "kamaji-hami-lab"},
                remote("r", "a-worker-12"),
            ],
            **SSH,
        }
    )
    names = [n for t in cfg.tenants for n in t.worker_names]
    assert len(names) == len(set(names)) == 14
