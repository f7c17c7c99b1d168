"""What orchestrate remembers: `StateStore` (records) and `SecretStore` (tokens), passed in
explicitly to whatever needs them. `State.here()` opens today's implementations under
$ORCHESTRATE_HOME; commands call it once and hand it down.
"""
from __future__ import annotations

from dataclasses import dataclass

from .folder import FolderStore, home
from .secrets import FileSecrets
from .store import (
    FAILED,
    INTERRUPTED,
    LAUNCHING,
    STOPPING,
    UP,
    ClusterRecord,
    SecretStore,
    StateStore,
    cluster_key,
)

__all__ = ["State", "StateStore", "SecretStore", "ClusterRecord", "cluster_key", "home",
           "LAUNCHING", "UP", "FAILED", "INTERRUPTED", "STOPPING"]


@dataclass(frozen=True)
class State:
    store: StateStore
    secrets: SecretStore

    @classmethod
    def here(cls) -> State:
        """This machine's state folder and secrets ($ORCHESTRATE_HOME, default ~/.orchestrate)."""
        root = home()
        return cls(FolderStore(root), FileSecrets(root / "secrets"))
