"""The workload mix file (YAML), validated with pydantic; errors name the field, e.g.
`mix.entries[2].gpumem: ...`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictInt,
    ValidationError,
    field_validator,
)

from labcheck.spec import Spec

# Pod names are <entry>-<index> (cap-<run id>-<entry>-<index> with --namespace, capacity/plan.py);
# in a DRA tenant they are part of each claim's name, which must stay within 63 characters.
NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,28}[a-z0-9])?$")
DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MAX_PODS = 500


class MixError(Exception):
    """The mix could not be read or is invalid; the message names the field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuMem(_Model):
    """A slice's memory: MB (`nvidia.com/gpumem`) or a percentage of the card it lands on
    (`nvidia.com/gpumem-percentage`, HAMi computes `card MB * pct / 100`)."""

    mb: int | None = None
    percent: int | None = None

    def __str__(self) -> str:
        return f"{self.percent}%" if self.percent is not None else f"{self.mb} MB"


def _gpumem(value: Any) -> GpuMem:
    if isinstance(value, GpuMem):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("MB must be a positive integer")
        return GpuMem(mb=value)
    if isinstance(value, str) and re.fullmatch(r"\s*\d+\s*%\s*", value):
        pct = int(value.strip().rstrip("%"))
        if not 1 <= pct <= 100:
            raise ValueError("a percentage of a card must be 1% to 100%")
        return GpuMem(percent=pct)
    raise ValueError("must be MB as an integer (6000) or a percentage of a card ('50%')")


def parse_duration(value: Any) -> int:
    """'8h', '90m', '1h30m', '2d', or a number of seconds -> seconds (> 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and value.strip() and (m := DURATION.match(value.strip())):
        d, h, mi, s = (int(g or 0) for g in m.groups())
        seconds = ((d * 24 + h) * 60 + mi) * 60 + s
    else:
        raise ValueError("must be a duration such as '8h', '90m', '1h30m', '2d' (or seconds)")
    if seconds <= 0:
        raise ValueError("must be longer than 0")
    return seconds


class Entry(_Model):
    tenant: str = Field(min_length=1)
    name: str
    count: StrictInt = Field(ge=1, le=MAX_PODS)
    gpumem: GpuMem
    gpucores: StrictInt = Field(default=0, ge=0, le=100, description="% of a card, 0: no limit")
    gpus: StrictInt = Field(default=1, ge=1, le=16, description="cards per pod, nvidia.com/gpu")
    duration: int | None = Field(default=None, description="seconds each pod would run")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME.match(v):
            raise ValueError(
                "must be 1-30 lowercase letters, digits or '-', starting and ending with a "
                "letter or digit (it becomes part of the pod names)"
            )
        return v

    @field_validator("gpumem", mode="before")
    @classmethod
    def _mem(cls, v: Any) -> GpuMem:
        return _gpumem(v)

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> int | None:
        return None if v is None else parse_duration(v)

    def whole_gpus(self) -> int:
        """Cards this entry needs without sharing: one whole card per requested GPU."""
        return self.count * self.gpus


class Mix(_Model):
    name: str = ""
    description: str = ""
    entries: list[Entry] = Field(min_length=1)
    # Set by in_tenants: the tenants the same entries run in, for a side-by-side report.
    _compared: tuple[str, ...] = PrivateAttr(default=())

    # On the field, not the model: the error names its key, mix.entries.
    @field_validator("entries")
    @classmethod
    def _unique(cls, entries: list[Entry]) -> list[Entry]:
        names = [e.name for e in entries]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"entry names must be unique: {', '.join(twice)}")
        total = sum(e.count for e in entries)
        if total > MAX_PODS:
            raise ValueError(f"{total} pods in all (count summed): at most {MAX_PODS} per run")
        return entries

    @property
    def tenants(self) -> list[str]:
        return list(dict.fromkeys(e.tenant for e in self.entries))

    def whole_gpus(self) -> int:
        return sum(e.whole_gpus() for e in self.entries)

    def pod_count(self) -> int:
        return sum(e.count for e in self.entries)

    @property
    def compared(self) -> tuple[str, ...]:
        return self._compared

    def in_tenants(self, tenants: Sequence[str]) -> Mix:
        """The same entries in each of `tenants` instead of the tenant each names: one mix on
        tenants with the same cards and another GPU-sharing mode, reported side by side."""
        names = list(dict.fromkeys(tenants))
        if len(names) < 2:
            raise MixError("--compare: name at least two tenants, separated by commas")
        total = self.pod_count() * len(names)
        if total > MAX_PODS:
            raise MixError(
                f"--compare: {total} pods in all ({self.pod_count()} per tenant): "
                f"at most {MAX_PODS} per run"
            )
        entries = [e.model_copy(update={"tenant": t}) for e in self.entries for t in names]
        out = self.model_copy(update={"entries": entries})
        out._compared = tuple(names)
        return out


def _loc(loc: Sequence[int | str]) -> str:
    out = "mix"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def parse_mix(data: Any, source: str = "mix") -> Mix:
    if not isinstance(data, dict):
        raise MixError(f"{source}: expected a mapping with 'entries', got {type(data).__name__}")
    try:
        return Mix.model_validate(data)
    except ValidationError as exc:
        lines = []
        for e in exc.errors(include_url=False):
            # A before-validator's ValueError reads "Value error, <text>": keep the text.
            msg = str(e["msg"]).removeprefix("Value error, ")
            lines.append(f"  {_loc(e['loc'])}: {msg}")
        raise MixError(f"{source} is invalid:\n" + "\n".join(lines)) from None


def load_mix(path: str) -> Mix:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise MixError(f"cannot read mix file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MixError(f"{path}: not YAML ({exc})") from None
    return parse_mix(data, path)


def check_tenants(mix: Mix, spec: Spec) -> None:
    """Every entry's tenant is one of the stack's, and has GPU nodes."""
    known = {t.name: t for t in spec.tenants}
    lines = []
    for i, e in enumerate(mix.entries):
        t = known.get(e.tenant)
        if t is None:
            lines.append(
                f"  mix.entries[{i}].tenant: no tenant {e.tenant!r} in stack {spec.stack} "
                f"(tenants: {', '.join(known)})"
            )
        elif not t.gpu_nodes():
            lines.append(f"  mix.entries[{i}].tenant: tenant {e.tenant} has no GPU node")
    if lines:
        raise MixError(f"the mix does not match stack {spec.stack}:\n" + "\n".join(lines))
