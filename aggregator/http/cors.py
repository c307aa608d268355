"""CORS for web pages that embed the JavaScript client (DESIGN.md, "HTTP API", "Browsers").

Only the routes a page needs are open to other origins: ``POST /api/v1/reports``, the schema
GETs and ``GET /api/v1/ohttp-keys`` (a page that sends through a relay checks the relay's keys
against the aggregator's). They answer every request, errors included, with ``Access-Control-Allow-Origin`` and
expose ``Retry-After``, so a page can tell "retry later" from "dropped". Their preflight
``OPTIONS`` is answered here, before any content-type or token rule, with 204. No admin route
and no route behind the read token ever allows another origin. Requests carry no cookies and the
server reads none, so credentials are never allowed.

With ``LDP_CORS_ORIGINS=*`` (the default: reports are anonymous by design) the answer is ``*``;
with a list, an allowed ``Origin`` is echoed with ``Vary: Origin``, and ``null`` never is.
"""

from __future__ import annotations

import re

from flask import Flask, Response, current_app, request

# The paths open to other origins, and the methods each allows there.
_OPEN = ((re.compile(r"/api/v1/reports"), "POST"),
         (re.compile(r"/api/v1/schemas(/[^/]+(/[^/]+)?)?"), "GET"),
         (re.compile(r"/api/v1/ohttp-keys"), "GET"))
# Browsers cap it (Chromium at 2 hours); longer would only be ignored.
MAX_AGE = "7200"


def allowed_methods(path: str) -> str | None:
    """The method a page may use on ``path`` from another origin; None when the path is closed."""
    for pattern, method in _OPEN:
        if pattern.fullmatch(path):
            return method
    return None


def headers_for(path: str, method: str, origin: str | None, origins: tuple[str, ...]) -> dict[str, str]:
    """The CORS headers of an answer to ``method`` on ``path`` from a page at ``origin``."""
    allowed = allowed_methods(path)
    if allowed is None or method not in (allowed, "OPTIONS", "HEAD" if allowed == "GET" else allowed):
        return {}
    out = {"Access-Control-Expose-Headers": "Retry-After"}
    if origins == ("*",):
        out["Access-Control-Allow-Origin"] = "*"
    else:
        out["Vary"] = "Origin"
        if origin is not None and origin != "null" and origin in origins:
            out["Access-Control-Allow-Origin"] = origin
    return out


def init_app(app: Flask) -> None:
    @app.before_request
    def preflight() -> Response | None:
        if request.method != "OPTIONS" or allowed_methods(request.path) is None:
            return None
        response = Response(status=204)
        response.headers["Access-Control-Allow-Methods"] = f"{allowed_methods(request.path)}, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = "Content-Type"
        response.headers["Access-Control-Max-Age"] = MAX_AGE
        return response

    @app.after_request
    def cors(response: Response) -> Response:
        response.headers.update(headers_for(request.path, request.method, request.headers.get("Origin"),
                                            current_app.config["LDP_CORS_ORIGINS"]))
        return response
