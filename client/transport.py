"""How the client talks HTTP: a two-method interface, and the default one built on requests.

The client only ever posts a JSON body and gets a JSON document. Anything with these two methods
can carry its traffic: a test passes an adapter around Flask's ``app.test_client()`` and so drives
the real client against the real aggregator without patching anything.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Protocol

import requests


class Response(NamedTuple):
    """What the client needs of an HTTP response. ``headers`` has lower-case names."""

    status: int
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None when there is none or it is not JSON


class Transport(Protocol):
    """Carries the client's requests. A network failure is any exception; the client retries."""

    def post_json(self, url: str, body: Any, timeout: float) -> Response: ...

    def get_json(self, url: str, timeout: float) -> Response: ...


class RequestsTransport:
    """The default transport: one :class:`requests.Session`, so connections are reused."""

    def __init__(self, session: requests.Session | None = None):
        self._session = session or requests.Session()

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        return _response(self._session.post(url, json=body, timeout=timeout))

    def get_json(self, url: str, timeout: float) -> Response:
        return _response(self._session.get(url, headers={"Accept": "application/json"}, timeout=timeout))

    def close(self) -> None:
        self._session.close()


def _response(reply: requests.Response) -> Response:
    try:
        body = reply.json()
    except ValueError:
        body = None
    return Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, body)
