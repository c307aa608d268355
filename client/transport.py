"""How the client talks HTTP: a small interface, and the default one built on requests.

The client posts a JSON body and gets a JSON document; through a relay it also posts bytes and
gets bytes (:class:`RelayTransport`). Anything with these methods (and a ``close()``) can carry
its traffic: a test passes an adapter around Flask's ``app.test_client()`` and so drives
the real client against the real aggregator without patching anything.

The default transport trusts no server: ``timeout`` is an overall deadline for the whole request
(a server dripping one byte at a time defeats a per-read timeout); a redirect is followed only to
the same origin (scheme, host and port); a response body is read to at most
:data:`MAX_RESPONSE_BYTES`. It uses public ``requests`` API only: an SDK inside other people's
apps must survive their upgrades of requests and urllib3.

How the deadline holds: requests can bound each read, not a whole exchange, and gives no public
handle on the socket to shut while it reads the status line and headers. So each request runs in
a thread of its own while the caller waits for it at most ``timeout`` seconds, so the caller's
time (the sender's, and ``close()``'s) is bounded whatever the server does. A request past its
deadline is abandoned, and its thread ends when the server lets it: at a silence longer than the
read timeout (at most ``timeout``), when the server closes, or at the next full chunk of a body.
A server can hold at most :data:`MAX_ABANDONED` such threads (and their connections); while it
does, new requests fail at once rather than add more, and the sender backs off as after any
network error.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Mapping, NamedTuple, Protocol
from urllib.parse import urljoin, urlsplit

import requests

# A response body past this is not read (a hostile or broken server could otherwise stream the
# app out of memory), and the request counts as failed.
MAX_RESPONSE_BYTES = 8 << 20
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
# A POST follows only the redirects that keep its method and body: requests would turn a POST
# answered 301/302/303 into a GET, whose answer (a 405, or a 200 page) says nothing of the reports.
_KEEPS_THE_BODY = (307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Requests past their deadline whose threads a server may still hold (see the module's docstring).
MAX_ABANDONED = 4
# The body is read in chunks this small so that a thread past its deadline stops soon: a read
# returns only when its chunk is full (or the body ends), however slowly the bytes come.
_CHUNK = 16 * 1024


class ResponseTooLarge(requests.RequestException):
    """The server's response body was over :data:`MAX_RESPONSE_BYTES`."""


class DeadlineExceeded(requests.RequestException):
    """The request did not finish within its overall deadline."""


class Response(NamedTuple):
    """What the client needs of an HTTP response. ``headers`` has lower-case names."""

    status: int
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None when there is none or it is not JSON
    content: bytes = b""  # the body's bytes (the relay's key configurations are no JSON)


class Transport(Protocol):
    """Carries the client's requests. A network failure is any exception; the client retries.

    ``timeout`` is the request's overall deadline in seconds. :meth:`close` releases what the
    transport holds (connections); the client calls it only on a transport it made itself.
    """

    def post_json(self, url: str, body: Any, timeout: float) -> Response: ...

    def get_json(self, url: str, timeout: float) -> Response: ...

    def close(self) -> None: ...


class RelayTransport(Transport, Protocol):
    """A transport that can also carry a relay's traffic (``TelemetryClient(..., relay=URL)``):
    bytes posted with their media type, and bodies read as bytes (:attr:`Response.content`)."""

    def post_bytes(self, url: str, data: bytes, content_type: str, timeout: float) -> Response: ...

    def get_bytes(self, url: str, timeout: float) -> Response: ...


def shown(text: Any, limit: int = 300) -> str:
    """Text from a server as it may appear in a log line: ``repr`` of at most ``limit``
    characters, so a newline or a terminal escape cannot forge or hide a line of the app's log."""
    return repr(str(text)[:limit])


def same_origin(a: str, b: str) -> bool:
    """Whether URLs ``a`` and ``b`` have the same scheme, host and port."""
    def origin(url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url)
        try:
            port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
        except ValueError:  # a port that is no number
            return ("", "", None)
        return parts.scheme.lower(), (parts.hostname or "").lower(), port
    return origin(a) == origin(b)


class RequestsTransport:
    """The default transport: one :class:`requests.Session`, so connections are reused."""

    def __init__(self, session: requests.Session | None = None):
        self._session = session or requests.Session()
        self._lock = threading.Lock()
        self._abandoned = 0  # requests past their deadline whose threads have not ended yet

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")  # compact: the size the sender counted
        return self._request("POST", url, timeout, data=data, headers={"Content-Type": "application/json"})

    def get_json(self, url: str, timeout: float) -> Response:
        return self._request("GET", url, timeout, headers={"Accept": "application/json"})

    def post_bytes(self, url: str, data: bytes, content_type: str, timeout: float) -> Response:
        return self._request("POST", url, timeout, data=data, headers={"Content-Type": content_type})

    def get_bytes(self, url: str, timeout: float) -> Response:
        return self._request("GET", url, timeout)

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, url: str, timeout: float, **kwargs: Any) -> Response:
        with self._lock:
            if self._abandoned >= MAX_ABANDONED:
                raise DeadlineExceeded(f"{self._abandoned} earlier requests past their deadline are still held "
                                       "by the server; not sending another until one ends")
        deadline = time.monotonic() + timeout
        exchange = _Exchange(lambda: _exchange(self._session, method, url, deadline, kwargs), self._ended)
        threading.Thread(target=exchange.run, name="ldp-telemetry-request", daemon=True).start()
        if not exchange.finished.wait(timeout):
            with self._lock:
                if exchange.abandon():
                    self._abandoned += 1
                    raise DeadlineExceeded(f"no complete answer within {timeout:g} s")
        return exchange.outcome()

    def _ended(self) -> None:
        """An abandoned request's thread has ended."""
        with self._lock:
            self._abandoned -= 1


class _Exchange:
    """One request run in its own thread: its outcome, or its abandonment by the caller."""

    def __init__(self, work: Callable[[], Response], on_abandoned_end: Callable[[], None]):
        self.finished = threading.Event()
        self._work = work
        self._on_abandoned_end = on_abandoned_end
        self._lock = threading.Lock()
        self._abandoned = False
        self._response: Response | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._response = self._work()
        except BaseException as exc:  # handed to the caller, which raises it in its own thread
            self._error = exc
        with self._lock:
            self.finished.set()
            abandoned = self._abandoned
        if abandoned:
            self._on_abandoned_end()

    def abandon(self) -> bool:
        """Give up on the request, unless it has just finished; True if it was given up."""
        with self._lock:
            if not self.finished.is_set():
                self._abandoned = True
            return self._abandoned

    def outcome(self) -> Response:
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response


def _exchange(session: requests.Session, method: str, url: str, deadline: float, kwargs: dict[str, Any]) -> Response:
    """The request, following redirects within the origin, with its body read by ``deadline``."""
    for _ in range(MAX_REDIRECTS + 1):
        left = max(0.001, deadline - time.monotonic())
        reply = session.request(method, url, timeout=(left, left), allow_redirects=False, stream=True, **kwargs)
        location = reply.headers.get("location")
        follow = reply.status_code in (_KEEPS_THE_BODY if method == "POST" else _REDIRECTS)
        if not (follow and location and same_origin(url, urljoin(url, location))):
            break
        reply.close()
        url = urljoin(url, location)
    return _response(reply, deadline)


def _response(reply: requests.Response, deadline: float) -> Response:
    """The response with its body (as bytes, and as JSON when it is JSON), read to at most
    :data:`MAX_RESPONSE_BYTES` by ``deadline``."""
    content = bytearray()
    with reply:
        for chunk in reply.iter_content(_CHUNK):
            content += chunk
            if len(content) > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(f"the response body is over {MAX_RESPONSE_BYTES} bytes")
            if time.monotonic() > deadline:
                raise DeadlineExceeded("the answer was still coming at the deadline")
    try:
        body = json.loads(bytes(content)) if content else None
    except (ValueError, RecursionError):
        body = None
    return Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, body, bytes(content))
