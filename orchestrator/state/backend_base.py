"""What every state backend shares: the `Backend` Protocol, the lock note (`LockInfo`) and the
refusals a backend raises (orchestrator.state.backends opens one; backend_file, backend_s3 are
the two)."""
from __future__ import annotations

import dataclasses
import getpass
import json
import os
import socket
import time
import uuid
from typing import Any, Protocol

from ..errors import StateError, StateLocked

UNREADABLE = "unknown"   # the id force-unlock takes for a lock note that cannot be read
STATE, LOCK = "state.json", "state.lock"


@dataclasses.dataclass(frozen=True)
class LockInfo:
    id: str               # uuid4 hex
    who: str              # user@host
    host: str
    pid: int
    operation: str        # "apply", "up", "down", ...
    created: float        # time.time()
    ci_url: str | None    # the CI job holding it, when there is one

    @classmethod
    def new(cls, operation: str) -> LockInfo:
        host = socket.gethostname()
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # a uid with no name (containers)
            user = str(os.getuid())
        return cls(id=uuid.uuid4().hex, who=f"{user}@{host}", host=host, pid=os.getpid(),
                   operation=operation, created=time.time(), ci_url=_ci_url())

    @classmethod
    def unreadable(cls) -> LockInfo:
        """What force_release returns for a lock note that could not be read."""
        return cls(id=UNREADABLE, who="", host="", pid=0, operation="", created=0.0, ci_url=None)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> LockInfo | None:
        """The lock note, or None when it is damaged (never raises)."""
        if not isinstance(data, dict):
            return None
        types: dict[str, tuple[type, ...]] = {
            "id": (str,), "who": (str,), "host": (str,), "pid": (int,), "operation": (str,),
            "created": (int, float), "ci_url": (str, type(None))}
        for key, allowed in types.items():
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, allowed) or value == "":
                return None
        return cls(id=data["id"], who=data["who"], host=data["host"], pid=data["pid"],
                   operation=data["operation"], created=float(data["created"]),
                   ci_url=data["ci_url"])

    def describe(self) -> str:
        if self.id == UNREADABLE:
            return f"an unreadable lock (lock id {UNREADABLE})"
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.created))
        text = f"{self.operation} by {self.who} (pid {self.pid}), since {since}, lock id {self.id}"
        return text + (f", CI: {self.ci_url}" if self.ci_url else "")

    def to_bytes(self) -> bytes:
        return (json.dumps(self.as_dict(), indent=2, sort_keys=True) + "\n").encode()


def _ci_url() -> str | None:
    env = os.environ
    if env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL") or "https://github.com"
        return f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
    return env.get("CI_JOB_URL") or None


def parse_lock(data: bytes) -> LockInfo | None:
    try:
        return LockInfo.from_dict(json.loads(data))
    except ValueError:  # includes UnicodeDecodeError
        return None


class Backend(Protocol):
    url: str  # for messages (never credentials)

    def read(self) -> tuple[bytes, str] | None:
        """(content, version), or None when there is no state yet."""

    def write(self, data: bytes, version: str | None) -> str:
        """Only over `version` (None: only if no state exists yet); the new version.
        StateConflict otherwise."""

    def acquire(self, info: LockInfo) -> None:
        """Take the lock; StateLocked(holder=LockInfo | None) if it is held."""

    def release(self, lock_id: str) -> None:
        """Remove the lock only if it is `lock_id`'s; nothing if it is gone."""

    def holder(self) -> LockInfo | None:
        """Who holds the lock now (None: nobody, or its note is unreadable)."""

    def force_release(self, lock_id: str) -> LockInfo:
        """Remove the lock whatever holds it, if its id is `lock_id` ("unknown" for an
        unreadable note); StateError if there is none or it has another id."""


def refused(url: str, found: tuple[bool, LockInfo | None]) -> StateLocked:
    """The refusal of a lock, from what the lock note said when read just after."""
    exists, holder = found
    if not exists:  # released between our attempt and our look at it
        return StateLocked(f"the state at {url} was locked by another command a moment ago",
                           holder=None, hint="try again, or pass --lock-timeout SECONDS")
    if holder is None:
        return StateLocked(
            f"the state at {url} is locked, and its lock note is unreadable", holder=None,
            hint=f"if no orchestrate command is running on it: orchestrate force-unlock "
                 f"{UNREADABLE}")
    return StateLocked(
        f"the state at {url} is locked: {holder.describe()}", holder=holder,
        hint=f"wait for it, pass --lock-timeout SECONDS, or if its holder is gone: "
             f"orchestrate force-unlock {holder.id}")


def not_held(url: str) -> StateError:
    return StateError(f"the state at {url} is not locked", hint="there is nothing to unlock")


def other_id(url: str, holder: LockInfo | None, lock_id: str) -> StateError:
    held_id = holder.id if holder else UNREADABLE
    what = holder.describe() if holder else "an unreadable lock"
    return StateError(f"the lock on the state at {url} has id {held_id}, not {lock_id} ({what})",
                      hint=f"check that its holder is gone, then: orchestrate force-unlock {held_id}")
