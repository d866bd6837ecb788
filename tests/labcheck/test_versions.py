"""labcheck `tenant.versions`: the stack, the TenantControlPlane's spec and status, the API
server and every kubelet agree, or a kubelet is within the skew Kubernetes allows."""

from __future__ import annotations

import pytest

from labcheck.checks.versions import kubelet_skew, release
from labcheck.result import Status
from tests.support.labcheck_fakes import run_lab, standard_lab

CHECK = "tenant.versions"


def tcp_of(lab, name: str) -> dict:
    return lab.mgmt.custom[("tenantcontrolplanes", name, name, "kamaji.clastix.io")]


def result(lab, tenant: str = "tenant-a"):
    _, r = run_lab(lab, [CHECK, "tenant.api", "tcp.ready", "mgmt.kamaji"])
    return r[(CHECK, tenant)]


def test_a_lab_whose_versions_agree_passes_naming_each_kubelet():
    res = result(standard_lab())
    assert res.status is Status.PASS, res
    assert res.evidence.startswith("v1.35.0 everywhere (1 node(s))")
    assert "tenant-a-worker-1: kubelet v1.35.0" in res.detail


@pytest.mark.upstream("kamaji-status-version-follows-spec-when-ready")
def test_a_control_plane_whose_status_stays_behind_its_spec_fails_though_ready():
    """Kamaji's webhook refused v1.35.0 for a control plane on v1.34.2: Ready, on the old one."""
    lab = standard_lab()
    tcp_of(lab, "tenant-a")["status"]["kubernetesResources"]["version"]["version"] = "v1.34.2"
    lab.tenant("tenant-a").git_version = "v1.34.2"
    res = result(lab)
    assert res.status is Status.FAIL
    assert res.expected == "its status.kubernetesResources.version.version v1.35.0 (the stack's)"
    assert res.seen == "v1.34.2"
    assert "refused the version" in res.cause
    assert "describe tenantcontrolplane tenant-a" in res.cause
    assert result(lab, "tenant-b").status is Status.PASS  # the other tenant is its own


def test_a_spec_edited_away_from_the_stack_fails_naming_pulumi_up():
    lab = standard_lab()
    tcp_of(lab, "tenant-b")["spec"]["kubernetes"]["version"] = "v1.35.1"
    res = result(lab, "tenant-b")
    assert res.status is Status.FAIL
    assert res.seen == "v1.35.1"
    assert "`pulumi up` sets it" in res.cause


def test_an_api_server_other_than_kamaji_reports_fails():
    lab = standard_lab()
    lab.tenant("tenant-a").git_version = "v1.35.1"
    res = result(lab)
    assert res.status is Status.FAIL
    assert res.expected.startswith("the API server's /version")


def test_build_metadata_on_the_api_servers_version_is_not_a_difference():
    lab = standard_lab()
    lab.tenant("tenant-a").git_version = "v1.35.0+k3s1"
    assert result(lab).status is Status.PASS


@pytest.mark.upstream("kubernetes-kubelet-skew")
def test_an_older_kubelet_within_the_skew_passes_said_as_such():
    lab = standard_lab()
    lab.tenant("tenant-a").nodes["tenant-a-worker-1"]["status"]["nodeInfo"]["kubeletVersion"] = (
        "v1.33.4"
    )
    res = result(lab)
    assert res.status is Status.PASS, res
    assert "1 kubelet(s) older" in res.evidence
    assert "tenant-a-worker-1: kubelet v1.33.4, within the skew Kubernetes allows" in res.detail


@pytest.mark.upstream("kubernetes-kubelet-skew")
@pytest.mark.parametrize(
    ("kubelet", "why"),
    [
        ("v1.36.0", "is newer than the API server v1.35.0"),
        ("v1.31.9", "is more than 3 minor versions older than v1.35.0"),
    ],
)
def test_a_kubelet_outside_the_skew_fails_naming_the_node_and_the_fix(kubelet, why):
    lab = standard_lab()
    lab.tenant("tenant-a").nodes["tenant-a-worker-1"]["status"]["nodeInfo"]["kubeletVersion"] = (
        kubelet
    )
    res = result(lab)
    assert res.status is Status.FAIL
    assert res.seen == f"tenant-a-worker-1: kubelet {kubelet} {why}"
    assert "workerImage" in res.cause


@pytest.mark.upstream("kubernetes-kubelet-skew")
@pytest.mark.parametrize(
    ("kubelet", "api_server", "allowed"),
    [
        ("v1.35.4", "v1.35.0", True),  # a newer patch of the same minor is no newer minor
        ("v1.32.0", "v1.35.0", True),
        ("v1.24.3", "v1.26.1", True),
        ("v1.24.3", "v1.27.0", False),  # below v1.25: two minors
        ("v2.0.0", "v1.35.0", False),
        ("", "v1.35.0", False),
    ],
)
def test_the_skew_rule(kubelet, api_server, allowed):
    assert (kubelet_skew(kubelet, api_server) is None) is allowed


def test_a_spec_without_the_version_skips_saying_why():
    lab = standard_lab()
    del lab.spec["tenants"][0]["kubernetesVersion"]
    res = result(lab)
    assert res.status is Status.SKIP
    assert "no kubernetesVersion" in res.evidence


def test_release_keeps_the_version_and_drops_build_metadata():
    assert release("v1.35.4+k3s1") == "v1.35.4"
    assert release("") == "none"
