"""The real kube-proxy v1.35.4 in a worker container on this host: what the host's conntrack
settings do to it (issue 19, part 3; the evidence behind preflight/checks.py's conntrack rule).

One worker of the node image, created with the program's worker flags on hc-net; kube-proxy run
by its containerd as kubeadm's DaemonSet runs it (kube_proxy_run.py), once per host setting.
The host's nf_conntrack_max and hashsize are changed for a case and restored after it, also
when it fails; every run's evidence is written to `<tier cache>/kube-proxy-conntrack/`.
Needs root on the host (it writes the initial netns's sysctl).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_host import Docker
from kube_proxy_run import (
    CONNTRACK_MAX,
    HostConntrack,
    KubeProxyRun,
    Worker,
    host_conntrack,
    worker_with_kube_proxy,
)
from node_image import K8S_VERSION

from preflight.checks import conntrack_findings, kube_proxy_conntrack_max
from preflight.host_facts import online_cpus

WRITE_REFUSED = f"open {CONNTRACK_MAX}: permission denied"
SYSFS_READ_ONLY = '"Sysfs is not writable"'


@pytest.fixture(scope="module")
def target() -> int:
    """What kube-proxy v1.35.4 wants here, by the preflight's own formula."""
    return kube_proxy_conntrack_max(K8S_VERSION, online_cpus(Path("/")))


@pytest.fixture(scope="module")
def worker(docker: Docker, node_image: str, tmp_path_factory) -> Iterator[Worker]:
    if os.geteuid() != 0 or not os.access(CONNTRACK_MAX, os.W_OK):
        pytest.fail(
            "needs root on the host: the cases set the host's nf_conntrack_max", pytrace=False
        )
    docker.require_privileged()
    with worker_with_kube_proxy(docker, node_image, tmp_path_factory.mktemp("hc-plane")) as w:
        yield w


@pytest.fixture(scope="module")
def evidence_dir(tier_cache_dir: Path) -> Path:
    path = tier_cache_dir / "kube-proxy-conntrack"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_with_host(worker: Worker, host: HostConntrack, evidence: Path, case: str) -> KubeProxyRun:
    with host_conntrack(host):
        run = worker.run_kube_proxy(HostConntrack.read())
    (evidence / f"{case}.txt").write_text(f"{run.evidence()}\n\n--- kube-proxy log\n{run.log}")
    return run


@pytest.fixture
def restored() -> Iterator[None]:
    """The host's settings are the same after the case as before it."""
    before = HostConntrack.read()
    yield
    assert HostConntrack.read() == before


@pytest.mark.upstream(
    "kube-proxy-conntrack-max-exact", "nf-conntrack-max-read-only-outside-the-initial-netns"
)
@pytest.mark.parametrize("factor", [2, 0.5], ids=["host-above-target", "host-below-target"])
def test_kube_proxy_exits_when_the_host_differs_from_its_target(
    worker: Worker, target: int, evidence_dir: Path, restored, factor: float
):
    """Twice the target (the kernel's 262144 on a 2-CPU host) or half of it: kube-proxy
    tries to write its target into the worker's netns, is refused, and exits before it writes
    any Service rule. The preflight fails such a host."""
    hashsize = HostConntrack.read().hashsize
    host = HostConntrack(int(target * factor), max(hashsize, target // 4))
    run = run_with_host(worker, host, evidence_dir, f"host-{host.max}")
    assert run.exit_code == 1, run.evidence()
    assert run.lines(f'"Set sysctl" entry="net/netfilter/nf_conntrack_max" value={target}')
    assert run.lines(f'"Error running ProxyServer" err="{WRITE_REFUSED}"'), run.log
    assert run.netns_max_before == run.netns_max_after == host.max  # the host's, unchanged
    assert run.probe_rules == "" and run.probe == ""
    (finding, _) = conntrack_findings(
        host.max, host.hashsize, [K8S_VERSION], online_cpus(Path("/"))
    )
    assert not finding.ok


@pytest.mark.upstream(
    "kube-proxy-conntrack-max-exact", "nf-conntrack-max-read-only-outside-the-initial-netns"
)
def test_kube_proxy_runs_and_serves_when_the_host_holds_its_target(
    worker: Worker, target: int, evidence_dir: Path, restored
):
    """The host at exactly the target: the worker's netns reads the same value, kube-proxy
    writes nothing there (no "Set sysctl" for it), syncs, and the probe Service answers
    through its cluster IP. The preflight passes such a host."""
    hashsize = HostConntrack.read().hashsize
    host = HostConntrack(target, max(hashsize, target // 4))
    run = run_with_host(worker, host, evidence_dir, f"host-{host.max}")
    assert run.exit_code is None, run.evidence()
    assert run.lines(f'"Setting nf_conntrack_max" nfConntrackMax={target}')
    assert not run.lines('entry="net/netfilter/nf_conntrack_max"'), run.log
    assert run.netns_max_before == run.netns_max_after == target
    assert "default/hc-probe:p cluster IP" in run.probe_rules
    assert run.probe == "hc-probe\n"
    findings = conntrack_findings(host.max, host.hashsize, [K8S_VERSION], online_cpus(Path("/")))
    assert all(f.ok for f in findings)


@pytest.mark.upstream("kube-proxy-conntrack-hashsize")
def test_a_small_hashsize_only_costs_an_event_below_v1_36(
    worker: Worker, target: int, evidence_dir: Path, restored
):
    """hashsize below target/4: kube-proxy v1.35 would raise it, but finds /sys read-only in
    the worker's netns (kind's entrypoint remounts it so; a privileged pod's own sysfs there is
    read-only too), logs it, skips the write and runs on. The preflight passes it for v1.35
    tenants (v1.36 dropped the skip: it fails it for those, from source)."""
    host = HostConntrack(target, target // 8)
    run = run_with_host(worker, host, evidence_dir, f"host-{host.max}-hashsize-{host.hashsize}")
    assert run.exit_code is None, run.evidence()
    (read_only,) = run.lines(SYSFS_READ_ONLY)
    assert '"Opts":["ro",' in read_only
    assert not run.lines("Setting conntrack hashsize")
    assert run.probe == "hc-probe\n"
    cpus = online_cpus(Path("/"))
    assert all(f.ok for f in conntrack_findings(host.max, host.hashsize, [K8S_VERSION], cpus))
    assert not all(f.ok for f in conntrack_findings(host.max, host.hashsize, ["v1.36.0"], cpus))


@pytest.mark.upstream("nf-conntrack-max-read-only-outside-the-initial-netns")
def test_the_worker_netns_reads_the_hosts_value_and_cannot_write_it(worker: Worker):
    """Kernel 6.x: nf_conntrack_max is mode 0444 outside the initial netns and reads the
    initial netns's value; root in the privileged worker is refused, even the same value."""
    host = HostConntrack.read()
    mode = worker.sh(f"stat -c %a {CONNTRACK_MAX}").stdout.strip()
    assert mode == "444"
    assert worker.netns_max() == host.max
    written = worker.sh(f"echo {host.max} > {CONNTRACK_MAX}")
    assert written.returncode != 0 and "Permission denied" in written.stderr
    assert HostConntrack.read() == host
