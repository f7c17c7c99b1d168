"""A project's state document: what `apply` (and `up`/`down`/`run` of a project's files) did,
shared by every machine that applies the project.

    {"format_version": 1, "project": "ml", "lineage": "<uuid>", "serial": 7,
     "version": "<orchestrate version that wrote it>",
     "resources": {"cluster/gpu": {...}, "experiment/mnist": {...}}}

`lineage` is made once, by the first write (`stamp_lineage`), and never changes: a document with
another lineage is another project's (or a restored copy) and is refused. `serial` grows by one
on every write. Entries hold hashes, identities and references, never a secret: a cluster's
entry keeps its token's reference and fingerprint (state.refs), not the token.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from .. import __version__
from ..errors import StateError

FORMAT_VERSION = 1
Entry = dict[str, Any]


@dataclass
class StateDoc:
    project: str
    lineage: str = ""             # made by the first write (a plan of no state has none yet)
    serial: int = 0
    resources: dict[str, Entry] = field(default_factory=dict)
    version: str = __version__

    def to_bytes(self) -> bytes:
        return (json.dumps({"format_version": FORMAT_VERSION, "project": self.project,
                            "lineage": self.lineage, "serial": self.serial,
                            "version": self.version, "resources": self.resources},
                           indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str, project: str) -> StateDoc:
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise StateError(f"the state at {where} is not JSON ({exc})",
                             hint="restore it from the bucket's versions, or remove it and "
                                  "`orchestrate state rm`/re-apply") from None
        problem = _problem(raw)
        if problem:
            raise StateError(f"the state at {where} is damaged: {problem}")
        if raw["format_version"] > FORMAT_VERSION:
            raise StateError(f"the state at {where} was written by a newer orchestrate "
                             f"({raw.get('version')}, state format {raw['format_version']})",
                             hint="upgrade orchestrate on this machine")
        if raw["project"] != project:
            raise StateError(f"the state at {where} belongs to project {raw['project']!r}, "
                             f"not {project!r}",
                             hint="each project needs its own state: change `state:` in "
                                  "orchestrate.yaml (or ORCHESTRATE_STATE)")
        return cls(project=raw["project"], lineage=raw["lineage"], serial=raw["serial"],
                   resources=raw["resources"], version=str(raw.get("version", "")))

    def stamp_lineage(self) -> None:
        if not self.lineage:
            self.lineage = uuid.uuid4().hex

    def entries(self, kind: str) -> dict[str, Entry]:
        """name -> entry of one kind ("cluster" or "experiment")."""
        prefix = f"{kind}/"
        return {address[len(prefix):]: entry for address, entry in self.resources.items()
                if address.startswith(prefix)}


def _problem(raw: Any) -> str | None:
    if not isinstance(raw, dict):
        return "expected a JSON object"
    types = {"format_version": int, "project": str, "lineage": str, "serial": int,
             "resources": dict}
    for key, kind in types.items():
        if not isinstance(raw.get(key), kind) or isinstance(raw.get(key), bool):
            return f"'{key}' is missing or not a {kind.__name__}"
    for address, entry in raw["resources"].items():
        if not isinstance(entry, dict) or "/" not in address:
            return f"the entry {address!r} is not an object under a kind/name address"
    return None


def address(kind: str, name: str) -> str:
    return f"{kind}/{name}"
