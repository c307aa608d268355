"""Bearer-token checks for admin calls and (when ``LDP_READ_TOKEN`` is set) reads.

No token: 401 with ``WWW-Authenticate``. A token that is not the right one: 403. Tokens are
compared in constant time (``hmac.compare_digest``) so response times leak nothing about them.
"""

from __future__ import annotations

import hmac

from flask import current_app, request

from .errors import ApiError

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ldp-telemetry"'}


def _bearer_token() -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _matches(token: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(token.encode(), expected.encode())


def require_admin() -> None:
    """Raise 401/403 unless the request carries the admin token."""
    token = _bearer_token()
    if token is None:
        raise ApiError(401, "this call needs the admin token: Authorization: Bearer <LDP_ADMIN_TOKEN>",
                       headers=_CHALLENGE)
    if not _matches(token, current_app.config["LDP_ADMIN_TOKEN"]):
        raise ApiError(403, "the admin token is wrong (or LDP_ADMIN_TOKEN is not set on this server)")


def require_reader() -> None:
    """When ``LDP_READ_TOKEN`` is set, raise 401/403 unless the request carries it (or the admin token)."""
    expected = current_app.config["LDP_READ_TOKEN"]
    if expected is None:
        return
    token = _bearer_token()
    if token is None:
        raise ApiError(401, "reading needs the read token: Authorization: Bearer <LDP_READ_TOKEN>",
                       headers=_CHALLENGE)
    if not (_matches(token, expected) or _matches(token, current_app.config["LDP_ADMIN_TOKEN"])):
        raise ApiError(403, "the read token is wrong")
