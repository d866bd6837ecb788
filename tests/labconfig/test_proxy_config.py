"""The `proxy` stack config: the workers' only source of proxy settings (finding T9)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pulumi
import pytest

from labconfig.model import ConfigError, LabConfig, ProxyConfig
from labconfig.parse import parse_config
from labconfig.stack import raw_stack_config
from tests.support.pulumi_harness import PROJECT, lab_stack_config

TENANTS = lab_stack_config()["tenants"]


@pytest.fixture(autouse=True)
def clean_runtime_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({}, [])


def read(proxy: object, secret: bool = False) -> LabConfig:
    config = {f"{PROJECT}:tenants": json.dumps(TENANTS), f"{PROJECT}:proxy": json.dumps(proxy)}
    return parse_config(raw_stack_config(config, [f"{PROJECT}:proxy"] if secret else []))


def test_no_proxy_by_default():
    assert parse_config({"tenants": TENANTS}).proxy == ProxyConfig(http="", https="", no_proxy="")


def test_the_proxy_is_read_as_an_object_with_camel_case_keys():
    proxy = {"http": "http://p:3128", "https": "http://p:3128", "noProxy": "localhost,.corp"}
    assert read(proxy).proxy == ProxyConfig(
        http="http://p:3128", https="http://p:3128", no_proxy="localhost,.corp"
    )


def test_a_proxy_with_credentials_may_be_set_as_a_secret():
    """T9: `pulumi config set --secret --path proxy.https ...` marks the whole key secret."""
    assert read({"https": "http://user:pw@p:3128"}, secret=True).proxy.https == (
        "http://user:pw@p:3128"
    )


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ({"noProxy": "localhost"}, r"^proxy: noProxy is only used with http or https \(got "),
        ({"htps": "http://p:3128"}, r"^proxy\.htps: Extra inputs are not permitted"),
    ],
)
def test_a_bad_proxy_is_named_by_its_key(proxy: dict, message: str):
    with pytest.raises(ConfigError, match=message):
        read(proxy)
