"""bounded_runc.py: the JSON it edits (pure), the program as dockerd runs it, and privileged
containers on the tier's daemon, with and without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import bounded_runc
import pytest
from bounded_runc import (
    bound_file,
    bounding_set,
    json_to_edit,
    missing_capabilities,
    spec_without_capabilities,
    without_capabilities,
)
from docker_host import (
    RUNTIME,
    Docker,
    capabilities_to_bound,
    daemon_config,
    host_capabilities_to_bound,
    launcher_script,
)
from test_workers import leftover

THIS_HOST = "000001fffeffffff"  # CapBnd here: every capability 0..40 but CAP_SYS_RESOURCE (24)
ALL_CAPS = [f"CAP_{name}" for name in bounded_runc.CAPABILITIES[:38]]  # what Docker 20.10 asks
SHIM_GLOBALS = ["--root", "/run/docker/runtime-runc/moby", "--log", "/run/x/log.json",
                "--log-format", "json", "--systemd-cgroup"]  # fmt: skip


def status(capbnd: str) -> str:
    return f"Name:\tpython\nCapPrm:\t0000000000000000\nCapBnd:\t{capbnd}\nCapAmb:\t0\n"


def privileged_process(caps: list[str]) -> dict:
    sets = {key: list(caps) for key in ("bounding", "effective", "inheritable", "permitted")}
    return {"args": ["sh"], "cwd": "/", "capabilities": sets}


def test_the_bounding_set_says_which_capabilities_must_go():
    assert bounding_set(status(THIS_HOST)) == 0x1FFFEFFFFFF
    assert missing_capabilities(0x1FFFEFFFFFF, 40) == ["CAP_SYS_RESOURCE"]
    assert missing_capabilities((1 << 41) - 1, 40) == []
    # Capabilities the kernel does not know (above cap_last_cap) are never asked for.
    assert missing_capabilities((1 << 38) - 1, 37) == []
    assert missing_capabilities(0x1FFFEFFFFFF & ~(1 << 12), 40) == [
        "CAP_NET_ADMIN",
        "CAP_SYS_RESOURCE",
    ]
    with pytest.raises(ValueError, match="CapBnd"):
        bounding_set("Name:\tx\n")


def test_a_process_loses_only_the_missing_capabilities_in_every_set():
    process = privileged_process(ALL_CAPS)
    process["capabilities"]["ambient"] = ["CAP_SYS_RESOURCE", "CAP_CHOWN"]
    bounded = without_capabilities(process, {"CAP_SYS_RESOURCE"})
    for key in ("bounding", "effective", "inheritable", "permitted"):
        assert bounded["capabilities"][key] == [c for c in ALL_CAPS if c != "CAP_SYS_RESOURCE"]
    assert bounded["capabilities"]["ambient"] == ["CAP_CHOWN"]
    assert {k: v for k, v in bounded.items() if k != "capabilities"} == {"args": ["sh"], "cwd": "/"}
    assert process["capabilities"]["effective"] == ALL_CAPS  # the input is left alone
    assert without_capabilities({"args": ["sh"]}, {"CAP_SYS_RESOURCE"}) == {"args": ["sh"]}


def test_a_bundle_spec_keeps_everything_but_the_missing_capabilities():
    spec = {"ociVersion": "1.0.2", "process": privileged_process(ALL_CAPS), "root": {"path": "r"}}
    bounded = spec_without_capabilities(spec, {"CAP_SYS_RESOURCE"})
    assert "CAP_SYS_RESOURCE" not in json.dumps(bounded)
    assert bounded["root"] == spec["root"] and bounded["ociVersion"] == "1.0.2"
    assert spec_without_capabilities({"ociVersion": "1"}, {"CAP_X"}) == {"ociVersion": "1"}


@pytest.mark.upstream("containerd-shim-runc-arguments")
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # containerd 1.6 go-runc: Create, Exec (after the shim's global flags)
        ([*SHIM_GLOBALS, "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "id"],
         ("spec", Path("/b/config.json"))),
        ([*SHIM_GLOBALS, "exec", "--process", "/tmp/runc-process1", "--detach", "--pid-file",
          "/p", "id"], ("process", Path("/tmp/runc-process1"))),
        (["--root", "/r", "run", "--bundle=/c", "id"], ("spec", Path("/c/config.json"))),
        (["create", "-b", "/d", "id"], ("spec", Path("/d/config.json"))),
        (["exec", "-p", "/tmp/p", "id"], ("process", Path("/tmp/p"))),
        (["exec", "id", "sh"], None),  # a command line, no process file
        (["--root", "create", "start", "id"], None),  # "create" here is --root's value
        ([*SHIM_GLOBALS, "start", "id"], None),
        ([*SHIM_GLOBALS, "delete", "--force", "id"], None),
        (["--version"], None),
    ],
)  # fmt: skip
def test_the_json_to_edit_is_found_in_runcs_arguments(argv, expected):
    assert json_to_edit(argv) == expected


def test_create_without_a_bundle_edits_the_working_directorys_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    assert json_to_edit(["create", "id"]) == ("spec", tmp_path / "config.json")


def test_the_file_is_rewritten_only_when_something_goes(tmp_path: Path):
    spec = tmp_path / "config.json"
    spec.write_text(json.dumps({"process": privileged_process(ALL_CAPS)}))
    assert bound_file("spec", spec, {"CAP_SYS_RESOURCE"}) is True
    assert "CAP_SYS_RESOURCE" not in spec.read_text()
    before = spec.read_text()
    assert bound_file("spec", spec, {"CAP_SYS_RESOURCE"}) is False
    assert spec.read_text() == before
    process = tmp_path / "process.json"
    process.write_text(json.dumps(privileged_process(["CAP_SYS_RESOURCE", "CAP_KILL"])))
    assert bound_file("process", process, {"CAP_SYS_RESOURCE"}) is True
    assert json.loads(process.read_text())["capabilities"]["effective"] == ["CAP_KILL"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "process.json"]


def test_the_daemon_gets_the_wrapper_only_where_the_bounding_set_needs_it(tmp_path: Path):
    launcher = tmp_path / "bounded-runc"
    needs = capabilities_to_bound(status(THIS_HOST), 40)
    assert needs == ["CAP_SYS_RESOURCE"]
    assert daemon_config(needs, launcher) == {
        "runtimes": {RUNTIME: {"path": str(launcher)}},
        "default-runtime": RUNTIME,
    }
    assert capabilities_to_bound(status("000001ffffffffff"), 40) == []
    assert daemon_config([], launcher) == {}  # plain runc


FAKE_RUNC = """#!/bin/sh
# Prints its arguments and the capabilities of the JSON bounded_runc handed over.
echo "$@" > "$OUT/argv"
for arg in "$@"; do
  case "$prev" in
    --bundle) cp "$arg/config.json" "$OUT/seen.json" ;;
    --process) cp "$arg" "$OUT/seen.json" ;;
  esac
  prev="$arg"
done
"""


@pytest.mark.parametrize("command", ["create", "exec"])
def test_the_launcher_edits_the_json_then_runs_runc_with_the_same_arguments(
    tmp_path: Path, command: str
):
    """The program as dockerd's shim runs it: launcher, isolated Python, then runc (a fake
    here); what goes is what this host's own bounding set lacks."""
    runc = tmp_path / "runc"
    runc.write_text(FAKE_RUNC)
    runc.chmod(0o755)
    launcher = tmp_path / "bounded-runc"
    launcher.write_text(
        launcher_script(sys.executable, Path(bounded_runc.__file__).resolve(), str(runc))
    )
    launcher.chmod(0o755)
    if command == "create":
        (tmp_path / "config.json").write_text(json.dumps({"process": privileged_process(ALL_CAPS)}))
        argv = [*SHIM_GLOBALS, "create", "--bundle", str(tmp_path), "--pid-file", "p", "id1"]
    else:
        (tmp_path / "process.json").write_text(json.dumps(privileged_process(ALL_CAPS)))
        argv = [*SHIM_GLOBALS, "exec", "--process", str(tmp_path / "process.json"), "id1"]
    result = subprocess.run(
        [str(launcher), *argv],
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "argv").read_text().split() == argv
    seen = json.loads((tmp_path / "seen.json").read_text())
    process = seen if command == "exec" else seen["process"]
    gone = set(host_capabilities_to_bound())
    assert process["capabilities"]["effective"] == [c for c in ALL_CAPS if c not in gone]


# --- on the tier's daemon ------------------------------------------------------------------

PRIVILEGED_WORK = (
    "mount -t tmpfs none /mnt && touch /mnt/written && "
    "ip link add lab-br0 type bridge && ip link set lab-br0 up && "
    "grep CapEff /proc/self/status && echo privileged-ok"
)


@pytest.mark.upstream("docker-privileged-gets-every-capability")
def test_a_privileged_container_mounts_and_makes_bridges(docker: Docker, busybox: str):
    docker.require_privileged()
    result = docker.run("run", "--rm", "--privileged", busybox, "sh", "-c", PRIVILEGED_WORK)
    assert "privileged-ok" in result.stdout
    effective = int(result.stdout.split("CapEff:")[1].split()[0], 16)
    # Every capability up to CAP_AUDIT_READ (37) that this host's bounding set has (moby
    # 20.10 asks for those; later releases for all the kernel knows), and none it lacks.
    host_bounding = bounding_set(Path("/proc/self/status").read_text())
    asked = host_bounding & ((1 << 38) - 1)
    assert effective & asked == asked
    assert effective & ~host_bounding == 0


@pytest.mark.upstream("containerd-shim-runc-arguments")
def test_docker_exec_into_a_privileged_container_works(docker: Docker, busybox: str):
    """An exec goes through `runc exec --process <file>`: the wrapper bounds that file too."""
    docker.require_privileged()
    name = f"host-tier-exec-{os.getpid()}"
    leftover(docker, name)
    try:
        docker.run("run", "-d", "--name", name, "--privileged", busybox, "sleep", "300")
        result = docker.run("exec", name, "sh", "-c", PRIVILEGED_WORK)
        assert "privileged-ok" in result.stdout
    finally:
        docker.run("rm", "-f", name, check=False)


@pytest.mark.upstream("docker-privileged-gets-every-capability")
def test_plain_runc_fails_exactly_where_the_bounding_set_lacks_a_capability(
    docker: Docker, busybox: str
):
    """The adaptation is needed, and only where the bounding set says: `--runtime runc`
    is dockerd's built-in plain runc."""
    result = docker.run(
        "run", "--rm", "--runtime", "runc", "--privileged", busybox, "true", check=False
    )
    if host_capabilities_to_bound():
        assert result.returncode != 0
        assert "unable to apply caps: operation not permitted" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
