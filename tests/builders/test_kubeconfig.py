"""The check every provider's kubeconfig passes (builders/kubeconfig.py)."""

from __future__ import annotations

import json

import pulumi
import pytest
import yaml

from builders.kubeconfig import UnusableKubeconfig, checked_kubeconfig, kubeconfig_problem
from tests.support.pulumi_harness import FAKE_KUBECONFIG

DOC = yaml.safe_load(FAKE_KUBECONFIG)


def edited(**changes: object) -> str:
    return yaml.safe_dump({**DOC, **changes})


@pytest.mark.upstream("pulumi-k8s-empty-kubeconfig-is-ambient")
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "is missing"),  # the SDK then sends $KUBECONFIG, the provider then loads it
        ("", "is empty"),  # Configure: `pathOrContents != ""` else the ambient loading rules
        (" \n\t", "is empty"),
        ("~/.kube/config", "is not a kubeconfig"),  # parseKubeconfigString reads it as a path
        ("/home/someone/.kube/config", "is not a kubeconfig"),
    ],
)
def test_what_the_provider_takes_as_the_users_own_kubeconfig_is_refused(text, problem):
    assert (kubeconfig_problem(text) or "").startswith(problem)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("clusters: [", "is not YAML (while parsing a flow node)"),
        ("- a\n- b\n", "is not a kubeconfig"),
        ("apiVersion: v1\nkind: Config\n", "has no current-context"),
        (edited(contexts=[]), "has no context 'c' (its current-context)"),
        (edited(contexts="c"), "has no context 'c'"),
        (edited(contexts=[{"name": "c", "context": {"user": "u"}}]), "has no cluster in context"),
        (edited(clusters=[]), "has no cluster 'c' (of context 'c')"),
        (edited(clusters=[{"name": "c", "cluster": {}}]), "has no server for cluster 'c'"),
        (edited(**{"current-context": "other"}), "has no context 'other'"),
    ],
)
def test_a_kubeconfig_that_names_no_cluster_is_refused(text, problem):
    """Such a provider would not fall back, but it would not reach the lab either."""
    assert (kubeconfig_problem(text) or "").startswith(problem)


def test_a_kubeconfig_naming_its_cluster_passes_unchanged():
    assert kubeconfig_problem(FAKE_KUBECONFIG) is None
    assert checked_kubeconfig(FAKE_KUBECONFIG, "x") == FAKE_KUBECONFIG
    as_json = json.dumps(DOC)  # the provider reads JSON too
    assert checked_kubeconfig(as_json, "x") == as_json


def test_the_error_names_its_source_and_fix_in_one_clean_line():
    with pytest.raises(UnusableKubeconfig) as info:
        checked_kubeconfig("", "tenant t: admin.conf of Secret t/t-admin-kubeconfig", fix="Do X")
    assert isinstance(info.value, pulumi.RunError)  # the CLI prints it without a traceback
    assert str(info.value) == (
        "tenant t: admin.conf of Secret t/t-admin-kubeconfig is empty; no Kubernetes provider "
        "is declared with it (given none, pulumi-kubernetes would use KUBECONFIG or "
        "~/.kube/config: your kubectl's cluster). Do X"
    )
    with pytest.raises(UnusableKubeconfig, match=r"^m is missing; .*cluster\)$"):
        checked_kubeconfig(None, "m")
