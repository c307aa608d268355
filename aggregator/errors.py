"""Every JSON error body, and the handlers that make each 4xx an API answer.

The one shape (DESIGN.md): ``{"error": "<one sentence>", "details": [{"index", "field",
"message"}]}``; ``index`` only where a batch item is meant. A server error is a bug: anything
unexpected is logged and answered with a JSON 500, and a database too busy to answer is a 503
with ``Retry-After`` so that clients retry.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import HTTPException

from .store import StoreBusy, StoreUnavailable

# The sentence for each HTTP error Flask raises itself, in the words of this API.
_MESSAGES = {
    404: "no such resource",
    405: "method not allowed on this path",
    413: "request body is larger than LDP_MAX_BODY allows",
    415: "Content-Type must be application/json (or text/plain;charset=UTF-8 for reports)",
}


class ApiError(Exception):
    """A 4xx answer: raise it anywhere in a request; the handler renders it."""

    def __init__(self, status: int, error: str, details: Iterable[dict[str, Any]] = (),
                 headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status = status
        self.error = error
        self.details = list(details)
        self.headers = headers or {}


def detail(field: str, message: str, index: int | None = None) -> dict[str, Any]:
    """One entry of ``details``."""
    return {"field": field, "message": message} if index is None else {"index": index, "field": field, "message": message}


def refuse_unknown(given: Iterable[str], known: Sequence[str], what: str) -> None:
    """A 400 naming the first (sorted) of ``given`` that is not ``known``: a body field or query
    parameter (``what``) that the request's handler does not read is refused, never ignored."""
    unknown = sorted(key for key in given if key not in known)
    if unknown:
        shown = unknown[0][:40]  # a caller's key, of any length
        raise ApiError(400, f"unknown {what} {shown!r}; known: {', '.join(known)}", [detail(shown, f"unknown {what}")])


def error_response(status: int, error: str, details: Iterable[dict[str, Any]] = (),
                   headers: dict[str, str] | None = None) -> Response:
    """The JSON error body with ``status``."""
    response = jsonify({"error": error, "details": list(details)})
    response.status_code = status
    response.headers.update(headers or {})
    return response


def _wants_json() -> bool:
    # Dashboard pages keep Flask's HTML errors; the API and operations paths answer JSON.
    return request.blueprint != "dashboard"


def init_app(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def api_error(exc: ApiError) -> Response:
        return error_response(exc.status, exc.error, exc.details, exc.headers)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response | HTTPException:
        if not _wants_json() or exc.code is None:
            return exc
        headers = {k: v for k, v in exc.get_headers() if k.lower() in ("allow", "www-authenticate", "retry-after")}
        message = _MESSAGES.get(exc.code) or (exc.description or exc.name).rstrip(".")
        return error_response(exc.code, message, headers=headers)

    @app.errorhandler(StoreBusy)
    def database_busy(exc: StoreBusy) -> Response:
        return error_response(503, "the database is busy; retry shortly", headers={"Retry-After": "1"})

    @app.errorhandler(StoreUnavailable)
    def database_unavailable(exc: StoreUnavailable) -> Response:
        # The details (file paths, the driver's words) go to the operator's log, not to the caller.
        current_app.logger.error("database unavailable on %s %s: %s", request.method, request.path, exc)
        return error_response(503, "the database is unavailable; retry later", headers={"Retry-After": "5"})

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        current_app.logger.exception("unexpected error on %s %s", request.method, request.path)
        return error_response(500, "internal server error (a bug: please report it)")
