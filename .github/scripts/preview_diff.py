"""What a pull request changes in a stack, from two previews made from scratch (docs/workflows.md).

Where no backend holds the deployed stacks, the `preview` job previews each stack twice on
empty throwaway backends, the pull request's base and its head, each with
`pulumi preview --json` (fact `pulumi-preview-json-digest`), and compares the two plans:

- `diff_previews(base, head)` (pure): the resources only in head (added), only in base
  (removed), in both with other inputs (changed, input by input), the rest counted (unchanged),
  and the config keys whose values differ;
- `render(diff)` (pure): that comparison as markdown, for the job summary.

Both previews start from nothing, so every resource in either is a create: what differs is what
the two programs plan, not what `up` would change in a running lab. Three kinds of value cannot
be compared and are said so, not guessed at:

- a secret: the CLI writes it as `[secret]` (a value still in Pulumi's secret envelope is masked
  here too), so a change in a secret does not show;
- an unknown: an output of a resource not yet created; it stands as `(unknown until up)`;
- a preview id: pulumi-command makes up `<name><8 hex digits>` as the ID of each Command it
  would create, anew on every preview (fact `pulumi-command-preview-id-random`), and Kubernetes
  auto-names end the same way; each becomes `<name>[preview id]` on both sides before they are
  compared, so a trigger that carries one is not a change.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# pulumi/pulumi sdk v3.274.1 go/common/resource/sig/sig.go: how an unknown is serialised
# (UnknownStringValue) and the key of a secret's envelope (Key).
UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET = "[secret]"
PREVIEW_ID = "[preview id]"
# The provider's bookkeeping of which inputs it defaulted, not an input of the program.
BOOKKEEPING = frozenset({"__defaults"})
WIDTH = 100  # characters of a value shown; the rest is cut around what differs
CONTEXT = 24  # characters kept on each side of a difference in a cut value
MOST_INPUTS = 25  # changed inputs listed per resource; the rest counted


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # a key or list item one side does not have


@dataclass(frozen=True)
class Change:
    """One input (or config key) whose value differs: its path, base's value, head's."""

    path: str
    base: Any
    head: Any


@dataclass(frozen=True)
class Resource:
    urn: str
    type: str

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]


@dataclass(frozen=True)
class Changed:
    resource: Resource
    changes: tuple[Change, ...]


@dataclass(frozen=True)
class PreviewDiff:
    added: tuple[Resource, ...]
    removed: tuple[Resource, ...]
    changed: tuple[Changed, ...]
    unchanged: int
    config: tuple[Change, ...]

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.config)


@dataclass(frozen=True)
class _Planned:
    op: str
    type: str
    inputs: Any


def _digest(preview: str | Mapping[str, Any]) -> Mapping[str, Any]:
    return json.loads(preview) if isinstance(preview, str) else preview


def _planned(digest: Mapping[str, Any]) -> dict[str, _Planned]:
    """Each resource the preview leaves in the stack, by URN: the last step with a new state."""
    planned: dict[str, _Planned] = {}
    for step in digest.get("steps") or ():
        state = step.get("newState")
        if state is None:  # a delete: the resource is gone after it
            planned.pop(step["urn"], None)
            continue
        planned[step["urn"]] = _Planned(step["op"], state.get("type", ""), state.get("inputs", {}))
    return planned


def _names(*plans: Mapping[str, _Planned]) -> set[str]:
    return {urn.rsplit("::", 1)[-1] for plan in plans for urn in plan}


def preview_id_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """`<name>` or `<name>-` then 8 hex digits, where `<name>` is a resource's name: an ID or
    an auto-name the preview made up."""
    ordered = sorted({name for name in names if name}, key=len, reverse=True)
    if not ordered:
        return None
    alternatives = "|".join(map(re.escape, ordered))
    return re.compile(rf"(?<![\w.-])({alternatives})-?[0-9a-f]{{8}}(?![0-9A-Za-z])")


def normalise(value: Any, ids: re.Pattern[str] | None) -> Any:
    """Secrets masked, preview ids replaced, the provider's bookkeeping dropped."""
    if isinstance(value, dict):
        if SECRET_SIG in value:
            return SECRET
        return {k: normalise(v, ids) for k, v in value.items() if k not in BOOKKEEPING}
    if isinstance(value, list):
        return [normalise(item, ids) for item in value]
    if isinstance(value, str) and ids is not None:
        return ids.sub(lambda match: match.group(1) + PREVIEW_ID, value)
    return value


_KEY = re.compile(r"[A-Za-z_][\w-]*")


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _json_container(text: str) -> Any:
    """A string that holds a JSON object or array (a ConfigMap's config.json), parsed."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict | list) else None


def changes(base: Any, head: Any, path: str = "") -> Iterator[Change]:
    """Every leaf that differs, by path: `values.devicePlugin.deviceSplitCount`, `triggers[4]`,
    `data["config.json"](json).splitCount` (a string of JSON compared as JSON)."""
    if base == head:
        return
    if isinstance(base, dict) and isinstance(head, dict):
        for key in sorted(base.keys() | head.keys()):
            yield from changes(base.get(key, ABSENT), head.get(key, ABSENT), _join(path, key))
        return
    if isinstance(base, list) and isinstance(head, list):
        for i in range(max(len(base), len(head))):
            yield from changes(
                base[i] if i < len(base) else ABSENT,
                head[i] if i < len(head) else ABSENT,
                _join(path, i),
            )
        return
    if isinstance(base, str) and isinstance(head, str):
        parsed_base, parsed_head = _json_container(base), _json_container(head)
        if parsed_base is not None and parsed_head is not None:
            yield from changes(parsed_base, parsed_head, f"{path}(json)")
            return
    yield Change(path or "(inputs)", base, head)


def diff_previews(base: str | Mapping[str, Any], head: str | Mapping[str, Any]) -> PreviewDiff:
    """Head's plan against base's, both `pulumi preview --json` digests of the same stack."""
    base_digest, head_digest = _digest(base), _digest(head)
    base_plan, head_plan = _planned(base_digest), _planned(head_digest)
    ids = preview_id_pattern(_names(base_plan, head_plan))
    added = tuple(Resource(urn, head_plan[urn].type) for urn in head_plan if urn not in base_plan)
    removed = tuple(Resource(urn, base_plan[urn].type) for urn in base_plan if urn not in head_plan)
    changed: list[Changed] = []
    unchanged = 0
    for urn, planned in head_plan.items():
        before = base_plan.get(urn)
        if before is None:
            continue
        found = list(changes(normalise(before.inputs, ids), normalise(planned.inputs, ids)))
        if before.op != planned.op:
            found.insert(0, Change("(step)", before.op, planned.op))
        if found:
            changed.append(Changed(Resource(urn, planned.type), tuple(found)))
        else:
            unchanged += 1
    config = tuple(
        changes(
            normalise(dict(base_digest.get("config") or {}), None),
            normalise(dict(head_digest.get("config") or {}), None),
        )
    )
    # A config key is a path of its own: `kamaji-hami-lab:hamiSplitCount`, not `["..."]`.
    config = tuple(Change(_config_key(c.path), c.base, c.head) for c in config)
    return PreviewDiff(
        tuple(sorted(added, key=_order)),
        tuple(sorted(removed, key=_order)),
        tuple(sorted(changed, key=lambda entry: _order(entry.resource))),
        unchanged,
        config,
    )


def _order(resource: Resource) -> tuple[str, str]:
    return resource.name, resource.urn


def _config_key(path: str) -> str:
    match = re.fullmatch(r'\["((?:[^"\\]|\\.)*)"\](.*)', path)
    return json.loads(f'"{match.group(1)}"') + match.group(2) if match else path


# -- markdown ------------------------------------------------------------------------------------


def code(text: str) -> str:
    """An inline code span that holds `text` whatever backticks it has."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def shown(value: Any) -> str:
    """A value as the summary shows it, on one line: a string quoted, anything else as JSON;
    what cannot be known said in words."""
    if value is ABSENT:
        return "(none)"
    if value == UNKNOWN:
        return "(unknown until up)"
    if value == SECRET:
        return SECRET
    if isinstance(value, str):  # quoted, on one line, its own quotes left as they are
        return '"' + value.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t") + '"'
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _cut(text: str, start: int, end: int) -> str:
    """`text[start:end]` within its context, at most WIDTH characters of the difference."""
    middle = text[start:end]
    if len(middle) > WIDTH:
        middle = f"{middle[: WIDTH // 2]}…({len(middle) - WIDTH} more)…{middle[-WIDTH // 2 :]}"
    before = text[max(0, start - CONTEXT) : start]
    after = text[end : end + CONTEXT]
    lead = "…" if start > CONTEXT else ""
    tail = "…" if end + CONTEXT < len(text) else ""
    return f"{lead}{before}{middle}{after}{tail}"


def shortened(base: str, head: str) -> tuple[str, str]:
    """Two long values cut to where they differ, with some context on each side."""
    if len(base) <= WIDTH and len(head) <= WIDTH:
        return base, head
    prefix = 0
    limit = min(len(base), len(head))
    while prefix < limit and base[prefix] == head[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and base[-1 - suffix] == head[-1 - suffix]:
        suffix += 1
    return _cut(base, prefix, len(base) - suffix), _cut(head, prefix, len(head) - suffix)


def change_line(change: Change) -> str:
    base, head = shortened(shown(change.base), shown(change.head))
    return f"{code(change.path)}: {code(base)} -> {code(head)}"


def _resource(resource: Resource) -> str:
    return f"{code(resource.name)} ({code(resource.type)})"


def render(diff: PreviewDiff) -> str:
    """The comparison as markdown: counts, then config, changed, added and removed."""
    if diff.empty:
        return (
            f"**No difference**: both plan the same {diff.unchanged} resources with the same "
            "inputs and the same config.\n"
        )
    counts = (
        f"**{len(diff.changed)} changed, {len(diff.added)} added, {len(diff.removed)} removed**, "
        f"{diff.unchanged} unchanged"
    )
    if diff.config:
        keys = "key" if len(diff.config) == 1 else "keys"
        counts += f"; {len(diff.config)} config {keys} changed"
    lines = [counts + ".", ""]
    if diff.config:
        lines += ["Config:", ""]
        lines += [f"- {change_line(change)}" for change in diff.config]
        lines.append("")
    if diff.changed:
        lines += ["Changed, input by input (base -> head):", ""]
        for entry in diff.changed:
            lines.append(f"- {_resource(entry.resource)}")
            lines += [f"  - {change_line(change)}" for change in entry.changes[:MOST_INPUTS]]
            if len(entry.changes) > MOST_INPUTS:
                lines.append(f"  - … and {len(entry.changes) - MOST_INPUTS} more inputs")
        lines.append("")
    for title, resources in (("Added", diff.added), ("Removed", diff.removed)):
        if resources:
            lines += [f"{title}:", ""]
            lines += [f"- {_resource(resource)}" for resource in resources]
            lines.append("")
    return "\n".join(lines)
