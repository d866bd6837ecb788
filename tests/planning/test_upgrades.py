"""Which tenant version changes the program performs, and how it says so."""

from __future__ import annotations

import pytest

from planning.upgrades import Change, UpgradeRefused, judge, judge_all, upgrade_steps


@pytest.mark.parametrize(
    ("previous", "wanted", "change"),
    [
        (None, "v1.36.4", Change.NEW),
        ("v1.36.4", "v1.36.4", Change.SAME),
        ("v1.36.1", "v1.36.4", Change.PATCH),
        ("v1.35.8", "v1.36.4", Change.MINOR),
        ("v1.35.0", "v1.36.1", Change.MINOR),
    ],
)
def test_accepted_changes(previous, wanted, change):
    found = judge("tenant-a", 0, previous, wanted)
    assert found.change is change
    assert found.is_upgrade is (change in (Change.PATCH, Change.MINOR))


@pytest.mark.upstream("kamaji-kubeadm-ceiling")
@pytest.mark.parametrize(
    ("previous", "wanted"),
    [("v1.36.4", "v1.35.8"), ("v1.36.4", "v1.36.1"), ("v1.35.0", "v1.34.11")],
)
def test_a_downgrade_is_refused_naming_the_key_and_the_way_back(previous, wanted):
    """Kamaji's webhook refuses a minor downgrade (tcp_version.go:81-92); kubeadm has no
    downgrade at all, so a patch downgrade is refused too."""
    with pytest.raises(UpgradeRefused) as refused:
        judge("tenant-b", 1, previous, wanted)
    message = str(refused.value)
    assert message.startswith(f"tenants[1].kubernetesVersion: {wanted} is older than {previous}")
    assert "tenant tenant-b" in message
    assert f"Set it back to {previous} or newer" in message


@pytest.mark.upstream("kamaji-kubeadm-ceiling")
def test_a_skipped_minor_is_refused_naming_the_step_between():
    with pytest.raises(UpgradeRefused) as refused:
        judge("tenant-a", 0, "v1.34.11", "v1.36.4")
    message = str(refused.value)
    assert message.startswith("tenants[0].kubernetesVersion: v1.36.4 skips a minor version")
    assert "Upgrade to a v1.35 release first (pulumi up), then to v1.36.4" in message


def test_every_tenant_is_judged_by_its_own_record_and_index():
    changes = judge_all(
        {"tenant-a": "v1.35.8", "gone": "v1.30.0"},
        [("tenant-a", "v1.36.4"), ("tenant-new", "v1.36.4")],
    )
    assert [(c.tenant, c.change) for c in changes] == [
        ("tenant-a", Change.MINOR),
        ("tenant-new", Change.NEW),
    ]
    with pytest.raises(UpgradeRefused, match=r"^tenants\[1\]\.kubernetesVersion"):
        judge_all({"tenant-b": "v1.36.4"}, [("tenant-a", "v1.36.4"), ("tenant-b", "v1.35.8")])


def test_the_steps_name_the_order_and_what_comes_back():
    change = judge("tenant-b", 1, "v1.35.8", "v1.36.4")
    text = upgrade_steps(change, ["tenant-b-worker-1", "tenant-b-worker-2"], replaced=True)
    assert text.startswith("tenant tenant-b: v1.35.8 -> v1.36.4. Kamaji upgrades the control plane")
    assert "one worker at a time (tenant-b-worker-1, then tenant-b-worker-2)" in text
    assert "replaced by a node of the new image" in text
    assert "pods nothing owns are not re-created" in text
    remote = upgrade_steps(change, ["gpu-1"], replaced=False)
    assert "packages in place (its pods stay)" in remote
    assert "not re-created" not in remote
