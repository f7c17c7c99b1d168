"""What orchestrate remembers: `StateStore` (records) and `SecretStore` (tokens), passed in
explicitly to whatever needs them. `State.here()` opens today's implementations under
$ORCHESTRATE_HOME; commands call it once and hand it down.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..errors import ClusterError
from .folder import FolderStore, home, is_valid_name, private_home
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
    demo_key,
    service_key,
)

__all__ = ["State", "StateStore", "SecretStore", "ClusterRecord", "cluster_key", "service_key",
           "demo_key",
           "home",
           "LAUNCHING", "UP", "FAILED", "INTERRUPTED", "STOPPING"]


@dataclass(frozen=True)
class State:
    store: StateStore
    secrets: SecretStore

    @classmethod
    def here(cls) -> State:
        """This machine's state folder and secrets ($ORCHESTRATE_HOME, default ~/.orchestrate),
        private (`folder.private_home`)."""
        root = private_home()
        secrets = FileSecrets(root / "secrets")
        _adopt_old_tokens(root, secrets)
        return cls(FolderStore(root), secrets)


def _adopt_old_tokens(root: Path, secrets: FileSecrets) -> None:
    """orchestrate 0.1.0 kept each token beside its state (clusters/<name>/auth_token,
    local-ray/auth_token). Move them into the SecretStore once, so that clusters (and a kept
    embedded Ray) started before an upgrade keep the token they run with."""
    old = [(path, cluster_key(path.parent.name))
           for path in (root / "clusters").glob("*/auth_token") if is_valid_name(path.parent.name)]
    old.append((root / "local-ray" / "auth_token", "local-ray"))  # embedded.TOKEN_KEY
    for path, key in old:
        if path.is_file():
            with contextlib.suppress(OSError, ClusterError):  # left where it is; reported later
                secrets.adopt(key, path)
