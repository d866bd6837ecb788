"""The capacity run as a tenant user RBAC restricts to pods in its namespace (issue 20, item 5),
against the fake API servers; the refusals are the real kube-apiserver's words (fact
`kube-rbac-forbidden-message`), as tests/real/test_capacity_real.py read them from its audit log.
"""

from __future__ import annotations

import json
import signal

import pytest

from capacity.mix import parse_mix
from capacity.run import NODES_NEEDED, PLACED, UNFIT
from labcheck.cluster import ClusterError
from labcheck.runner import Interrupted
from tests.capacity.hami_fake import HamiLab, capacity_lab
from tests.capacity.test_run import cli
from tests.capacity.test_run import run as run_fake

TEAM = "team-b"
USER = "tenant-b-dev"


def forbidden(verb: str, resource: str, namespace: str = "") -> ClusterError:
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return ClusterError(
        403,
        f'{resource} is forbidden: User "{USER}" cannot {verb} resource "{resource}" in API '
        f'group "" {where}',
    )


Refusal = tuple[str, tuple | None, ClusterError]  # call, its exact args (None: any), answer


def restrict(lab: HamiLab, *refusals: Refusal) -> None:
    """tenant-b answers these calls with RBAC's 403."""

    def hook(name: str, args: tuple) -> None:
        for call, call_args, error in refusals:
            if name == call and call_args in (None, args):
                raise error

    lab.tenant("tenant-b").hook = hook


def tenant_user_lab(*refusals: Refusal) -> HamiLab:
    """A lab whose tenant-b has the user's namespace, and a user who may not do ``refusals``."""
    lab = capacity_lab()
    lab.tenant("tenant-b").namespaces[TEAM] = {"metadata": {"name": TEAM}}
    restrict(lab, *refusals)
    return lab


MIX = parse_mix(
    {
        "entries": [
            {"tenant": "tenant-b", "name": "llm", "count": 2, "gpumem": 8000},
            {"tenant": "tenant-b", "name": "too-big", "count": 1, "gpumem": 30000},
        ]
    }
)
NO_CLUSTER_PODS = ("list_pods", (), forbidden("list", "pods"))


def run(lab: HamiLab, mix=MIX, namespace: str | None = TEAM):
    return run_fake(lab, mix, namespace=namespace)


def calls(lab: HamiLab, *names: str) -> list[tuple]:
    return [c for c in lab.tenant("tenant-b").calls if c[0] in names]


def test_with_a_namespace_only_the_pods_are_created_and_deleted_there():
    lab = tenant_user_lab(NO_CLUSTER_PODS)
    result = run(lab)
    assert result.verdict() == "2 pods on 2 cards; whole GPUs would need 3; 1 did not fit"
    assert {p.namespace for p in result.pods} == {TEAM} and not result.own_namespace
    server = lab.tenant("tenant-b")
    assert TEAM in server.namespaces and not [k for k in server.pods if k[0] == TEAM]
    assert calls(lab, "create_namespace", "delete_namespace") == []
    names = ("llm-0", "llm-1", "too-big-0")
    assert sorted(server.deleted) == [("pod", f"{TEAM}/cap-1a2b3c4d-{n}") for n in names]
    assert result.cleaned == 3 and result.cleanup_errors == []


def test_pods_of_other_namespaces_not_readable_leave_a_note_and_the_namespace_s_cards():
    lab = tenant_user_lab(NO_CLUSTER_PODS)
    result = run(lab)
    assert result.notes == [
        "tenant-b: pods of other namespaces not readable (403 list pods at the cluster scope): "
        f"the cards show only the pods of {TEAM}; they were placed among all"
    ]
    segments = [s.pod for c in result.maps["tenant-b"].cards for s in c.segments]
    assert sorted(segments) == [f"{TEAM}/cap-1a2b3c4d-llm-0", f"{TEAM}/cap-1a2b3c4d-llm-1"]


def test_a_user_who_may_not_list_nodes_is_told_before_anything_is_created():
    lab = tenant_user_lab(("list_nodes", None, forbidden("list", "nodes")))
    with pytest.raises(ClusterError) as caught:
        run(lab)
    assert caught.value.status == 403 and caught.value.message.startswith(
        f"tenant-b: {NODES_NEEDED}; nodes is forbidden"
    )
    assert calls(lab, "create_pod", "create_namespace") == []


def test_a_user_who_may_not_create_namespaces_is_pointed_to_namespace():
    lab = tenant_user_lab(("create_namespace", None, forbidden("create", "namespaces")))
    with pytest.raises(ClusterError, match="can run the mix in a namespace it owns: --namespace"):
        run(lab, namespace=None)
    assert calls(lab, "create_pod") == []


@pytest.mark.upstream("kube-rbac-forbidden-message")
def test_rbac_refusing_a_pod_fails_the_run_where_admission_refusing_it_is_a_verdict():
    lab = tenant_user_lab(("create_pod", None, forbidden("create", "pods", TEAM)))
    with pytest.raises(ClusterError, match='cannot create resource "pods"'):
        run(lab)
    assert not lab.tenant("tenant-b").pods


def test_events_not_readable_leave_the_condition_as_the_reason_and_a_note():
    lab = tenant_user_lab(NO_CLUSTER_PODS, ("list_events", None, forbidden("list", "events", TEAM)))
    result = run(lab)
    (unfit,) = [p for p in result.pods if p.state == UNFIT]
    assert "CardInsufficientMemory" in unfit.reason and "FilteringFailed" not in unfit.reason
    assert result.notes[0].startswith(f"tenant-b: events of {TEAM} not readable (403 list events)")
    assert result.count(PLACED) == 2


def test_the_cli_takes_namespace_and_reports_it(tmp_path):
    lab = tenant_user_lab(NO_CLUSTER_PODS)
    mix = tmp_path / "mix.yaml"
    mix.write_text(json.dumps({"entries": [{"tenant": "tenant-b", "name": "x", "count": 1,
                                            "gpumem": 1000}]}))  # fmt: skip
    code, text = cli(lab, tmp_path, "--mix", str(mix), "--namespace", TEAM)
    assert code == 0, text
    assert "note: tenant-b: pods of other namespaces not readable" in text
    data = json.loads((tmp_path / "reports" / "capacity-report.json").read_text())
    assert data["namespace"] == TEAM and data["pods"][0]["pod"] == f"{TEAM}/cap-1a2b3c4d-x-0"


def test_a_failed_cleanup_in_a_user_namespace_names_the_pods_to_delete(tmp_path):
    lab = tenant_user_lab(NO_CLUSTER_PODS, ("delete_pod", None, forbidden("delete", "pods", TEAM)))
    mix = tmp_path / "mix.yaml"
    mix.write_text(json.dumps({"entries": [{"tenant": "tenant-b", "name": "x", "count": 1,
                                            "gpumem": 1000}]}))  # fmt: skip
    code, text = cli(lab, tmp_path, "--mix", str(mix), "--namespace", TEAM)
    assert code == 1
    assert (
        f"(delete by hand: kubectl delete pods -n {TEAM} -l capacity.lab/run-id=1a2b3c4d)" in text
    )


def test_a_pod_created_as_ctrl_c_arrives_is_still_deleted_from_the_user_namespace():
    """The API server created the pod, the signal came before the answer: in the user's own
    namespace no namespace deletion sweeps it up, so the run must delete it by name."""
    lab = tenant_user_lab()
    server = lab.tenant("tenant-b")

    def hook(name: str, args: tuple) -> None:
        if name == "create_pod" and args[1]["metadata"]["name"].endswith("-llm-1"):
            server.create_pod(*args)  # the server did it; the client never heard back
            raise Interrupted(signal.SIGINT)

    server.hook = hook
    result = run(lab)
    assert result.interrupted == signal.SIGINT
    assert not [k for k in server.pods if k[0] == TEAM] and result.cleanup_errors == []


def test_a_failing_run_whose_cleanup_fails_too_says_what_is_left():
    """The run fails (an API error while pods are polled), and its pods cannot be deleted: the
    error names them and the command that removes them."""
    lab = tenant_user_lab(("delete_pod", None, forbidden("delete", "pods", TEAM)))
    server = lab.tenant("tenant-b")
    refuse_delete = server.hook

    def hook(name: str, args: tuple) -> None:
        if name == "list_pods":
            raise ClusterError(500, "etcdserver: request timed out")
        refuse_delete(name, args)

    server.hook = hook
    with pytest.raises(ClusterError) as caught:
        run(lab)
    message = caught.value.message
    assert message.startswith("etcdserver: request timed out; cleanup FAILED: tenant-b: pod ")
    assert message.endswith(f"(delete by hand: kubectl delete pods -n {TEAM} -l "
                            "capacity.lab/run-id=1a2b3c4d)")  # fmt: skip
