"""Today's SecretStore: one 0600 file per secret under $ORCHESTRATE_HOME/secrets/ (0700).

Tokens live apart from the state folders, so state can be copied, inspected or shared without
them. `ray up` mounts a cluster's token file onto its nodes; the embedded Ray reads its token
file through RAY_AUTH_TOKEN_PATH. A secret is never printed: errors name the key and the file.
"""
from __future__ import annotations

import os
import re
import secrets as random
from pathlib import Path

from ..errors import ClusterError
from ..util.files import atomic_write, private_folder

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,99})*")


def new_token() -> str:
    """Same shape as Ray's own generator: 256 bits, hex."""
    return random.token_hex(32)


class FileSecrets:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ClusterError(f"invalid secret name {key!r}")
        return self.root / key

    def _folder_for(self, key: str) -> Path:
        path = self.path(key)
        try:
            private_folder(self.root)
            private_folder(path.parent)
        except OSError as exc:
            raise ClusterError(f"cannot create the secrets folder {path.parent}: "
                               f"{exc.strerror or exc}",
                               hint="ORCHESTRATE_HOME (default ~/.orchestrate) must be a "
                                    "writable folder") from None
        return path

    def ensure(self, key: str) -> Path:
        path = self._folder_for(key)
        if not path.exists():
            atomic_write(path, new_token(), mode=0o600)
        os.chmod(path, 0o600)
        return path

    def adopt(self, key: str, source: Path) -> None:
        """Move an existing token file in as `key` (unless `key` has one: then drop `source`)."""
        path = self._folder_for(key)
        if path.exists():
            source.unlink()
            return
        os.replace(source, path)
        os.chmod(path, 0o600)

    def put(self, key: str, token: str) -> Path:
        """Keep `token` (fetched from where a project keeps it) as the secret's file (0600)."""
        path = self._folder_for(key)
        atomic_write(path, token, mode=0o600)
        return path

    def replace(self, key: str) -> Path:
        path = self._folder_for(key)
        atomic_write(path, new_token(), mode=0o600)
        return path

    def read(self, key: str) -> str:
        path = self.path(key)
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            raise ClusterError(f"no secret {key!r} is stored ({path})") from None
        except (OSError, UnicodeDecodeError) as exc:  # the message names the file, not its content
            raise ClusterError(f"the secret {key!r} ({path}) is unreadable: "
                               f"{type(exc).__name__}") from None
        if not token:
            raise ClusterError(f"the secret {key!r} ({path}) is empty")
        return token

    def remove(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)
