"""Where the Kamaji charts come from: the clastix/kamaji git tag of the image that runs.

The published chart is `0.0.0+latest`, republished on every master push, so its templates,
RBAC, CRDs and etcd subchart are whatever master was on deploy day. The charts at the tag
of `kamajiImageTag` are the ones that image was released with. They are fetched on the
user's host when the stack is deployed (nothing is vendored) and checked against the
commit pinned here; `helm dependency build` then fetches the etcd subchart at the version
the tag's `Chart.lock` names, not the newest that `>=0.15.0` would allow.
"""

from __future__ import annotations

from dataclasses import dataclass

from components.scripts import STRICT

KAMAJI_GIT_URL = "https://github.com/clastix/kamaji.git"
# The cache is keyed by commit, so a tag that moves cannot change what a stack installs.
CACHE_DIR = '"${XDG_CACHE_HOME:-$HOME/.cache}/kamaji-hami-lab/kamaji"'


@dataclass(frozen=True)
class KamajiSource:
    tag: str
    commit: str  # what the tag pointed to when it was checked
    # git tree ids of charts/kamaji and charts/kamaji-crds at `commit`: content digests
    chart_tree: str
    crds_chart_tree: str
    etcd_chart_version: str  # kamaji-etcd in charts/kamaji/Chart.lock


# Checked in clastix/kamaji: `git rev-parse <tag>^{commit} <tag>:charts/kamaji ...`.
KAMAJI_SOURCES: dict[str, KamajiSource] = {
    "26.8.2-edge": KamajiSource(
        tag="26.8.2-edge",
        commit="ddbabd87ed0e8d7c319414383e153c46f21733a9",
        chart_tree="844f16ac9d4eaf0532b47f263f3ce2556d5633e5",
        crds_chart_tree="492465f5b4df1d06c3db5b3d444ecd11a32456a9",
        etcd_chart_version="0.15.0",
    ),
}


def kamaji_source(image_tag: str) -> KamajiSource:
    try:
        return KAMAJI_SOURCES[image_tag]
    except KeyError:
        known = ", ".join(sorted(KAMAJI_SOURCES))
        raise ValueError(
            f"no pinned chart source for Kamaji {image_tag!r} (known: {known}); add the tag's "
            "commit to KAMAJI_SOURCES in components/kamaji_chart.py"
        ) from None


def fetch_environment(source: KamajiSource) -> dict[str, str]:
    return {
        "KAMAJI_GIT_URL": KAMAJI_GIT_URL,
        "KAMAJI_TAG": source.tag,
        "KAMAJI_COMMIT": source.commit,
    }


def chart_fetch_script() -> str:
    """Puts charts/kamaji (with its locked subcharts) and charts/kamaji-crds of the pinned
    commit into the cache, once, and prints the directory that holds them (the only stdout).

    Needs git and helm. A private Helm repository config keeps the user's `helm repo` list
    untouched (`helm dependency build` only downloads from repositories it knows).
    """
    return (
        STRICT
        + f"cache={CACHE_DIR}\n"
        + """\
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
    echo "Review the new tag, then pin it in components/kamaji_chart.py." >&2
    exit 1
  fi
  export HELM_REPOSITORY_CONFIG="$work/repositories.yaml"
  export HELM_REPOSITORY_CACHE="$work/repository-cache"
  n=0
  for url in $(sed -n 's/^ *repository: *//p' "$work/src/charts/kamaji/Chart.lock" | sort -u); do
    n=$((n + 1))
    helm repo add "lock-$n" "$url" >&2
  done
  helm dependency build "$work/src/charts/kamaji" >&2
  rm -rf "$dest"
  mkdir -p "$dest"
  mv "$work/src/charts/kamaji" "$work/src/charts/kamaji-crds" "$dest/"
  touch "$dest/.complete"
fi
printf '%s\\n' "$dest"
"""
    )
