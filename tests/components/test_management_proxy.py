"""The kind management cluster's proxy: the stack's `proxy` config, never the shell's (T9)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from components.platform.management import kind_proxy_environment
from labconfig.model import ProxyConfig
from tests.support.pulumi_harness import ProgramRun, lab_stack_config, run_program

PROXY_KEYS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")
SHELL = {
    "PATH": "/usr/bin",
    "HTTP_PROXY": "http://shell:8080",
    "https_proxy": "http://shell:8080",
    "no_proxy": "shell.corp",
}


def exec_environment(provider_env: Mapping[str, str], command_env: Mapping[str, str]) -> dict:
    """The script's environment as pulumi-command builds it: `os.Environ()` of the provider,
    then each `environment` entry appended; os/exec keeps the last value of a duplicate key."""
    entries = [*provider_env.items(), *command_env.items()]
    return dict(entries)  # later pairs overwrite earlier ones, as os/exec's dedupEnv does


def kind_proxy_lookup(env: Mapping[str, str]) -> dict[str, str]:
    """kind's common.getProxyEnvs before it adds its own NO_PROXY entries: the upper-case
    variable, else the lower-case one; an empty value counts as unset."""
    found = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        value = env.get(name, "") or env.get(name.lower(), "")
        if value:
            found[name] = value
    return found


def test_the_lookup_models_kind_reading_the_shells_proxy():
    """The model's counter-case: without our entries kind would take the shell's proxy,
    from either spelling."""
    assert kind_proxy_lookup(exec_environment(SHELL, {})) == {
        "HTTP_PROXY": "http://shell:8080",
        "HTTPS_PROXY": "http://shell:8080",
        "NO_PROXY": "shell.corp",
    }


@pytest.mark.upstream("kind-proxy-from-its-environment")
def test_without_proxy_config_kind_sees_no_proxy_from_the_shell():
    """T9: all six variables are set, empty, so neither spelling of the shell's survives."""
    env = kind_proxy_environment(ProxyConfig())
    assert env == dict.fromkeys(PROXY_KEYS, "")
    assert kind_proxy_lookup(exec_environment(SHELL, env)) == {}


def kind_command(monkeypatch: pytest.MonkeyPatch, **config: object) -> tuple[ProgramRun, dict]:
    """The lab stack run from a shell with a proxy; the kind Command's environment."""
    for name, value in SHELL.items():
        if name != "PATH":
            monkeypatch.setenv(name, value)
    run = run_program({**lab_stack_config(), **config})
    return run, run.named("management-kind").inputs["environment"]


@pytest.mark.upstream("kind-proxy-from-its-environment")
def test_the_shells_proxy_never_reaches_kind(monkeypatch: pytest.MonkeyPatch):
    """T9: with no `proxy` config the kind Command clears all six variables, so an `up` from
    another shell neither changes the Command nor hands kind that shell's proxy."""
    run, env = kind_command(monkeypatch)
    assert {key: env[key] for key in PROXY_KEYS} == dict.fromkeys(PROXY_KEYS, "")
    kind = run.named("management-kind")
    assert not any(kind.is_secret(f"environment.{key}") for key in PROXY_KEYS)
    assert kind_proxy_lookup(exec_environment(SHELL, env)) == {}


@pytest.mark.upstream("kind-proxy-from-its-environment")
def test_the_configured_proxy_reaches_kind_as_a_secret(monkeypatch: pytest.MonkeyPatch):
    """T9: both spellings of the configured values, each set one secret (a URL may carry
    credentials); NO_PROXY is the configured list, kind appends the lab's own entries."""
    proxy = {"https": "http://user:pw@proxy:3128", "noProxy": "localhost,.corp"}
    run, env = kind_command(monkeypatch, proxy=proxy)
    assert {key: env[key] for key in PROXY_KEYS} == {
        "HTTP_PROXY": "",
        "http_proxy": "",
        "HTTPS_PROXY": "http://user:pw@proxy:3128",
        "https_proxy": "http://user:pw@proxy:3128",
        "NO_PROXY": "localhost,.corp",
        "no_proxy": "localhost,.corp",
    }
    kind = run.named("management-kind")
    secret = {key for key in PROXY_KEYS if kind.is_secret(f"environment.{key}")}
    assert secret == {"HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"}
    assert kind_proxy_lookup(exec_environment(SHELL, env)) == {
        "HTTPS_PROXY": "http://user:pw@proxy:3128",
        "NO_PROXY": "localhost,.corp",
    }
