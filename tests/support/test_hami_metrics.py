"""The HAMi metrics stand-in writes what HAMi v2.10.0's scheduler writes for the same pods."""

from __future__ import annotations

import urllib.request

import pytest

from tests.support.hami_metrics import (
    Card,
    Container,
    HamiMetricsServer,
    dra_samples,
    exposition,
    go_float,
    state_of,
)

# client_golang v1.24.1 (HAMi v2.10.0's go.mod) run with the descriptors of cmd/scheduler/
# metrics.go:107-146,325-334 and NewClusterManager's zone label (metrics.go:409): card GPU-a on
# w1 with 81920 MiB, pods ml/p1 and ml/p2, one container each with 20000 MiB and 30 % of cores.
CLIENT_GOLANG_OUTPUT = """\
hami_gpu_core_allocated_ratio{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 60
hami_gpu_core_limit_ratio{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 100
hami_gpu_memory_allocated_bytes{device_cores="100",device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 4.194304e+10
hami_gpu_memory_limit_bytes{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 8.589934592e+10
hami_gpu_shared_count{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 2
hami_node_gpu_memory_allocated_ratio{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 0.48828125
hami_node_gpu_overview{device_cores="100",device_index="0",device_memory_limit="81920",device_type="NVIDIA",device_uuid="GPU-a",node="w1",zone="vGPU"} 4.194304e+10
hami_vgpu_core_allocated_ratio{container_index="0",device_uuid="GPU-a",namespace="ml",node="w1",pod="p1",zone="vGPU"} 30
hami_vgpu_core_allocated_ratio{container_index="0",device_uuid="GPU-a",namespace="ml",node="w1",pod="p2",zone="vGPU"} 30
hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-a",namespace="ml",node="w1",pod="p1",zone="vGPU"} 2.097152e+10
hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-a",namespace="ml",node="w1",pod="p2",zone="vGPU"} 2.097152e+10
"""  # noqa: E501 (the exposition's lines as written)

TWO_PODS = state_of(
    [Card("GPU-a", "w1", 81920)],
    [Container("ml", p, 0, "w1", "GPU-a", 20000, 30) for p in ("p1", "p2")],
)


def series_lines(text: str) -> str:
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if line and not line.startswith("#") and not line.startswith("hami_build_info")
    )


@pytest.mark.upstream("hami-scheduler-metrics-v2.10")
def test_the_series_are_those_hamis_collector_writes_for_the_same_pods():
    assert series_lines(exposition(TWO_PODS)) == CLIENT_GOLANG_OUTPUT


@pytest.mark.upstream("hami-scheduler-metrics-v2.10")
def test_every_family_is_a_gauge_with_hamis_help_text():
    text = exposition(TWO_PODS)
    assert "# HELP hami_vgpu_core_allocated_ratio vGPU core allocated from a container\n" in text
    assert "# TYPE hami_gpu_shared_count gauge\n" in text
    types = [line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")]
    assert types == ["gauge"] * 10  # nine collector families and hami_build_info


def test_a_pod_that_is_gone_leaves_its_series_and_the_card_counts_without_it():
    one_left = state_of(TWO_PODS.cards, TWO_PODS.containers[:1])
    text = exposition(one_left)
    assert 'pod="p2"' not in text
    assert (
        'hami_gpu_shared_count{device_index="0",device_type="NVIDIA",device_uuid="GPU-a",' in text
    )
    assert '"w1",zone="vGPU"} 1\n' in text
    assert "hami_gpu_core_allocated_ratio{" in text and "} 30\n" in text


def test_an_idle_card_is_still_listed_with_nothing_allocated():
    text = series_lines(exposition(state_of([Card("GPU-b", "w2", 23034, index=1)])))
    assert 'hami_gpu_memory_allocated_bytes{device_cores="100",device_index="1",' in text
    assert (
        'hami_gpu_shared_count{device_index="1",device_type="NVIDIA",device_uuid="GPU-b",' in text
    )
    assert "hami_vgpu" not in text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (1, "1"), (100, "100"), (123456, "123456"), (1e6, "1e+06"), (0.5, "0.5"),
     (1e-5, "1e-05"), (24153 * 1048576, "2.5326256128e+10")],
)  # fmt: skip
def test_values_are_written_as_go_formats_them(value, text):
    assert go_float(value) == text


def test_the_server_renders_the_state_of_the_moment_of_each_scrape():
    with HamiMetricsServer("127.0.0.1", TWO_PODS) as server:
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert 'pod="p2"' in response.read().decode()
        server.state = state_of(TWO_PODS.cards)
        with urllib.request.urlopen(url, timeout=5) as response:
            assert "hami_vgpu" not in response.read().decode()
        assert server.scrapes == 2


@pytest.mark.upstream("hami-dra-monitor-exports-allocations")
def test_hami_dra_monitor_series_are_in_mib_per_pod_with_its_own_label_names():
    state = state_of(
        [Card("GPU-c0", "c-w1", 40000)], [Container("ns", "d0", 0, "c-w1", "GPU-c0", 10000, 50)]
    )
    got = {(name, tuple(labels)): value for name, labels, value in dra_samples(state)}
    device = ("nodeid", "deviceuuid", "deviceidx", "devicename", "devicebrand", "deviceproductname")
    assert got == {
        ("GPUDeviceMemoryLimit", device): 40000,
        ("GPUDeviceCoreLimit", device): 100,
        ("GPUDeviceMemoryAllocated", device): 10000,
        ("GPUDeviceCoreAllocated", device): 50,
        ("vGPUDeviceCoreAllocated", (*device, "podnamespace", "podname")): 50,
        ("vGPUDeviceMemoryAllocated", (*device, "podnamespace", "podname")): 10000,
    }
