"""The labcheck spec's registry files: what labcheck must find in each node the program writes
them into, by digest, never by text."""

from __future__ import annotations

import hashlib
import json

from builders.labcheck_spec import expected_registry_files, redact
from builders.registry_mirrors import registry_files
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config, stack_config

MIRRORS = [
    {"registry": "docker.io", "mirror": "harbor.example/hub"},
    {"registry": "*", "mirror": "cache.example"},
]
AUTH = {"harbor.example": "robot$lab:s3cret"}
TOKEN = "cm9ib3QkbGFiOnMzY3JldA=="  # base64 of AUTH's value, as the hosts.toml carries it


def mirrored(**more) -> dict:
    return {**lab_stack_config(), "registryMirrors": MIRRORS, **more}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_each_file_by_its_digests_and_the_mode_the_install_script_gives_it():
    cfg = parse_config(mirrored(registryMirrorAuth=json.dumps(AUTH)))
    expected = expected_registry_files(cfg)
    written = registry_files(cfg.registry_mirrors, AUTH)
    assert [f["path"] for f in expected["files"]] == sorted(written)
    by_path = {f["path"]: f for f in expected["files"]}
    hub = "/etc/containerd/certs.d/docker.io/hosts.toml"
    assert by_path[hub]["mode"] == "600"
    assert by_path[hub]["sha256"] == sha(written[hub])
    assert by_path[hub]["redactedSha256"] == sha(
        written[hub].replace(f'"Basic {TOKEN}"', '"<redacted>"')
    )
    assert by_path[hub]["size"] == len(written[hub])
    others = {path: f["mode"] for path, f in by_path.items() if path != hub}
    assert set(others.values()) == {"644"}
    # A file without credentials: both digests are of its text.
    default = by_path["/etc/containerd/certs.d/_default/hosts.toml"]
    assert default["sha256"] == default["redactedSha256"]
    # Neither the credentials nor the header they become are in the spec.
    text = json.dumps(expected)
    assert "s3cret" not in text and TOKEN not in text


def test_the_nodes_the_program_writes_them_into_with_the_command_that_does():
    expected = expected_registry_files(parse_config(mirrored()))
    assert expected["managementNodes"] == {
        "kamaji-hami-lab-control-plane": "management-registry-mirrors"
    }
    assert expected["tenantNodes"] == {
        "tenant-a": {"tenant-a-worker-1": "tenant-a-worker-1-registry-mirrors"},
        "tenant-b": {"tenant-b-worker-1": "tenant-b-worker-1-registry-mirrors"},
    }


def test_no_files_without_mirrors():
    assert expected_registry_files(parse_config(lab_stack_config())) is None


def test_redaction_keeps_everything_but_an_authorization_value():
    text = (
        '[host."https://h"]\n  [host."https://h".header]\n    Authorization = "Basic abc="\n'
        'x = 1\n  authorization="a=b"\nheader = { AUTHORIZATION = "c" }\nAuthorization\ny = 2\n'
    )
    assert redact(text) == (
        '[host."https://h"]\n  [host."https://h".header]\n    Authorization = "<redacted>"\n'
        'x = 1\n  authorization= "<redacted>"\nheader = { AUTHORIZATION = "<redacted>"\n'
        "Authorization\ny = 2\n"  # no `=` on its line: nothing to redact, nor on the next
    )


def test_no_node_the_program_does_not_write_into():
    """An existing management cluster and remote workers are their owners' to configure."""
    raw = {**stack_config("gpu"), "registryMirrors": MIRRORS}
    cfg = parse_config(raw, secrets_set=False)
    assert cfg.management_mode == "existing"
    assert {t.worker_mode for t in cfg.tenants} == {"remote"}
    expected = expected_registry_files(cfg)
    assert expected["managementNodes"] == {} and expected["tenantNodes"] == {}
    assert expected["files"]
