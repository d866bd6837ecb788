"""The lab's Prometheus scrapes each tenant's HAMi scheduler metrics through that tenant's API
server: real Prometheus 3.16.0 and two real kube-apiservers v1.35.4 (one per tenant), the
scrape configs as the program makes them, HAMi's metrics from a stand-in with HAMi v2.10.0's
exact names and labels (tests/support/hami_metrics.py) listening on an address of this host.

What the series must be: every one HAMi serves, with the same labels and values, plus
``tenant``; gone at the next scrape once HAMi no longer serves it (a pod deleted); a token
without the right to proxy that one Service is refused (403) and its target is down.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from controlplane import ControlPlane
from prometheus import (
    PrometheusServer,
    ProxyPath,
    host_address,
    reader_token,
    serve_behind_service,
    wait_may_proxy,
    write_secret_dir,
)

from builders.prometheus_scrape import (
    DEVICE_PLUGIN_NAMESPACE,
    DEVICE_PLUGIN_SELECTOR,
    READER,
    VGPU_MONITOR_PORT,
    ScrapeTarget,
    hami_scrape_configs,
    job_name,
    reader_manifests,
)
from tests.support.hami_metrics import (
    Card,
    Container,
    HamiMetricsServer,
    HamiState,
    Use,
    samples,
    vgpu_monitor_exposition,
    vgpu_monitor_samples,
)

INTERVAL = "2s"
TARGET_LABELS = ("job", "instance", "tenant")


STATE_A = HamiState(
    cards=(Card("GPU-a0", "a-w1", 23034, index=0), Card("GPU-a1", "a-w1", 23034, index=1)),
    containers=(
        Container("team-x", "train-0", 0, "a-w1", "GPU-a0", 10000, 50),
        Container("team-x", "train-1", 0, "a-w1", "GPU-a0", 5000, 25),
        Container("team-y", "nb-0", 1, "a-w1", "GPU-a1", 2000, 10),
    ),
)
STATE_B = HamiState(
    cards=(Card("GPU-b0", "b-w1", 81920),),
    containers=(Container("ml", "p1", 0, "b-w1", "GPU-b0", 20000, 30),),
)


@dataclasses.dataclass
class Tenant:
    name: str
    plane: ControlPlane
    hami: HamiMetricsServer
    target: ScrapeTarget


@dataclasses.dataclass
class ScrapeLab:
    tenants: dict[str, Tenant]
    prometheus: PrometheusServer
    proxy: ProxyPath
    workdir: Path
    vgpu_monitor: HamiMetricsServer  # tenant-b's, on its node GPU_NODE_B


def api_host(plane: ControlPlane) -> str:
    return plane.server.removeprefix("https://")


def lab_reader_token(plane: ControlPlane, proxy: ProxyPath, vgpu_monitor: bool) -> str:
    """The program's reader in the tenant (builders/prometheus_scrape.py) and its token: the one
    its token Secret gets from the controller manager where it runs, else a TokenRequest."""
    for manifest in reader_manifests(dra=False, vgpu_monitor=vgpu_monitor):
        if manifest["kind"] != "Secret" or "kube-controller-manager" in plane.processes:
            plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    # RBAC decides from informer caches: Prometheus's first scrape must not be refused.
    reader = f"system:serviceaccount:{proxy.namespace}:{READER}"
    wait_may_proxy(plane, reader, proxy)
    if vgpu_monitor:
        plane.wait_until_allowed("admin", "list", "pods", "-n", DEVICE_PLUGIN_NAMESPACE,
                                 f"--as={reader}")  # fmt: skip
    if "kube-controller-manager" not in plane.processes:
        return plane.service_account_token(proxy.namespace, READER)
    secret = plane.wait_for_object(
        "secret", READER, "-n", proxy.namespace,
        condition=lambda s: "token" in s.get("data", {}), what="the reader's token",
    )  # fmt: skip
    return base64.b64decode(secret["data"]["token"]).decode()


def proxy_path(configs: list[dict]) -> ProxyPath:
    paths = {config["metrics_path"] for config in configs if "static_configs" in config}
    assert len(paths) == 1, paths
    return ProxyPath.parse(paths.pop())


GPU_NODE_B = "b-w1"
USES_B = [Use("ml", "p1", "train", 0, "GPU-b0", 12000, 20000, 2.5)]


@contextlib.contextmanager
def start_vgpu_monitor(plane: ControlPlane, host: str) -> Iterator[HamiMetricsServer]:
    """HAMi's device plugin pod on the GPU node with its vGPU monitor, which the monitor job
    reads through the pod proxy on the monitor's own port (hence on this host at that port)."""
    try:
        server = HamiMetricsServer(host, USES_B, port=VGPU_MONITOR_PORT,
                                   exposed=vgpu_monitor_exposition)  # fmt: skip
    except OSError as exc:
        raise RuntimeError(f"the vGPU monitor's port {host}:{VGPU_MONITOR_PORT}: {exc}") from exc
    key, value = DEVICE_PLUGIN_SELECTOR.split("=")
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"hami-device-plugin-{GPU_NODE_B}",
                     "namespace": DEVICE_PLUGIN_NAMESPACE, "labels": {key: value}},
        "spec": {"nodeName": GPU_NODE_B, "containers": [{
            "name": "vgpu-monitor", "image": "x", "ports": [{"containerPort": VGPU_MONITOR_PORT}],
        }]},
    }  # fmt: skip
    plane.kubectl("apply", "-f", "-", input=json.dumps(pod))
    status = {"status": {"podIP": host, "podIPs": [{"ip": host}]}}
    plane.kubectl("patch", "pod", pod["metadata"]["name"], "-n", DEVICE_PLUGIN_NAMESPACE,
                  "--subresource=status", "--type=merge", "-p", json.dumps(status))  # fmt: skip
    with server:
        yield server


@pytest.fixture(scope="module")
def lab(start_control_plane, tmp_path_factory) -> Iterator[ScrapeLab]:
    workdir = tmp_path_factory.mktemp("prometheus-scrape")
    host = host_address()
    with contextlib.ExitStack() as stack:
        tenants: dict[str, Tenant] = {}
        for name, state in (("tenant-a", STATE_A), ("tenant-b", STATE_B)):
            # Two tenants, two API servers; tenant-a's with the controller manager, which fills
            # the reader's token Secret as in the lab, tenant-b's without (a TokenRequest).
            plane = start_control_plane(f"prom-{name}", full=name == "tenant-a")
            hami = stack.enter_context(HamiMetricsServer(host, state))
            # tenant-b has real cards: HAMi's vGPU monitor on its GPU node, found as a pod.
            vgpu = name == "tenant-b"
            target = ScrapeTarget(name, api_host(plane), str(workdir / name), vgpu_monitor=vgpu)
            tenants[name] = Tenant(name, plane, hami, target)
        configs = hami_scrape_configs([t.target for t in tenants.values()], INTERVAL)
        proxy = proxy_path(configs)
        for tenant in tenants.values():
            serve_behind_service(tenant.plane, proxy, host, tenant.hami.port)
            token = lab_reader_token(tenant.plane, proxy, tenant.target.vgpu_monitor)
            write_secret_dir(Path(tenant.target.secret_dir), tenant.plane, token)
        monitor = stack.enter_context(start_vgpu_monitor(tenants["tenant-b"].plane, host))
        config = {"global": {"scrape_interval": INTERVAL}, "scrape_configs": configs}
        prometheus = PrometheusServer.start(workdir / "prometheus", config)
        stack.callback(prometheus.stop)
        yield ScrapeLab(tenants, prometheus, proxy, workdir, monitor)


Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def served(state: HamiState) -> Series:
    return {(name, frozenset(labels.items())): value for name, labels, value in samples(state)}


def scraped(prometheus: PrometheusServer, tenant: str) -> Series:
    """Every HAMi series Prometheus holds now for ``tenant``, without the target's labels."""
    out: Series = {}
    query = f'{{__name__=~"hami_.+",__name__!="hami_build_info",job="{job_name(tenant)}"}}'
    for row in prometheus.query(query):
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        for key in TARGET_LABELS:
            labels.pop(key)
        out[(name, frozenset(labels.items()))] = float(row["value"][1])
    return out


def proxied_by(plane: ControlPlane, user: str) -> list[int]:
    """The status codes of ``user``'s requests through a service proxy, from the audit log."""
    codes = []
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef", {})
        if (ref.get("resource"), ref.get("subresource")) != ("services", "proxy"):
            continue
        if event["user"]["username"] == user and event["stage"] == "ResponseComplete":
            codes.append(event["responseStatus"]["code"])
    return codes


@pytest.mark.upstream("hami-scheduler-metrics-v2.10", "kube-service-proxy-url")
def test_each_tenant_is_scraped_through_its_own_api_server_with_hamis_series(lab: ScrapeLab):
    targets = lab.prometheus.wait_for_scrapes(2)
    assert sorted((t["labels"]["job"], t["health"], t["lastError"]) for t in targets) == [
        (job_name("tenant-a"), "up", ""),
        (job_name("tenant-b"), "up", ""),
        (f"{job_name('tenant-b')}-vgpu-monitor", "up", ""),
    ]
    for tenant in lab.tenants.values():
        assert scraped(lab.prometheus, tenant.name) == served(tenant.hami.state)
        # Through the tenant's API server, as the ServiceAccount the token is of.
        user = f"system:serviceaccount:{lab.proxy.namespace}:{READER}"
        codes = proxied_by(tenant.plane, user)
        assert codes and set(codes) == {200}, codes
    durations = {
        row["metric"]["job"]: float(row["value"][1])
        for row in lab.prometheus.query("scrape_duration_seconds")
    }
    print(f"scrape_duration_seconds per job: {durations}")
    assert len(durations) == 3


@pytest.mark.upstream("prom-staleness")
def test_a_pod_that_goes_away_is_gone_at_the_next_scrape_and_a_new_one_appears(lab: ScrapeLab):
    tenant = lab.tenants["tenant-a"]
    lab.prometheus.wait_for_scrapes(1)
    before = STATE_A.containers
    new_pod = Container("team-y", "nb-1", 0, "a-w1", "GPU-a1", 3000, 20)
    tenant.hami.state = dataclasses.replace(STATE_A, containers=(*before[:1], before[2], new_pod))
    try:
        lab.prometheus.wait_for_scrapes(2)
        now = scraped(lab.prometheus, "tenant-a")
        # A staleness marker, not five minutes of the last value (the lookback delta).
        assert now == served(tenant.hami.state)
        assert not any(("pod", "train-1") in labels for _, labels in now)
    finally:
        tenant.hami.state = STATE_A


@pytest.mark.upstream("kube-service-proxy-rbac")
def test_a_token_without_the_right_to_proxy_that_service_gets_403_and_its_target_is_down(
    lab: ScrapeLab,
):
    plane = lab.tenants["tenant-a"].plane
    workdir = lab.workdir / "denied"
    accounts = {
        "no-role": None,  # no Role at all
        "name-only": [lab.proxy.service],  # services/proxy on the name without scheme and port
        "whole-id": [lab.proxy.service_id],  # what the lab grants: the control
    }
    targets = []
    for account, allowed in accounts.items():
        token = reader_token(plane, account, lab.proxy, allowed)
        write_secret_dir(workdir / account, plane, token)
        targets.append(ScrapeTarget(account, api_host(plane), str(workdir / account)))
    config = {"scrape_configs": hami_scrape_configs(targets, INTERVAL)}
    prometheus = PrometheusServer.start(workdir / "prometheus", config)
    try:
        health = {
            t["labels"]["tenant"]: (t["health"], t["lastError"])
            for t in prometheus.wait_for_scrapes(1)
        }
    finally:
        prometheus.stop()
    assert health["whole-id"] == ("up", "")
    for account in ("no-role", "name-only"):
        assert health[account][0] == "down"
        assert "403" in health[account][1], health[account]


@pytest.mark.upstream("prom-scrape-auth-tls-fields")
def test_prometheus_reads_the_token_file_at_every_scrape(lab: ScrapeLab):
    """A rotated token (the tenant's Secret updated in the mounted folder) is used at the next
    scrape, without a reload: an invalid one makes the target down (401), the good one up."""
    token = Path(lab.tenants["tenant-b"].target.secret_dir) / "token"
    good = token.read_text()

    def health() -> dict[str, tuple[str, str]]:
        targets = lab.prometheus.wait_for_scrapes(2)
        return {t["labels"]["job"]: (t["health"], t["lastError"]) for t in targets}

    b, a = job_name("tenant-b"), job_name("tenant-a")
    try:
        token.write_text("not-a-token")
        refused = health()
    finally:
        token.write_text(good)
    assert refused[b][0] == "down" and "401" in refused[b][1], refused
    assert refused[a] == ("up", "")
    assert health()[b] == ("up", "")


@pytest.mark.upstream("hami-chart-device-plugin-monitor-service", "hami-vgpumonitor-metrics")
def test_the_vgpu_monitor_of_each_gpu_node_is_found_and_read_through_the_api_server(
    lab: ScrapeLab,
):
    """Pod discovery through the tenant's API server finds the device plugin's pod; its vGPU
    monitor is read through the pod proxy, labelled with the tenant and the node."""
    job = f"{job_name('tenant-b')}-vgpu-monitor"
    targets = [t for t in lab.prometheus.wait_for_scrapes(2) if t["labels"]["job"] == job]
    assert [(t["labels"]["instance"], t["health"]) for t in targets] == [(GPU_NODE_B, "up")]
    assert "/pods/hami-device-plugin-b-w1:9394/proxy/metrics" in targets[0]["scrapeUrl"]
    got: Series = {}
    for row in lab.prometheus.query(f'{{job="{job}",__name__=~"hami_.+"}}'):
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        assert (labels.pop("tenant"), labels.pop("job"), labels.pop("instance")) == (
            "tenant-b",
            job,
            GPU_NODE_B,
        )
        got[(name, frozenset(labels.items()))] = float(row["value"][1])
    want = {(n, frozenset(labels.items())): v for n, labels, v in vgpu_monitor_samples(USES_B)}
    assert got == want
    assert lab.vgpu_monitor.scrapes >= 2
