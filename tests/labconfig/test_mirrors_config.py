"""A mirrored site's stack config (`registryMirrors`, `chartSources`, `kamajiGitUrl`): read as
Pulumi hands it over, every mistake named by its key, nothing set by default."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pulumi
import pytest

from labconfig.model import ConfigError, LabConfig
from labconfig.parse import parse_config
from labconfig.stack import raw_stack_config
from tests.support.pulumi_harness import PROJECT, lab_stack_config

TENANTS = lab_stack_config()["tenants"]
CA = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUJ0s=\n-----END CERTIFICATE-----\n"


@pytest.fixture(autouse=True)
def clean_runtime_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({}, [])


def read(**keys: object) -> LabConfig:
    config = {f"{PROJECT}:tenants": json.dumps(TENANTS)}
    config |= {
        f"{PROJECT}:{key}": value if isinstance(value, str) else json.dumps(value)
        for key, value in keys.items()
    }
    return parse_config(raw_stack_config(config))


def test_nothing_is_mirrored_by_default():
    cfg = parse_config({"tenants": TENANTS})
    assert cfg.registry_mirrors == () and cfg.chart_sources == {}
    assert cfg.kamaji_git_url == "https://github.com/clastix/kamaji.git"
    assert cfg.chart("metallb").repo == "https://metallb.github.io/metallb"


def test_mirrors_and_chart_sources_are_read_as_the_cli_passes_them():
    cfg = read(
        registryMirrors=[
            {"registry": "docker.io", "mirror": "harbor.example.com/dockerhub-proxy", "ca": CA},
            {"registry": "*", "mirror": "10.0.0.5:5000", "plainHttp": True, "mirrorOnly": True},
        ],
        chartSources={"hami": "oci://harbor.example.com/charts", "metallb": "https://c.example/m"},
    )
    hub, rest = cfg.registry_mirrors
    assert (hub.host, hub.path, hub.ca) == ("harbor.example.com", "dockerhub-proxy", CA)
    assert (rest.registry, rest.host, rest.path) == ("*", "10.0.0.5:5000", "")
    assert rest.plain_http and rest.mirror_only
    assert not hub.mirror_only  # the registry stays the fallback unless told
    hami = cfg.chart("hami")
    assert (hami.name, hami.chart, hami.repo) == (
        "hami", "oci://harbor.example.com/charts/hami", None,
    )  # fmt: skip
    metallb = cfg.chart("metallb")
    assert (metallb.chart, metallb.repo) == ("metallb", "https://c.example/m")
    # An upstream OCI chart keeps its own reference.
    assert cfg.chart("nvml-mock").chart == "oci://ghcr.io/nvidia/k8s-test-infra/chart/nvml-mock"


@pytest.mark.parametrize(
    ("keys", "key", "message"),
    [
        ({"registryMirrors": [{"registry": "docker.io", "mirror": "https://h.example"}]},
         "registryMirrors[0].mirror", "without the scheme"),
        ({"registryMirrors": [{"registry": "docker.io", "mirror": "H_ost"}]},
         "registryMirrors[0].mirror", "host[:port][/path]"),
        ({"registryMirrors": [{"registry": "Docker Hub", "mirror": "h.example"}]},
         "registryMirrors[0].registry", "registry host such as docker.io"),
        ({"registryMirrors": [{"registry": "quay.io", "mirror": "h.example", "ca": "not pem"}]},
         "registryMirrors[0].ca", "PEM certificates"),
        ({"registryMirrors": [
            {"registry": "quay.io", "mirror": "h.example", "ca": CA, "plainHttp": True}]},
         "registryMirrors[0]", "a plainHttp mirror has no certificate"),
        ({"registryMirrors": [{"registry": "quay.io", "mirror": "a.example"},
                              {"registry": "quay.io", "mirror": "b.example"}]},
         "registryMirrors", "'quay.io' has two mirrors"),
        ({"registryMirrors": [{"registry": "quay.io", "mirror": "a.example", "mirrorOnly": 2}]},
         "registryMirrors[0].mirrorOnly", "valid boolean"),
        ({"registryMirrors": [{"registry": "quay.io", "mirror": "a.example", "user": "x"}]},
         "registryMirrors[0].user", "Extra inputs are not permitted"),
        ({"chartSources": {"kamaji": "https://c.example"}},
         "chartSources", "no chart is named 'kamaji': one of cert-manager, metallb, kamaji-etcd"),
        ({"chartSources": {"hami": "harbor.example.com/charts"}},
         "chartSources", "hami: 'harbor.example.com/charts' must be a Helm repository"),
        ({"kamajiGitUrl": ""}, "kamajiGitUrl", "at least 1 character"),
    ],
)  # fmt: skip
def test_a_bad_mirror_or_chart_source_is_named_by_its_key(keys, key, message):
    with pytest.raises(ConfigError) as error:
        read(**keys)
    assert error.value.key == key
    assert message in str(error.value)


def secret_auth(value: str, mirrors: list | None = None) -> LabConfig:
    config = {
        f"{PROJECT}:tenants": json.dumps(TENANTS),
        f"{PROJECT}:registryMirrors": json.dumps(
            mirrors or [{"registry": "docker.io", "mirror": "harbor.example/hub"}]
        ),
        f"{PROJECT}:registryMirrorAuth": value,
    }
    return parse_config(raw_stack_config(config, [f"{PROJECT}:registryMirrorAuth"]))


def test_mirror_credentials_are_a_secret_by_mirror_host():
    cfg = secret_auth('{"harbor.example": "robot:pw"}')
    assert cfg.mirror_auth() == {"harbor.example": "robot:pw"}
    assert "robot:pw" not in cfg.model_dump_json()


@pytest.mark.parametrize(
    ("value", "mirrors", "message"),
    [
        ("robot:pw", None, "must be a JSON object"),
        ('{"other.example": "robot:pw"}', None, "'other.example' is no mirror's host"),
        ('{"harbor.example": "robot"}', None, "harbor.example: must be 'user:password'"),
        ('{"lan:5000": "robot:pw"}', [{"registry": "*", "mirror": "lan:5000", "plainHttp": True}],
         "lan:5000 is a plainHttp mirror: its password would cross in clear"),
    ],
)  # fmt: skip
def test_bad_mirror_credentials_are_named_without_their_value(value, mirrors, message):
    with pytest.raises(ConfigError) as error:
        secret_auth(value, mirrors)
    assert error.value.key == "registryMirrorAuth"
    assert message in str(error.value)
    assert "pw" not in str(error.value).replace("password", "")


def test_mirror_credentials_must_be_set_as_a_secret():
    config = {
        f"{PROJECT}:tenants": json.dumps(TENANTS),
        f"{PROJECT}:registryMirrorAuth": '{"h": "u:p"}',
    }
    with pytest.raises(ConfigError, match="pulumi config set --secret registryMirrorAuth"):
        parse_config(raw_stack_config(config))
