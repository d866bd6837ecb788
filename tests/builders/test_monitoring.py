"""The lab's Prometheus: scrape jobs, the tenant reader, recording rules, chart values, and the
dashboard (builders/prometheus_scrape.py, slice_rules.py, monitoring_values.py, dashboard.py).

What the rules and queries compute is run against a real Prometheus in the real tier; here:
their shape, their inputs' names, and that they parse as PromQL."""

from __future__ import annotations

import json
import re

import promql_parser
import pytest

from builders.dashboard import (
    DASHBOARD_UID,
    DATASOURCE_UID,
    PANELS,
    dashboard_json,
    dashboard_queries,
    resolved,
)
from builders.monitoring_values import (
    CHART_DEFAULT_JOBS,
    DASHBOARD_CONFIGMAP,
    PROMETHEUS_URL,
    grafana_values,
    prometheus_values,
    tenant_secret_name,
)
from builders.prometheus_scrape import (
    READER,
    ScrapeTarget,
    hami_scrape_configs,
    proxy_path,
    reader_manifests,
    secret_dir,
)
from builders.slice_rules import (
    CARD_CORES,
    CARD_MEMORY,
    SLICE_CORES,
    SLICE_MEMORY,
    SLICE_SHARE,
    ledger_queries,
    recording_rules,
    rule_groups,
    slice_hours_expr,
)
from labconfig.monitoring import MonitoringConfig

TARGETS = [
    ScrapeTarget("tenant-a", "172.30.255.205:6443", secret_dir("tenant-a")),
    ScrapeTarget("tenant-dra", "172.30.255.206:6443", secret_dir("tenant-dra"), dra=True),
]
HAMI_INPUTS = {
    "hami_vgpu_memory_allocated_bytes",
    "hami_vgpu_core_allocated_ratio",
    "hami_gpu_memory_limit_bytes",
    "hami_gpu_core_limit_ratio",
}
DRA_INPUTS = {
    "vGPUDeviceMemoryAllocated",
    "vGPUDeviceCoreAllocated",
    "GPUDeviceMemoryLimit",
    "GPUDeviceCoreLimit",
}


@pytest.mark.upstream(
    "hami-chart-scheduler-service",
    "hami-dra-monitor-endpoint",
    "kube-service-proxy-url",
    "prom-scrape-auth-tls-fields",
)
def test_each_tenant_is_scraped_through_its_own_api_server_as_its_reader():
    hami, dra = hami_scrape_configs(TARGETS, "30s")
    assert hami == {
        "job_name": "tenant-tenant-a",
        "scrape_interval": "30s",
        "scheme": "https",
        "metrics_path": "/api/v1/namespaces/kube-system/services/http:hami-scheduler:monitor"
        "/proxy/metrics",
        "authorization": {
            "type": "Bearer",
            "credentials_file": "/etc/lab-tenants/tenant-a/token",
        },
        "tls_config": {"ca_file": "/etc/lab-tenants/tenant-a/ca.crt"},
        "static_configs": [{"targets": ["172.30.255.205:6443"], "labels": {"tenant": "tenant-a"}}],
    }
    assert dra["metrics_path"] == proxy_path(dra=True)
    assert proxy_path(dra=True) == (
        "/api/v1/namespaces/hami-dra/services/http:hami-dra-monitor:metrics/proxy/metrics"
    )
    assert dra["static_configs"][0]["labels"] == {"tenant": "tenant-dra"}
    assert "honor_labels" not in hami  # `tenant` is the job's: a series cannot rename itself


@pytest.mark.upstream("kube-service-proxy-rbac")
@pytest.mark.parametrize("dra", [False, True])
def test_the_reader_may_get_that_one_proxy_and_nothing_else(dra: bool):
    account, role, binding, token = reader_manifests(dra)
    namespace = "hami-dra" if dra else "kube-system"
    service = proxy_path(dra).split("/services/")[1].split("/proxy")[0]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["services/proxy"],
            "resourceNames": [service],
            "verbs": ["get"],
        }
    ]
    assert {m["metadata"]["namespace"] for m in (account, role, binding, token)} == {namespace}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": READER, "namespace": namespace}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == READER
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"] == {"kubernetes.io/service-account.name": READER}


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(?:hami_\w+|v?GPUDevice\w+|lab:\w+)\b", expr))


@pytest.mark.upstream(
    "hami-sched-metrics-per-container",
    "hami-sched-metrics-per-card",
    "hami-dra-monitor-exports-allocations",
)
def test_the_rules_read_hamis_and_hami_dras_names_and_give_one_shape():
    rules = recording_rules()
    for rule in rules:
        promql_parser.parse(rule["expr"])
    records = [r["record"] for r in rules]
    inputs = set().union(*(_metric_names(r["expr"]) for r in rules)) - set(records)
    monitor = {"hami_container_last_kernel_elapsed_seconds"}  # the vGPU monitor's, real cards
    assert inputs == HAMI_INPUTS | DRA_INPUTS | monitor
    # Each rule reads only what the exporters give or what an earlier rule recorded.
    for index, rule in enumerate(rules):
        given = HAMI_INPUTS | DRA_INPUTS | monitor
        assert _metric_names(rule["expr"]) - given <= set(records[:index])
    by_record = {r["record"]: r["expr"] for r in rules}
    # HAMi's bytes become MB (HAMi's MB are MiB); HAMi-DRA's are MiB already.
    assert "hami_vgpu_memory_allocated_bytes" in by_record[SLICE_MEMORY]
    assert "/ 1048576" in by_record[SLICE_MEMORY].split("\nor\n")[0]
    assert "1048576" not in by_record[SLICE_MEMORY].split("\nor\n")[1]
    for record in (SLICE_MEMORY, SLICE_CORES):
        assert (
            by_record[record].count("sum by (tenant, namespace, pod, container_index, node, card)")
            == 2
        )
    for record in (CARD_MEMORY, CARD_CORES):
        assert by_record[record].count("sum by (tenant, node, card)") == 2
    # A slice's share: the larger of its memory and compute fractions of its own card.
    share = by_record[SLICE_SHARE]
    assert share.startswith("max without (share_of)")
    assert f"{SLICE_MEMORY} / on (tenant, card) group_left {CARD_MEMORY}" in share
    assert f"{SLICE_CORES} / on (tenant, card) group_left {CARD_CORES}" in share


def test_the_rules_are_evaluated_as_often_as_the_tenants_are_scraped():
    (group,) = rule_groups("15s")
    assert (group["interval"], group["rules"]) == ("15s", recording_rules())


@pytest.mark.upstream("prom-subquery-sum-over-time", "prom-staleness")
def test_slice_hours_integrate_one_sample_a_minute():
    """A pod's slices count while their series exist: a gone pod's stop at once (staleness)."""
    expr = slice_hours_expr(SLICE_MEMORY, "tenant, card", "24h")
    assert expr == ("sum by (tenant, card) (sum_over_time(lab:slice_memory_mb[24h:60s])) / 60")
    promql_parser.parse(expr)


@pytest.mark.upstream("prom-chart-values-keys")
def test_prometheus_scrapes_only_the_tenants_and_itself_and_keeps_its_record():
    config = MonitoringConfig(retention="30d", volume_size="20Gi", scrape_interval="15s")
    values = prometheus_values(config, TARGETS)
    jobs = values["scrapeConfigs"]
    # The chart's default jobs are off (all but Prometheus's own), ours are on.
    assert {k for k, v in jobs.items() if v.get("enabled", True)} == {
        "tenant-tenant-a",
        "tenant-tenant-dra",
    }
    assert set(CHART_DEFAULT_JOBS) < set(jobs) and "prometheus" not in jobs
    assert jobs["tenant-tenant-a"] == hami_scrape_configs(TARGETS, "15s")[0]
    for sub in ("alertmanager", "kube-state-metrics", "prometheus-node-exporter"):
        assert values[sub] == {"enabled": False}
    assert values["prometheus-pushgateway"] == {"enabled": False}
    assert values["rbac"] == {"create": False}
    server = values["server"]
    assert server["retention"] == "30d"
    assert server["persistentVolume"] == {"enabled": True, "size": "20Gi"}
    assert server["global"] == {"scrape_interval": "15s", "evaluation_interval": "15s"}
    assert values["serverFiles"]["recording_rules.yml"] == {"groups": rule_groups("15s")}
    # Each tenant's Secret where its job reads the token and CA.
    mounts = {m["secretName"]: m for m in server["extraSecretMounts"]}
    for target, job in zip(TARGETS, hami_scrape_configs(TARGETS, "15s"), strict=True):
        mount = mounts[tenant_secret_name(target.tenant)]
        assert mount["readOnly"] is True
        assert job["authorization"]["credentials_file"] == f"{mount['mountPath']}/token"
        assert job["tls_config"]["ca_file"] == f"{mount['mountPath']}/ca.crt"


@pytest.mark.upstream("grafana-chart-values-keys")
def test_grafana_shows_the_dashboard_on_its_planned_address_with_no_image_but_its_own():
    values = grafana_values("172.30.255.254", admin_secret=False)
    assert values["service"] == {
        "type": "LoadBalancer",
        "annotations": {"metallb.io/loadBalancerIPs": "172.30.255.254"},
    }
    (source,) = values["datasources"]["datasources.yaml"]["datasources"]
    assert (source["uid"], source["url"], source["type"]) == (
        DATASOURCE_UID,
        PROMETHEUS_URL,
        "prometheus",
    )
    assert PROMETHEUS_URL == "http://prometheus-server.lab-monitoring.svc"
    (provider,) = values["dashboardProviders"]["dashboardproviders.yaml"]["providers"]
    assert provider["options"]["path"] == f"/var/lib/grafana/dashboards/{provider['name']}"
    assert values["dashboardsConfigMaps"] == {provider["name"]: DASHBOARD_CONFIGMAP}
    home = values["grafana.ini"]["dashboards"]["default_home_dashboard_path"]
    assert home == f"{provider['options']['path']}/sharing.json"
    # No inline dashboards (a curl init container), no sidecar, no test pod.
    assert "dashboards" not in values and "sidecar" not in values
    assert values["testFramework"] == {"enabled": False}
    assert values["grafana.ini"]["auth.anonymous"] == {"enabled": True, "org_role": "Viewer"}
    assert "admin" not in values
    assert grafana_values("172.30.255.254", admin_secret=True)["admin"]["existingSecret"]


@pytest.mark.upstream("hami-sched-metrics-quota")
def test_the_dashboard_reads_the_lab_series_through_the_provisioned_data_source():
    board = json.loads(dashboard_json())
    assert board["uid"] == DASHBOARD_UID
    assert [p["title"] for p in board["panels"]] == [p.title for p in PANELS]
    targets = [t for p in board["panels"] for t in p["targets"]]
    assert [t["expr"] for t in targets] == [q for _, q in dashboard_queries()]
    assert {p["datasource"]["uid"] for p in board["panels"]} == {DATASOURCE_UID}
    # Tables over the range are one instant figure each; the others draw over time.
    for panel in board["panels"]:
        instant = panel["type"] == "table"
        assert all(t.get("instant", False) is instant for t in panel["targets"])
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert set(variables) == {"tenant", "namespace"}
    assert variables["tenant"]["query"] == f"label_values({CARD_MEMORY}, tenant)"
    quota = [q for title, q in dashboard_queries() if "quota" in title]
    assert [_metric_names(q) for q in quota] == [
        {"hami_resource_quota_used"},
        {"hami_resource_quota_limit"},
    ]
    assert all("quota_name" in q for q in quota)
    for _, query in dashboard_queries():
        promql_parser.parse(resolved(query, "6h"))
        assert 'tenant=~"$tenant"' in query  # every panel follows the tenant choice


def test_a_query_resolves_as_grafana_sends_it():
    query = slice_hours_expr(f'{SLICE_SHARE}{{tenant=~"$tenant"}}', "tenant", "$__range")
    assert resolved(query, "2h", tenant="tenant-a") == (
        'sum by (tenant) (sum_over_time(lab:slice_gpu_share{tenant=~"tenant-a"}[2h:60s])) / 60'
    )


def test_the_ledger_columns_integrate_the_lab_series_over_the_chosen_window():
    """Without labcheck's own pods: the validation's, no tenant's to bill."""
    queries = ledger_queries()
    by = "tenant, namespace, card"
    mine = '{namespace!~"labcheck-.+"}'
    assert queries["gpu_hours"] == slice_hours_expr(SLICE_SHARE + mine, by, "$__range")
    assert queries["mb_hours"] == slice_hours_expr(SLICE_MEMORY + mine, by, "$__range")
    assert queries["core_hours"] == slice_hours_expr(SLICE_CORES + mine, by, "$__range")
    # pods counted on the integrals' grid: no pod without slice-hours
    assert f"count_over_time(lab:slice_memory_mb{mine}[$__range:60s])" in queries["pods"]
    for query in queries.values():
        promql_parser.parse(resolved(query, "86400s"))


@pytest.mark.upstream("hami-chart-device-plugin-monitor-service", "hami-vgpumonitor-metrics")
def test_real_cards_add_the_vgpu_monitor_of_each_gpu_node_through_the_pod_proxy():
    target = ScrapeTarget(
        "tenant-gpu", "10.0.0.5:6443", secret_dir("tenant-gpu"), vgpu_monitor=True
    )
    scheduler, monitor = hami_scrape_configs([target], "30s")
    assert scheduler["job_name"] == "tenant-tenant-gpu"
    assert monitor["job_name"] == "tenant-tenant-gpu-vgpu-monitor"
    (sd,) = monitor["kubernetes_sd_configs"]
    assert (sd["role"], sd["api_server"], sd["namespaces"]) == (
        "pod",
        "https://10.0.0.5:6443",
        {"names": ["kube-system"]},
    )
    assert sd["selectors"] == [
        {"role": "pod", "label": "app.kubernetes.io/component=hami-device-plugin"}
    ]
    # Discovery and scrape both as the tenant's reader, to the tenant's API server.
    for where in (sd, monitor):
        assert where["authorization"]["credentials_file"] == "/etc/lab-tenants/tenant-gpu/token"
        assert where["tls_config"]["ca_file"] == "/etc/lab-tenants/tenant-gpu/ca.crt"
    relabel = {r.get("target_label", "keep"): r for r in monitor["relabel_configs"]}
    assert relabel["keep"]["regex"] == "9394"
    assert relabel["__address__"]["replacement"] == "10.0.0.5:6443"
    assert relabel["__metrics_path__"]["replacement"] == (
        "/api/v1/namespaces/kube-system/pods/${1}:9394/proxy/metrics"
    )
    assert relabel["tenant"]["replacement"] == "tenant-gpu"
    # The reader may list the pods and proxy to them only where a monitor runs.
    rules = reader_manifests(dra=False, vgpu_monitor=True)[1]["rules"]
    assert {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]} in rules
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]} in rules
    assert len(reader_manifests(dra=False)[1]["rules"]) == 1
    assert len(hami_scrape_configs([TARGETS[0]], "30s")) == 1  # simulated: no monitor


def test_an_idle_slice_is_one_whose_container_ran_no_kernel_for_five_minutes():
    (idle,) = [r for r in recording_rules() if r["record"] == "lab:slice_idle_gpu_share"]
    assert idle["expr"].startswith(f"{SLICE_SHARE}\nand on (tenant, namespace, pod, card)")
    assert ") > 300" in idle["expr"]
    assert ledger_queries()["idle_gpu_hours"] == slice_hours_expr(
        'lab:slice_idle_gpu_share{namespace!~"labcheck-.+"}', "tenant, namespace, card", "$__range"
    )
