"""Every check against the fake lab: healthy, then broken on purpose."""

from __future__ import annotations

import pytest

from labcheck import MANAGED_BY_LABEL, RUN_ID_LABEL
from labcheck.result import Status
from tests.support.labcheck_fakes import A100, FakeLab, run_lab, standard_lab


def run(lab, only=()):
    return run_lab(lab, only)


def assert_clean(lab):
    """Nothing of ours is left, and nothing that is not ours was deleted."""
    for s in lab.servers.values():
        assert not s.pods, (s.name, list(s.pods))
        assert "labcheck-t1" not in s.namespaces
        for kind, name in s.deleted:
            assert "lc-t1-" in name or name == "labcheck-t1", (kind, name)


def test_healthy_lab_passes_and_cleans_up():
    lab = standard_lab()
    out, r = run(lab)
    bad = [x for x in out.results if x.status.bad]
    assert not bad, bad
    assert out.ok
    skipped = {k for k, v in r.items() if v.status is Status.SKIP}
    dra_checks = ("dra.slices", "dra.sharing", "dra.exhaustion")
    # tenant-a has a single card; memory limits need real GPUs; both tenants share with HAMi;
    # the fake lab's spec has no Prometheus (tests/labcheck/test_monitoring_checks.py has).
    monitoring = ("monitoring.targets", "monitoring.truth")
    assert skipped == {
        ("gpu.policy", "tenant-a"),
        ("gpu.memory-limit", "tenant-a"),
        ("gpu.memory-limit", "tenant-b"),
        *((c, t) for c in dra_checks + monitoring for t in ("tenant-a", "tenant-b")),
    }
    assert r[("dra.slices", "tenant-a")].evidence == (
        "a check of dra: this tenant's gpuSharing is hami"
    )
    assert r[("sharing.one-mode", "tenant-b")].status is Status.PASS
    assert "gpuMode simulated" in r[("gpu.memory-limit", "tenant-a")].evidence
    assert "spread: different cards, binpack: same card" in r[("gpu.policy", "tenant-b")].evidence
    assert "3 pods share" in r[("gpu.sharing", "tenant-b")].evidence
    assert_clean(lab)


def test_test_objects_are_labelled_and_named_per_run():
    lab = standard_lab()
    seen = []
    server = lab.tenant("tenant-a")
    orig = server.create_pod

    def spy(ns, body):
        seen.append((ns, body["metadata"]))
        return orig(ns, body)

    server.create_pod = spy
    run(lab, only=["konnectivity.*", "hami.webhook", "gpu.quota"])
    assert seen
    for ns, meta in seen:
        assert meta["labels"][MANAGED_BY_LABEL] == "labcheck"
        assert meta["labels"][RUN_ID_LABEL] == "t1"
        assert meta["name"].startswith("lc-t1-")
        assert ns in ("labcheck-t1", "gpu-workloads")


def test_webhook_not_reached_fails_loudly_and_blocks_gpu_checks():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.webhook = False
    out, r = run(lab)
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert res.seen == "schedulerName is default-scheduler"
    assert "HAMi webhook not reached" in res.cause and "Konnectivity" in res.cause
    assert r[("gpu.sharing", "tenant-a")].status is Status.SKIP
    assert "blocked: hami.webhook" in r[("gpu.sharing", "tenant-a")].evidence
    assert r[("gpu.sharing", "tenant-b")].status is Status.PASS
    assert not out.ok
    assert_clean(lab)


def test_broken_tunnel_fails_logs_exec_and_port_forward():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.konnectivity = False
    _, r = run(lab, only=["konnectivity.*"])
    for check in ("konnectivity.logs", "konnectivity.exec", "konnectivity.port-forward"):
        res = r[(check, "tenant-b")]
        assert res.status is Status.FAIL, check
        assert "No agent available" in res.seen and "Konnectivity" in res.cause
        assert r[(check, "tenant-a")].status is Status.PASS
    assert_clean(lab)


def test_stuck_allocation_is_reported_with_the_lock_cause():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.finish_alloc = False
    out, r = run(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL
    assert "bind-phase allocating" in res.seen and "lock" in res.cause
    assert not out.ok
    assert_clean(lab)


def test_slow_lock_release_misses_the_burst_bound():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.lock_hold_seconds = 20  # 5 pods x 20 s > 60 s
    _, r = run(lab, only=["gpu.node-lock"])
    res = r[("gpu.node-lock", "tenant-a")]
    assert res.status is Status.FAIL
    assert "node lock contention" in res.seen
    assert r[("gpu.node-lock", "tenant-b")].status is Status.PASS
    assert_clean(lab)


def test_lock_burst_within_bound_passes_and_reports_the_observed_release():
    """Issue 13 (hollow test): the evidence states the release labcheck saw, not a literal."""
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.lock_hold_seconds = 2  # the last bind holds the lock 2 s more
    _, r = run(lab, only=["gpu.node-lock"])
    res = r[("gpu.node-lock", "tenant-a")]
    assert res.status is Status.PASS
    assert res.evidence == (
        "5 pods back to back on tenant-a-worker-1 allocated in 8.0s (bound 60s); "
        "no hami.io/mutex.lock on tenant-a-worker-1 2s after the last bind"
    )
    assert (
        "hami.io/mutex.lock"
        not in lab.tenant("tenant-a").nodes["tenant-a-worker-1"]["metadata"]["annotations"]
    )


def test_lock_still_held_after_every_pod_bound_fails_with_the_bind_cause():
    """Issue 13: the post-burst lock check is a verdict of its own (all pods bound, lock kept)."""
    lab = standard_lab()
    lab.spec["timeouts"].update(lockBurstPods=2, lockBurstSeconds=60)
    lab.tenant("tenant-a").knobs.lock_hold_seconds = 30  # outlives the 10 s API wait
    _, r = run(lab, only=["gpu.node-lock"])
    res = r[("gpu.node-lock", "tenant-a")]
    assert res.status is Status.FAIL
    assert res.expected == "no hami.io/mutex.lock on tenant-a-worker-1 after all binds"
    assert res.seen == "hami.io/mutex.lock=2026-01-01T00:00:00Z,labcheck-t1,lc-t1-lock-1"
    assert res.cause.startswith("allocation never finished: the node lock or bind-phase")
    assert r[("gpu.node-lock", "tenant-b")].status is Status.PASS
    assert_clean(lab)


def test_inventory_mismatch():
    lab = standard_lab()
    node = lab.tenant("tenant-b").nodes["tenant-b-worker-1"]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "10"  # one card's worth
    _, r = run(lab, only=["gpu.inventory"])
    res = r[("gpu.inventory", "tenant-b")]
    assert res.status is Status.FAIL and "nvidia.com/gpu=20" in res.expected
    del node["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "20"
    _, r = run(lab, only=["gpu.inventory"])
    assert "register" in r[("gpu.inventory", "tenant-b")].cause


def test_policy_ignored_is_caught():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.ignore_policy = "spread"
    _, r = run(lab, only=["gpu.policy"])
    res = r[("gpu.policy", "tenant-b")]
    assert res.status is Status.FAIL and res.expected.startswith("binpack: 2 pods on the same")


def test_overcommit_is_caught():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.ignore_memory = True
    _, r = run(lab, only=["gpu.oversubscription"])
    res = r[("gpu.oversubscription", "tenant-a")]
    assert res.status is Status.FAIL and "bound to tenant-a-worker-1" in res.seen
    assert_clean(lab)


def test_scheduler_down_gives_no_hami_reason():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.scheduler = False
    _, r = run(lab, only=["hami.webhook"])
    res = r[("hami.webhook", "tenant-a")]
    assert res.status is Status.FAIL and "hami-scheduler down" in res.cause


def test_quota_not_enforced():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.quota_admission = False
    _, r = run(lab, only=["gpu.quota"])
    res = r[("gpu.quota", "tenant-b")]
    assert res.status is Status.FAIL and "ResourceQuotaNotFit" in res.expected
    assert r[("gpu.quota", "tenant-a")].status is Status.PASS
    assert_clean(lab)


def test_quota_object_differs():
    lab = standard_lab()
    lab.tenant("tenant-a").quotas[("gpu-workloads", "gpu-quota")]["spec"]["hard"] = {}
    _, r = run(lab, only=["gpu.quota"])
    assert r[("gpu.quota", "tenant-a")].status is Status.FAIL


def test_tcp_not_ready_or_moved_blocks_the_tenant():
    lab = standard_lab()
    tcp = lab.mgmt.custom[("tenantcontrolplanes", "tenant-a", "tenant-a", "kamaji.clastix.io")]
    tcp["status"]["controlPlaneEndpoint"] = "172.30.255.210:6443"
    _, r = run(lab)
    assert r[("tcp.ready", "tenant-a")].status is Status.FAIL
    assert "loadBalancerIPs" in r[("tcp.ready", "tenant-a")].cause
    assert r[("tenant.api", "tenant-a")].status is Status.SKIP
    assert r[("tcp.distinct", "")].status is Status.SKIP
    tcp["status"]["kubernetesResources"]["version"]["status"] = "Provisioning"
    _, r = run(lab, only=["tcp.ready"])
    assert r[("tcp.ready", "tenant-a")].seen == "Provisioning"


def test_duplicate_endpoints():
    lab = standard_lab()
    tcp = lab.mgmt.custom[("tenantcontrolplanes", "tenant-b", "tenant-b", "kamaji.clastix.io")]
    tcp["status"]["controlPlaneEndpoint"] = "172.30.255.200:6443"
    _, r = run(lab, only=["tcp.distinct"])
    assert "share 172.30.255.200" in r[("tcp.distinct", "")].seen


def test_management_failures():
    lab = standard_lab()
    lab.mgmt.workloads["kamaji-system"][1]["status"]["readyReplicas"] = 0
    lab.mgmt.knobs.dry_run_error["ipaddresspools"] = (
        'failed calling webhook "ipaddresspoolvalidationwebhook.metallb.io"'
    )
    _, r = run(lab, only=["mgmt.*"])
    assert "StatefulSet/kamaji-etcd 0/1" in r[("mgmt.kamaji", "")].seen
    assert "MetalLB webhook" in r[("mgmt.webhooks", "")].expected
    del lab.mgmt.custom[("datastores", "", "default", "kamaji.clastix.io")]
    lab.mgmt.workloads["kamaji-system"][1]["status"]["readyReplicas"] = 1
    _, r = run(lab, only=["mgmt.kamaji"])
    assert "DataStore/default" in r[("mgmt.kamaji", "")].expected


def test_tenant_api_unreachable_and_unhealthy():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.reachable = False
    lab.tenant("tenant-a").knobs.readyz = "[-]etcd failed"
    out, r = run(lab)
    assert "unreachable" in r[("tenant.api", "tenant-b")].cause
    assert r[("tenant.api", "tenant-a")].seen == "[-]etcd failed"
    assert r[("nodes.joined", "tenant-b")].status is Status.SKIP
    assert not out.ok


def test_node_membership():
    lab = standard_lab()
    from tests.support.labcheck_fakes import _node

    a = lab.tenant("tenant-a")
    a.nodes["stray"] = _node("stray")
    lab.mgmt.nodes["tenant-b-worker-1"] = _node("tenant-b-worker-1")
    lab.tenant("tenant-b").nodes["tenant-b-worker-1"]["status"]["conditions"][0]["status"] = "False"
    _, r = run(lab, only=["nodes.*"])
    assert "stray" in r[("nodes.joined", "tenant-a")].seen
    assert "not Ready" in r[("nodes.joined", "tenant-b")].seen
    assert "tenant-b-worker-1" in r[("nodes.management-clean", "")].seen
    del a.nodes["tenant-a-worker-1"]
    _, r = run(lab, only=["nodes.joined"])
    assert "missing ['tenant-a-worker-1']" in r[("nodes.joined", "tenant-a")].seen


def test_isolation_leaks_are_failures():
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.accept_foreign = True
    lab.mgmt.knobs.accept_foreign = True
    _, r = run(lab, only=["isolation.*"])
    cross = r[("isolation.cross-tenant", "")]
    assert cross.status is Status.FAIL and "tenant-a read tenant-b" in cross.seen
    assert r[("isolation.management", "tenant-a")].status is Status.FAIL


def test_isolation_probe_uses_target_ca_and_foreign_token():
    lab = standard_lab()
    run(lab, only=["isolation.cross-tenant"])
    b = lab.tenant("tenant-b")
    assert b.foreign_calls and all(name == "get_raw" for name, _ in b.foreign_calls)
    assert "tenant-a-creds@tenant-b" in lab.created_clusters


def test_gpu_pod_on_foreign_node_is_caught():
    lab = standard_lab()
    a = lab.tenant("tenant-a")
    a.namespaces["apps"] = {"metadata": {"name": "apps"}}
    a.pods[("apps", "x")] = {
        "metadata": {
            "name": "x",
            "namespace": "apps",
            "annotations": {"hami.io/vgpu-node": "tenant-b-worker-1"},
        },
        "spec": {"nodeName": "", "schedulerName": "hami-scheduler", "containers": [{}]},
        "status": {"phase": "Pending"},
        "_seq": 0,
        "_token": "",
    }
    _, r = run(lab, only=["isolation.gpu-placement"])
    res = r[("isolation.gpu-placement", "tenant-a")]
    assert res.status is Status.FAIL and "tenant-b-worker-1" in res.seen
    assert ("apps", "x") in a.pods  # never touched: not ours


def test_real_gpu_memory_limit():
    lab = FakeLab()
    s = lab.add_tenant("gpu-host", "172.30.255.202", [A100], gpu_mode="real")
    _, r = run(lab, only=["gpu.memory-limit"])
    res = r[("gpu.memory-limit", "gpu-host")]
    assert res.status is Status.PASS and "20480 MiB" in res.evidence
    s.knobs.smi_reports_card = True
    _, r = run(lab, only=["gpu.memory-limit"])
    res = r[("gpu.memory-limit", "gpu-host")]
    assert res.status is Status.FAIL and res.seen == "81920 MiB" and "libvgpu" in res.cause


def test_tenant_without_gpus_skips_gpu_checks():
    lab = FakeLab()
    lab.add_tenant("cpu-only", "172.30.255.203", [])
    out, r = run(lab)
    assert r[("hami.webhook", "cpu-only")].status is Status.SKIP
    assert r[("gpu.inventory", "cpu-only")].status is Status.SKIP
    assert r[("isolation.cross-tenant", "")].status is Status.SKIP
    assert out.ok


@pytest.mark.parametrize("check", ["gpu.sharing", "gpu.oversubscription", "gpu.node-lock"])
def test_gpu_pods_deleted_even_when_a_check_fails(check):
    lab = standard_lab()
    lab.tenant("tenant-b").knobs.finish_alloc = False
    run(lab, only=[check])
    assert_clean(lab)


def test_gpu_pods_wait_for_the_node_lock_shown_by_a_dry_run():
    lab = standard_lab()
    _, r = run(lab, only=["hami.lock-wait"])
    result = r[("hami.lock-wait", "tenant-b")]
    assert result.status is Status.PASS
    assert "scheduling.x-k8s.io/pod-group=hami-node-lock-wait" in result.evidence
    assert not lab.tenant("tenant-b").pods  # a dry run creates nothing
    assert_clean(lab)


def test_a_tenant_without_the_lock_wait_policy_fails_with_its_cause():
    lab = standard_lab()
    lab.tenant("tenant-a").knobs.lock_wait_policy = False
    _, r = run(lab, only=["hami.lock-wait"])
    result = r[("hami.lock-wait", "tenant-a")]
    assert result.status is Status.FAIL
    assert result.seen == "no scheduling.x-k8s.io/pod-group label"
    assert "--feature-gates" in result.cause
    assert r[("hami.lock-wait", "tenant-b")].status is Status.PASS


def test_a_pod_group_other_than_the_programs_fails():
    """The check reads the value, not only the label: a GPU pod admitted into another pod group
    (another policy's, a gang's) is not the program's policy at work."""
    lab = standard_lab()
    lab.spec["tenants"][0]["lockWait"]["value"] = "the-programs-value"
    _, r = run(lab, only=["hami.lock-wait"])
    result = r[("hami.lock-wait", "tenant-a")]
    assert result.status is Status.FAIL
    assert result.expected == "scheduling.x-k8s.io/pod-group=the-programs-value on a GPU pod"
    assert result.seen == "scheduling.x-k8s.io/pod-group=hami-node-lock-wait"
    assert r[("hami.lock-wait", "tenant-b")].status is Status.PASS


def test_a_tenant_whose_version_serves_no_policy_is_skipped_with_the_reason():
    lab = standard_lab()
    lab.spec["tenants"][0]["lockWait"] = None
    _, r = run(lab, only=["hami.lock-wait"])
    result = r[("hami.lock-wait", "tenant-a")]
    assert result.status is Status.SKIP
    assert "before v1.34" in result.evidence
