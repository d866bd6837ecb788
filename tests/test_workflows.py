"""The real-host end-to-end job (.github/workflows/real-host-e2e.yml) cannot run here; what it
installs and runs is checked against what the program and the preflight demand."""

from __future__ import annotations

import re
import subprocess

import yaml

from labconfig.model import KIND_NODE_IMAGE
from preflight.checks import KIND_RELEASE, kube_proxy_conntrack_max
from tests.support.pulumi_harness import PROJECT_DIR

WORKFLOW = PROJECT_DIR / ".github" / "workflows" / "real-host-e2e.yml"


def steps() -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["lab"]["steps"]


def script() -> str:
    return "\n".join(step.get("run", "") for step in steps())


def test_the_job_installs_the_kind_release_the_preflight_asks_for():
    assert f"go install sigs.k8s.io/kind@{KIND_RELEASE}" in script()


def test_the_jobs_kubectl_is_within_one_minor_of_the_kind_node_image():
    kubectl = re.search(r"dl\.k8s\.io/release/v1\.(\d+)\.\d+/bin/linux/amd64/kubectl", script())
    node = re.search(r"kindest/node:v1\.(\d+)\.", KIND_NODE_IMAGE)
    assert kubectl and node
    assert abs(int(kubectl.group(1)) - int(node.group(1))) <= 1


def test_the_jobs_conntrack_target_is_kube_proxys():
    """The job computes the preflight's target in shell: bash gives the same numbers."""
    formula = re.search(r"target=(\$\(\(.+\)\))", script())
    assert formula
    for cpus in (2, 4, 8):
        line = formula.group(1).replace("$(nproc)", str(cpus))
        shell = subprocess.run(["bash", "-c", f"echo {line}"], capture_output=True, text=True)
        assert int(shell.stdout) == kube_proxy_conntrack_max("v1.35.0", cpus)


def test_the_job_brings_the_lab_up_checks_it_previews_no_change_and_always_destroys():
    runs = [(step.get("run", ""), step.get("if")) for step in steps() if "run" in step]
    commands = [run for run, _ in runs]
    order = [
        next(i for i, run in enumerate(commands) if needle in run)
        for needle in ("make up", "-m labcheck --stack lab", "--expect-no-changes", "make destroy")
    ]
    assert order == sorted(order)
    assert runs[order[-1]][1] == "always()"
