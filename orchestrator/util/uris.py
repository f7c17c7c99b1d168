"""Telling a URI (s3://bucket/x, local:///mnt/data) from a local path."""
from __future__ import annotations

import re

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(path: str) -> bool:
    return bool(_URI.match(path))
