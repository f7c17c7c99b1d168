"""A project's shared state: the document (state.document) in its backend (state.backends),
read and written with a version check, plus where its clusters' tokens live (state.refs), plus
this machine's own State (the workspace `ray up` runs in).

    project_state = ProjectState.open(project)
    doc = project_state.read()                  # remembers the version it read
    with project_state.lock("apply", timeout=0, progress=info): ...
    project_state.write(doc)                    # serial + 1; StateConflict if it moved meanwhile
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .. import __version__
from ..errors import StateConflict, StateError
from ..language.project import ProjectSpec
from ..state import State, home
from ..state.backends import Backend, LockInfo, locked, open_backend
from ..state.document import Entry, StateDoc
from ..state.refs import TokenSource, open_tokens


@dataclass
class ProjectState:
    project: ProjectSpec
    backend: Backend
    tokens: TokenSource
    machine: State                                   # this machine's state and secrets
    version: str | None = field(default=None, repr=False)
    doc: StateDoc | None = field(default=None, repr=False)

    @classmethod
    def open(cls, project: ProjectSpec, machine: State | None = None) -> ProjectState:
        machine = machine or State.here()
        backend = open_backend(project.state, default_folder=home() / "projects" / project.name)
        from ..state.secrets import FileSecrets

        files = machine.secrets if isinstance(machine.secrets, FileSecrets) else \
            FileSecrets(home() / "secrets")
        return cls(project, backend, open_tokens(project.secrets, files), machine)

    def read(self) -> StateDoc:
        found = self.backend.read()
        if found is None:
            self.version, self.doc = None, StateDoc(self.project.name)
        else:
            data, self.version = found
            self.doc = StateDoc.from_bytes(data, self.backend.url, self.project.name)
        return self.doc

    def write(self, doc: StateDoc) -> None:
        """Write `doc` as the next serial, only if the state is still the version we read."""
        if self.doc is not None and doc.lineage != self.doc.lineage:
            raise StateError(f"refusing to write state of lineage {doc.lineage} over "
                             f"{self.doc.lineage} at {self.backend.url}")
        doc.stamp_lineage()
        doc.serial += 1
        doc.version = __version__
        try:
            self.version = self.backend.write(doc.to_bytes(), self.version)
        except StateConflict:
            doc.serial -= 1
            raise StateConflict(f"the state at {self.backend.url} changed while this command "
                                f"ran (serial {doc.serial} was read)",
                                hint="another command wrote it without the lock; run "
                                     "`orchestrate plan` again") from None
        self.doc = doc

    @contextlib.contextmanager
    def lock(self, operation: str, *, timeout: float = 0,
             progress: Callable[[str], None] = lambda _: None) -> Iterator[LockInfo]:
        with locked(self.backend, operation, timeout=timeout, progress=progress) as info:
            yield info


STAMPS = ("applied_by", "applied_from", "applied_at", "orchestrate_version")  # what stamp() adds


def stamp(entry: Entry, who: LockInfo | None) -> Entry:
    """Who applied an entry, when, with which orchestrate."""
    entry["applied_by"] = who.who if who else ""
    if who and who.ci_url:
        entry["applied_from"] = who.ci_url
    entry["applied_at"] = time.time()
    entry["orchestrate_version"] = __version__
    return entry
