"""Runs the Pulumi program under mocks and records every registration, edges and secrets included.

Pulumi's mock monitor sees each RegisterResource request; a subclass keeps what the tests
need: type, name, parent, dependencies (explicit and through inputs), provider, inputs, and
which inputs were sent as secrets. No CLI, no engine, no network.

Every run also plays the machine the program runs on (`MockHost`, in place of
components/host.py's `current`): Docker's default bridge answers what the test says, Kamaji's
charts are in a cache of the harness's own, and any other command fails the run. So no run
reaches the Docker daemon, GitHub or the checkout's cache, whatever the machine has.

A preview can start from a partial state (`existing`): what is not in it is a create, which in
a real preview has no ID and no computed outputs yet, and a `Resource.get` of an object that is
not in the cluster fails the way the engine fails it (finding B2).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import functools
import json
import os
import runpy
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks

from components import host as program_host
from components.platform import kamaji_chart
from labconfig.kamaji_sources import KAMAJI_SOURCES

PROJECT_DIR = Path(__file__).resolve().parents[2]
PROJECT = "kamaji-hami-lab"
# What the CLI names the organization of a stack on a file backend.
ORGANIZATION = "organization"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_MARK = "1b47061264138c4ac30d75fd1eb44270"

# A tenant token Secret as its controller fills it (base64, as Secret data).
FAKE_READER_TOKEN_DATA = {
    "token": base64.b64encode(b"fake-reader-token").decode(),
    "ca.crt": base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfake\n").decode(),
    "namespace": base64.b64encode(b"kube-system").decode(),
}
FAKE_KUBECONFIG = yaml.safe_dump(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "fake-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
)


# What `docker network inspect bridge -f '{{ index .Options "..mtu" }}'` prints when the
# default bridge sets no MTU (kind then sets none either).
NO_MTU = "<no value>"
DOCKER_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)


class UnexpectedHostCommand(AssertionError):
    """The program ran a command on its host that MockHost does not play."""


@functools.cache
def prepared_cache() -> Path:
    """The program's cache as on a machine that fetched every pinned Kamaji commit before:
    one per process, removed at exit."""
    cache = Path(tempfile.mkdtemp(prefix="kamaji-hami-lab-cache-"))
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    for source in KAMAJI_SOURCES.values():
        charts = cache / kamaji_chart.CACHE_IN_PROJECT.name / source.commit
        for chart in ("kamaji", "kamaji-crds"):
            (charts / chart).mkdir(parents=True)
        (charts / kamaji_chart.COMPLETE_MARK).touch()
    return cache


def prepared_chart_cache() -> Path:
    """Where the program finds Kamaji's charts in every run (the releases name this path)."""
    return prepared_cache() / kamaji_chart.CACHE_IN_PROJECT.name


@dataclass
class MockHost(program_host.Host):
    """The machine the program runs on, as every run plays it (components/host.py).

    `bridge_mtu` is what Docker's default bridge reports (None: the daemon does not answer);
    `cache` is the program's cache, by default one holding every pinned Kamaji commit. Any
    other command raises UnexpectedHostCommand: a chart fetch cannot run here. `which` is the
    real PATH lookup, which reaches nothing; a test that sets PATH decides what it finds.
    """

    bridge_mtu: str | None = NO_MTU
    cache: Path = field(default_factory=prepared_cache)
    commands: list[list[str]] = field(default_factory=list)

    def run(
        self, argv: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.commands.append(argv)
        if argv[:4] == ["docker", "network", "inspect", "bridge"]:
            if self.bridge_mtu is None:
                return subprocess.CompletedProcess(argv, 1, "", DOCKER_DOWN)
            return subprocess.CompletedProcess(argv, 0, f"{self.bridge_mtu}\n", "")
        raise UnexpectedHostCommand(
            f"the program ran `{shlex.join(argv)[:200]}` on its host under the mocks; "
            "MockHost (tests/support/pulumi_harness.py) plays only `docker network inspect`"
        )

    def cache_dir(self) -> Path:
        return self.cache


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str
    provider: str
    dependencies: list[str]
    inputs: dict[str, Any]
    secret_inputs: set[str]
    secret_outputs: list[str]
    custom: bool
    read: bool = False
    # Options the engine plans a replacement with (M1): delete-before-replace, and which
    # resources each input came from (their dependents are deleted first).
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    read_id: str = ""  # a read's ID as the engine got it (rpc.UNKNOWN while unknown)

    def is_secret(self, path: str) -> bool:
        """True when `path` (e.g. `connection.privateKey`) or an enclosing value was secret."""
        return any(path == p or path.startswith(f"{p}.") for p in self.secret_inputs)


@dataclass
class ProgramRun:
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)  # stack outputs, resolved
    secret_outputs: set[str] = field(default_factory=set)  # names of secret stack outputs
    exit_code: int | None = None  # set when the program exited (run_program(allow_exit=True))

    def of_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> Registration:
        matches = [r for r in self.resources if r.name == name]
        assert len(matches) == 1, f"{len(matches)} resources named {name!r}"
        return matches[0]

    def by_urn(self) -> dict[str, Registration]:
        return {r.urn: r for r in self.resources}

    def ancestors(self, urn: str) -> Iterator[str]:
        index = self.by_urn()
        while urn in index and index[urn].parent:
            urn = index[urn].parent
            yield urn

    def subtree(self, root_name: str) -> list[Registration]:
        root = self.named(root_name).urn
        return [r for r in self.resources if r.urn == root or root in self.ancestors(r.urn)]

    def edges(self, registration: Registration) -> list[str]:
        """Direct edges: explicit and input dependencies, and the provider it is managed by."""
        edges = list(registration.dependencies)
        if registration.provider:  # "<provider urn>::<provider id>"
            edges.append(registration.provider.rsplit("::", 1)[0])
        return edges

    def depends_on(self, urn: str) -> set[str]:
        """Everything `urn` waits for, directly or transitively."""
        index = self.by_urn()
        seen: set[str] = set()
        stack = self.edges(index[urn])
        while stack:
            dep = stack.pop()
            if dep in seen or dep not in index:
                continue
            seen.add(dep)
            stack.extend(self.edges(index[dep]))
        return seen


def _secret_paths(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_MARK:
            yield path
            return
        for key, item in value.items():
            yield from _secret_paths(item, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _secret_paths(item, f"{path}[{i}]")


def _unwrap_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_MARK:
            return _unwrap_secrets(value.get("value"))
        return {k: _unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap_secrets(v) for v in value]
    return value


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, run: ProgramRun) -> None:
        super().__init__(mocks)
        self.run = run

    def _record(self, request, urn: str, **fields: Any) -> None:
        """What both a registration and a read carry: identity, edges and the inputs sent."""
        self.run.resources.append(
            Registration(
                urn=urn,
                type=request.type,
                name=request.name,
                parent=request.parent,
                provider=request.provider,
                dependencies=list(request.dependencies),
                inputs=_unwrap_secrets(self.resources[urn].state),
                **fields,
            )
        )

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            raw = json_format.MessageToDict(request.object)
            self._record(
                request,
                response.urn,
                secret_inputs=set(_secret_paths(raw)),
                secret_outputs=list(request.additionalSecretOutputs),
                custom=request.custom,
                delete_before_replace=request.deleteBeforeReplace,
                ignore_changes=list(request.ignoreChanges),
                property_dependencies={
                    key: list(deps.urns) for key, deps in request.propertyDependencies.items()
                },
            )
        return response

    def ReadResource(self, request):
        response = super().ReadResource(request)
        self._record(
            request,
            response.urn,
            secret_inputs=set(),
            secret_outputs=[],
            custom=True,
            read=True,
            read_id=request.id,
        )
        return response


class MissingResource(Exception):
    """What the engine's ReadStep reports when the provider finds no object with that ID."""


# What the program's reads may find in a cluster, by (type, id), from the resource whose
# creation puts it there. Kamaji writes a TenantControlPlane's admin kubeconfig Secret.
def _objects_left_by(type_: str, inputs: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    if type_ == "kubernetes:kamaji.clastix.io/v1alpha1:TenantControlPlane":
        meta = inputs["metadata"]
        secret_id = f"{meta['namespace']}/{meta['name']}-admin-kubeconfig"
        data = {"admin.conf": base64.b64encode(FAKE_KUBECONFIG.encode()).decode()}
        return {("kubernetes:core/v1:Secret", secret_id): {"data": data}}
    return {}


class LabMocks(pulumi.runtime.Mocks):
    """Plays the providers and the engine's plan.

    In an `up` every resource is created and returns what a real create computes. In a preview
    only the resources `existing(name)` accepts are in the state: they keep their ID and
    outputs; every other one is a create, which the engine previews without an ID and with
    only its inputs. A read (`Resource.get`) is skipped when its ID is unknown, as the engine's
    ReadStep skips it, and otherwise finds only an object some existing resource left in the
    cluster; anything else fails with the engine's "does not exist".
    """

    def __init__(
        self,
        preview: bool,
        existing: Callable[[str], bool],
        last_outputs: dict[str, Any] | None = None,
    ) -> None:
        self.preview = preview
        self.existing = existing
        # The stack's own outputs of its last deployment (UpgradeGuard reads them by a
        # reference named org/project/stack); none: a stack never deployed.
        self.last_outputs = last_outputs or {}
        self.cluster: dict[tuple[str, str], dict[str, Any]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.resource_id:  # the program imports nothing: an ID is a read
            return self._read(args)
        id_, state = self._create(args)
        in_state = not self.preview or self.existing(args.name)
        if in_state:
            self.cluster.update(_objects_left_by(args.typ, state))
        if args.custom and not in_state:
            return "", dict(args.inputs)  # a create in preview: no ID, nothing computed yet
        return id_, state

    def _read(self, args: pulumi.runtime.MockResourceArgs):
        if args.typ == "pulumi:pulumi:StackReference":  # another stack: there by precondition
            return self._create(args)
        if args.resource_id == pulumi.runtime.rpc.UNKNOWN:
            return "", {}  # ReadStep.Apply: "the only time we can't run is if the ID is unknown"
        found = self.cluster.get((args.typ, args.resource_id))
        if found is None:
            raise MissingResource(f"resource '{args.resource_id}' does not exist")
        return args.resource_id, {**args.inputs, **found}

    def _create(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        name = args.name
        if args.typ == "command:local:Command":
            state["stdout"] = FAKE_KUBECONFIG if name.endswith("-kind") else ""
            state["stderr"] = ""
        elif args.typ == "docker:index/remoteImage:RemoteImage":
            state["imageId"] = "sha256:" + "0" * 64
        elif args.typ == "docker:index/network:Network":
            state.setdefault("name", name)
        elif (
            args.typ == "kubernetes:core/v1:Secret"
            and args.inputs.get("type") == "kubernetes.io/service-account-token"
        ):
            # What the tenant's token controller writes, and the provider waits for.
            state["data"] = FAKE_READER_TOKEN_DATA
        elif args.typ == "pulumi:pulumi:StackReference" and args.inputs["name"] == (
            f"{ORGANIZATION}/{PROJECT}/{pulumi.get_stack()}"
        ):
            state["outputs"] = self.last_outputs
            state["secretOutputNames"] = []
        elif args.typ == "pulumi:pulumi:StackReference":
            state["outputs"] = {"managementKubeconfig": FAKE_KUBECONFIG}
            state["secretOutputNames"] = ["managementKubeconfig"]
        return f"{name}-id", state

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def _collect_stack_outputs(run: ProgramRun) -> None:
    root = pulumi.runtime.settings.get_root_resource()
    for key, value in getattr(root, "outputs", {}).items():
        output = pulumi.Output.from_input(value)
        run.outputs[key] = _await(output.future())
        if _await(output.is_secret()):
            run.secret_outputs.add(key)


def _await(awaitable: Any) -> Any:
    return pulumi.runtime.mocks._sync_await(awaitable)  # type: ignore[attr-defined]


# Keys a user sets with `pulumi config set --secret` (Pulumi.gpu.yaml says how).
SECRET_CONFIG_KEYS = ("managementKubeconfig", "sshPrivateKey")
CONFIG_ENV_VARS = ("PULUMI_CONFIG", "PULUMI_CONFIG_SECRET_KEYS")


def pass_config(
    config: dict[str, Any], secret_keys: Collection[str] | None, automation: bool
) -> dict[str, str | None]:
    """Hands the stack config to the program as Pulumi does; returns the env vars to restore.

    CLI: pulumi-language-python sets PULUMI_CONFIG and PULUMI_CONFIG_SECRET_KEYS, and its
    exec script passes both to `set_all_config` (pulumi/pulumi
    sdk/python/cmd/pulumi-language-python-exec). Automation API inline program:
    `set_all_config(request.config, request.configSecretKeys)`, no env var
    (sdk/python/lib/pulumi/automation/_server.py). `secret_keys` default: the
    SECRET_CONFIG_KEYS present, as a user who followed the docs set them.
    """
    saved = {name: os.environ.pop(name, None) for name in CONFIG_ENV_VARS}
    values = json.loads(config_env(config))
    if secret_keys is None:
        secret_keys = [key for key in SECRET_CONFIG_KEYS if key in config]
    secrets = [f"{PROJECT}:{key}" for key in secret_keys]
    if automation:
        pulumi.runtime.set_all_config(values, secrets)
    else:
        os.environ["PULUMI_CONFIG"] = json.dumps(values)
        os.environ["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(secrets)
        env = pulumi.runtime.get_config_env()
        pulumi.runtime.set_all_config(env, pulumi.runtime.get_config_secret_keys_env())
    return saved


def _restore_env(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def config_env(config: dict[str, Any]) -> str:
    """PULUMI_CONFIG as the language host passes it: structured values are JSON text."""
    return json.dumps(
        {
            f"{PROJECT}:{key}": value if isinstance(value, str) else json.dumps(value)
            for key, value in config.items()
        }
    )


def run_program(
    config: dict[str, Any],
    *,
    stack: str = "lab",
    preview: bool = False,
    existing: Collection[str] | Callable[[str], bool] | None = None,
    allow_exit: bool = False,
    secret_keys: Collection[str] | None = None,
    automation: bool = False,
    host: MockHost | None = None,
    last_outputs: dict[str, Any] | None = None,
) -> ProgramRun:
    """Runs __main__.py with this stack config and returns what it registered.

    The config reaches the program as under the CLI, or with `automation` as under the
    Automation API (`pass_config`); `secret_keys` are the keys set as secrets.

    `existing` (preview only) names the resources a previous `up` left in the state, or decides
    by name; by default all of them, as in a preview of a lab that is fully up.

    `host` plays the machine (a default MockHost when None): the real one is never asked.
    `last_outputs`: the stack's own outputs as its last deployment left them.
    """
    run = ProgramRun()
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(_ignore_failed_reads)
    asyncio.set_event_loop(loop)
    old_env = pass_config(config, secret_keys, automation)
    old_cwd = Path.cwd()
    old_host = program_host.current
    try:
        program_host.current = host if host is not None else MockHost()
        os.chdir(PROJECT_DIR)
        mocks = LabMocks(preview, _in_state(existing), last_outputs)
        # set_mocks makes a root Stack only when there is none: without this, every run in a
        # process parented its components to the first run's stack (seen in the snapshots).
        pulumi.runtime.settings.ROOT.set(None)
        pulumi.runtime.set_mocks(
            mocks,
            project=PROJECT,
            stack=stack,
            preview=preview,
            monitor=RecordingMonitor(mocks, run),
            organization=ORGANIZATION,
        )
        # set_mocks keeps the task set of the last run; a failed run leaves tasks of its
        # (now closed) loop there, which the next run would wait for.
        pulumi.runtime.settings.SETTINGS.outputs = set()

        exits: list[SystemExit] = []

        def program() -> None:
            # The program exits on a config error; re-raised below, once the runtime's task
            # has finished cleanly (asyncio would otherwise log it as never retrieved).
            try:
                runpy.run_path(str(PROJECT_DIR / "__main__.py"), run_name="__main__")
            except SystemExit as exit_:
                exits.append(exit_)

        pulumi.runtime.mocks._sync_await(  # type: ignore[attr-defined]
            pulumi.runtime.stack.run_pulumi_func(program)
        )
        if exits and not allow_exit:
            raise exits[0]
        if exits:
            run.exit_code = exits[0].code  # type: ignore[assignment]
            return run
        _collect_stack_outputs(run)
    finally:
        program_host.current = old_host
        os.chdir(old_cwd)
        _restore_env(old_env)
        _cancel_leftover_tasks(loop)
        loop.close()
    return run


def _ignore_failed_reads(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A read failed on purpose (MissingResource) leaves futures nobody awaits.

    asyncio logs each when the garbage collector finalizes it, with a traceback whose
    formatting calls ast.parse (Python 3.11's caret anchors). A collection can run in the
    middle of another ast.parse (pytest rewriting a test module's asserts), and that nested
    call breaks CPython 3.11's AST recursion bookkeeping: "SystemError: AST constructor
    recursion depth mismatch" ended whole test sessions. The expected failures stay silent:
    the reads, and a program stopped by a RunError (UpgradeGuard's refusals), which
    run_program raises anyway.
    """
    if not isinstance(context.get("exception"), (MissingResource, pulumi.RunError)):
        loop.default_exception_handler(context)


def _cancel_leftover_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """A run that failed (a read of a missing object) leaves outputs waiting on it."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


def _in_state(existing: Collection[str] | Callable[[str], bool] | None) -> Callable[[str], bool]:
    if existing is None:
        return lambda _name: True
    if callable(existing):
        return existing
    names = frozenset(existing)
    return names.__contains__


def stack_config(stack: str) -> dict[str, Any]:
    """The config of Pulumi.<stack>.yaml, without the project prefix."""
    data = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())["config"]
    return {key.split(":", 1)[1]: value for key, value in data.items()}


def lab_stack_config() -> dict[str, Any]:
    return stack_config("lab")


def integral_numbers(value: Any) -> Any:
    """Registered inputs as a provider sends them: numbers cross Pulumi's protobuf Struct as
    doubles, and the provider sends integral ones as integers (Go's JSON encoding of the
    float64 6443 is `6443`), which is what the API server decodes and stores."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral_numbers(item) for item in value]
    return value


def kubernetes_object(registration: Registration) -> dict[str, Any]:
    """What pulumi-kubernetes sends for a registration: its inputs, with integral numbers, and
    the kind and apiVersion of its type token (`kubernetes:apps/v1:Deployment`)."""
    kind = registration.type.rsplit(":", 1)[1].removesuffix("Patch")
    group_version = registration.type.split(":")[1]
    manifest = integral_numbers(registration.inputs)
    manifest["kind"] = kind
    manifest["apiVersion"] = group_version.removeprefix("core/")
    return manifest
