"""Calling the aggregator's API from the CLI: over HTTP, or in-process on a database file.

``--db`` lets an operator publish a schema or read estimates without a running server (e.g.
before the first start): the request goes through the real app's test client, so the very same
validation and answers apply.
"""

from __future__ import annotations

import secrets
from typing import Any

import click


def call(method: str, path: str, *, url: str, db: str | None, token: str | None,
         body: Any = None) -> tuple[int, dict[str, Any]]:
    """``(status, JSON answer)`` of one API call."""
    if db is not None:
        return _in_process(method, path, db, body)
    import requests

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = requests.request(method, url.rstrip("/") + path, json=body, headers=headers, timeout=30)
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from None
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, {"error": response.text[:200]}


def ok(method: str, path: str, *, url: str, db: str | None, token: str | None, body: Any = None) -> Any:
    """The JSON answer of one API call that must succeed; else a ``ClickException`` with the
    status and the server's own sentence (and its first details)."""
    status, answer = call(method, path, url=url, db=db, token=token, body=body)
    if status >= 300:
        details = "; ".join(f"{d.get('field', '')}: {d.get('message', '')}" for d in answer.get("details", [])[:3])
        raise click.ClickException(f"{status}: {answer.get('error', answer)}" + (f" ({details})" if details else ""))
    return answer


def _in_process(method: str, path: str, db: str, body: Any) -> tuple[int, dict[str, Any]]:
    from ..aggregator import create_app

    # The operator holds the file, so they are admin: a one-off token authorises this call.
    token = secrets.token_urlsafe(24)
    app = create_app({"LDP_DB": db, "LDP_SCHEDULER": False, "LDP_ADMIN_TOKEN": token, "LDP_READ_TOKEN": None})
    response = app.test_client().open(path, method=method, json=body, headers={"Authorization": f"Bearer {token}"})
    return response.status_code, response.get_json()
