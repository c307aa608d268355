"""Calling the aggregator's API from the CLI: over HTTP, or in-process on a database file.

``--db`` lets an operator publish a schema or read estimates without a running server (e.g.
before the first start): the request goes through the real app's test client, so the very same
validation and answers apply.
"""

from __future__ import annotations

import secrets
from typing import Any

import click

TIMEOUT = 30  # seconds a call waits for an answer


def call(method: str, path: str, *, url: str, db: str | None, token: str | None,
         body: Any = None) -> tuple[int, dict[str, Any]]:
    """``(status, JSON answer)`` of one API call; a ``ClickException`` naming the URL and why when
    there is no answer at all."""
    if db is not None:
        return _in_process(method, path, db, body)
    import requests

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = requests.request(method, url.rstrip("/") + path, json=body, headers=headers, timeout=TIMEOUT)
    except requests.RequestException as exc:
        raise click.ClickException(f"{tried(method, path, url=url, db=db)} got no answer: {_cause(exc)} (is "
                                   f"ldp-telemetry serve running there? --url or LDP_URL names another)") from None
    try:
        return response.status_code, response.json()
    except ValueError:  # not our API (a wrong base URL, a proxy's page): its first words
        return response.status_code, {"error": " ".join(response.text.split())[:200] or "(an empty body)"}


def tried(method: str, path: str, *, url: str, db: str | None) -> str:
    """What a call tried, for its error sentence: the method and the URL, or the database file."""
    return f"{method} {path} on the database file {db}" if db is not None else f"{method} {url.rstrip('/')}{path}"


def refused(method: str, path: str, status: int, answer: dict[str, Any], *, url: str, db: str | None) -> str:
    """One sentence for an answer that is not a success: what was tried, the status, the server's
    own sentence and its first details."""
    details = "; ".join(f"{d.get('field', '')}: {d.get('message', '')}" for d in answer.get("details", [])[:3])
    return (f"{tried(method, path, url=url, db=db)} answered {status}: {answer.get('error', answer)}"
            + (f" ({details})" if details else ""))


def ok(method: str, path: str, *, url: str, db: str | None, token: str | None, body: Any = None) -> Any:
    """The JSON answer of one API call that must succeed; else a ``ClickException`` (:func:`refused`)."""
    status, answer = call(method, path, url=url, db=db, token=token, body=body)
    if status >= 300:
        raise click.ClickException(refused(method, path, status, answer, url=url, db=db))
    return answer


def _cause(exc: BaseException) -> str:
    """The root of a failed request in a few words (connection refused, no such host, a timeout),
    not urllib3's chain of wrappers."""
    import socket

    import requests

    if isinstance(exc, requests.Timeout):
        return f"no answer within {TIMEOUT} s"
    if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                        requests.exceptions.InvalidSchema)):
        return "that is not an http:// or https:// URL"
    root: BaseException = exc
    for _ in range(10):  # requests wraps urllib3's MaxRetryError, which wraps the socket's error
        inner = getattr(root, "reason", None) or root.__cause__ or root.__context__ or next(
            (a for a in root.args if isinstance(a, BaseException)), None)
        if not isinstance(inner, BaseException):
            break
        root = inner
    if isinstance(root, ConnectionRefusedError):
        return "connection refused (nothing listens on that port)"
    if isinstance(root, socket.gaierror):
        return "no such host"
    if isinstance(root, requests.exceptions.SSLError) or "SSL" in type(root).__name__:
        return f"TLS failed ({root})"
    return str(root) or type(root).__name__


def _in_process(method: str, path: str, db: str, body: Any) -> tuple[int, dict[str, Any]]:
    from ..aggregator import create_app

    # The operator holds the file, so they are admin: a one-off token authorises this call.
    token = secrets.token_urlsafe(24)
    app = create_app({"LDP_DB": db, "LDP_SCHEDULER": False, "LDP_ADMIN_TOKEN": token, "LDP_READ_TOKEN": None})
    response = app.test_client().open(path, method=method, json=body, headers={"Authorization": f"Bearer {token}"})
    return response.status_code, response.get_json()
