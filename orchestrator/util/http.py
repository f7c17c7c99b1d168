"""Ray's dashboard over plain HTTP, with the cluster's token as a bearer header.

Ray's job client and the Serve client take the same `headers`, so `bearer()` is the one place
the header is spelt.

Every request here goes straight to its address: HTTP(S)_PROXY, ALL_PROXY and NO_PROXY are not
read (the addresses are loopback, a forward or the cluster's own, and a proxy would see the
token), and a redirect is not followed (urllib's default handler would copy `Authorization`
to wherever it points): a 3xx is an HttpError. Before a token goes to a loopback address,
`listeners.check` proves the listener is ours; if not, HttpError (status None) and nothing sent.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from . import listeners


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None   # urllib then raises the 3xx as an HTTPError


# No ProxyHandler reading the environment, no redirects.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
# For credentials sent to a server that is not ours (MLflow's): the environment's proxy
# variables apply to remote addresses, never a redirect.
PROXIED = urllib.request.build_opener(_NoRedirect())


def opener_for(url: str) -> urllib.request.OpenerDirector:
    """How to send credentials to someone else's server at `url`: straight to a loopback
    address (a proxy would see them), through the environment's proxy otherwise; never
    following a redirect (urllib would copy `Authorization` to wherever it points)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    return DIRECT if listeners.is_loopback_host(host) else PROXIED


class HttpError(Exception):
    """The dashboard refused (`status` is the HTTP code) or did not answer (`status` is None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _open(request: urllib.request.Request, timeout: float) -> Any:
    """Open `request` directly; with a token only to a listener proven ours."""
    if request.has_header("Authorization"):
        try:
            listeners.check(request.full_url)
        except listeners.NotOurs as exc:
            raise HttpError(f"{exc}: no token sent") from None
    return DIRECT.open(request, timeout=timeout)


def get_json(address: str, path: str, token: str | None, *, timeout: float = 5) -> Any:
    """GET `address + path` with the token; the decoded JSON, or HttpError."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=bearer(token))
    try:
        with _open(request, timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise HttpError(f"HTTP {exc.code}", exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise HttpError(str(getattr(exc, "reason", exc))) from None


MAX_BYTES = 64 * 1024 * 1024   # a flame graph is kilobytes; no answer is kept past this


def get_bytes(address: str, path: str, token: str | None, *, timeout: float = 5,
              limit: int = MAX_BYTES) -> bytes:
    """GET `address + path` with the token; the answer's body (HttpError past `limit` bytes),
    or HttpError with the answer's last line of text (Ray's dashboard says why it refused)."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=bearer(token))
    try:
        with _open(request, timeout) as response:
            body = bytes(response.read(limit + 1))
            if len(body) > limit:
                raise HttpError(f"the answer is larger than {limit} bytes")
            return body
    except urllib.error.HTTPError as exc:
        try:   # why it refused: a line of text, read no further than 64 KiB
            detail = exc.read(64 * 1024).decode(errors="replace").strip().splitlines()
        except OSError:
            detail = []
        raise HttpError(f"HTTP {exc.code}" + (f": {detail[-1][:300]}" if detail else ""),
                        exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        raise HttpError(str(getattr(exc, "reason", exc))) from None


def send_json(address: str, path: str, token: str | None, body: Any, *, method: str = "PUT",
              timeout: float = 30) -> Any:
    """`method` the JSON `body` (None: no body) to `address + path` with the token; the
    decoded answer (None when empty), or HttpError with the answer's text."""
    headers = dict(bearer(token), **{"Content-Type": "application/json"})
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(address.rstrip("/") + path, data=data, headers=headers,
                                     method=method)
    try:
        with _open(request, timeout) as response:
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
    dashboard is up, it just wants the token); with one, only a success from a listener proven
    ours (never a token to anyone else)."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=bearer(token))
    try:
        _open(request, timeout).close()
    except urllib.error.HTTPError:
        return not token
    except (OSError, HttpError):
        return False
    return True


def status_of(url: str, *, timeout: float = 2) -> int | None:
    """The HTTP status a plain GET of `url` gets; None when nothing answers."""
    try:
        with DIRECT.open(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return None
