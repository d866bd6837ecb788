"""`python -m labcheck.sharing` (`make sharing`): the live table of who holds which slice, and its
picture, from the fake lab's API servers; only reads."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

from labcheck.sharing import PNG_NAME, main
from tests.support.labcheck_fakes import FakeLab, hami_pod, standard_lab

A_NODE, B_NODE = "tenant-a-worker-1", "tenant-b-worker-1"
WHEN = "2026-12-01T10:00:00+00:00"
READS = {"list_nodes", "list_pods"}


def examples_applied() -> FakeLab:
    """The lab stack with examples/1 (four 20000 MB / 25 % pods on tenant-a's A100) and
    examples/2 (one pod, 8000 MB / 50 % on each of tenant-b's L4) placed, as HAMi records them."""
    lab = standard_lab()
    for i in range(1, 5):
        slices = f"GPU-{A_NODE}-0,NVIDIA,20000,25:;"
        lab.tenant("tenant-a").add_placed_pod(
            hami_pod("gpu-workloads", f"a100-share-{i}", A_NODE, slices)
        )
    both = f"GPU-{B_NODE}-0,NVIDIA,8000,50:GPU-{B_NODE}-1,NVIDIA,8000,50:;"
    lab.tenant("tenant-b").add_placed_pod(hami_pod("gpu-workloads", "two-l4", B_NODE, both))
    # A notebook without a core limit, and a finished job whose slice HAMi no longer counts.
    lab.tenant("tenant-b").add_placed_pod(
        hami_pod("notebooks", "anna", B_NODE, f"GPU-{B_NODE}-0,NVIDIA,4096,0:;")
    )
    lab.tenant("tenant-b").add_placed_pod(
        hami_pod("gpu-workloads", "done", B_NODE, f"GPU-{B_NODE}-1,NVIDIA,9000,10:;", "Succeeded")
    )
    return lab


def run(lab: FakeLab, tmp_path: Path) -> tuple[int, str]:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(lab.spec))
    out = io.StringIO()
    argv = ["--spec", str(spec), "--report-dir", str(tmp_path / "reports" / "lab")]
    code = main(argv, out=out, factory=lab.factory, when=WHEN)
    return code, out.getvalue()


EXPECTED = f"""\
GPU sharing in stack lab, live at {WHEN}
tenant-a: 1 card(s) on 1 node(s), 4 pod(s), 80000/81920 MB allocated, largest free slice 0 MB
  {A_NODE} #0 NVIDIA A100-SXM4-80GB 81920 MB [######======%%%%%%@@@@@.]
    # gpu-workloads/a100-share-1  20000 MB      25%
    = gpu-workloads/a100-share-2  20000 MB      25%
    % gpu-workloads/a100-share-3  20000 MB      25%
    @ gpu-workloads/a100-share-4  20000 MB      25%
    . free                         1920 MB       0%  4/10 slots taken, cores all taken
tenant-b: 2 card(s) on 1 node(s), 2 pod(s), 20096/46068 MB allocated, largest free slice 15034 MB
  {B_NODE} #0 NVIDIA L4 23034 MB [########=====...........]
    # gpu-workloads/two-l4   8000 MB      50%
    = notebooks/anna         4096 MB no limit
    . free                  10938 MB      50%  2/10 slots taken, next pod up to 10938 MB
  {B_NODE} #1 NVIDIA L4 23034 MB [########................]
    # gpu-workloads/two-l4   8000 MB      50%
    . free                  15034 MB      50%  1/10 slots taken, next pod up to 15034 MB
"""


def test_the_table_says_which_pod_holds_which_slice_of_each_card(tmp_path):
    code, out = run(examples_applied(), tmp_path)
    assert code == 0
    table, picture = out.rsplit("\n", 2)[0] + "\n", out.splitlines()[-1]
    assert table == EXPECTED
    assert picture == f"picture: {tmp_path / 'reports' / 'lab' / PNG_NAME}"


def test_the_picture_is_a_png_of_both_tenants(tmp_path):
    run(examples_applied(), tmp_path)
    data = (tmp_path / "reports" / "lab" / PNG_NAME).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 1500 and height >= 500
    assert sorted(p.name for p in (tmp_path / "reports" / "lab").iterdir()) == [PNG_NAME]


def test_only_reads_reach_the_api_servers(tmp_path):
    """Two LIST calls per tenant with its own kubeconfig, nothing on the management cluster,
    nothing created, patched or deleted (the fakes record every call by name)."""
    lab = examples_applied()
    before = {name: dict(lab.tenant(name).pods) for name in ("tenant-a", "tenant-b")}
    run(lab, tmp_path)
    for name in ("tenant-a", "tenant-b"):
        server = lab.tenant(name)
        assert [call for call, _ in server.calls] == ["list_nodes", "list_pods"]
        assert server.foreign_calls == [] and server.deleted == []
        assert server.pods == before[name]
    assert lab.mgmt.calls == []
    assert lab.created_clusters == ["tenant tenant-a", "tenant tenant-b"]


def test_empty_cards_and_a_tenant_without_gpus(tmp_path):
    lab = standard_lab()
    lab.add_tenant("tenant-c", "172.30.255.202", [])
    code, out = run(lab, tmp_path)
    assert code == 0
    lines = out.splitlines()
    assert lines[1:4] == [
        "tenant-a: 1 card(s) on 1 node(s), 0 pod(s), 0/81920 MB allocated, "
        "largest free slice 81920 MB",
        f"  {A_NODE} #0 NVIDIA A100-SXM4-80GB 81920 MB [{'.' * 24}]",
        "    . free  81920 MB     100%  0/10 slots taken, next pod up to 81920 MB",
    ]
    assert "tenant-c: no GPU node" in lines
    assert not {c for c, _ in lab.tenant("tenant-c").calls}  # nothing to read there


def test_an_unreachable_tenant_is_named_and_the_others_still_drawn(tmp_path):
    lab = examples_applied()
    lab.tenant("tenant-b").knobs.reachable = False
    code, out = run(lab, tmp_path)
    assert code == 1
    assert (
        "tenant-b: not read: ConnectTimeoutError: timed out (API server unreachable: MetalLB "
        "address not announced, TCP pod down, or wrong address in kubeconfig)"
    ) in out.splitlines()
    assert "gpu-workloads/a100-share-4" in out
    assert (tmp_path / "reports" / "lab" / PNG_NAME).exists()


def test_a_registration_hami_cannot_read_is_named(tmp_path):
    lab = examples_applied()
    node = lab.tenant("tenant-a").nodes[A_NODE]
    node["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "not json"
    code, out = run(lab, tmp_path)
    assert code == 1
    assert any(
        line.startswith("tenant-a: not read: a card registration is not HAMi's JSON")
        for line in out.splitlines()
    )


def test_a_bad_spec_exits_two(tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text("{}")
    assert main(["--spec", str(path)], out=io.StringIO(), factory=standard_lab().factory) == 2
    assert capsys.readouterr().err.startswith("sharing: ")
