"""A mirrored site's chart repository: the program's Helm releases, pointed at a Helm repository
on loopback by `chartSources`, render against the charts it serves (`helm template` with each
Release's inputs: name, chart, repository, version, namespace, values), for every chart this
machine can have: MetalLB's and cert-manager's come inside their Go modules, flannel's as the
tier already takes it (workload_images.py). Kamaji's, HAMi's and HAMi-DRA's are not reachable
here, so they are not served.

The repository is what `helm repo index` makes of `helm package`d charts, served by Python's
http.server started here on loopback and stopped by PID. cert-manager's module holds a
Chart.template.yaml whose version its release tool fills in; the test fills it with the pinned
version (`certManagerVersion`) as that tool does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_image import go_env
from site_mirror import free_port
from workload_images import flannel_chart_dir, helm_binary

from labconfig.parse import parse_config
from planning.pulls import stack_pulls
from tests.support.pulumi_harness import lab_stack_config, run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
SERVED = ("metallb", "cert-manager", "flannel")


def module_dir(module: str, version: str) -> Path:
    env, _ = go_env()
    listed = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        env=env, capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return Path(json.loads(listed.stdout)["Dir"])


def writable_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for item in [target, *target.rglob("*")]:  # the module cache's files are read-only
        item.chmod(0o755 if item.is_dir() else 0o644)
    return target


def cert_manager_chart(version: str, work: Path) -> Path:
    module = module_dir("github.com/cert-manager/cert-manager", version)
    chart = writable_copy(module / "deploy/charts/cert-manager", work / "cert-manager")
    template = (chart / "Chart.template.yaml").read_text()
    filled = re.sub(r"(?m)^version: .*$", f"version: {version}", template)
    filled = re.sub(r"(?m)^appVersion: .*$", f"appVersion: {version}", filled)
    (chart / "Chart.yaml").write_text(filled.replace("{{IS_PRERELEASE}}", "false"))
    return chart


def helm(helm_bin: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """helm with every file of its own in `home` (none of the user's)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    env |= {f"XDG_{kind.upper()}_HOME": str(home / kind) for kind in ("cache", "config", "data")}
    return subprocess.run(
        [str(helm_bin), *args], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def chart_repository(tier_cache_dir: Path, tmp_path_factory) -> Iterator[tuple[str, Path, Path]]:
    """(URL, helm, helm's home) of a Helm repository on loopback serving the three charts at
    the versions the program pins."""
    work = tmp_path_factory.mktemp("charts")
    defaults = run_program(lab_stack_config())
    versions = {
        r.inputs["name"]: r.inputs["version"]
        for r in defaults.of_type(RELEASE)
        if r.inputs["name"] in SERVED
    }
    helm_bin, home = helm_binary(tier_cache_dir), work / "home"
    home.mkdir()
    metallb = module_dir("go.universe.tf/metallb", f"v{versions['metallb']}") / "charts/metallb"
    charts = [
        writable_copy(metallb, work / "metallb"),
        cert_manager_chart(versions["cert-manager"], work),
        writable_copy(flannel_chart_dir(tier_cache_dir), work / "flannel"),
    ]
    repo = work / "repo"
    repo.mkdir()
    for chart in charts:
        packed = helm(helm_bin, home, "package", str(chart), "--destination", str(repo))
        assert packed.returncode == 0, packed.stderr
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    indexed = helm(helm_bin, home, "repo", "index", str(repo), "--url", url)
    assert indexed.returncode == 0, indexed.stderr
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(repo)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{url}/index.yaml", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no chart server"
                time.sleep(0.2)
        yield url, helm_bin, home
    finally:
        server.terminate()
        server.wait(timeout=20)


def rendered_images(manifests: str) -> set[str]:
    return set(re.findall(r"(?m)^\s+image: \"?([^\"\s]+)\"?$", manifests))


@pytest.mark.upstream("chart-images-rendered")
def test_the_programs_releases_render_against_the_sites_chart_repository(chart_repository):
    url, helm_bin, home = chart_repository
    mirrored = run_program({**lab_stack_config(), "chartSources": dict.fromkeys(SERVED, url)})
    releases = {r.name: r.inputs for r in mirrored.of_type(RELEASE) if r.inputs["name"] in SERVED}
    # One MetalLB and one cert-manager in the management cluster, flannel in each tenant.
    assert sorted(inputs["name"] for inputs in releases.values()) == [
        "cert-manager", "flannel", "flannel", "metallb",
    ]  # fmt: skip
    images: dict[str, set[str]] = {}
    for name, inputs in releases.items():
        assert inputs["repositoryOpts"]["repo"] == url and inputs["chart"] == inputs["name"]
        values = home / f"{name}.json"
        values.write_text(json.dumps(inputs.get("values", {})))
        result = helm(
            helm_bin, home, "template", inputs["name"], inputs["chart"], "--repo", url,
            "--version", inputs["version"], "--namespace", inputs["namespace"],
            "--values", str(values),
        )  # fmt: skip
        assert result.returncode == 0, f"{name}: {result.stderr}"
        assert "kind: DaemonSet" in result.stdout or "kind: Deployment" in result.stdout
        images[inputs["name"]] = rendered_images(result.stdout)
    # Exactly what `make pulls` lists for each chart (planning/pulls.py), so a mirror filled
    # from the list holds every image these charts run.
    listed = stack_pulls(parse_config(lab_stack_config())).images
    for chart in SERVED:
        assert images[chart] == {p.image for p in listed if p.purpose == f"{chart} chart"}, chart


def test_a_chart_the_repository_lacks_fails_the_render(chart_repository):
    """The render above can fail: a version the site's repository does not hold is refused."""
    url, helm_bin, home = chart_repository
    result = helm(helm_bin, home, "template", "metallb", "metallb", "--repo", url,
                  "--version", "0.0.1")  # fmt: skip
    assert result.returncode != 0
    assert "0.0.1" in result.stderr
