"""The capacity run against the real kube-apiserver v1.35.4 with real placement (issue 20, item 5).

tenant-b of the `lab` stack as one real control plane: its GPU node (two L4 cards) with kwok,
the real gpu_agent, the real kube-scheduler calling an extender that plays HAMi v2.10.0's Filter,
lock and Bind, and HAMi's webhook giving GPU pods HAMi's scheduler (hami_placement.py). The spec
is the program's own ``labcheckSpec`` with every kubeconfig pointed at that plane (only
tenant-b's is used: the mix has no other tenant). capacity runs through its real client
(``labcheck.kube``), in process (``capacity.cli.main``), or as the real ``python -m capacity``
process for the SIGINT test.

- pod creation: the report's cards, slices and verdict are what the extender recorded;
- cleanup: nothing labelled by the run is left, after a clean run, after a run the API server
  fails mid-way (a ValidatingAdmissionPolicy refusing one pod), and after SIGINT;
- RBAC: what a tenant user needs, read from the audit log, and the grant docs/capacity.md
  documents, applied verbatim.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, on_the_planes_version, wait_until
from hami_placement import PlacementLab, placement_lab, report
from test_agent_real import GPU_NODE, PHASE, annotations
from test_labcheck_real import AuditLog, admin_conf

from capacity import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from capacity.cli import main
from capacity.run import NODES_NEEDED
from tests.support.pulumi_harness import run_program, stack_config

ROOT = Path(__file__).resolve().parents[2]
TENANT = "tenant-b"
# tenant-b's two L4 cards (23034 MB each): four slices fit, a model larger than an L4 does not.
MIX = {
    "name": "real-l4",
    "entries": [
        {"tenant": TENANT, "name": "llm", "count": 2, "gpumem": 8000, "gpucores": 25},
        {"tenant": TENANT, "name": "rerank", "count": 2, "gpumem": 3000, "gpucores": 10},
        {"tenant": TENANT, "name": "too-big", "count": 1, "gpumem": 30000, "gpucores": 10},
    ],
}
VERDICT = "4 pods on 2 cards; whole GPUs would need 5; 1 did not fit"
MANAGED = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
# Token users of the plane: one with docs/capacity.md's grant, one with a pods-only Role.
DEV, PODS_ONLY_USER, TEAM_NS = "tenant-b-dev", "tenant-b-pods-only", "team-b"
# What the API server refuses an unknown request with (fact `kube-rbac-forbidden-message`).
RBAC_WORDS = 'cannot {verb} resource "{resource}" in API group ""'


@pytest.fixture(scope="module")
def lab_spec() -> dict[str, Any]:
    """The program's labcheckSpec for the `lab` stack (the mocks harness renders it)."""
    return json.loads(
        run_program(on_the_planes_version(stack_config("lab")), stack="lab").outputs["labcheckSpec"]
    )


@pytest.fixture(scope="module")
def cap_lab(start_control_plane) -> Iterator[PlacementLab]:
    plane = start_control_plane("capacity", users={DEV: (), PODS_ONLY_USER: ()})
    plane.create_namespace(TEAM_NS)
    with placement_lab(plane, webhook=True) as lab:
        yield lab


def spec_file(base: dict[str, Any], plane: ControlPlane, user: str, path: Path) -> Path:
    spec = json.loads(json.dumps(base))
    conf = yaml.safe_dump(admin_conf(plane, user))
    spec["management"]["kubeconfig"] = conf
    for tenant in spec["tenants"]:
        tenant["kubeconfig"] = conf
    path.write_text(json.dumps(spec))
    return path


def mix_file(path: Path, mix: dict[str, Any] = MIX) -> Path:
    path.write_text(yaml.safe_dump(mix))
    return path


def hami_recorded(lab: PlacementLab) -> dict[str, tuple[str, int, int]]:
    """Per bound pod ("ns/name"): the card, MB and cores the extender gave it."""
    records = lab.extender.snapshot()
    out = {}
    for key, record in records.items():
        if record.placed_at is not None:
            (grant,) = lab.extender.allocations[lab.extender.pods[key]["metadata"]["uid"]]
            out[key] = (grant.card.id, grant.mem, grant.cores)
    return out


def run_capacity(
    lab: PlacementLab, spec: Path, mix: Path, reports: Path, *extra: str
) -> tuple[int, str, float, dict[str, tuple[str, int, int]]]:
    """``python -m capacity`` in process: exit code, output, wall seconds, what HAMi recorded."""
    out = StringIO()
    started = time.monotonic()
    try:
        code = main(
            ["--spec", str(spec), "--mix", str(mix), "--report-dir", str(reports), *extra],
            out=out,
        )
        return code, out.getvalue(), time.monotonic() - started, hami_recorded(lab)
    finally:
        lab.extender.forget_all()  # the run deleted its pods (HAMi's onDelPod)


def leftovers(plane: ControlPlane) -> list[str]:
    """Every namespace and pod labelled by a capacity run, in any namespace."""
    found = []
    for kind in ("namespaces", "pods"):
        for item in plane.get_json(kind, "-A", "-l", MANAGED)["items"]:
            meta = item["metadata"]
            found.append(f"{kind} {meta.get('namespace', '')}/{meta['name']}")
    return found


def wait_clean(plane: ControlPlane) -> None:
    """A deleted namespace is gone once the controller manager has finalized it."""
    wait_until(lambda: not leftovers(plane), "nothing the capacity run created left", 30)


def requests_of(audit: AuditLog, user: str) -> dict[str, set[int]]:
    """ "<verb> <resource> <namespace or *>" -> the HTTP codes ``user`` got."""
    seen: dict[str, set[int]] = {}
    for e in audit.events():
        if e.get("user", {}).get("username") != user or "objectRef" not in e:
            continue
        ref = e["objectRef"]
        key = f"{e['verb']} {ref.get('resource', '')} {ref.get('namespace') or '*'}"
        seen.setdefault(key, set()).add(e["responseStatus"]["code"])
    return seen


def apply(plane: ControlPlane, objects: list[dict]) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": objects}
    plane.kubectl("apply", "-f", "-", input=json.dumps(doc))


# --- pod creation and the report ---------------------------------------------------------------


def test_a_mix_is_placed_as_hami_recorded_and_nothing_is_left(cap_lab, lab_spec, tmp_path, capsys):
    plane = cap_lab.plane
    spec = spec_file(lab_spec, plane, "admin", tmp_path / "spec.json")
    code, out, wall, hami = run_capacity(cap_lab, spec, mix_file(tmp_path / "m.yaml"), tmp_path)
    data = json.loads((tmp_path / "capacity-report.json").read_text())
    times = data["placementSeconds"]
    report(
        capsys,
        f"capacity run, 5 pods on tenant-b's two L4: {wall:.1f} s wall, placement median "
        f"{times['median']:.1f} s, last {times['last']:.1f} s",
    )
    assert code == 0, out
    assert out.splitlines()[-5] == VERDICT and data["verdict"] == VERDICT
    # Every placed pod's card, MB and cores are those HAMi's Filter gave it and Bind bound.
    placed = {p["pod"]: p for p in data["pods"] if p["state"] == "placed"}
    assert sorted(placed) == sorted(hami), (placed, hami)
    for key, (card, mem, cores) in hami.items():
        assert placed[key]["node"] == GPU_NODE
        assert placed[key]["slices"] == [{"card": card, "memMb": mem, "cores": cores}]
    assert sorted(data["cardsUsed"]) == sorted({card for card, _, _ in hami.values()})
    # The per-card table: both L4 with what the extender put on them.
    cards = data["cards"][TENANT]["cards"]
    assert len(cards) == 2
    for card in cards:
        on_it = [(m, c) for uuid, m, c in hami.values() if uuid == card["id"]]
        pods = sorted(k for k, (uuid, _, _) in hami.items() if uuid == card["id"])
        assert sorted(s["pod"] for s in card["segments"]) == pods, card
        assert (card["usedMb"], card["usedCores"]) == (
            sum(m for m, _ in on_it),
            sum(c for _, c in on_it),
        ), card
    (unfit,) = data["didNotFit"]
    assert unfit["pod"].endswith("/too-big-0") and "CardInsufficientMemory" in unfit["reason"]
    assert data["notes"] == []
    assert "cleanup: deleted 6 object(s) by name" in out
    wait_clean(plane)


# --- cleanup -----------------------------------------------------------------------------------

REFUSAL = "this test's policy refuses the pod"
BROKEN_POLICY = [
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "refuse-broken-pods"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            # Invalid (422), not Forbidden (403): a 403 from admission is a verdict on the pod.
            "validations": [
                {
                    "expression": "!object.metadata.name.contains('broken-')",
                    "message": REFUSAL,
                    "reason": "Invalid",
                }
            ],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "refuse-broken-pods"},
        "spec": {"policyName": "refuse-broken-pods", "validationActions": ["Deny"]},
    },
]


def refused_by_policy(plane: ControlPlane) -> bool:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x-broken-0", "namespace": TEAM_NS},
        "spec": {"containers": [{"name": "c", "image": "pause"}]},
    }
    result = plane.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    return REFUSAL in result.stderr


def test_a_pod_the_api_refuses_mid_run_fails_it_and_leaves_nothing(
    cap_lab, lab_spec, tmp_path, capsys
):
    plane = cap_lab.plane
    apply(plane, BROKEN_POLICY)
    try:
        wait_until(lambda: refused_by_policy(plane), "the policy in force", 30)
        mix = {"entries": [*MIX["entries"][:2]]}
        mix["entries"].insert(1, {"tenant": TENANT, "name": "broken", "count": 1, "gpumem": 1})
        spec = spec_file(lab_spec, plane, "admin", tmp_path / "spec.json")
        audit = AuditLog(plane)
        code, out, _, _ = run_capacity(cap_lab, spec, mix_file(tmp_path / "m.yaml", mix), tmp_path)
        err = capsys.readouterr().err
    finally:
        plane.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                      "refuse-broken-pods")  # fmt: skip
    assert code == 1 and REFUSAL in err and "HTTP 422" in err, (out, err)
    # Mid-run: the namespace and the first entry's pods were created before the refusal.
    codes = [
        (e["objectRef"].get("name") or e["objectRef"]["namespace"], e["responseStatus"]["code"])
        for e in audit.events()
        if e["verb"] == "create" and e.get("user", {}).get("username") == "admin"
        and e["objectRef"]["resource"] in ("namespaces", "pods")
        and "subresource" not in e["objectRef"]  # the extender's Bindings
    ]  # fmt: skip
    assert [code for _, code in codes] == [201, 201, 201, 422], codes
    assert codes[0][0].startswith("capacity-")
    wait_clean(plane)


@pytest.mark.parametrize("where", [[], ["--namespace", TEAM_NS]], ids=["own-ns", "user-ns"])
def test_sigint_of_the_real_process_mid_run_exits_130_and_leaves_nothing(
    cap_lab, lab_spec, tmp_path, where
):
    """Its own namespace is deleted; in the user's namespace only its pods are."""
    plane = cap_lab.plane
    spec = spec_file(lab_spec, plane, "admin", tmp_path / "spec.json")
    mix = {"entries": [{"tenant": TENANT, "name": "burst", "count": 10, "gpumem": 1000}]}
    command = [sys.executable, "-m", "capacity", "--spec", str(spec), "--mix"]
    assert not leftovers(plane)  # a pod seen below is this process's
    process = subprocess.Popen(
        [*command, str(mix_file(tmp_path / "m.yaml", mix)), *where],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # As soon as its first pod exists, before all are placed: mid-run.
        wait_until(lambda: pods_of_runs(cap_lab), "the run's first pod", 30)
        pods = pods_of_runs(cap_lab)
        os.kill(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        cap_lab.extender.forget_all()
    assert len(pods) < 10 or not all(annotations(p).get(PHASE) == "success" for p in pods)
    assert process.returncode == 128 + signal.SIGINT, out
    assert "INTERRUPTED: the run stopped early" in out
    wait_clean(plane)
    assert plane.get_json("namespace", TEAM_NS)["status"]["phase"] == "Active"


def pods_of_runs(lab: PlacementLab) -> list[dict]:
    return lab.admin.call("GET", f"/api/v1/pods?labelSelector={MANAGED}")["items"]


# --- RBAC of a tenant user -----------------------------------------------------------------------


def documented_grant() -> list[dict]:
    """The Role and ClusterRole docs/capacity.md tells a tenant admin to apply, verbatim."""
    text = (ROOT / "docs" / "capacity.md").read_text()
    section = text.split("## As a tenant user", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return list(yaml.safe_load_all(block))


PODS_ONLY = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pods-only", "namespace": TEAM_NS},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]}
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pods-only", "namespace": TEAM_NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods-only"},
        "subjects": [
            {"kind": "User", "name": PODS_ONLY_USER, "apiGroup": "rbac.authorization.k8s.io"}
        ],
    },
]


@pytest.fixture(scope="module")
def granted(cap_lab) -> ControlPlane:
    plane = cap_lab.plane
    grant = documented_grant()
    assert {o["kind"] for o in grant} == {
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    apply(plane, grant + PODS_ONLY)
    plane.wait_until_allowed(DEV, "list", "nodes")
    plane.wait_until_allowed(DEV, "create", "pods", "-n", TEAM_NS)
    plane.wait_until_allowed(PODS_ONLY_USER, "create", "pods", "-n", TEAM_NS)
    return plane


@pytest.mark.upstream("kube-rbac-forbidden-message")
def test_a_pods_only_user_is_told_the_permissions_it_lacks_before_anything_is_made(
    cap_lab, granted, lab_spec, tmp_path, capsys
):
    """A user who may only work with pods: the run needs `list nodes` (cluster-scoped), and says
    so before it creates a pod. With nodes but without --namespace, it is told to use it."""
    mix = mix_file(tmp_path / "m.yaml")
    pods_only = spec_file(lab_spec, granted, PODS_ONLY_USER, tmp_path / "p.json")
    audit = AuditLog(granted)
    code, out, _, _ = run_capacity(cap_lab, pods_only, mix, tmp_path, "--namespace", TEAM_NS)
    err = capsys.readouterr().err
    assert code == 1 and NODES_NEEDED in err, (out, err)
    assert RBAC_WORDS.format(verb="list", resource="nodes") + " at the cluster scope" in err
    assert requests_of(audit, PODS_ONLY_USER) == {"list nodes *": {403}}

    dev = spec_file(lab_spec, granted, DEV, tmp_path / "d.json")
    audit = AuditLog(granted)
    code, out, _, _ = run_capacity(cap_lab, dev, mix, tmp_path)
    err = capsys.readouterr().err
    assert code == 1 and "--namespace NS" in err, (out, err)
    assert RBAC_WORDS.format(verb="create", resource="namespaces") in err
    assert requests_of(audit, DEV) == {"list nodes *": {200}, "create namespaces *": {403}}
    assert not leftovers(granted)


def test_rbac_refusing_the_pods_fails_the_run_instead_of_counting_them_as_unfit(
    cap_lab, granted, lab_spec, tmp_path, capsys
):
    """A 403 from RBAC is a missing permission; a 403 from admission (HAMi's webhook, a quota)
    is a verdict on the pod ("refused"). `default` is not the user's namespace."""
    dev = spec_file(lab_spec, granted, DEV, tmp_path / "d.json")
    mix = mix_file(tmp_path / "m.yaml")
    code, out, _, _ = run_capacity(cap_lab, dev, mix, tmp_path, "--namespace", "default")
    err = capsys.readouterr().err
    assert code == 1 and RBAC_WORDS.format(verb="create", resource="pods") in err, (out, err)
    assert "did not fit" not in out


def test_the_documented_grant_runs_the_mix_in_the_users_namespace(
    cap_lab, granted, lab_spec, tmp_path, capsys
):
    dev = spec_file(lab_spec, granted, DEV, tmp_path / "d.json")
    audit = AuditLog(granted)
    code, out, wall, hami = run_capacity(
        cap_lab, dev, mix_file(tmp_path / "m.yaml"), tmp_path, "--namespace", TEAM_NS
    )
    report(capsys, f"capacity run as {DEV} in {TEAM_NS}: {wall:.1f} s wall")
    assert code == 0, out
    data = json.loads((tmp_path / "capacity-report.json").read_text())
    assert data["verdict"] == VERDICT and len(hami) == 4
    assert {p["pod"].split("/")[0] for p in data["pods"]} == {TEAM_NS}
    assert "CardInsufficientMemory" in data["didNotFit"][0]["reason"]
    # Exactly what it asked for; the only refusal is the cluster-wide pod list, noted.
    assert requests_of(audit, DEV) == {
        "list nodes *": {200},
        f"create pods {TEAM_NS}": {201},
        f"list pods {TEAM_NS}": {200},
        f"list events {TEAM_NS}": {200},
        "list pods *": {403},
        f"delete pods {TEAM_NS}": {200},
    }
    assert data["notes"] == [
        f"{TENANT}: pods of other namespaces not readable (403 list pods at the cluster scope): "
        f"the cards show only the pods of {TEAM_NS}; they were placed among all"
    ]
    # Its pods are gone, its namespace stays.
    wait_clean(granted)
    assert granted.get_json("namespace", TEAM_NS)["status"]["phase"] == "Active"
