"""Kamaji's charts: fetched from the pinned tag's commit into the cache (fake git and helm)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pulumi
import pytest

from builders.kamaji import (
    KAMAJI_NAMESPACE,
    crds_values,
)
from components.platform.kamaji_chart import (
    CACHE_IN_PROJECT,
    KAMAJI_GIT_URL,
    PROJECT_DIR,
    UPSTREAM,
    ChartFetchFailed,
    ChartOrigin,
    chart_fetch_script,
    default_cache_root,
    ensure_chart_cache,
    fetch_environment,
    release_chart_path,
)
from labconfig.kamaji_sources import KAMAJI_SOURCES, kamaji_source
from labconfig.model import ConfigError
from labconfig.parse import parse_config
from tests.support.fake_tools import fake_tools, tool_env
from tests.support.pulumi_harness import (
    MockHost,
    ProgramRun,
    lab_stack_config,
    run_program,
)

LAB = lab_stack_config()


COMMAND = "command:local:Command"


SOURCE = KAMAJI_SOURCES["26.8.2-edge"]


LOCK = """\
dependencies:
- name: kamaji-etcd
  repository: https://clastix.github.io/charts
  version: 0.15.0
digest: sha256:dffc71b76c5711884d1bb4b66dee859e4dc70b149b02b4d36d0c60d299d7c55a
"""


FAKE_GIT = """\
echo "git $* repo_config=${HELM_REPOSITORY_CONFIG:-}" >> "$CALLS"
if [ "$1" = clone ]; then
  dest="${@: -1}"
  mkdir -p "$dest/charts/kamaji" "$dest/charts/kamaji-crds/templates"
  printf '%s' "$LOCK" > "$dest/charts/kamaji/Chart.lock"
elif [ "$1 $3 $4" = "-C rev-parse HEAD" ]; then
  echo "$TAG_COMMIT"
else
  exit 2
fi
"""


FAKE_HELM = """\
echo "helm $* repo_config=${HELM_REPOSITORY_CONFIG:-}" >> "$CALLS"
if [ "$1 $2" = "dependency build" ]; then
  mkdir -p "$3/charts" && touch "$3/charts/kamaji-etcd-0.15.0.tgz"
elif [ "$1" = pull ]; then
  dest="${@: -1}"
  touch "$dest/kamaji-etcd-0.15.0.tgz"
fi
"""


def _cache_root(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "kamaji-hami-lab" / "kamaji"


def _run_fetch(
    tmp_path: Path, tag_commit: str, origin: ChartOrigin = UPSTREAM
) -> subprocess.CompletedProcess[str]:
    env = {
        **tool_env(tmp_path),
        **fetch_environment(SOURCE, _cache_root(tmp_path), origin),
        "LOCK": LOCK,
        "TAG_COMMIT": tag_commit,
    }
    return subprocess.run(
        ["bash", "-c", chart_fetch_script()], env=env, capture_output=True, text=True
    )


def _fetch_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tag_commit: str) -> Path:
    """Fake git and helm on PATH for ensure_chart_cache, which runs the fetch script itself."""
    log = fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    env = {**tool_env(tmp_path), "LOCK": LOCK, "TAG_COMMIT": tag_commit}
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.upstream("kamaji-chart-at-the-image-tag", "helm-dependency-build-needs-a-known-repo")
def test_chart_fetch_puts_the_tags_charts_with_locked_subcharts_in_the_cache(tmp_path: Path):
    """M3: the tag's charts/kamaji and charts/kamaji-crds, checked against the pinned commit;
    `helm dependency build` gets the lock's etcd chart through a private repo config (Helm only
    downloads from repositories it knows); stdout is the directory, and a second run reuses it."""
    fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    result = _run_fetch(tmp_path, SOURCE.commit)
    assert result.returncode == 0, result.stderr
    cached = tmp_path / "cache" / "kamaji-hami-lab" / "kamaji" / SOURCE.commit
    assert result.stdout == f"{cached}\n"
    assert (cached / "kamaji" / "charts" / "kamaji-etcd-0.15.0.tgz").is_file()
    assert (cached / "kamaji-crds" / "templates").is_dir()
    calls = (tmp_path / "calls.log").read_text().splitlines()
    clone, rev_parse, repo_add, build = calls
    assert clone.startswith(f"git clone --quiet --depth 1 --branch 26.8.2-edge {KAMAJI_GIT_URL} ")
    assert rev_parse.split()[3:5] == ["rev-parse", "HEAD"]
    repo_config = repo_add.rsplit("repo_config=", 1)[1]
    assert repo_add.startswith("helm repo add lock-1 https://clastix.github.io/charts ")
    assert repo_config and not repo_config.startswith(str(tmp_path / "home"))
    assert build.startswith("helm dependency build ") and build.endswith(repo_config)
    assert not list((tmp_path / "cache" / "kamaji-hami-lab" / "kamaji").glob(".fetch.*"))

    again = _run_fetch(tmp_path, SOURCE.commit)
    assert again.stdout == result.stdout
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 4  # nothing fetched


@pytest.mark.upstream("kamaji-chart-at-the-image-tag")
def test_chart_fetch_refuses_a_tag_that_moved(tmp_path: Path):
    """M3: a re-pointed tag would be a moving target again: stop and say so."""
    fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    result = _run_fetch(tmp_path, "f" * 40)
    assert result.returncode == 1
    assert f"is now commit {'f' * 40}, not the pinned {SOURCE.commit}" in result.stderr
    assert "helm" not in (tmp_path / "calls.log").read_text()
    assert not (tmp_path / "cache" / "kamaji-hami-lab" / "kamaji" / SOURCE.commit).exists()


def test_kamaji_tag_without_a_pinned_source_is_a_config_error():
    with pytest.raises(ConfigError, match=r"kamajiImageTag.*no pinned chart source.*26\.8\.2-edge"):
        parse_config({**LAB, "kamajiImageTag": "26.9.1-edge"})
    assert kamaji_source("26.8.2-edge").commit == "ddbabd87ed0e8d7c319414383e153c46f21733a9"


@pytest.mark.upstream("pulumi-k8s-release-check-skips-unknown-chart")
def test_the_program_fetches_missing_charts_on_any_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3 (review 3): a machine that never deployed (CI's preview, another checkout) has no
    cache, and the releases' Check loads the chart path: the program fetches the pinned
    charts itself, once, and a second run reuses them without git or helm."""
    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    root = _cache_root(tmp_path)
    dest = ensure_chart_cache(SOURCE, root)
    assert dest == root / SOURCE.commit
    assert (dest / "kamaji" / "charts" / "kamaji-etcd-0.15.0.tgz").is_file()
    assert (dest / "kamaji-crds" / "templates").is_dir()
    assert [call.split()[:2] for call in _calls(log)] == [
        ["git", "clone"], ["git", "-C"], ["helm", "repo"], ["helm", "dependency"],
    ]  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git, no helm: not needed now
    assert ensure_chart_cache(SOURCE, root) == dest
    assert len(_calls(log)) == 4


def test_cached_charts_are_used_without_git_or_helm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3: a complete cache entry is the answer, whatever is on PATH."""
    dest = tmp_path / SOURCE.commit
    (dest / "kamaji").mkdir(parents=True)
    (dest / ".complete").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ensure_chart_cache(SOURCE, tmp_path) == dest


def test_a_tag_that_moved_stops_the_program_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """M3: the commit pin is checked on every fetch, wherever it runs."""
    log = _fetch_tools(tmp_path, monkeypatch, "f" * 40)
    root = _cache_root(tmp_path)
    with pytest.raises(
        ChartFetchFailed, match=rf"is now commit f{{40}}, not the pinned {SOURCE.commit}"
    ):
        ensure_chart_cache(SOURCE, root)
    assert not (root / SOURCE.commit).exists()
    assert not any("helm" in call for call in _calls(log))


def test_an_interrupted_fetch_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """M3: a directory without the completion mark is a fetch that died half-way."""
    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    root = _cache_root(tmp_path)
    (root / SOURCE.commit / "kamaji").mkdir(parents=True)
    assert ensure_chart_cache(SOURCE, root) == root / SOURCE.commit
    assert (root / SOURCE.commit / ".complete").is_file()
    assert _calls(log)[0].startswith("git clone ")


def test_missing_git_or_helm_is_named_before_fetching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fake_tools(tmp_path, {"git": FAKE_GIT})
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(
        ChartFetchFailed, match=r"are not in .* yet, and fetching them needs helm on PATH"
    ):
        ensure_chart_cache(SOURCE, tmp_path / "cache")
    assert not (tmp_path / "calls.log").exists()


@pytest.mark.upstream("pulumi-python-run-error-no-traceback", "pulumi-python-error-waits-for-rpcs")
def test_a_program_without_helm_stops_with_one_line_before_registering_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    """Issue 17 item 4: without helm the program ended in a Python traceback
    (`ChartFetchFailed`, a RuntimeError) after half a plan, pointing at a README section that
    does not exist. Now: before the first registration (the SDK re-raises a program's error
    only after the registrations already sent are done, and a failed one, such as a provider
    plugin that cannot be had, is reported instead), one line that names the README's real
    section, and exit code 32, on which the CLI adds no second line. A RunError, so any
    other caller shows no traceback either. tests/real/test_preview_errors.py sees it from
    the real CLI."""
    fake_tools(tmp_path, {"git": FAKE_GIT})
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    run = run_program(LAB, host=MockHost(cache=tmp_path / "no-cache-yet"), allow_exit=True)
    assert (run.exit_code, run.resources) == (32, [])
    charts = tmp_path / "no-cache-yet" / "kamaji-charts"
    # What the engine gets from pulumi.log.error (the mocks' engine logs it).
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "ERROR",
            f"Kamaji's charts (26.8.2-edge) are not in {charts} yet, and fetching them needs "
            "helm on PATH (install: see README, Host prerequisites).",
        )
    ]
    assert "## Host prerequisites" in (PROJECT_DIR / "README.md").read_text().splitlines()
    assert issubclass(ChartFetchFailed, pulumi.RunError)
    assert not (tmp_path / "calls.log").exists()


def test_concurrent_runs_fetch_the_charts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """M3: two programs at once (a preview next to an up) share the cache: the lock makes the
    second wait and find the first one's charts."""
    import threading

    log = _fetch_tools(tmp_path, monkeypatch, SOURCE.commit)
    slow_git = tmp_path / "bin" / "git"
    slow_git.write_text(slow_git.read_text().replace("set -eu\n", "set -eu\nsleep 0.3\n", 1))
    root = _cache_root(tmp_path)
    results: list[Path] = []

    def one_program() -> None:
        results.append(ensure_chart_cache(SOURCE, root))

    runs = [threading.Thread(target=one_program) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join()
    assert results == [root / SOURCE.commit] * 2
    assert sum(call.startswith("git clone ") for call in _calls(log)) == 1


@pytest.mark.upstream("pulumi-k8s-release-relative-chart-path")
def test_the_chart_path_is_the_same_in_every_checkout(tmp_path: Path):
    """M3 (review 3, 4): the cache is in the checkout and the Release names its chart relative
    to the project, which the provider resolves from the project's root: another checkout or
    CI's preview sends the same `chart` and plans no update of the releases."""
    for checkout in (tmp_path / "alice/lab", tmp_path / "runner/work/lab"):
        cache = checkout / CACHE_IN_PROJECT / SOURCE.commit
        assert release_chart_path(cache, "kamaji", checkout) == (
            f"./.cache/kamaji-charts/{SOURCE.commit}/kamaji"
        )
    elsewhere = tmp_path / "cache" / SOURCE.commit
    assert release_chart_path(elsewhere, "kamaji-crds", tmp_path / "lab") == str(
        elsewhere / "kamaji-crds"
    )
    assert default_cache_root() == PROJECT_DIR / ".cache/kamaji-charts"
    ignored = (PROJECT_DIR / ".gitignore").read_text().splitlines()
    assert "/.cache/" in ignored, "the chart cache must be gitignored"


@pytest.mark.upstream(
    "helm-crds-dir-installed-once", "pulumi-k8s-release-check-skips-unknown-chart"
)
def test_kamaji_crds_are_their_own_release_from_the_fetched_charts(
    lab: ProgramRun, kamaji_charts_already_cached: Path
):
    """M3: the CRDs come from the tag's kamaji-crds chart, a release Helm upgrades with the
    tag; the Kamaji release skips its crds/. Both charts are in the machine's cache, a path
    known in every preview (the provider's Check loads it), not the output of a resource."""
    cached = kamaji_charts_already_cached / SOURCE.commit
    crds = lab.named("kamaji-crds")
    kamaji = lab.named("kamaji-chart")
    # no Command fetches the charts (the DataStores' delete runs only on destroy)
    fetches = [r for r in lab.of_type(COMMAND) if r.name.startswith("kamaji")]
    assert [r.name for r in fetches] == ["kamaji-datastores-delete"]
    for release, chart in ((crds, "kamaji-crds"), (kamaji, "kamaji")):
        assert release.inputs["chart"] == str(cached / chart)
        assert (
            "chart" not in release.property_dependencies
            or not release.property_dependencies["chart"]
        )
        assert "repositoryOpts" not in release.inputs and "version" not in release.inputs
        assert release.inputs["namespace"] == KAMAJI_NAMESPACE
    assert kamaji.inputs["skipCrds"] is True and "skipCrds" not in crds.inputs
    assert crds.urn in kamaji.dependencies
    assert lab.named("kamaji-cert-manager").urn in crds.dependencies
    assert (
        crds.inputs["values"]
        == crds_values()
        == {
            "kamajiNamespace": "kamaji-system",
            "kamajiService": "kamaji-webhook-service",
            "kamajiCertificateName": "kamaji-serving-cert",
        }
    )


def test_kamaji_chart_source_is_a_stack_output(lab: ProgramRun):
    """M3: what was installed, by commit and chart tree (the charts' content digests)."""
    assert lab.outputs["kamajiChart"] == {
        "tag": "26.8.2-edge",
        "commit": "ddbabd87ed0e8d7c319414383e153c46f21733a9",
        "chartTree": "844f16ac9d4eaf0532b47f263f3ce2556d5633e5",
        "crdsChartTree": "492465f5b4df1d06c3db5b3d444ecd11a32456a9",
        "etcdChartVersion": "0.15.0",
    }


def test_the_pr_preview_has_git_and_a_pinned_helm_before_the_program_runs():
    """M3 (review 3): CI's preview runs the program, which fetches the charts with git and helm."""
    import yaml

    workflow = Path(__file__).resolve().parents[2] / ".github/workflows/pull-request.yml"
    steps = yaml.safe_load(workflow.read_text())["jobs"]["preview"]["steps"]
    uses = [step.get("uses", "").lower() for step in steps]
    helm = next(i for i, name in enumerate(uses) if name.startswith("azure/setup-helm@"))
    assert re.fullmatch(r"v3\.\d+\.\d+", steps[helm]["with"]["version"])
    checkout = next(i for i, name in enumerate(uses) if name.startswith("actions/checkout@"))
    assert checkout < helm  # git: the checkout ran on it
    assert helm < next(i for i, s in enumerate(steps) if "preview_stack.py" in s.get("run", ""))


@pytest.mark.parametrize(
    ("etcd_source", "pull"),
    [
        ("https://harbor.example/chartrepo/clastix",
         "helm pull kamaji-etcd --repo https://harbor.example/chartrepo/clastix --version 0.15.0 "
         "--destination {subcharts}"),
        ("oci://harbor.example/charts/",
         "helm pull oci://harbor.example/charts/kamaji-etcd --version 0.15.0 "
         "--destination {subcharts}"),
    ],
)  # fmt: skip
def test_a_mirrored_site_clones_its_git_mirror_and_pulls_the_locked_subchart_from_its_source(
    tmp_path: Path, etcd_source: str, pull: str
):
    """The commit is checked as upstream's; the etcd subchart is the Chart.lock's version from
    the site's repository, where Helm installs subcharts from (charts/)."""
    fake_tools(tmp_path, {"git": FAKE_GIT, "helm": FAKE_HELM})
    origin = ChartOrigin("/srv/mirrors/kamaji.git", etcd_source)
    result = _run_fetch(tmp_path, SOURCE.commit, origin)
    assert result.returncode == 0, result.stderr
    clone, _, pulled = (tmp_path / "calls.log").read_text().splitlines()
    assert clone.startswith(
        "git clone --quiet --depth 1 --branch 26.8.2-edge /srv/mirrors/kamaji.git "
    )
    work = clone.split()[-2].removesuffix("/src")
    subcharts = f"{work}/src/charts/kamaji/charts"
    assert pulled.split(" repo_config=")[0] == pull.format(subcharts=subcharts)
    cached = _cache_root(tmp_path) / SOURCE.commit
    assert (cached / "kamaji" / "charts" / "kamaji-etcd-0.15.0.tgz").is_file()
