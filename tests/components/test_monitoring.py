"""The lab's record over time under Pulumi mocks: a reader in every tenant, its token copied to
the management cluster as a secret, Prometheus and Grafana there (components/platform/
monitoring.py, components/tenant/metrics_reader.py)."""

from __future__ import annotations

import base64
import json

import pytest

from components.tenant.metrics_reader import reader_credentials
from tests.support.pulumi_harness import (
    FAKE_KUBECONFIG,
    FAKE_READER_TOKEN_DATA,
    ProgramRun,
    lab_stack_config,
    run_program,
    stack_config,
)

RELEASE = "kubernetes:helm.sh/v3:Release"
LAB = lab_stack_config()


def test_each_tenant_gets_a_reader_after_its_chart(lab: ProgramRun):
    for tenant in ("tenant-a", "tenant-b"):
        names = {r.name for r in lab.subtree(f"{tenant}-metrics-reader")}
        assert names >= {
            f"{tenant}-metrics-reader-account",
            f"{tenant}-metrics-reader-role",
            f"{tenant}-metrics-reader-binding",
            f"{tenant}-metrics-reader-token",
        }
        token = lab.named(f"{tenant}-metrics-reader-token")
        # In the tenant, after HAMi (whose chart makes the service it may proxy to).
        assert token.provider.startswith(lab.named(f"{tenant}-provider").urn)
        assert lab.named(f"{tenant}-hami-chart").urn in lab.depends_on(token.urn)


def test_the_token_reaches_prometheus_as_a_secret_and_only_there(lab: ProgramRun):
    copy = lab.named("monitoring-tenant-tenant-a-metrics-reader")
    assert copy.inputs["metadata"] == {
        "name": "tenant-tenant-a-metrics-reader",
        "namespace": "lab-monitoring",
    }
    assert copy.inputs["data"] == {
        "token": FAKE_READER_TOKEN_DATA["token"],
        "ca.crt": FAKE_READER_TOKEN_DATA["ca.crt"],
    }
    assert copy.is_secret("data")
    assert copy.provider.startswith(lab.named("management-provider").urn)
    token = base64.b64decode(FAKE_READER_TOKEN_DATA["token"]).decode()
    for registration in lab.resources:
        if registration is not copy and not registration.name.endswith("-metrics-reader-token"):
            assert token not in json.dumps(registration.inputs, default=str), registration.name
    prometheus = lab.named("monitoring-prometheus")
    assert copy.urn in lab.depends_on(prometheus.urn)


def test_prometheus_scrapes_each_tenant_at_its_planned_address(lab: ProgramRun):
    prometheus = lab.named("monitoring-prometheus")
    assert (prometheus.inputs["name"], prometheus.inputs["namespace"]) == (
        "prometheus",
        "lab-monitoring",
    )
    assert prometheus.inputs["version"] == "29.27.0"
    assert prometheus.inputs["repositoryOpts"]["repo"] == (
        "https://prometheus-community.github.io/helm-charts"
    )
    jobs = prometheus.inputs["values"]["scrapeConfigs"]
    endpoints = {n: t["endpoint"] for n, t in lab.outputs["tenants"].items()}
    for tenant in ("tenant-a", "tenant-b"):
        (static,) = jobs[f"tenant-{tenant}"]["static_configs"]
        assert f"https://{static['targets'][0]}" == endpoints[tenant]
        assert static["labels"] == {"tenant": tenant}


def test_grafana_takes_the_pools_last_address_and_the_url_is_an_output(lab: ProgramRun):
    grafana = lab.named("monitoring-grafana")
    annotations = grafana.inputs["values"]["service"]["annotations"]
    assert annotations == {"metallb.io/loadBalancerIPs": "172.30.255.254"}
    assert lab.outputs["poolRange"].endswith("-172.30.255.254")
    assert lab.outputs["dashboardUrl"] == "http://172.30.255.254/d/kamaji-hami-lab-sharing"
    assert "172.30.255.254" not in {
        t["endpoint"].split("//")[1][:-5] for t in lab.outputs["tenants"].values()
    }
    dashboards = lab.named("monitoring-dashboards")
    assert dashboards.urn in lab.depends_on(grafana.urn)
    assert json.loads(dashboards.inputs["data"]["sharing.json"])["uid"] == "kamaji-hami-lab-sharing"
    # MetalLB's pool first: the Service's address comes from it.
    assert lab.named("metallb-ipaddresspool").urn in lab.depends_on(grafana.urn)
    assert "admin" not in grafana.inputs["values"]  # no password set: the chart's own


def test_a_grafana_password_is_a_secret_the_chart_reads():
    run = run_program(
        {**LAB, "grafanaAdminPassword": "s3cret-pass"}, secret_keys={"grafanaAdminPassword"}
    )
    admin = run.named("monitoring-grafana-admin")
    assert admin.is_secret("stringData")
    assert admin.inputs["stringData"] == {"admin-user": "admin", "admin-password": "s3cret-pass"}
    grafana = run.named("monitoring-grafana")
    assert grafana.inputs["values"]["admin"]["existingSecret"] == admin.inputs["metadata"]["name"]
    assert admin.urn in run.depends_on(grafana.urn)


@pytest.mark.parametrize(
    ("monitoring", "expected"),
    [({"enabled": False}, set()), ({"grafana": False}, {"prometheus"})],
)
def test_monitoring_and_grafana_can_be_turned_off(monitoring: dict, expected: set[str]):
    run = run_program({**LAB, "monitoring": monitoring})
    charts = {r.inputs["name"] for r in run.of_type(RELEASE)} & {"prometheus", "grafana"}
    assert charts == expected
    readers = [r for r in run.resources if r.type == "kamaji-hami-lab:index:MetricsReader"]
    assert len(readers) == (2 if expected else 0)
    assert run.outputs["dashboardUrl"] is None


def test_a_dra_tenant_is_scraped_at_its_monitor():
    run = run_program(stack_config("dra"), stack="dra")
    jobs = run.named("monitoring-prometheus").inputs["values"]["scrapeConfigs"]
    assert jobs["tenant-tenant-dra"]["metrics_path"].startswith(
        "/api/v1/namespaces/hami-dra/services/http:hami-dra-monitor:metrics/"
    )
    role = run.named("tenant-dra-metrics-reader-role")
    assert role.inputs["metadata"]["namespace"] == "hami-dra"
    assert run.named("tenant-dra-hami-dra-chart").urn in run.depends_on(role.urn)


@pytest.mark.upstream("pulumi-k8s-awaits-service-account-token")
def test_an_unfilled_token_secret_stops_the_update_naming_it():
    """The provider returns the Secret once filled; one without a token is a clear error, not
    a Prometheus that gets 401 from the tenant later."""
    assert reader_credentials(FAKE_READER_TOKEN_DATA) == {
        "token": FAKE_READER_TOKEN_DATA["token"],
        "ca.crt": FAKE_READER_TOKEN_DATA["ca.crt"],
    }
    for data in (None, {}, {"token": "dG9rZW4="}, {"ca.crt": "Y2E=", "token": ""}):
        with pytest.raises(ValueError, match="lab-metrics-reader token Secret has no"):
            reader_credentials(data)


def test_the_gpu_stack_reads_each_gpu_hosts_vgpu_monitor_too():
    """Real cards: the device plugin's vGPU monitor (use, idle), not in a simulated tenant."""
    secrets = {
        "sshPrivateKey": "-----BEGIN KEY-----\nfake\n",
        "managementKubeconfig": FAKE_KUBECONFIG,
    }
    run = run_program({**stack_config("gpu"), **secrets}, stack="gpu")
    jobs = run.named("monitoring-prometheus").inputs["values"]["scrapeConfigs"]
    monitors = sorted(name for name in jobs if name.endswith("-vgpu-monitor"))
    assert monitors and all(jobs[m]["kubernetes_sd_configs"] for m in monitors)
    lab = run_program(LAB)
    lab_jobs = lab.named("monitoring-prometheus").inputs["values"]["scrapeConfigs"]
    assert not [name for name in lab_jobs if name.endswith("-vgpu-monitor")]
