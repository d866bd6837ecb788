"""Trims a `pulumi preview --json` digest to what tests/test_preview_diff.py reads.

    pulumi preview --stack lab --json --non-interactive | python3 tests/previews/trim.py > X.json

Kept: `config`, `changeSummary`, and of each step its `op`, `urn` and new state's `type` and
`inputs`. A string longer than 500 characters (a script, a chart's code) becomes
`[<n> characters, sha256 <16 hex>]`: equal strings stay equal, so the comparison is the same.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

LONGEST = 500


def shortened(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: shortened(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shortened(item) for item in value]
    if isinstance(value, str) and len(value) > LONGEST:
        digest = hashlib.sha256(value.encode()).hexdigest()[:16]
        return f"[{len(value)} characters, sha256 {digest}]"
    return value


def trimmed(digest: dict[str, Any]) -> dict[str, Any]:
    steps = []
    for step in digest.get("steps") or ():
        kept: dict[str, Any] = {"op": step["op"], "urn": step["urn"]}
        state = step.get("newState")
        if state is not None:
            kept["newState"] = {"type": state["type"], "inputs": shortened(state.get("inputs", {}))}
        steps.append(kept)
    return {
        "config": digest.get("config", {}),
        "steps": steps,
        "changeSummary": digest.get("changeSummary", {}),
    }


if __name__ == "__main__":
    json.dump(trimmed(json.load(sys.stdin)), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
