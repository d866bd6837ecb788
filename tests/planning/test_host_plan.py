"""What the lab asks of its host: the plan and its sizing record (planning/host_plan.py)."""

from __future__ import annotations

from labconfig.parse import parse_config
from planning.host_plan import HostPlan, Sizing, host_plan
from tests.support.pulumi_harness import lab_stack_config

IMAGE_136 = "kindest/node:v1.36.1@sha256:" + "3" * 64


SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nmade-up\n-----END OPENSSH PRIVATE KEY-----\n"


def test_sizing_record_round_trips_and_ignores_noise():
    assert Sizing.from_record(Sizing(3, 4).record()) == Sizing(3, 4)
    assert Sizing.from_record("old output\n" + Sizing(2, 1).record()) == Sizing(2, 1)
    assert Sizing.from_record("") is None and Sizing.from_record("not json") is None


def test_host_plan_counts_only_what_runs_on_this_host():
    config = lab_stack_config()
    config["tenants"] = [
        {"name": "a", "kubernetesVersion": "v1.35.0", "workers": 2},
        {"name": "b", "kubernetesVersion": "v1.36.0", "workerImage": IMAGE_136, "workers": 1},
        {
            "name": "c",
            "kubernetesVersion": "v1.34.0",
            "workerMode": "remote",
            "remoteWorkers": [{"name": "gpu-c", "host": "192.0.2.3"}],
        },
    ]
    plan = host_plan(parse_config({**config, "sshPrivateKey": SSH_KEY}))
    assert plan == HostPlan(
        sizing=Sizing(tenants=3, workers=3),
        kube_proxy_versions=("v1.35.0", "v1.36.0"),  # the remote tenant's kube-proxy is not here
        kind_cluster=True,
        network_name="kamaji-hami-lab",
        subnet="172.30.0.0/16",
        # kubectl on this host talks to every tenant, the remote one too, and to kind's cluster.
        tenant_versions=(("a", "v1.35.0"), ("b", "v1.36.0"), ("c", "v1.34.0")),
        management_version="v1.37.0",
    )
    assert plan.api_servers == (
        ("kind management cluster", "v1.37.0"),
        ("tenant a", "v1.35.0"),
        ("tenant b", "v1.36.0"),
        ("tenant c", "v1.34.0"),
    )


def test_the_management_version_is_the_kind_node_image_s_and_only_with_kind():
    """kubectl's skew is checked against the cluster kind creates from the pinned node image;
    an existing management cluster's version is not known to the plan."""
    config = {**lab_stack_config(), "managementNodeImage": IMAGE_136}
    assert host_plan(parse_config(config)).management_version == "v1.36.1"
    existing = {**lab_stack_config(), "managementMode": "existing"}
    existing["managementStack"] = "org/kamaji-hami-lab/lab"
    plan = host_plan(parse_config(existing))
    assert plan.management_version is None
    assert plan.api_servers == (("tenant tenant-a", "v1.36.4"), ("tenant tenant-b", "v1.36.4"))


def test_nothing_on_this_host_means_no_plan():
    cfg = parse_config(
        {
            "managementMode": "existing",
            "managementStack": "org/kamaji-hami-lab/lab",
            "sshPrivateKey": SSH_KEY,
            "tenants": [
                {
                    "name": "real",
                    "workerMode": "remote",
                    "remoteWorkers": [{"name": "gpu-1", "host": "192.0.2.10"}],
                }
            ],
        }
    )
    assert host_plan(cfg) is None
