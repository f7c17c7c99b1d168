"""Ray's dashboard over plain HTTP, with the cluster's token as a bearer header.

Ray's job client and the Serve client take the same `headers`, so `bearer()` is the one place
the header is spelt.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class HttpError(Exception):
    """The dashboard refused (`status` is the HTTP code) or did not answer (`status` is None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def get_json(address: str, path: str, token: str | None, *, timeout: float = 5) -> Any:
    """GET `address + path` with the token; the decoded JSON, or HttpError."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=bearer(token))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise HttpError(f"HTTP {exc.code}", exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(str(getattr(exc, "reason", exc))) from None


def send_json(address: str, path: str, token: str | None, body: Any, *, method: str = "PUT",
              timeout: float = 30) -> Any:
    """`method` the JSON `body` to `address + path` with the token; the decoded answer (None
    when empty), or HttpError with the answer's text."""
    headers = dict(bearer(token), **{"Content-Type": "application/json"})
    request = urllib.request.Request(address.rstrip("/") + path, data=json.dumps(body).encode(),
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
            return json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace").strip().splitlines()
        raise HttpError(f"HTTP {exc.code}" + (f": {detail[-1][:300]}" if detail else ""),
                        exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(str(getattr(exc, "reason", exc))) from None


def answers(address: str, token: str | None = None, path: str = "/api/version", *,
            timeout: float = 2) -> bool:
    """Whether something answers HTTP there; without a token a 401/403 still counts (the
    dashboard is up, it just wants the token); with one, only a success counts."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=bearer(token))
    try:
        urllib.request.urlopen(request, timeout=timeout).close()
    except urllib.error.HTTPError:
        return not token
    except OSError:
        return False
    return True


def status_of(url: str, *, timeout: float = 2) -> int | None:
    """The HTTP status a plain GET of `url` gets; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None
