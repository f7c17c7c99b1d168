"""What changed between two rendered configs, and whether Ray on the head must restart for it."""
from __future__ import annotations

import hashlib
import json
from fnmatch import fnmatchcase

# Changes the head's autoscaler picks up by itself from the new bootstrap config:
# `ray up --no-restart` ships them without restarting Ray (running jobs survive).
SCALING_FIELDS = (
    "max_workers",
    "min_workers",
    "upscaling_speed",
    "idle_timeout_minutes",
    "available_node_types.*.min_workers",
    "available_node_types.*.max_workers",
    "provider.worker_ips",
)


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: value}


def diff(old: dict, new: dict) -> list[str]:
    """Dotted field names that were added, removed or changed, in order."""
    before, after = _flatten(old), _flatten(new)
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"+ {key}")
        elif key not in after:
            lines.append(f"- {key}")
        elif before[key] != after[key]:
            lines.append(f"~ {key}")
    return lines


def only_scaling(changes: list[str]) -> bool:
    fields = [line[2:] for line in changes]
    return bool(fields) and all(any(fnmatchcase(f, p) for p in SCALING_FIELDS) for f in fields)
