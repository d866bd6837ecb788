"""The real kube-proxy v1.35.4 and v1.36.3 in a worker container on this host: the program's
configuration leaves the host's conntrack table alone; kubeadm's default (Kamaji's addon)
crash-loops unless the host holds exactly its target, and from v1.36 a large enough hash size
(the evidence behind builders/kube_proxy.py).

One worker of the node image, created with the program's worker flags on hc-net; kube-proxy run
by its containerd as kubeadm's DaemonSet runs it (kube_proxy_run.py), once per case. The host's
nf_conntrack_max and hashsize are changed for a case and restored after it, also when it fails;
every run's evidence is written to `<tier cache>/kube-proxy-conntrack/`. Needs root on the host
(it writes the initial netns's sysctl).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_host import Docker
from kube_proxy_run import (
    CONNTRACK_MAX,
    NEXT_BINARY,
    NEXT_VERSION,
    HostConntrack,
    KubeProxyRun,
    Worker,
    host_conntrack,
    kube_proxy_next,
    kubeadm_default_target,
    program_kube_proxy_config,
    worker_with_kube_proxy,
)
from node_image import K8S_VERSION

from preflight.host_facts import online_cpus

WRITE_REFUSED = f"open {CONNTRACK_MAX}: permission denied"
SYSFS_READ_ONLY = '"Sysfs is not writable"'
TCP_ESTABLISHED = "nf_conntrack_tcp_timeout_established"


@pytest.fixture(scope="module")
def target() -> int:
    """What kube-proxy v1.35.4 with kubeadm's default configuration wants here."""
    return kubeadm_default_target(K8S_VERSION, online_cpus(Path("/")))


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


@pytest.fixture(scope="module")
def next_binary(worker: Worker, tier_cache_dir: Path) -> str:
    """kube-proxy v1.36.3 (built here once) in the worker."""
    return worker.install(kube_proxy_next(tier_cache_dir), NEXT_BINARY)


def run_with_host(
    worker: Worker, host: HostConntrack, evidence: Path, case: str, binary: str | None = None
) -> tuple[KubeProxyRun, HostConntrack]:
    """One run with the host set to `host`; also what the host held right after the run,
    before it is restored."""
    with host_conntrack(host):
        run = worker.run_kube_proxy(HostConntrack.read(), binary)
        after = HostConntrack.read()
    (evidence / f"{case}.txt").write_text(
        f"{run.evidence()}\nhost after the run: nf_conntrack_max={after.max} "
        f"hashsize={after.hashsize}\n\n--- kube-proxy log\n{run.log}"
    )
    return run, after


@pytest.fixture
def restored() -> Iterator[None]:
    """The host's settings are the same after the case as before it."""
    before = HostConntrack.read()
    yield
    assert HostConntrack.read() == before


@pytest.mark.upstream(
    "kube-proxy-max-per-core-zero-skips-the-conntrack-table", "kube-proxy-conntrack-hashsize"
)
@pytest.mark.parametrize("factor", [2, 0.5], ids=["host-above-target", "host-below-target"])
def test_the_programs_kube_proxy_runs_and_leaves_the_host_as_it_is(
    worker: Worker, target: int, evidence_dir: Path, restored, factor: float
):
    """The program's configuration (`maxPerCore: 0`), the host at twice or half of what
    kubeadm's default would write and its hashsize at an eighth of that (below a quarter,
    which kube-proxy would otherwise raise): kube-proxy computes no target, writes neither
    value (no "Setting nf_conntrack_max", no hashsize line, not even the read-only-sysfs
    one), syncs, and the probe Service answers; the host holds the same values after it. The
    per-netns TCP timeout is still kube-proxy's (24 h), in the worker's netns only."""
    worker.use_config(program_kube_proxy_config())
    host = HostConntrack(int(target * factor), target // 8)
    run, after = run_with_host(worker, host, evidence_dir, f"program-host-{host.max}")
    assert run.exit_code is None, run.evidence()
    assert run.host == host and after == host
    assert not run.lines("nf_conntrack_max"), run.log
    assert not run.lines("hashsize") and not run.lines(SYSFS_READ_ONLY), run.log
    assert run.netns_max_before == run.netns_max_after == host.max
    assert "default/hc-probe:p cluster IP" in run.probe_rules
    assert run.probe == "hc-probe\n"
    assert worker.netns_value(TCP_ESTABLISHED) == 86400


@pytest.mark.upstream(
    "kube-proxy-conntrack-max-exact",
    "nf-conntrack-max-read-only-outside-the-initial-netns",
    "kamaji-kube-proxy-addon-is-kubeadms-default",
)
def test_kubeadms_default_config_exits_when_the_host_differs_from_its_target(
    worker: Worker, target: int, evidence_dir: Path, restored
):
    """Why the lab runs its own kube-proxy: with kubeadm's default configuration (Kamaji's
    addon), the host at twice its target (the kernel's 262144 on a 2-CPU host), kube-proxy
    tries to write its target into the worker's netns, is refused, and exits before it
    writes any Service rule: a kubelet would restart it forever."""
    worker.use_config(worker.kubeadm_config)
    host = HostConntrack(2 * target, max(HostConntrack.read().hashsize, target // 4))
    run, after = run_with_host(worker, host, evidence_dir, f"kubeadm-default-host-{host.max}")
    assert run.exit_code == 1, run.evidence()
    assert run.lines(f'"Set sysctl" entry="net/netfilter/nf_conntrack_max" value={target}')
    assert run.lines(f'"Error running ProxyServer" err="{WRITE_REFUSED}"'), run.log
    assert run.netns_max_before == run.netns_max_after == host.max  # the host's, unchanged
    assert after == host
    assert run.probe_rules == "" and run.probe == ""


@pytest.mark.upstream(
    "kube-proxy-max-per-core-zero-skips-the-conntrack-table", "kube-proxy-conntrack-hashsize"
)
def test_the_programs_kube_proxy_v1_36_runs_with_a_small_hashsize_too(
    worker: Worker, next_binary: str, evidence_dir: Path, restored
):
    """v1.36 raises a hashsize below a quarter of its target, and exits when it cannot (next
    test); with the program's configuration it never gets there: the host at twice its
    target and an eighth of it as hashsize, v1.36.3 runs, serves, and writes neither."""
    target = kubeadm_default_target(NEXT_VERSION, online_cpus(Path("/")))
    worker.use_config(program_kube_proxy_config(NEXT_VERSION))
    host = HostConntrack(2 * target, target // 8)
    run, after = run_with_host(
        worker, host, evidence_dir, f"program-{NEXT_VERSION}-host-{host.max}", next_binary
    )
    assert run.lines(f'"Version info" version="{NEXT_VERSION}"'), run.log[:2000]
    assert run.exit_code is None, run.evidence()
    assert not run.lines("nf_conntrack_max") and not run.lines("hashsize"), run.log
    assert run.probe == "hc-probe\n"
    assert after == host


@pytest.mark.upstream("kube-proxy-conntrack-hashsize")
def test_kubeadms_default_config_v1_36_exits_on_a_small_hashsize(
    worker: Worker, next_binary: str, evidence_dir: Path, restored
):
    """What the old preflight's hashsize rule was read from in source, run: kubeadm's default
    configuration, the host at exactly v1.36.3's target but with a hashsize below a quarter of
    it. v1.36 no longer skips the write on a read-only /sys: it tries, fails, and exits."""
    target = kubeadm_default_target(NEXT_VERSION, online_cpus(Path("/")))
    worker.use_config(worker.kubeadm_config)
    host = HostConntrack(target, target // 8)
    run, after = run_with_host(
        worker, host, evidence_dir, f"kubeadm-default-{NEXT_VERSION}-hashsize-{host.hashsize}",
        next_binary,
    )  # fmt: skip
    assert run.exit_code == 1, run.evidence()
    assert run.lines(f'"Setting conntrack hashsize" conntrackHashsize={target // 4}'), run.log
    assert run.lines("could not set conntrack parameters"), run.log
    assert after == host and run.probe_rules == ""


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
