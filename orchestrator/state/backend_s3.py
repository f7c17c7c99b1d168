"""A project's state in S3: <prefix>/state.json and <prefix>/state.lock, written with S3's
conditional writes (If-None-Match: *, If-Match: ETag); a version is the ETag. Also the AWS
helpers refs.py uses for Secrets Manager."""
from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import StateConflict, StateError, require
from .backend_base import LOCK, STATE, UNREADABLE, LockInfo, not_held, other_id, parse_lock, refused

# --- Amazon S3 -------------------------------------------------------------------------------

def aws_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def aws_client(service: str) -> Any:
    """A boto3 client (region from the environment, else us-east-1). boto3 itself honours
    AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_<SERVICE>, which is how tests point it at moto."""
    boto3 = require("boto3", "boto3", "aws")
    from botocore.config import Config

    config = Config(connect_timeout=10, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.session.Session().client(service, region_name=aws_region(), config=config)


def aws_code(exc: BaseException) -> str:
    """The AWS error code of a ClientError ("" for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def aws_error(exc: Exception, *, doing: str, where: str) -> StateError:
    """A boto3/botocore failure as a StateError naming `where` and the AWS error code; never
    the exception's text (it may quote a request), never credentials."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return StateError(f"cannot {doing} {where}: no AWS credentials were found",
                          hint="give this machine AWS credentials (environment variables, a "
                               "profile, or the CI's cloud role)")
    if isinstance(exc, EndpointConnectionError):
        return StateError(f"cannot {doing} {where}: the AWS endpoint did not answer "
                          f"({exc.kwargs.get('endpoint_url', 'unknown endpoint')})",
                          hint="check the network, AWS_ENDPOINT_URL and the region")
    if isinstance(exc, NoRegionError):
        return StateError(f"cannot {doing} {where}: no AWS region", hint="set AWS_REGION")
    if isinstance(exc, ClientError):
        code = aws_code(exc) or "unknown"
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
        operation = getattr(exc, "operation_name", "") or "a request"
        hint = ("check the permissions of this machine's AWS identity"
                if code in ("AccessDenied", "AccessDeniedException", "Forbidden", "403",
                            "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
                            "UnrecognizedClientException")
                else None)
        return StateError(f"cannot {doing} {where}: AWS refused {operation} with {code} "
                          f"(HTTP {status})", hint=hint)
    return StateError(f"cannot {doing} {where}: {type(exc).__name__}",
                      hint="check the network, AWS_ENDPOINT_URL and the AWS configuration")


class S3Backend:
    """<prefix>/state.json and <prefix>/state.lock in one S3 bucket."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.bucket = parts.netloc
        self.prefix = unquote(parts.path).strip("/")
        if not self.bucket or parts.query or parts.fragment or "@" in self.bucket:
            raise StateError(f"the state URL {url!r} does not name an S3 bucket",
                             hint="write it as s3://BUCKET/PREFIX")
        self.url = f"s3://{self.bucket}/{self.prefix}"
        base = f"{self.prefix}/" if self.prefix else ""
        self._state, self._lock = base + STATE, base + LOCK
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws_client("s3")
        return self._client

    def _call(self, doing: str, method: str, /, **kwargs: Any) -> Any:
        """One S3 request; every failure becomes a StateError except the ClientErrors the caller
        asked to see by code (they come back as the exception)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            if aws_code(exc) == "NoSuchBucket":
                raise StateError(
                    f"the state bucket '{self.bucket}' does not exist ({self.url})",
                    hint=f"create it (aws s3 mb s3://{self.bucket}), or fix `state:` in "
                         f"orchestrate.yaml (or ORCHESTRATE_STATE)") from None
            raise
        except BotoCoreError as exc:
            raise aws_error(exc, doing=doing, where=f"the state at {self.url}") from None

    def _fail(self, exc: Exception, doing: str) -> StateError:
        return aws_error(exc, doing=doing, where=f"the state at {self.url}")

    def _get(self, key: str, doing: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self._call(doing, "get_object", Key=key)
            return answer["Body"].read(), str(answer["ETag"])
        except ClientError as exc:
            if aws_code(exc) in ("NoSuchKey", "404"):
                return None
            raise self._fail(exc, doing) from None
        except BotoCoreError as exc:  # the body's stream broke
            raise self._fail(exc, doing) from None

    def read(self) -> tuple[bytes, str] | None:
        return self._get(self._state, "read")

    def write(self, data: bytes, version: str | None) -> str:
        from botocore.exceptions import ClientError

        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        try:
            answer = self._call("write", "put_object", Key=self._state, Body=data,
                                ContentType="application/json", **condition)
        except ClientError as exc:
            # 412: it changed (or appeared); NoSuchKey: it was deleted; 409: a write raced ours
            if aws_code(exc) in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"):
                raise StateConflict(f"the state at {self.url} is not the version read "
                                    f"({'none' if version is None else version})") from None
            raise self._fail(exc, "write") from None
        return str(answer["ETag"])

    def _read_lock(self, doing: str) -> tuple[bool, LockInfo | None, str]:
        """(exists, its note or None when unreadable, its ETag)."""
        found = self._get(self._lock, doing)
        if found is None:
            return False, None, ""
        return True, parse_lock(found[0]), found[1]

    def acquire(self, info: LockInfo) -> None:
        from botocore.exceptions import ClientError

        for attempt in range(2):
            try:
                self._call("lock", "put_object", Key=self._lock, Body=info.to_bytes(),
                           ContentType="application/json", IfNoneMatch="*")
                return
            except ClientError as exc:
                code = aws_code(exc)
                if code == "ConditionalRequestConflict" and attempt == 0:
                    continue  # a concurrent conditional write to the key: ask once more
                if code not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise self._fail(exc, "lock") from None
        exists, holder, _etag = self._read_lock("lock")
        raise refused(self.url, (exists, holder))

    def _delete_lock(self, etag: str, doing: str) -> bool:
        """Delete the lock only if it is still the note we read (False: it changed or went)."""
        from botocore.exceptions import ClientError

        try:
            self._call(doing, "delete_object", Key=self._lock, IfMatch=etag)
        except ClientError as exc:
            if aws_code(exc) in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"):
                return False
            raise self._fail(exc, doing) from None
        return True

    def release(self, lock_id: str) -> None:
        exists, holder, etag = self._read_lock("unlock")
        if exists and holder is not None and holder.id == lock_id:
            self._delete_lock(etag, "unlock")

    def holder(self) -> LockInfo | None:
        return self._read_lock("read the lock of")[1]

    def force_release(self, lock_id: str) -> LockInfo:
        exists, holder, etag = self._read_lock("force-unlock")
        if not exists:
            raise not_held(self.url)
        if (holder.id if holder else UNREADABLE) != lock_id:
            raise other_id(self.url, holder, lock_id)
        if not self._delete_lock(etag, "force-unlock"):
            raise StateError(f"the lock on the state at {self.url} changed while it was being "
                             f"removed", hint="run `orchestrate force-unlock` again with the id "
                                              "it names now, if its holder is gone")
        return holder or LockInfo.unreadable()


