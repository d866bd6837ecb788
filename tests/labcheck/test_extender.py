"""hami.extender-timeout: the extender httpTimeout HAMi's chart rendered into kube-scheduler's
config, against the --node-lock-retry-timeout its extender runs with, on the (fake) lab."""

from __future__ import annotations

import pytest

from builders.hami import hami_values
from labcheck.checks import ALL_CHECKS
from labcheck.checks.extender import (
    CAUSE,
    NO_CONFIG_MAP_CAUSE,
    NO_DEPLOYMENT_CAUSE,
    WIRING_CAUSE,
    config_source,
    flag_value,
    go_duration_seconds,
)
from labcheck.result import CheckFailed, Status
from labconfig.parse import parse_config
from tests.support.labcheck_fakes import (
    A100,
    HAMI_NAMESPACE,
    HAMI_SERVICE,
    FakeLab,
    check_result,
    fail_call,
    install_scheduler,
    scheduler_deployment,
    standard_lab,
)
from tests.support.pulumi_harness import lab_stack_config

CHECK = "hami.extender-timeout"
KEY = (HAMI_NAMESPACE, HAMI_SERVICE)
YAML_AT = "ConfigMap kube-system/hami-scheduler key config.yaml"
FLAG_AT = "in vgpu-scheduler-extender"
LONGER = "extender httpTimeout longer than --node-lock-retry-timeout"


def program_extender_args() -> list[str]:
    """The extender flags the program hands HAMi's chart (scheduler.extender.extraArgs)."""
    tenant = parse_config(lab_stack_config()).tenants[0]
    args: list[str] = hami_values(tenant, 10, "5m")["scheduler"]["extender"]["extraArgs"]
    return args


def verdict(lab: FakeLab) -> tuple[Status, str, str, str, str]:
    res = check_result(lab, CHECK)
    return res.status, res.evidence, res.expected, res.seen, res.cause


@pytest.mark.upstream("hami-chart-scheduler-config")
def test_the_charts_30s_outlasts_the_28s_retry_the_program_passes():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), "30s", program_extender_args())
    assert verdict(lab) == (
        Status.PASS,
        f"extender httpTimeout 30s in {YAML_AT}, --node-lock-retry-timeout 28s {FLAG_AT}: "
        "2s to spare",
        "",
        "",
        "",
    )


@pytest.mark.upstream("hami-chart-scheduler-config")
def test_a_20s_http_timeout_fails_naming_both_values_and_what_to_change():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), "20s", program_extender_args())
    assert verdict(lab) == (
        Status.FAIL,
        "",
        LONGER,
        f"extender httpTimeout 20s in {YAML_AT}, --node-lock-retry-timeout 28s {FLAG_AT}: "
        "Bind may wait 28s, kube-scheduler only 20s",
        CAUSE,
    )
    assert "--node-lock-retry-timeout" in CAUSE and "httpTimeout" in CAUSE
    assert check_result(lab, CHECK, "tenant-b").status is Status.PASS  # per tenant


@pytest.mark.upstream("hami-chart-scheduler-config")
def test_equal_timeouts_fail_and_a_longer_go_duration_passes():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), "28s")
    assert verdict(lab)[0] is Status.FAIL
    install_scheduler(lab.tenant("tenant-a"), "1m30s")
    assert verdict(lab)[:2] == (
        Status.PASS,
        f"extender httpTimeout 1m30s (90s) in {YAML_AT}, --node-lock-retry-timeout 28s "
        f"{FLAG_AT}: 62s to spare",
    )


@pytest.mark.upstream("hami-chart-scheduler-config")
def test_the_legacy_policy_json_states_nanoseconds():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), 30_000_000_000, legacy=True)
    status, evidence, *_ = verdict(lab)
    assert (status, evidence) == (
        Status.PASS,
        "extender httpTimeout 30000000000 ns (30s) in ConfigMap kube-system/hami-scheduler key "
        f"config.json, --node-lock-retry-timeout 28s {FLAG_AT}: 2s to spare",
    )
    install_scheduler(lab.tenant("tenant-a"), 20_000_000_000, legacy=True)
    status, _, expected, seen, _ = verdict(lab)
    assert (status, expected) == (Status.FAIL, LONGER)
    assert seen.endswith("Bind may wait 28s, kube-scheduler only 20s")
    install_scheduler(lab.tenant("tenant-a"), "30s", legacy=True)  # not a time.Duration
    status, _, expected, seen, cause = verdict(lab)
    assert (status, seen, cause) == (
        Status.FAIL,
        "ValueError: httpTimeout '30s' is not an integer of nanoseconds",
        WIRING_CAUSE,
    )


@pytest.mark.upstream("kube-scheduler-extender-default-timeout")
def test_an_unset_http_timeout_is_kube_schedulers_5s_default():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), None)
    status, _, expected, seen, _ = verdict(lab)
    assert (status, expected) == (Status.FAIL, LONGER)
    assert seen.startswith("extender httpTimeout not set (kube-scheduler's default 5s) in")
    install_scheduler(lab.tenant("tenant-a"), None, ["--node-lock-retry-timeout=3s"])
    assert verdict(lab)[0] is Status.PASS


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_without_the_flag_the_extender_waits_hamis_default_28s():
    lab = standard_lab()
    install_scheduler(lab.tenant("tenant-a"), "30s", ["--node-lock-timeout=5m"])
    assert verdict(lab)[:2] == (
        Status.PASS,
        f"extender httpTimeout 30s in {YAML_AT}, --node-lock-retry-timeout 28s (HAMi's default) "
        f"{FLAG_AT}: 2s to spare",
    )
    install_scheduler(lab.tenant("tenant-a"), "20s", [])
    assert verdict(lab)[0] is Status.FAIL


def test_the_last_flag_wins_in_either_spelling():
    lab = standard_lab()
    args = ["--node-lock-retry-timeout=10s", "--node-lock-retry-timeout", "40s"]
    install_scheduler(lab.tenant("tenant-a"), "30s", args)
    status, _, _, seen, _ = verdict(lab)
    assert (status, seen.endswith("Bind may wait 40s, kube-scheduler only 30s")) == (
        Status.FAIL,
        True,
    )
    install_scheduler(lab.tenant("tenant-a"), "30s", ["--node-lock-retry-timeout=soon"])
    status, _, expected, seen, _ = verdict(lab)
    assert (status, expected) == (Status.FAIL, "--node-lock-retry-timeout a Go duration")
    assert "'soon' is not a Go duration" in seen


@pytest.mark.upstream("hami-chart-scheduler-config")
def test_a_missing_config_map_or_key_fails_clearly():
    lab = standard_lab()
    server = lab.tenant("tenant-a")
    mounted = "(Deployment kube-system/hami-scheduler mounts it)"
    broken = [
        (
            lambda: server.config_maps[KEY].update(data={"config.json": "{}"}),
            f"key config.yaml in ConfigMap kube-system/hami-scheduler {mounted}",
            "keys ['config.json']",
            WIRING_CAUSE,
        ),
        (
            lambda: server.config_maps.pop(KEY),
            f"ConfigMap kube-system/hami-scheduler {mounted}",
            'HTTP 404: configmaps "hami-scheduler" not found',
            NO_CONFIG_MAP_CAUSE,
        ),
        (
            lambda: server.deployments.pop(KEY),
            "Deployment kube-system/hami-scheduler (HAMi's scheduler)",
            'HTTP 404: deployments.apps "hami-scheduler" not found',
            NO_DEPLOYMENT_CAUSE,
        ),
    ]
    for breaks, expected, seen, cause in broken:
        breaks()
        assert verdict(lab) == (Status.FAIL, "", expected, seen, cause)
    server.deployments[KEY] = scheduler_deployment()
    del server.deployments[KEY]["spec"]["template"]["spec"]["containers"][1]
    assert verdict(lab)[2:] == (
        "a vgpu-scheduler-extender container in Deployment kube-system/hami-scheduler",
        "containers ['kube-scheduler']",
        WIRING_CAUSE,
    )


def test_a_config_without_a_binding_extender_or_unparseable_fails_clearly():
    lab = standard_lab()
    data = lab.tenant("tenant-a").config_maps[KEY]["data"]
    data["config.yaml"] = "kind: KubeSchedulerConfiguration\nextenders: []\n"
    status, _, expected, seen, cause = verdict(lab)
    assert (status, expected, seen, cause) == (
        Status.FAIL,
        f"an extender httpTimeout in {YAML_AT}",
        "ValueError: no extender with a bindVerb among 0 extender(s)",
        WIRING_CAUSE,
    )
    data["config.yaml"] = "extenders: [{bindVerb: bind, httpTimeout: thirty}]\n"
    assert "'thirty' is not a Go duration" in verdict(lab)[3]
    data["config.yaml"] = "extenders: [\n"
    assert verdict(lab)[3].startswith("ParserError: ")


def test_reads_only_and_an_api_error_is_reported_as_such():
    lab = standard_lab()
    server = lab.tenant("tenant-a")
    assert check_result(lab, CHECK).status is Status.PASS
    assert sorted({name for name, _ in server.calls}) == ["get_config_map", "get_deployment"]
    fail_call(server, "get_config_map", 403, "configmaps is forbidden")
    res = check_result(lab, CHECK)
    assert (res.status, res.seen) == (Status.ERROR, "HTTP 403: configmaps is forbidden")


def test_a_tenant_without_gpu_nodes_is_skipped():
    lab = FakeLab()
    lab.add_tenant("tenant-a", "172.30.255.200", [])
    res = check_result(lab, CHECK)
    assert (res.status, res.evidence) == (Status.SKIP, "no GPU nodes configured for this tenant")


def test_it_runs_before_the_first_gpu_pod_and_needs_only_the_api():
    ids = [c.id for c in ALL_CHECKS]
    (check,) = [c for c in ALL_CHECKS if c.id == CHECK]
    assert ids.index(CHECK) == ids.index("hami.webhook") - 1
    assert (check.per_tenant, check.requires) == (True, ("tenant.api",))
    lab = FakeLab()
    lab.add_tenant("tenant-a", "172.30.255.200", [A100])
    lab.tenant("tenant-a").knobs.readyz = "not ok"
    res = check_result(lab, CHECK)
    assert res.status is Status.PASS  # --only: a prerequisite not selected is not enforced


# kube-scheduler's config, found through the Deployment ----------------------------------------
def test_the_config_is_found_through_kube_schedulers_flag_and_mount():
    deployment = scheduler_deployment()
    assert config_source(deployment, "d").key == "config.yaml"
    pod = deployment["spec"]["template"]["spec"]
    pod["volumes"][0]["configMap"]["items"] = [{"key": "sched", "path": "config.yaml"}]
    found = config_source(deployment, "d")
    assert (found.config_map, found.key, found.legacy) == ("hami-scheduler", "sched", False)
    pod["containers"][0]["command"] = ["kube-scheduler", "-v=4"]
    with pytest.raises(CheckFailed, match="kube-scheduler started with --config"):
        config_source(deployment, "d")
    pod["containers"][0]["command"] = ["kube-scheduler", "--config", "/etc/ks/cfg/sched.yaml"]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "scheduler-config", "mountPath": "/etc/ks", "subPath": "all"}
    ]
    pod["volumes"][0]["configMap"]["items"] = [{"key": "k", "path": "all/cfg/sched.yaml"}]
    assert config_source(deployment, "d").key == "k"
    legacy = config_source(scheduler_deployment(legacy=True), "d")
    assert (legacy.key, legacy.legacy) == ("config.json", True)
    unmounted = scheduler_deployment()
    unmounted["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = []
    with pytest.raises(CheckFailed, match="mounted from a ConfigMap"):
        config_source(unmounted, "d")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30),
        ("1m30s", 90),
        ("1.5h", 5400),
        ("500ms", 0.5),
        ("2m0.5s", 120.5),
        ("1h2m3s4ms", 3723.004),
        ("0", 0),
        ("-2m", -120),
        ("+5s", 5),
        ("300us", 0.0003),
    ],
)
def test_go_durations(text, seconds):
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "s", "1x", "1m30", "1 m", "--1s", "m1s"])
def test_not_go_durations(text):
    with pytest.raises(ValueError, match="is not a Go duration"):
        go_duration_seconds(text)


def test_flag_values_as_pflag_reads_them():
    argv = ["scheduler", "--a=1", "--b", "2", "--a=3", "--", "--a=4"]
    assert (flag_value(argv, "--a"), flag_value(argv, "--b"), flag_value(argv, "--c")) == (
        "3",
        "2",
        None,
    )
