"""Where the Kamaji charts come from: the clastix/kamaji git tag of the image that runs.

The published chart is `0.0.0+latest`, republished on every master push, so its templates,
RBAC, CRDs and etcd subchart are whatever master was on deploy day. The charts at the tag
of `kamajiImageTag` are the ones that image was released with. The program fetches them,
once per machine, into a cache keyed by commit (nothing is vendored), checked against the
commit pinned in labconfig/kamaji_sources.py; `helm dependency build` then fetches the
etcd subchart at the version the tag's `Chart.lock` names, not the newest that `>=0.15.0`
would allow.
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass
from pathlib import Path

import pulumi

from builders.scripts import STRICT
from components import host
from labconfig.kamaji_sources import KAMAJI_GIT_URL, KamajiSource

COMPLETE_MARK = ".complete"  # written last: a directory without it is a fetch that died
FETCH_TOOLS = ("git", "helm")
FETCH_TIMEOUT_SECONDS = 900


class ChartFetchFailed(pulumi.RunError):
    """The pinned charts could not be put into the cache; the message says why.

    A user's setup problem, not a bug: as a RunError the language host prints the message
    alone, one `error:` line and no Python traceback (upstream fact
    `pulumi-python-run-error-no-traceback`)."""


PROJECT_DIR = Path(__file__).resolve().parents[2]
CACHE_IN_PROJECT = host.CACHE_IN_PROJECT / "kamaji-charts"  # gitignored


def default_cache_root() -> Path:
    """In the checkout, keyed by commit (a tag that moves cannot change what a stack installs):
    the releases can then name their charts relative to the project (`release_chart_path`).
    A host read like the fetch itself: both go through components/host.py."""
    return host.current.cache_dir() / CACHE_IN_PROJECT.name


def release_chart_path(charts_dir: Path, chart: str, project_dir: Path = PROJECT_DIR) -> str:
    """The Release's `chart`: relative to the project when the cache is in it, so every
    checkout and machine (CI's preview too) sends the same input and plans no update. The
    provider resolves it from its working directory, the project's root; the `./` makes
    Helm take it as a path, never as a repository chart name."""
    path = charts_dir / chart
    if path.is_relative_to(project_dir):
        return f"./{path.relative_to(project_dir)}"
    return str(path)


@dataclass(frozen=True)
class ChartOrigin:
    """Where the fetch takes the charts from: upstream by default, or a mirrored site's git
    mirror (or local clone) and its chart repository for the etcd subchart."""

    git_url: str = KAMAJI_GIT_URL
    etcd_chart_source: str = ""  # a Helm repository or an OCI prefix; '' = the Chart.lock's


UPSTREAM = ChartOrigin()


def fetch_environment(
    source: KamajiSource, cache_root: Path, origin: ChartOrigin = UPSTREAM
) -> dict[str, str]:
    return {
        "KAMAJI_CHART_CACHE": str(cache_root),
        "KAMAJI_GIT_URL": origin.git_url,
        "KAMAJI_TAG": source.tag,
        "KAMAJI_COMMIT": source.commit,
        "KAMAJI_ETCD_CHART_SOURCE": origin.etcd_chart_source,
        "KAMAJI_ETCD_CHART_VERSION": source.etcd_chart_version,
    }


def chart_fetch_script() -> str:
    """Puts charts/kamaji (with its locked subcharts) and charts/kamaji-crds of the pinned
    commit into the cache, once, and prints the directory that holds them (the only stdout).

    Needs git and helm. A private Helm repository config keeps the user's `helm repo` list
    untouched (`helm dependency build` only downloads from repositories it knows).
    """
    return (
        STRICT
        + """\
cache="$KAMAJI_CHART_CACHE"
dest="$cache/$KAMAJI_COMMIT"
if [ ! -f "$dest/.complete" ]; then
  mkdir -p "$cache"
  work=$(mktemp -d "$cache/.fetch.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  GIT_TERMINAL_PROMPT=0 git clone --quiet --depth 1 --branch "$KAMAJI_TAG" "$KAMAJI_GIT_URL" \\
    "$work/src" >&2
  commit=$(git -C "$work/src" rev-parse HEAD)
  if [ "$commit" != "$KAMAJI_COMMIT" ]; then
    echo "Kamaji tag $KAMAJI_TAG is now commit $commit, not the pinned $KAMAJI_COMMIT." >&2
    echo "Review the new tag, then pin it in labconfig/kamaji_sources.py." >&2
    exit 1
  fi
  export HELM_REPOSITORY_CONFIG="$work/repositories.yaml"
  export HELM_REPOSITORY_CACHE="$work/repository-cache"
  subcharts="$work/src/charts/kamaji/charts"
  case "$KAMAJI_ETCD_CHART_SOURCE" in
    "")
      n=0
      lock="$work/src/charts/kamaji/Chart.lock"
      for url in $(sed -n 's/^ *repository: *//p' "$lock" | sort -u); do
        n=$((n + 1))
        helm repo add "lock-$n" "$url" >&2
      done
      helm dependency build "$work/src/charts/kamaji" >&2
      ;;
    oci://*)  # the locked version from the site's registry, where Helm looks for subcharts
      mkdir -p "$subcharts"
      helm pull "${KAMAJI_ETCD_CHART_SOURCE%/}/kamaji-etcd" --version "$KAMAJI_ETCD_CHART_VERSION" \
        --destination "$subcharts" >&2
      ;;
    *)
      mkdir -p "$subcharts"
      helm pull kamaji-etcd --repo "$KAMAJI_ETCD_CHART_SOURCE" \
        --version "$KAMAJI_ETCD_CHART_VERSION" --destination "$subcharts" >&2
      ;;
  esac
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$work/src/charts/kamaji" "$work/src/charts/kamaji-crds" "$dest/"
  touch "$dest/.complete"
fi
printf '%s\\n' "$dest"
"""
    )


def ensure_chart_cache(
    source: KamajiSource, cache_root: Path | None = None, origin: ChartOrigin = UPSTREAM
) -> Path:
    """The directory with the pinned commit's charts/kamaji and charts/kamaji-crds, fetched
    now when this machine does not have it yet.

    Runs at program time, in preview too: a Helm Release loads a local chart in its Check
    whenever the path is known, so the charts must exist on whichever machine previews or
    deploys (another checkout, CI), not only on the one that first deployed. Idempotent;
    a lock keeps concurrent runs of the program from fetching twice.
    """
    root = cache_root or default_cache_root()
    dest = root / source.commit
    if (dest / COMPLETE_MARK).is_file():
        return dest
    missing = [tool for tool in FETCH_TOOLS if host.current.which(tool) is None]
    if missing:
        raise ChartFetchFailed(
            f"Kamaji's charts ({source.tag}) are not in {root} yet, and fetching them needs "
            f"{' and '.join(missing)} on PATH (install: see README, Host prerequisites)."
        )
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        try:
            result = host.current.run(
                ["bash", "-c", chart_fetch_script()],
                env=fetch_environment(source, root, origin),
                timeout=FETCH_TIMEOUT_SECONDS,
            )
        except host.CommandTimedOut as error:
            raise ChartFetchFailed(f"fetching Kamaji's charts ({source.tag}) timed out") from error
    if result.returncode != 0 or result.stdout != f"{dest}\n":
        raise ChartFetchFailed(
            f"fetching Kamaji's charts ({source.tag}, {source.commit}) failed:\n"
            + result.stderr.strip()
        )
    return dest
