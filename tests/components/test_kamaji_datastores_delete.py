"""On destroy, Kamaji's DataStores are deleted while Kamaji still runs, before its chart goes.

The DataStore of Kamaji's release carries a finalizer only Kamaji's controller removes; `helm
uninstall` took the controller and the DataStore at once, and the release's delete then waited
on a DataStore that stayed Terminating (fact kamaji-datastore-finalizer). The step
(builders/scripts.py `kamaji_datastores_delete_script`) runs for real against a fake kubectl.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.scripts import kamaji_datastores_delete_script
from tests.support.fake_tools import script_run
from tests.support.pulumi_harness import ProgramRun

# `get` answers as $REACHABLE says; `delete` succeeds unless $DELETE_FAILS.
FAKE_KUBECTL = r"""
echo "kubectl $*" >> "$CALLS"
cp "$KUBECONFIG" "$STATE/kubeconfig-seen"
case " $* " in
  *" get "*) [ "$REACHABLE" = yes ] || exit 1; echo "NAME  USED-BY" ;;
  *" delete "*) [ -z "$DELETE_FAILS" ] || { echo "error: timed out waiting" >&2; exit 1; } ;;
esac
"""
SELECTOR = "-l app.kubernetes.io/instance=kamaji"


@pytest.fixture
def step(tmp_path: Path):
    runner = script_run(tmp_path, {"kubectl": FAKE_KUBECTL})

    def run(reachable: bool = True, delete_fails: bool = False) -> subprocess.CompletedProcess:
        return runner(
            kamaji_datastores_delete_script(timeout_seconds=7),
            REACHABLE="yes" if reachable else "no",
            DELETE_FAILS="1" if delete_fails else "",
            LAB_KUBECONFIG="management-kubeconfig",
            RELEASE="kamaji",
        )

    run.calls = runner.calls  # type: ignore[attr-defined]
    run.state = runner.state  # type: ignore[attr-defined]
    return run


@pytest.mark.upstream("kamaji-datastore-finalizer")
def test_it_deletes_the_releases_datastores_and_waits(step):
    result = step()
    assert result.returncode == 0, result.stderr
    calls = step.calls.read_text().splitlines()
    assert calls == [
        f"kubectl --request-timeout=10s get datastores.kamaji.clastix.io {SELECTOR}",
        f"kubectl --request-timeout=20s delete datastores.kamaji.clastix.io {SELECTOR} "
        "--wait --timeout=7s",
    ]
    assert (step.state / "kubeconfig-seen").read_text() == "management-kubeconfig\n"


def test_an_unreachable_cluster_only_warns(step):
    result = step(reachable=False)
    assert result.returncode == 0
    assert "warning: cannot list Kamaji's DataStores" in result.stderr
    assert " delete " not in step.calls.read_text()


def test_a_datastore_still_in_use_stops_the_destroy_saying_why(step):
    result = step(delete_fails=True)
    assert result.returncode == 1
    assert "were not deleted within 7s" in result.stderr
    assert "destroy that stack first" in result.stderr
    assert "management-kubeconfig" not in result.stderr


@pytest.mark.upstream("kamaji-datastore-finalizer")
def test_it_is_destroyed_after_every_tenant_and_before_kamajis_release(lab: ProgramRun):
    step = lab.named("kamaji-datastores-delete")
    release = lab.named("kamaji-chart")
    assert release.urn in lab.depends_on(step.urn)
    assert step.is_secret("environment.LAB_KUBECONFIG")
    assert step.inputs["environment"]["RELEASE"] == "kamaji"
    assert "delete" in step.inputs
    for tenant in ("tenant-a", "tenant-b"):
        assert step.urn in lab.depends_on(lab.named(f"{tenant}-control-plane").urn), tenant


def test_its_create_runs_in_a_shell(lab: ProgramRun):
    """The create only says what the step is for; it must run (a quote in it once did not)."""
    create = lab.named("kamaji-datastores-delete").inputs["create"]
    result = subprocess.run(["/bin/sh", "-c", create], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    assert "deleted before it on destroy" in result.stdout
