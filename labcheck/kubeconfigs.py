"""`python -m labcheck.kubeconfigs`: each tenant's admin kubeconfig, from the stack's outputs, in a
file only its owner can read (what `make kubeconfig` runs).

The stack exports them as one secret, `tenantKubeconfigs` (tenant -> kubeconfig YAML). Each file
gets one cluster, user and context, all three named after the tenant: the context is what a user
picks, and distinct cluster and user names keep `KUBECONFIG=a.yaml:b.yaml` from merging one
tenant's credentials into the other's entry (kubectl keeps the first entry of a name). stdout
carries only `export KUBECONFIG=...` lines, so `eval "$(make -s kubeconfig TENANT=...)"` works.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from .cluster import _current
from .spec import NotUpYet, Runner, SpecError, read_stack_output

OUTPUT = "tenantKubeconfigs"
EXIT_OK, EXIT_ERROR = 0, 1
# Owner only, from the first byte: the files are cluster-admin credentials.
DIR_MODE, FILE_MODE = 0o700, 0o600


class KubeconfigError(Exception):
    """What keeps a kubeconfig from being written; safe to print (it never holds a value)."""


def up_first(stack: str) -> str:
    return f"stack {stack} has no outputs yet: bring the lab up first: make up STACK={stack}"


def stack_kubeconfigs(stack: str, run: Runner = subprocess.run, cwd: str | None = None) -> Any:
    """tenant -> kubeconfig YAML, as the stack's last `pulumi up` exported it."""
    try:
        text = read_stack_output(stack, None, run=run, cwd=cwd)
    except NotUpYet:
        raise KubeconfigError(up_first(stack)) from None
    except SpecError as exc:
        raise KubeconfigError(str(exc)) from None
    try:
        outputs = yaml.safe_load(text)  # JSON is YAML; one parser for both the outer and inner
    except yaml.YAMLError:
        raise KubeconfigError(f"stack {stack}: `pulumi stack output --json` is not JSON") from None
    # A stack that exists but was never brought up prints `{}` (upstream fact
    # `pulumi-stack-output-all-json`); one without this output predates it.
    found = outputs.get(OUTPUT) if isinstance(outputs, dict) else None
    if not found:
        raise KubeconfigError(up_first(stack))
    if not isinstance(found, dict):
        raise KubeconfigError(f"stack {stack}: output {OUTPUT} is not a map of tenants")
    return found


def choose(kubeconfigs: dict[str, Any], tenant: str | None, stack: str) -> dict[str, Any]:
    if tenant is None:
        return kubeconfigs
    if tenant not in kubeconfigs:
        known = ", ".join(sorted(kubeconfigs))
        raise KubeconfigError(f"unknown tenant {tenant!r} in stack {stack} (its tenants: {known})")
    return {tenant: kubeconfigs[tenant]}


def renamed(text: Any, tenant: str) -> dict[str, Any]:
    """The kubeconfig's current context with its cluster and user, all named `tenant`."""
    try:
        doc = yaml.safe_load(text) if isinstance(text, str) else text
        context, cluster, user = _current(doc)
    except (yaml.YAMLError, ValueError, KeyError, TypeError, AttributeError):
        raise KubeconfigError(
            f"tenant {tenant}: its kubeconfig in {OUTPUT} has no usable current context"
        ) from None
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": tenant, "cluster": cluster.get("cluster", {})}],
        "users": [{"name": tenant, "user": user.get("user", {})}],
        "contexts": [{"name": tenant, "context": {**context, "cluster": tenant, "user": tenant}}],
        "current-context": tenant,
    }


def private_directory(directory: Path) -> None:
    """`directory` and each parent this creates at 0700; an existing `directory` made 0700."""
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    for path in reversed(missing):
        path.mkdir(mode=DIR_MODE)
    directory.chmod(DIR_MODE)  # mkdir's mode passes through the umask; an old one may be wider


def write_private(path: Path, text: str) -> None:
    """Write `text` to a new 0600 file beside `path`, then rename it over `path`: an old file
    (whatever its mode) is replaced whole, and no reader ever sees a wider mode or half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp's own mode, said here where it matters
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_kubeconfigs(
    kubeconfigs: dict[str, Any], tenant: str | None, stack: str, directory: Path
) -> list[Path]:
    """Every chosen tenant checked before the first file is written, so an error writes none."""
    docs = {name: renamed(text, name) for name, text in choose(kubeconfigs, tenant, stack).items()}
    private_directory(directory)
    paths = []
    for name, doc in docs.items():
        path = (directory / f"{name}.yaml").absolute()
        write_private(path, yaml.safe_dump(doc, sort_keys=False))
        paths.append(path)
    return paths


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m labcheck.kubeconfigs",
        description="Write each tenant's admin kubeconfig (read from the stack's outputs) to "
        "DIR/<tenant>.yaml, owner-only, and print an `export KUBECONFIG=...` line per tenant.",
    )
    p.add_argument("--stack", required=True, help="the Pulumi stack to read, e.g. lab")
    p.add_argument("--tenant", help="only this tenant (default: every tenant)")
    p.add_argument("--dir", type=Path, required=True, help="where to write, e.g. kubeconfigs/lab")
    p.add_argument("--cwd", help="Pulumi project directory (default: current)")
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    run: Runner = subprocess.run,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        found = stack_kubeconfigs(args.stack, run=run, cwd=args.cwd)
        paths = write_kubeconfigs(found, args.tenant, args.stack, args.dir)
    except KubeconfigError as exc:
        print(f"kubeconfig: {exc}", file=err)
        return EXIT_ERROR
    for path in paths:
        out.write(f"export KUBECONFIG={shlex.quote(str(path))}\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
