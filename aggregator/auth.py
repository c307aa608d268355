"""Bearer-token checks for admin calls, relays' batches and (when ``LDP_READ_TOKEN`` is set) reads.

No token: 401 with ``WWW-Authenticate``. A token that is not the right one: 403. Tokens are
compared in constant time (``hmac.compare_digest``) so response times leak nothing about them.
"""

from __future__ import annotations

import hmac
from typing import Callable, Mapping
from urllib.parse import quote, urlencode

from flask import current_app, redirect, request
from werkzeug.wrappers import Response

from .errors import ApiError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ldp-telemetry"'}
# The dashboard keeps the read token here once a browser opened it with ?token= (see dashboard.py);
# reads of the API accept it too, so the dashboard's CSV link works in that browser.
TOKEN_COOKIE = "ldp_read_token"
# What a path segment may hold unescaped besides letters, digits and "_.-~" (RFC 3986 pchar), and "/".
_PATH_SAFE = "/!$&'()*+,;=:@"


def bearer_token() -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, if any."""
    return bearer_of(request.headers.get("Authorization"))


def bearer_of(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header's value, if it is ``Bearer <token>``."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def matches(token: str, expected: str | None) -> bool:
    """Whether ``token`` is ``expected`` (never when unset), in constant time."""
    return expected is not None and hmac.compare_digest(token.encode(), expected.encode())


def is_reader(token: str) -> bool:
    """The read token, or the admin token (which may do everything)."""
    config = current_app.config
    return matches(token, config["LDP_READ_TOKEN"]) or matches(token, config["LDP_ADMIN_TOKEN"])


def reader_token() -> str | None:
    """The token a read request offers: a bearer header, else the dashboard's cookie."""
    return bearer_token() or request.cookies.get(TOKEN_COOKIE) or None  # an empty cookie is no token


def identified_reader() -> bool:
    """Whether the request carries the read or the admin token (whether or not reading needs one)."""
    token = reader_token()
    return token is not None and is_reader(token)


def without_token(path: str, args: Mapping[str, str]) -> Response:
    """The redirect from a dashboard address opened with ``?token=`` to the same address without it.

    The path is percent-encoded again (it arrives decoded, and may hold a CR or LF, which no
    header may carry: it was a 500) and starts with one slash (``//host`` would leave the site).
    """
    location = "/" + quote(path.lstrip("/"), safe=_PATH_SAFE)
    query = {k: v for k, v in args.items() if k != "token"}
    return redirect(location + (f"?{urlencode(query)}" if query else ""))


def _require(accepts: Callable[[str], bool], needs: str, wrong: str) -> None:
    """Raise 401 (saying what the call ``needs``) without a bearer token, 403 (``wrong``) unless
    ``accepts`` it."""
    token = bearer_token()
    if token is None:
        raise ApiError(401, f"this call needs {needs}", headers=_CHALLENGE)
    if not accepts(token):
        raise ApiError(403, wrong)


def require_admin() -> None:
    """Raise 401/403 unless the request carries the admin token."""
    _require(lambda token: matches(token, current_app.config["LDP_ADMIN_TOKEN"]),
             "the admin token: Authorization: Bearer <LDP_ADMIN_TOKEN>",
             "the admin token is wrong (or LDP_ADMIN_TOKEN is not set on this server)")


def is_relay(token: str | None, tokens: tuple[str, ...]) -> bool:
    """Whether ``token`` is one of the relays' ``tokens`` (``LDP_RELAY_TOKENS``): each compared in
    constant time, and all of them, so the time tells neither which nor how close."""
    if token is None:
        return False
    found = False
    for expected in tokens:
        found |= matches(token, expected)
    return found


def require_relay() -> None:
    """Raise 401/403 unless the request carries one of the relays' tokens."""
    _require(lambda token: is_relay(token, current_app.config["LDP_RELAY_TOKENS"]),
             "a relay's token: Authorization: Bearer <one of LDP_RELAY_TOKENS>",
             "the relay token is wrong (or LDP_RELAY_TOKENS is not set on this server)")


def require_reader() -> None:
    """When ``LDP_READ_TOKEN`` is set, raise 401/403 unless the request carries it (or the admin token)."""
    if current_app.config["LDP_READ_TOKEN"] is None:
        return
    token = reader_token()
    if token is None:
        raise ApiError(401, "reading needs the read token: Authorization: Bearer <LDP_READ_TOKEN>",
                       headers=_CHALLENGE)
    if not is_reader(token):
        raise ApiError(403, "the read token is wrong")
