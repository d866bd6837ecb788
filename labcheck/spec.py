"""The labcheck spec: the `labcheckSpec` stack output, validated with pydantic.

The spec is a Pulumi secret (it holds admin kubeconfigs), so error messages name the bad
key and the rule it broke but never echo the value.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Sequence
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

GpuMode = Literal["simulated", "nvml-mock", "real"]
GpuSharing = Literal["hami", "dra"]
NodePolicy = Literal["binpack", "spread"]
GpuPolicy = Literal["binpack", "spread", "topology-aware", "mutex"]

PULUMI_TIMEOUT_SECONDS = 120
# What `pulumi stack output` says of a stack that no `pulumi up` has finished yet (upstream
# fact `pulumi-stack-output-not-up-yet`): the outputs come from that update, so say so.
NOT_UP_YET = ("does not have output property '", "no stack named ")


class SpecError(Exception):
    """The spec could not be loaded or is invalid; the message is safe to print."""


class NotUpYet(SpecError):
    """`pulumi stack output` found no stack, or not the output asked for: no `pulumi up` has
    finished. Each caller adds what the user does next."""


class _Model(BaseModel):
    # extra="forbid": a typo in the lead's output must fail loudly, not be ignored.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


def _parse_kubeconfig(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        doc = value
    elif isinstance(value, str):
        try:
            doc = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError("is not valid YAML") from None
    else:
        raise ValueError("must be a kubeconfig YAML string")
    if not isinstance(doc, dict):
        raise ValueError("must be a kubeconfig mapping")
    for key in ("clusters", "users", "contexts"):
        if not isinstance(doc.get(key), list) or not doc[key]:
            raise ValueError(f"kubeconfig has no '{key}' list")
    return doc


class Card(_Model):
    type: str = Field(min_length=1)
    devmem: int = Field(gt=0, description="MB per card")
    devcore: int = Field(gt=0, le=100)
    count: int = Field(gt=0, description="split count per card")

    @field_validator("type")
    @classmethod
    def _nvidia(cls, v: str) -> str:
        # HAMi's NVIDIA backend ignores cards whose type lacks NVIDIA (lab-facts 6.1).
        if "NVIDIA" not in v:
            raise ValueError("must contain 'NVIDIA' (HAMi ignores other cards)")
        return v


class SchedulerPolicy(_Model):
    node: NodePolicy = "binpack"
    gpu: GpuPolicy = "spread"


class PodGroup(_Model):
    """The pod-group label the tenant's API server gives GPU pods HAMi places, so that HAMi's
    Bind waits for its node lock (docs/placement-time.md)."""

    label: str = Field(min_length=1)
    value: str = Field(min_length=1)


class Quota(_Model):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)
    gpumem_mb: int = Field(gt=0, alias="gpumemMB")


class Tenant(_Model):
    name: str = Field(min_length=1)
    namespace: str = Field(min_length=1)
    kubeconfig: dict[str, Any]
    address: str = Field(min_length=1)
    port: int = Field(gt=0, lt=65536)
    nodes: list[str] = Field(min_length=1)
    gpu_mode: GpuMode
    # hami: HAMi shares the cards; dra: Kubernetes DRA with HAMi-DRA (HAMi's checks do not apply)
    gpu_sharing: GpuSharing = "hami"
    gpus: dict[str, list[Card]] = Field(default_factory=dict)
    scheduler_policy: SchedulerPolicy = Field(default_factory=SchedulerPolicy)
    quota: Quota | None = None
    # None: the tenant's version serves no admission policy the lab switches on.
    lock_wait: PodGroup | None = None
    # Where the HAMi release (webhook Service, scheduler) runs; the lab installs it here.
    hami_namespace: str = Field(default="kube-system", min_length=1)
    # The version the stack gives the tenant (None: a spec written before it was carried).
    kubernetes_version: str | None = None

    @field_validator("kubeconfig", mode="before")
    @classmethod
    def _kc(cls, v: Any) -> dict[str, Any]:
        return _parse_kubeconfig(v)

    @model_validator(mode="after")
    def _gpu_nodes_known(self) -> Tenant:
        unknown = sorted(set(self.gpus) - set(self.nodes))
        if unknown:
            raise ValueError(f"gpus lists nodes not in 'nodes': {', '.join(unknown)}")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError("nodes has duplicates")
        return self

    @property
    def endpoint(self) -> str:
        return f"{self.address}:{self.port}"

    def gpu_nodes(self) -> list[str]:
        return [n for n in self.nodes if self.gpus.get(n)]


class Management(_Model):
    kubeconfig: dict[str, Any]
    kamaji_namespace: str = "kamaji-system"
    datastore: str = "default"

    @field_validator("kubeconfig", mode="before")
    @classmethod
    def _kc(cls, v: Any) -> dict[str, Any]:
        return _parse_kubeconfig(v)


# Budget per pod of the node-lock burst. Measured against the real HAMi v2.10.0 on one node
# (upstream-findings D5/D6): chart-default client rate (5 QPS) 5 pods 10-20 s, 10 pods 33-35 s,
# 20 pods 82-86 s (~4.3 s per pod at worst); with --kube-qps=50 --kube-burst=100 the last of
# 20 pods took 53 s (2.65 s per pod, kube-scheduler backoff). 5 s per pod covers every measured
# burst even at the default rate and leaves ~2x headroom over the tuned one.
LOCK_BURST_SECONDS_PER_POD = 5
LOCK_BURST_MIN_DEFAULT_SECONDS = 60


def lock_burst_budget(pods: int) -> float:
    """The default lockBurstSeconds: 5 s per pod, never below the historical 60 s."""
    return max(LOCK_BURST_MIN_DEFAULT_SECONDS, LOCK_BURST_SECONDS_PER_POD * pods)


class Timeouts(_Model):
    # Upper bounds keep every wait finite even with a fat-fingered spec.
    api_seconds: float = Field(default=10, gt=0, le=300)
    pod_seconds: float = Field(default=90, gt=0, le=1800)
    lock_burst_pods: int = Field(default=5, ge=2, le=50)
    # When omitted: lock_burst_budget(lockBurstPods), filled in before validation.
    lock_burst_seconds: float = Field(gt=0, le=1800)

    @model_validator(mode="before")
    @classmethod
    def _scale_burst_budget(cls, data: Any) -> Any:
        if not isinstance(data, dict) or {"lockBurstSeconds", "lock_burst_seconds"} & set(data):
            return data
        pods = data.get("lockBurstPods", data.get("lock_burst_pods", 5))
        valid = isinstance(pods, int) and not isinstance(pods, bool)
        # An invalid lockBurstPods is reported by its own field; the floor avoids a second error.
        return {**data, "lockBurstSeconds": lock_burst_budget(pods if valid else 0)}

    @field_validator("lock_burst_seconds")
    @classmethod
    def _budget_fits_the_burst(cls, v: float, info: ValidationInfo) -> float:
        pods = info.data.get("lock_burst_pods")
        if pods is not None and v < LOCK_BURST_SECONDS_PER_POD * pods:
            raise ValueError(
                f"must be at least {LOCK_BURST_SECONDS_PER_POD} s per pod of lockBurstPods "
                f"({LOCK_BURST_SECONDS_PER_POD * pods} s for {pods} pods): HAMi binds about "
                "one pod every 2.5-4.3 s on one node"
            )
        return v


class RegistryFile(_Model):
    """One file the program writes into a node for the site's mirrors, by its digests: the spec
    never holds a file's text (a hosts.toml may carry a mirror's credentials)."""

    path: str = Field(pattern=r"^/[^\s]+$")
    mode: str = Field(pattern=r"^[0-7]{3,4}$")  # as `stat -c %a` prints it
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    # Of the text with every Authorization header's value redacted (the pod redacts the same).
    redacted_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class RegistryFiles(_Model):
    """The registry files of a mirrored site and the nodes that hold them: node name -> the
    Command that writes them there (what to re-run when they differ)."""

    files: list[RegistryFile] = Field(min_length=1)
    management_nodes: dict[str, str] = Field(default_factory=dict)
    tenant_nodes: dict[str, dict[str, str]] = Field(default_factory=dict)


class Monitoring(_Model):
    """The lab's Prometheus: its HTTP API's path on the management cluster's API server."""

    prometheus: str = Field(min_length=1)
    scrape_interval: str = "30s"
    jobs: dict[str, str] = Field(default_factory=dict)  # scrape job by tenant
    # PromQL per ledger column, over `$__range` (builders/slice_rules.py ledger_queries).
    ledger: dict[str, str] = Field(default_factory=dict)
    slices: dict[str, str] = Field(default_factory=dict)  # `memory`, `cores`: the lab: series

    def over(self, window: str) -> dict[str, str]:
        """The ledger's queries over `window` (a Prometheus duration)."""
        return {column: q.replace("$__range", window) for column, q in self.ledger.items()}


class Spec(_Model):
    stack: str = Field(min_length=1)
    management: Management
    tenants: list[Tenant] = Field(min_length=1)
    timeouts: Timeouts = Field(default_factory=lambda: Timeouts.model_validate({}))
    test_image: str = "registry.k8s.io/pause:3.10"
    tools_image: str = "busybox:1.37.0"
    # Only used by the real-GPU memory check: an image that has nvidia-smi.
    smi_image: str = "nvidia/cuda:12.4.1-base-ubuntu22.04"
    # A mirrored site's mirror per registry (`*`: every other), from the stack's registryMirrors.
    registry_mirrors: dict[str, str] = Field(default_factory=dict)
    # With mirrors: what each node must hold (labcheck/checks/registries.py reads it there).
    registry_files: RegistryFiles | None = None
    monitoring: Monitoring | None = None  # a stack with monitoring off has none

    @model_validator(mode="after")
    def _unique(self) -> Spec:
        names = [t.name for t in self.tenants]
        if len(set(names)) != len(names):
            raise ValueError("tenant names must be unique")
        unknown = sorted(set(self.registry_files.tenant_nodes) - set(names)) if (
            self.registry_files
        ) else []  # fmt: skip
        if unknown:
            raise ValueError(f"registryFiles.tenantNodes names no tenant: {', '.join(unknown)}")
        owner: dict[str, str] = {}
        for t in self.tenants:
            for n in t.nodes:
                if n in owner:
                    raise ValueError(f"node {n} is listed for {owner[n]} and {t.name}")
                owner[n] = t.name
        return self

    def tenant(self, name: str) -> Tenant:
        for t in self.tenants:
            if t.name == name:
                return t
        raise KeyError(name)


def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(spec)"


def parse_spec(data: Any, source: str = "labcheckSpec") -> Spec:
    """Validate a decoded spec (a dict, or a JSON string that decodes to one)."""
    if isinstance(data, (str, bytes)):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{source}: not JSON ({exc.msg} at line {exc.lineno})") from None
    # pulumi.Output.json_dumps exports a JSON string; --json then wraps it once more.
    if isinstance(data, str):
        return parse_spec(data, source)
    if not isinstance(data, dict):
        raise SpecError(f"{source}: expected a JSON object, got {type(data).__name__}")
    try:
        return Spec.model_validate(data)
    except ValidationError as exc:
        # Never include input values: the spec carries credentials.
        lines = [f"  {_loc(e['loc'])}: {e['msg']}" for e in exc.errors(include_input=False)]
        raise SpecError(f"{source} is invalid:\n" + "\n".join(lines)) from None


Runner = Callable[..., subprocess.CompletedProcess[str]]


def pulumi_command(stack: str, output: str | None = "labcheckSpec") -> list[str]:
    """`pulumi stack output` of one output, or of all of them as one JSON object (None)."""
    return [
        "pulumi",
        "stack",
        "output",
        *([output] if output else []),
        "--show-secrets",
        "--json",
        "--stack",
        stack,
    ]


def read_stack_output(
    stack: str,
    output: str | None = "labcheckSpec",
    run: Runner = subprocess.run,
    cwd: str | None = None,
) -> str:
    """The JSON text the Pulumi CLI prints (the user's own login and passphrase); SpecError,
    NotUpYet before any `pulumi up`, with the CLI's last line of error and never a value."""
    cmd = pulumi_command(stack, output)
    try:
        proc = run(
            cmd,
            capture_output=True,
            text=True,
            timeout=PULUMI_TIMEOUT_SECONDS,
            cwd=cwd,
            check=False,
        )
    except FileNotFoundError:
        raise SpecError("pulumi CLI not found on PATH (use --spec FILE instead)") from None
    except subprocess.TimeoutExpired:
        raise SpecError(f"'{' '.join(cmd)}' took more than {PULUMI_TIMEOUT_SECONDS}s") from None
    if proc.returncode != 0:
        err = (proc.stderr or "").strip().splitlines()
        tail = err[-1] if err else f"exit code {proc.returncode}"
        shown = " ".join(cmd[: cmd.index("--show-secrets")])
        failed = f"'{shown} --stack {stack}' failed: {tail}"
        if any(text in tail for text in NOT_UP_YET):
            raise NotUpYet(failed)
        raise SpecError(failed)
    return proc.stdout


def load_from_stack(stack: str, run: Runner = subprocess.run, cwd: str | None = None) -> Spec:
    """Read the spec with the Pulumi CLI (the user's own login and passphrase)."""
    try:
        text = read_stack_output(stack, run=run, cwd=cwd)
    except NotUpYet as exc:
        raise SpecError(
            f"{exc}\nThe spec is an output of the stack's `pulumi up`: bring the lab up first "
            f"(make up STACK={stack}), or give a saved spec with --spec FILE."
        ) from None
    return parse_spec(text, f"stack {stack} output labcheckSpec")


def load_from_file(path: str) -> Spec:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise SpecError(f"cannot read spec file {path}: {exc.strerror}") from None
    return parse_spec(text, path)


def load_from_env(var: str, environ: dict[str, str] | None = None) -> Spec:
    env = os.environ if environ is None else environ
    text = env.get(var)
    if not text:
        raise SpecError(f"environment variable {var} is not set or empty")
    return parse_spec(text, f"${var}")
