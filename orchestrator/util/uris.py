"""Telling a URI (s3://bucket/x, local:///mnt/data) from a local path, and one that carries
credentials (s3://KEY:SECRET@bucket/x) from one that does not."""
from __future__ import annotations

import re

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

CREDENTIALS_MESSAGE = ("the URI carries credentials (NAME:SECRET@ before the host), "
                       "which the job's configuration would show to everyone who can list jobs")
CREDENTIALS_HINT = ("leave them out of the URI; give the storage its credentials where the job "
                    "runs: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, an instance role or a "
                    "cloud CLI's login")


def is_uri(path: str) -> bool:
    return bool(_URI.match(path))


def has_credentials(path: str) -> bool:
    """Whether `path` is a URI with a secret in its user information (`NAME:SECRET@` before
    the host): a job's config shows it to everyone who may list jobs, so it is refused. A name
    alone is not a secret (`s3://anonymous@bucket` is pyarrow's unsigned access)."""
    if not is_uri(path):
        return False
    authority = path.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    userinfo, at, _host = authority.rpartition("@")
    return bool(at) and ":" in userinfo
