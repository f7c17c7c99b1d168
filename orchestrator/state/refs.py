"""Where a project keeps its clusters' Ray tokens. State keeps only the reference and a
fingerprint, never the token.

    open_tokens("", local)                     file: this machine's FileSecrets ("file:clusters/gpu")
    open_tokens("env://PREFIX", local)         a variable each: clusters/gpu-a -> PREFIX + "GPU_A";
                                               PREFIX begins with ORCHESTRATE_TOKEN_ (`env://`
                                               alone is that), so a reference can name no other
                                               variable ($HOME, $AWS_SECRET_ACCESS_KEY ...)
    open_tokens("aws-sm://PREFIX", local)      AWS Secrets Manager: secret PREFIX + "clusters/gpu"

Errors name the reference, never the token.
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Protocol

from ..errors import ClusterError, StateError
from .backend_s3 import aws_client, aws_code, aws_error
from .secrets import FileSecrets, new_token

SCHEMES = ("file (the default), env://ORCHESTRATE_TOKEN_... (default ORCHESTRATE_TOKEN_), "
           "aws-sm://PREFIX")
# Every variable an env:// reference names begins with this (as Terraform reads only TF_VAR_*
# variables): a project file or ORCHESTRATE_SECRETS cannot turn another variable of the
# runner's environment into a "token" sent to a cluster.
ENV_PREFIX = "ORCHESTRATE_TOKEN_"
_ENV_NAME = re.compile(ENV_PREFIX + r"[A-Z0-9_]*")


def fingerprint(token: str) -> str:
    """Enough to tell two tokens apart, nothing to recover one from."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]


class TokenSource(Protocol):
    scheme: str  # "file" | "env" | "aws-sm"

    def ref(self, key: str) -> str:
        """The reference shown to people and kept in state."""

    def fetch(self, key: str) -> str | None:
        """The token, None if there is none; StateError naming the reference otherwise."""

    def create(self, key: str, token: str | None = None) -> str:
        """A new token (or `token`: one a running cluster has already) stored at the reference,
        returned. Never overwrites: a token found there (another runner made it meanwhile) is
        returned instead."""

    def delete(self, key: str) -> None:
        """Forget the token (nothing if it is gone, or cannot be stored here)."""


class FileTokens:
    """This machine's token files (FileSecrets): the tokens stay with the machine."""

    scheme = "file"

    def __init__(self, local: FileSecrets) -> None:
        self.local = local

    def ref(self, key: str) -> str:
        return f"file:{key}"

    def _unusable(self, key: str, exc: ClusterError) -> StateError:
        return StateError(f"the token at {self.ref(key)} cannot be used: {exc.message}",
                          hint=exc.hint)

    def fetch(self, key: str) -> str | None:
        try:
            if not self.local.path(key).exists():
                return None
            return self.local.read(key)
        except ClusterError as exc:  # names the key and the file, never the content
            raise self._unusable(key, exc) from None

    def create(self, key: str, token: str | None = None) -> str:
        try:
            if token is not None and not self.local.path(key).exists():
                self.local.put(key, token)
            self.local.ensure(key)
            return self.local.read(key)
        except ClusterError as exc:
            raise self._unusable(key, exc) from None

    def delete(self, key: str) -> None:
        try:
            self.local.remove(key)
        except (ClusterError, OSError):
            pass  # an invalid key has no file; a file that cannot be removed is reported by `ls`


class EnvTokens:
    """One environment variable per cluster, set by CI from its secrets; read-only."""

    scheme = "env"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix or ENV_PREFIX

    def variable(self, key: str) -> str:
        name = key.removeprefix("clusters/")
        return self.prefix + re.sub(r"[^A-Z0-9]", "_", name.upper())

    def ref(self, key: str) -> str:
        return f"env://{self.variable(key)}"

    def fetch(self, key: str) -> str | None:
        return (os.environ.get(self.variable(key)) or "").strip() or None

    def create(self, key: str, token: str | None = None) -> str:
        found = self.fetch(key)
        if found is not None:
            return found
        variable = self.variable(key)
        raise StateError(f"set {variable} to the token of {key}: orchestrate cannot store a "
                         f"token in an environment variable",
                         hint="make one with `openssl rand -hex 32`, kept in the CI's secrets "
                              f"and given to the job as {variable}")

    def delete(self, key: str) -> None:
        return None


class SecretsManagerTokens:
    """One AWS Secrets Manager secret per cluster, named PREFIX + key."""

    scheme = "aws-sm"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws_client("secretsmanager")
        return self._client

    def name(self, key: str) -> str:
        return self.prefix + key

    def ref(self, key: str) -> str:
        return f"aws-sm://{self.name(key)}"

    def _call(self, key: str, doing: str, method: str, /, *, absent: tuple[str, ...] = (),
              **kwargs: Any) -> Any:
        """One request; None when AWS answers with an error code in `absent`."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(**kwargs)
        except ClientError as exc:
            if aws_code(exc) in absent:
                return None
            raise aws_error(exc, doing=doing, where=self.ref(key)) from None
        except BotoCoreError as exc:
            raise aws_error(exc, doing=doing, where=self.ref(key)) from None

    def fetch(self, key: str) -> str | None:
        answer = self._call(key, "read", "get_secret_value", SecretId=self.name(key),
                            absent=("ResourceNotFoundException",))
        if answer is None:
            return None
        token = answer.get("SecretString")
        if not isinstance(token, str) or not token.strip():
            raise StateError(f"the secret {self.ref(key)} holds no token (it must be a string)",
                             hint="put the cluster's token there as the secret's string value")
        return token.strip()

    def create(self, key: str, token: str | None = None) -> str:
        token = token or new_token()
        made = self._call(key, "create", "create_secret", Name=self.name(key), SecretString=token,
                          Description=f"orchestrate: the Ray auth token of {key}",
                          absent=("ResourceExistsException",))
        if made is not None:
            return token
        found = self.fetch(key)  # another runner made it first
        if found is None:
            raise StateError(f"the secret {self.ref(key)} exists but cannot be read",
                             hint="it may be scheduled for deletion: restore or delete it")
        return found

    def delete(self, key: str) -> None:
        self._call(key, "delete", "delete_secret", SecretId=self.name(key),
                   ForceDeleteWithoutRecovery=True, absent=("ResourceNotFoundException",))


def open_tokens(url: str, local: FileSecrets) -> TokenSource:
    """Where the project's `secrets:` (or ORCHESTRATE_SECRETS) says tokens live."""
    if url in ("", "file", "file://"):
        return FileTokens(local)
    if url.startswith("env://"):
        prefix = url.removeprefix("env://")
        if prefix and not _ENV_NAME.fullmatch(prefix):
            raise StateError(f"the secrets URL {url!r} names variables outside "
                             f"{ENV_PREFIX}*: env:// tokens are read only from variables whose "
                             f"names begin with {ENV_PREFIX}",
                             hint=f"write env:// (variables {ENV_PREFIX}<CLUSTER>) or "
                                  f"env://{ENV_PREFIX}TEAM_ (capitals, digits, _)")
        return EnvTokens(prefix)
    if url.startswith("aws-sm://"):
        prefix = url.removeprefix("aws-sm://")
        if prefix and not prefix.endswith("/"):
            prefix += "/"  # aws-sm://team/ml -> team/ml/clusters/<name>
        if prefix.startswith("/") or "//" in prefix:
            raise StateError(f"the secrets URL {url!r} is not a Secrets Manager name prefix",
                             hint="write it as aws-sm://PREFIX/, e.g. aws-sm://orchestrate/ml/")
        return SecretsManagerTokens(prefix)
    raise StateError(f"the secrets URL {url!r} has a scheme orchestrate does not know",
                     hint=f"use one of: {SCHEMES}")
