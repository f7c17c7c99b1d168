"""The demo page's sign-in (`demo: true` in a service file; the page itself is `demo_app`'s
Gradio app at `{route}/demo/`): the cookie, the note a browser not signed in gets, the security
headers on every answer under the page.

Signing in (`auth: token`): a browser cannot be told to send a header, so the page takes a
cookie instead. It carries neither the API token nor the page's own secret, but a MAC of an
expiry: `EXPIRY.HMAC-SHA256(key, "EXPIRY|orchestrate-demo-page")`, good for `LIFETIME` (not
sliding: a cookie leaked once, from a shared screen, a proxy's log or a browser profile, lets
its finder in for 12 hours at most, then `orchestrate demo` signs in again). The page's secret
is made by `orchestrate serve` and kept 0600 beside the token; the key is its SHA-256, the only
part of it sent (`demo_sha256` in the user_config), so the replica can check a cookie and the
secret never leaves this machine (whoever reads the Serve config, a token holder, can make a
sign-in: the config is the key's only copy off this machine). `orchestrate demo` makes the
cookie when its one-time loopback link is opened. Browsers scope cookies by host, not port, so
any listener on 127.0.0.1 whose path matches gets the cookie: it is HttpOnly, SameSite=Strict, a
session cookie, and its Path is the page's (`{route}/demo`), under which every route of the
Gradio app is. The app takes the cookie only there, never as the API's token, and refuses a
request that another origin's page makes (`demo_app.Gate`).
"""
from __future__ import annotations

import hashlib
import hmac
import html
import re
import time
from typing import Any

COOKIE = "orchestrate-demo"
PAGE_PATH = "/demo"   # under the route: the Gradio app at PAGE_PATH + "/"
VALUE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")   # EXPIRY.MAC
PURPOSE = "orchestrate-demo-page"
LIFETIME = 12 * 3600   # seconds a sign-in lasts, from the link's opening
# a cookie whose expiry lies further ahead than LIFETIME was not made by `cookie_header`; the
# margin is for a clock on the cluster behind this machine's
CLOCK_MARGIN = 3600


def cookie_path(route: str) -> str:
    """The cookie's Path: the page, and every route of its app under it."""
    return route.rstrip("/") + PAGE_PATH


# A route as the service schema allows it (route_prefix), never `/`: what goes into the cookie's
# Path comes from state that may be shared, so `;` or a line break must not reach the header.
ROUTE = re.compile(r"/[A-Za-z0-9._~/-]*[A-Za-z0-9._~-][A-Za-z0-9._~/-]*")


def mac_key(secret: str) -> str:
    """The cookie's MAC key as the replica holds it (`demo_sha256`): the secret's SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def _mac(key: str, expiry: int) -> str:
    return hmac.new(bytes.fromhex(key), f"{expiry}|{PURPOSE}".encode(),
                    hashlib.sha256).hexdigest()


def cookie_value(secret: str, now: float | None = None) -> str:
    """`EXPIRY.MAC`: a sign-in to the page of `secret` until `LIFETIME` after `now`."""
    expiry = int(time.time() if now is None else now) + LIFETIME
    return f"{expiry}.{_mac(mac_key(secret), expiry)}"


def cookie_header(secret: str, route: str, now: float | None = None) -> str:
    """The `Set-Cookie` value signing a browser in to the page of `secret` for `LIFETIME`, for
    the route's page only (ValueError for a route the service schema does not allow, or
    `/`)."""
    if not ROUTE.fullmatch(route):
        raise ValueError(f"{route!r} is not a service's route prefix")
    return (f"{COOKIE}={cookie_value(secret, now)}; Path={cookie_path(route)}; HttpOnly; "
            f"SameSite=Strict")


def cookie_values(header: str | None) -> list[str]:
    """Every value a `Cookie` header carries under `COOKIE` (a browser sends one per path that
    matches); malformed ones are left out."""
    found = []
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and VALUE.fullmatch(value):
            found.append(value)
    return found


def signed_in(value: str, key: str, now: float | None = None) -> str | None:
    """None when `value` is a sign-in made with `key` that has not expired; else why not:
    "expired" or "wrong" (forged, of another secret, malformed, or not made here)."""
    found = VALUE.fullmatch(value)
    if found is None:
        return "wrong"
    expiry, mac = int(found[1]), found[2]
    if not hmac.compare_digest(mac, _mac(key, expiry)):
        return "wrong"
    now = time.time() if now is None else now
    if expiry > now + LIFETIME + CLOCK_MARGIN:
        return "wrong"
    return None if now < expiry else "expired"


def security_headers() -> dict[str, str]:
    """Every answer under the page: nothing but this origin's own parts (Gradio's from its
    wheel), never framed by another page, never cached."""
    return {"Content-Security-Policy": "default-src 'self'; script-src 'self' 'unsafe-inline'; "
                                       "style-src 'self' 'unsafe-inline'; "
                                       "img-src 'self' data: blob:; font-src 'self' data:; "
                                       "media-src 'self' blob:; connect-src 'self'; "
                                       "object-src 'none'; form-action 'self'; "
                                       "base-uri 'self'; frame-ancestors 'none'",
            "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
            "X-Content-Type-Options": "nosniff"}


def with_headers(send: Any) -> Any:
    """An ASGI `send` that puts `security_headers` on the answer's start (in place of the app's
    own of the same names)."""
    extra = [(k.lower().encode(), v.encode()) for k, v in security_headers().items()]
    names = {k for k, _ in extra}

    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
            message = {**message, "headers": kept + extra}
        await send(message)

    return sending


def signed_out(service: str, reason: str) -> str:
    name = html.escape(service)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>{name}: sign in</title><style>{STYLE}</style></head><body><main class="narrow">
<h1>{name}: sign in to try the model</h1><p>{html.escape(reason)}</p>
<p>This page is for whoever holds the service's token. On the machine that served it, run</p>
<pre>orchestrate demo {name}</pre>
<p>It opens this page in your browser through a one-time sign-in link (no secret is ever put
in a URL); with <code>--no-browser</code> it prints the link to open yourself.</p>
</main></body></html>
"""


STYLE = """
body { margin:0; background:#f5f7fa; color:#1f2933;
       font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width:640px; margin:0 auto; padding:28px 24px; }
h1 { font-size:1.5rem; margin:0 0 4px; }
pre, code { background:#e4e7eb; padding:2px 6px; border-radius:4px; }
pre { padding:10px; }
"""
