"""How the client talks HTTP: a two-method interface, and the default one built on requests.

The client only ever posts a JSON body and gets a JSON document. Anything with these two methods
can carry its traffic: a test passes an adapter around Flask's ``app.test_client()`` and so drives
the real client against the real aggregator without patching anything.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple, Protocol

import requests

# The client trusts no server: a response body past this is not read (a hostile or broken
# server could otherwise stream the app out of memory), and the request counts as failed.
MAX_RESPONSE_BYTES = 8 << 20


class ResponseTooLarge(requests.RequestException):
    """The server's response body was over :data:`MAX_RESPONSE_BYTES`."""


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
        # Redirects are not followed: requests would turn a POST answered 301/302/303 into a GET,
        # whose answer (a 405, or a 200 page) says nothing about the reports. A 3xx is retried.
        return _response(self._session.post(url, json=body, timeout=timeout, allow_redirects=False, stream=True))

    def get_json(self, url: str, timeout: float) -> Response:
        return _response(self._session.get(url, headers={"Accept": "application/json"}, timeout=timeout,
                                           stream=True))

    def close(self) -> None:
        self._session.close()


def _response(reply: requests.Response) -> Response:
    """The response with its JSON body, read to at most :data:`MAX_RESPONSE_BYTES`."""
    content = bytearray()
    with reply:
        for chunk in reply.iter_content(64 * 1024):
            content += chunk
            if len(content) > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(f"the response body is over {MAX_RESPONSE_BYTES} bytes")
    try:
        body = json.loads(bytes(content)) if content else None
    except (ValueError, RecursionError):
        body = None
    return Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, body)
