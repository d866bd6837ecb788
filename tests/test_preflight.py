"""Host preflight: each failing check says what to run; reading the host is kept apart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from components import preflight
from components.footprint import Footprint, lab_footprint
from components.preflight import HostFacts, check_host, read_host_facts, required_conntrack_max
from components.preflight_step import preflight_command

GOOD = HostFacts(
    cgroup_v2=True,
    inotify_instances=8192,
    inotify_watches=524288,
    conntrack_max=262144,
    br_netfilter=True,
    cpus=4,
    mem_available_mb=7000,
    disk_free_gb=60.0,
    tools={"docker": "28.2.2", "kind": "kind v0.31.0 go1.25 linux/amd64", "kubectl": "v1.35.0"},
)
NEED = lab_footprint(2, 2)


def failed(facts: HostFacts, need: Footprint = NEED) -> dict[str, str]:
    return {f.check: f.fix for f in check_host(facts, need) if not f.ok}


def test_a_good_host_passes_everything():
    assert failed(GOOD) == {}


@pytest.mark.parametrize(
    ("change", "check", "fix"),
    [
        ({"cgroup_v2": False}, "cgroup v2", "systemd.unified_cgroup_hierarchy=1"),
        (
            {"inotify_instances": 128},
            "inotify instances",
            "sysctl -w fs.inotify.max_user_instances=1024",
        ),
        (
            {"inotify_watches": 8192},
            "inotify watches",
            "sysctl -w fs.inotify.max_user_watches=524288",
        ),
        ({"conntrack_max": 65536}, "nf_conntrack_max", "net.netfilter.nf_conntrack_max=131072"),
        ({"conntrack_max": None}, "nf_conntrack_max", "modprobe nf_conntrack"),
        ({"br_netfilter": False}, "br_netfilter", "sudo modprobe br_netfilter"),
        ({"mem_available_mb": 2000}, "memory", "fewer tenants"),
        ({"cpus": 2}, "CPUs", "fewer tenants"),
        ({"disk_free_gb": 3.0}, "disk", "free space"),
    ],
)
def test_each_failure_names_its_fix(change, check, fix):
    fixes = failed(replace(GOOD, **change))
    assert check in fixes
    assert fix in fixes[check]


def test_conntrack_need_grows_with_cpus():
    assert required_conntrack_max(2) == 131072
    assert required_conntrack_max(16) == 524288
    fixes = failed(replace(GOOD, cpus=16, conntrack_max=262144))
    assert "net.netfilter.nf_conntrack_max=524288" in fixes["nf_conntrack_max"]


def test_missing_tools_and_old_kind():
    fixes = failed(replace(GOOD, tools={**GOOD.tools, "kubectl": None}))
    assert fixes == {"kubectl": "install kubectl"}
    old = failed(replace(GOOD, tools={**GOOD.tools, "kind": "kind v0.20.0 go1.20"}))
    assert "kind version" in old


def test_footprint_of_the_default_lab_fits_a_4cpu_8gb_host():
    assert NEED.cpus <= 4 and NEED.memory_mb <= 8192 * 0.75
    assert lab_footprint(3, 3).memory_mb > NEED.memory_mb


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_reads_the_host_from_proc_and_sys(tmp_path: Path, monkeypatch):
    write(tmp_path, "sys/fs/cgroup/cgroup.controllers", "cpu memory\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_instances", "1024\n")
    write(tmp_path, "proc/sys/fs/inotify/max_user_watches", "524288\n")
    write(tmp_path, "proc/meminfo", "MemTotal: 16000000 kB\nMemAvailable: 8192000 kB\n")
    (tmp_path / "sys/module/br_netfilter").mkdir(parents=True)
    monkeypatch.setattr(preflight, "_tool_version", lambda tool, run: None)
    facts = read_host_facts(tmp_path, disk_path=str(tmp_path))
    assert facts.cgroup_v2 and facts.br_netfilter
    assert (facts.inotify_instances, facts.inotify_watches) == (1024, 524288)
    assert facts.conntrack_max is None  # nf_conntrack not loaded
    assert facts.mem_available_mb == 8000
    assert facts.tools == {"docker": None, "kind": None, "kubectl": None}


def test_main_exits_non_zero_and_prints_fixes(monkeypatch, capsys):
    monkeypatch.setattr(preflight, "read_host_facts", lambda: replace(GOOD, br_netfilter=False))
    assert preflight.main(["--tenants", "2", "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert "FAIL br_netfilter" in err and "fix: sudo modprobe br_netfilter" in err
    monkeypatch.setattr(preflight, "read_host_facts", lambda: GOOD)
    assert preflight.main(["--tenants", "2", "--workers", "2"]) == 0


def test_the_program_runs_preflight_with_its_own_interpreter():
    assert preflight_command(2, 3, python="/opt/lab venv/python") == (
        "'/opt/lab venv/python' -m components.preflight --tenants 2 --workers 3"
    )
