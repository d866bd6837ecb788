"""RBAC rules match the calls made; the runtime files are stdlib-only and complete."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gpu_agent
from gpu_agent import Agent, TransientError, parse_config, reconcile_once, required_rbac_rules
from gpu_agent.__main__ import main
from gpu_agent.kube import API_CALLS, KubeApi
from tests.support.fake_kube import FakeKube

PKG = Path(gpu_agent.__file__).parent
NODE = "w1"


def test_rbac_rules_exact():
    assert required_rbac_rules() == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch", "watch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch", "watch"]},
    ]
    assert all("*" not in r["verbs"] + r["resources"] for r in required_rbac_rules())


def test_api_calls_cover_the_protocol():
    methods = {n for n in vars(KubeApi) if not n.startswith("_")}
    assert methods == set(API_CALLS)


def _allowed(verb: str, resource: str) -> bool:
    return any(
        "" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
        for r in required_rbac_rules()
    )


def test_every_call_is_allowed_and_every_rule_is_used():
    """Drive every code path (register, complete, conflict re-read, orphan GET, watch)."""
    kube = FakeKube()
    kube.add_node(NODE)
    config = parse_config({"nodes": {NODE: [{"type": "NVIDIA L4", "devmem": 23034}]}})
    reconcile_once(kube, config)
    kube.add_pod("a", "p1")
    kube.schedule("a", "p1", NODE)
    kube.race_next_node_patch(NODE)  # forces get_node
    reconcile_once(kube, config)
    kube.add_pod("a", "p2")
    kube.schedule("a", "p2", NODE)
    kube.fail_next("patch_pod", TransientError(503, "x"))
    kube.delete_pod("a", "p2")
    reconcile_once(kube, config)  # orphan check: get_pod -> 404
    kube.add_pod("a", "p3")
    kube.schedule("a", "p3", NODE)

    def race_pod(method, args):
        if method == "patch_pod":
            kube.before_call = None
            kube.set_pod_phase("a", "p3", "Running")

    kube.before_call = race_pod  # forces get_pod on conflict
    reconcile_once(kube, config)
    agent = Agent(kube, config)  # the long-running loop: list, then watch
    agent.step()
    kube.add_pod("a", "p4")
    kube.schedule("a", "p4", NODE)
    assert agent.follow("nodes", 0) and agent.follow("pods", 0)
    assert agent.step().completed == ["a/p4"]
    used = {(c.verb, c.resource) for c in kube.calls}
    assert all(_allowed(v, r) for v, r in used)
    granted = {
        (v, r) for rule in required_rbac_rules() for r in rule["resources"] for v in rule["verbs"]
    }
    assert used == granted


# Runs in a fresh interpreter: CPython 3.11's ast module can be left in a bad state by
# errors earlier in a long test session ("AST constructor recursion depth mismatch").
IMPORT_ROOTS = """
import ast, json, sys
roots = set()
for path in sys.argv[1:]:
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots.add((node.module or "").split(".")[0])
print(json.dumps(sorted(roots)))
"""


def test_runtime_files_listed_and_stdlib_only():
    on_disk = sorted(p.name for p in PKG.glob("*.py"))
    assert on_disk == sorted(gpu_agent.RUNTIME_FILES)
    paths = [str(PKG / name) for name in gpu_agent.RUNTIME_FILES]
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ROOTS, *paths], capture_output=True, text=True, check=True
    )
    roots = json.loads(result.stdout)
    assert "json" in roots  # the scan sees absolute imports at all
    for root in roots:
        assert root in sys.stdlib_module_names or root == "__future__", root
    # flat: a ConfigMap cannot carry subdirectories (bytecode caches are not shipped)
    assert [p.name for p in PKG.glob("*/") if p.name != "__pycache__"] == []


def test_main_bad_config_exits_non_zero(monkeypatch):
    monkeypatch.delenv("GPU_AGENT_CONFIG", raising=False)
    monkeypatch.setenv("GPU_AGENT_CONFIG_FILE", "/nonexistent.json")
    assert main([]) == 2
    monkeypatch.setenv("GPU_AGENT_CONFIG", '{"nodes": {}}')
    assert main(["--once"]) == 2


def test_main_outside_cluster_exits_non_zero(monkeypatch):
    monkeypatch.setenv(
        "GPU_AGENT_CONFIG", '{"nodes": {"w1": [{"type": "NVIDIA L4", "devmem": 1}]}}'
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["--once"]) == 3


def test_main_once_against_forbidden_api(monkeypatch):
    """401/403 from the API server end the process with a non-zero code."""
    monkeypatch.setenv(
        "GPU_AGENT_CONFIG", '{"nodes": {"w1": [{"type": "NVIDIA L4", "devmem": 1}]}}'
    )
    kube = FakeKube()
    kube.fail_next("list_nodes", gpu_agent.AuthError(403, "forbidden"))
    monkeypatch.setattr(gpu_agent.HttpKubeApi, "in_cluster", classmethod(lambda cls: kube))
    assert main(["--once"]) == 3
    kube.fail_next("list_nodes", gpu_agent.AuthError(401, "unauthorized"))
    monkeypatch.setattr("signal.signal", lambda *a: None)  # keep pytest's own handlers
    monkeypatch.setattr(gpu_agent.agent, "AUTH_GRACE_SECONDS", 0.0)  # no retry of the 401
    assert main([]) == 3  # the long-running loop exits too


def test_python_dash_m_exits_non_zero_on_bad_config():
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_AGENT_")}
    env["GPU_AGENT_CONFIG"] = "not json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_agent", "--once"],
        cwd=PKG.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "bad config" in proc.stdout
