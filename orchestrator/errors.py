"""The orchestrator's error hierarchy.

    OrchestrateError            anything the user can act on; the CLI prints it, exit code 1
    ├── SpecError               one or more problems in a user's YAML file (list of Problem)
    ├── MissingDependency       an optional extra is not installed (hint: the pip command)
    ├── PreflightError          a cloud check failed before anything was launched
    ├── ClusterError            launching, reaching or tearing down a cluster failed
    │   └── NotContacted        before anything reached it (no kubeconfig): nothing changed
    ├── JobError                submitting or following a Ray job failed
    ├── ServeError              deploying, reaching or removing a Serve application failed
    └── StateError              a project's shared state: unreadable, refused, or locked
        ├── StateLocked         another command holds the state's lock (`holder` says who)
        └── StateConflict       the state moved under us (a conditional write was refused)

The core never prints or exits; it raises one of these. `orchestrator.cli` alone turns them
into output and exit codes (1 for these, 130 for Ctrl-C, 3 for a bug). Library exceptions
(Ray, boto3, Google, Azure) are translated into these at the boundary where they are caught.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one file: where, which field, and what was expected."""

    file: str
    message: str
    line: int | None = None
    column: int | None = None
    field: str = ""  # dotted path, e.g. "available_node_types.gpu.max_workers"
    hint: str | None = None
    severity: str = "error"  # or "warning": reported, but the file is still valid

    def location(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return where

    def format(self) -> str:
        text = f"{self.location()}: "
        if self.field:
            text += f"{self.field}: "
        text += self.message
        if self.hint:
            text += f" ({self.hint})"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "field": self.field,
            "message": self.message,
            "hint": self.hint,
            "severity": self.severity,
        }


class OrchestrateError(Exception):
    """An error the user can act on. `hint` says what to do about it."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class SpecError(OrchestrateError):
    """A user's YAML file is wrong; carries every problem found, not only the first."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        summary = "; ".join(p.format() for p in self.problems[:3])
        if len(self.problems) > 3:
            summary += f"; and {len(self.problems) - 3} more"
        super().__init__(summary)


class MissingDependency(OrchestrateError):
    """An optional extra (a cloud SDK, Ray, torch) is needed but not installed."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"this needs the Python package '{package}', which is not installed",
            hint=f'pip install "orchestrate-ray[{extra}]"',
        )
        self.package = package
        self.extra = extra


def require(module: str, package: str, extra: str) -> ModuleType:
    """Import an optional module (a cloud SDK; filelock and psutil from the `ray` extra), or
    raise MissingDependency naming the pip extra. Callers that want the module's own types
    call this first and then import it by name."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(package, extra) from exc


class PreflightError(OrchestrateError):
    """A cloud or host check failed before launching."""


class ClusterError(OrchestrateError):
    """Launching, reaching or tearing down a cluster failed."""


class KeyRefused(ClusterError):
    """The head's sshd refused every key this machine offered: it runs, but this machine may
    not log in (another runner's key pair, a key not in its authorized_keys)."""


class NotContacted(ClusterError):
    """Nothing reached the cluster (no kubeconfig, an unknown context): nothing of it changed,
    so what is recorded of it still holds."""


class JobError(OrchestrateError):
    """Submitting, following or stopping a Ray job failed."""


class ServeError(OrchestrateError):
    """Deploying, reaching or removing a Serve application (`orchestrate serve`) failed."""


class StateError(OrchestrateError):
    """A project's shared state (orchestrate plan/apply) cannot be read, written or trusted."""


class StateLocked(StateError):
    """Another command holds the state's lock; `holder` is its lock note (None if unreadable)."""

    def __init__(self, message: str, *, holder: Any = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.holder = holder


class StateConflict(StateError):
    """A conditional write was refused: someone wrote the state since we read it."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a lock was held: unwinds exactly like Ctrl-C (records say
    "interrupted", `finally` blocks release what they hold); the CLI exits 143."""
