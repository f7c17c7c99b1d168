"""Who a served model lets in (`serving`, `demo_app`): the API's Bearer token, and the demo
page's sign-in cookie (`demo_page`).

Only hashes reach the cluster (the user_config: `token_sha256`, `demo_sha256`); the Serve proxy
has no authentication of its own, so the application checks every request here. Everything fails
closed: a config whose hash is missing or not a SHA-256 (hand-made, from another version, not
yet applied) lets no one in, and only `auth: "none"`, written out, opens the routes.
"""
from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

from . import demo_page

SHA256 = re.compile(r"[0-9a-f]{64}")


def token_matches(header: str | None, config: Mapping[str, Any]) -> bool:
    """`Authorization: Bearer <token>` against the user_config's hash."""
    if config.get("auth") == "none":
        return True
    expected = config.get("token_sha256")
    if config.get("auth") != "token" or not isinstance(expected, str) \
            or not SHA256.fullmatch(expected):
        return False
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return False
    digest = hashlib.sha256(token.strip().encode()).hexdigest()
    return hmac.compare_digest(digest, expected)


def authorized(headers: Mapping[str, str], config: Mapping[str, Any]) -> bool:
    """The API: the Bearer token only (the demo page's secret is no token)."""
    return token_matches(headers.get("authorization"), config)


def demo_authorized(headers: Mapping[str, str], config: Mapping[str, Any],
                    now: float | None = None) -> bool:
    """The demo page and every route under it: with the demo on, the Bearer token or a sign-in
    cookie of the page (`demo_page.signed_in`, keyed by `demo_sha256`) not yet expired. Where a
    request comes from (a page of another origin) is `demo_app.Gate`'s to check."""
    if not config.get("demo"):
        return False
    if token_matches(headers.get("authorization"), config):
        return True
    return not_signed_in(headers, config, now) is None


def not_signed_in(headers: Mapping[str, str], config: Mapping[str, Any],
                  now: float | None = None) -> str | None:
    """None when a page cookie of the request signs it in; else why not: "none" (no cookie),
    "expired", or "wrong" (forged, another secret's, or the page not signed in to here)."""
    values = demo_page.cookie_values(headers.get("cookie"))
    if not values:
        return "none"
    key = config.get("demo_sha256")
    if config.get("auth") != "token" or not isinstance(key, str) or not SHA256.fullmatch(key):
        return "wrong"
    found = [demo_page.signed_in(value, key, now) for value in values]
    if None in found:
        return None
    return "expired" if "expired" in found else "wrong"


REASONS = {"none": "Your browser is not signed in.",
           "expired": f"Your browser's sign-in has expired (a sign-in lasts "
                      f"{demo_page.LIFETIME // 3600} hours).",
           "wrong": "Your browser's sign-in is not for this service's page as it is now served."}


def page_refused(headers: Mapping[str, str], config: Mapping[str, Any], name: str,
                 now: float | None = None) -> str | None:
    """The page's sign-in note (served with 401) for a request it does not let in; None: in."""
    if demo_authorized(headers, config, now=now):
        return None
    return demo_page.signed_out(name, REASONS[not_signed_in(headers, config, now) or "wrong"])
