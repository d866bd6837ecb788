"""HAMi's values per GPU mode, its extender flags and the GPU quota (builders/hami.py)."""

from __future__ import annotations

import json
import re

import pytest

from builders.hami import (
    device_plugin_values,
    gpu_quota_manifest,
    hami_values,
    runtime_class_manifest,
)
from labconfig.parse import parse_config
from tests.support.pulumi_harness import lab_stack_config, stack_config

CFG = parse_config(lab_stack_config())
TENANT_A, TENANT_B = CFG.tenants
GPU = parse_config({**stack_config("gpu"), "sshPrivateKey": "k", "managementKubeconfig": "kc"})
NVML = parse_config(stack_config("nvml"))


def test_hami_values_for_simulated_gpus():
    values = hami_values(TENANT_B, 10, "5m")
    image = values["scheduler"]["kubeScheduler"]["image"]
    assert image == {
        "registry": "registry.k8s.io",
        "repository": "kube-scheduler",
        "tag": "v1.36.4",
    }
    assert "--node-lock-timeout=5m" in values["scheduler"]["extender"]["extraArgs"]
    assert values["scheduler"]["defaultSchedulerPolicy"] == {
        "nodeSchedulerPolicy": "binpack",
        "gpuSchedulerPolicy": "spread",
    }
    assert values["devicePlugin"]["enabled"] is False
    assert values["devicePlugin"]["deviceSplitCount"] == 10
    assert values["mockDevicePlugin"] == {"enabled": False}  # gpu_agent registers the cards
    assert "nodeLockExpire" not in json.dumps(values)  # ignored upstream: never rely on it


def test_gpu_quota_uses_hamis_key():
    quota = gpu_quota_manifest(81920)
    assert quota["spec"]["hard"] == {"limits.nvidia.com/gpumem": "81920"}


@pytest.mark.upstream("hami-extender-client-rate-flags", "hami-v2.10-one-rate-limited-client")
def test_hami_extenders_client_is_sized_to_its_lock_polling():
    """HAMi's default 5 QPS / burst 10 throttled every Bind to ~1.3 s in a 20-pod burst (D6);
    at 50/100 the lock polls starved the calls that place pods (a 50-pod burst: the last after
    17.6-18.4 s against the real HAMi, 6.9-7.0 s at 200/400; docs/placement-time.md). What the
    flags do to a burst is measured in tests/real/test_placement_burst.py."""
    args = hami_values(TENANT_A, 10, "5m")["scheduler"]["extender"]["extraArgs"]
    assert args[-2:] == ["--kube-qps=200", "--kube-burst=400"]
    assert args[:3] == ["--debug", "-v=4", "--node-lock-timeout=5m"]


@pytest.mark.upstream("hami-chart-runtime-class-is-a-hook")
def test_real_gpus_use_a_runtime_class_the_lab_owns_not_the_charts_hook():
    """T14: the chart's RuntimeClass is a pre-install hook that uninstall leaves behind."""
    plugin = device_plugin_values(GPU.tenants[0], 10)
    assert plugin["runtimeClassName"] == "nvidia"
    assert plugin["createRuntimeClass"] is False
    assert runtime_class_manifest() == {"metadata": {"name": "nvidia"}, "handler": "nvidia"}
    assert "createRuntimeClass" not in device_plugin_values(TENANT_A, 10)


@pytest.mark.upstream("hami-plugin-and-monitor-load-nvml-by-name")
def test_nvml_mock_library_is_on_both_hami_containers_library_path():
    """T1: both containers dlopen libnvidia-ml.so.1 by name; each sees nvml-mock's driver
    root at its own mount (/driver-root in the plugin, the node's /var at /hostvar)."""
    (tenant,) = NVML.tenants
    plugin = device_plugin_values(tenant, 10)
    assert plugin["nvidiaDriverRoot"] == "/var/lib/nvml-mock/driver"
    assert plugin["extraEnvs"] == [{"name": "LD_LIBRARY_PATH", "value": "/driver-root/usr/lib64"}]
    assert plugin["monitor"] == {
        "extraEnvs": [
            {"name": "LD_LIBRARY_PATH", "value": "/hostvar/lib/nvml-mock/driver/usr/lib64"}
        ]
    }
    for other in (TENANT_A, GPU.tenants[0]):
        assert "extraEnvs" not in device_plugin_values(other, 10)


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_a_pod_group_members_bind_waits_for_the_node_lock_up_to_the_flag_the_program_passes():
    """Issue 20: HAMi's Bind waits for a held lock (instead of failing into kube-scheduler's
    backoff) for PodGroup pods, up to --node-lock-retry-timeout. The program passes HAMi's own
    default (28 s), so a changed default cannot switch the wait off. Whether it stays below the
    extender httpTimeout the chart renders is the chart's to say: labcheck's
    hami.extender-timeout reads both on the running lab (tests/labcheck/test_extender.py)."""
    args = hami_values(TENANT_B, 10, "5m")["scheduler"]["extender"]["extraArgs"]
    retry = [a for a in args if a.startswith("--node-lock-retry-timeout=")]
    assert retry == ["--node-lock-retry-timeout=28s"]


@pytest.mark.upstream("hami-v2.10-pod-group-bind-waits-for-lock")
def test_the_pod_group_label_was_read_in_the_hami_the_program_pins():
    """The lab labels every GPU pod a PodGroup member only for Bind's lock retry. That HAMi reads
    the label nowhere else was checked in one HAMi version's source; a bump of the pinned chart
    fails here until the fact is read again in the new version (and its version updated)."""
    from labconfig.model import LabConfig
    from tests.test_upstream_facts import fact_entries

    fact = fact_entries()["hami-v2.10-pod-group-bind-waits-for-lock"]
    checked = re.search(r"Checked at (v[0-9.]+) \(", fact)
    pinned = LabConfig.model_fields["hami_chart_version"].default
    assert checked and checked.group(1) == f"v{pinned}"
    assert "has no other use in HAMi " + checked.group(1) in " ".join(fact.split())
