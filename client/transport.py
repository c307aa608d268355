"""How the client talks HTTP: a two-method interface, and the default one built on requests.

The client only ever posts a JSON body and gets a JSON document. Anything with these two methods
can carry its traffic: a test passes an adapter around Flask's ``app.test_client()`` and so drives
the real client against the real aggregator without patching anything.

The default transport trusts no server: ``timeout`` is an overall deadline for the whole request
(a server dripping one byte at a time defeats a per-read timeout, so a timer shuts the
connection when the deadline passes); a redirect is followed only to the same origin
(scheme, host and port); a response body is read to at most :data:`MAX_RESPONSE_BYTES`.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any, Mapping, NamedTuple, Protocol
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3 import HTTPConnectionPool, HTTPSConnectionPool

# A response body past this is not read (a hostile or broken server could otherwise stream the
# app out of memory), and the request counts as failed.
MAX_RESPONSE_BYTES = 8 << 20
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
# A POST follows only the redirects that keep its method and body: requests would turn a POST
# answered 301/302/303 into a GET, whose answer (a 405, or a 200 page) says nothing of the reports.
_KEEPS_THE_BODY = (307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class ResponseTooLarge(requests.RequestException):
    """The server's response body was over :data:`MAX_RESPONSE_BYTES`."""


class DeadlineExceeded(requests.RequestException):
    """The request did not finish within its overall deadline."""


class Response(NamedTuple):
    """What the client needs of an HTTP response. ``headers`` has lower-case names."""

    status: int
    headers: Mapping[str, str]
    body: Any  # the parsed JSON body, or None when there is none or it is not JSON


class Transport(Protocol):
    """Carries the client's requests. A network failure is any exception; the client retries."""

    def post_json(self, url: str, body: Any, timeout: float) -> Response: ...

    def get_json(self, url: str, timeout: float) -> Response: ...


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
        for prefix in ("http://", "https://"):
            self._session.mount(prefix, _WatchedAdapter())

    def post_json(self, url: str, body: Any, timeout: float) -> Response:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")  # compact: the size the sender counted
        return self._request("POST", url, timeout, data=data, headers={"Content-Type": "application/json"})

    def get_json(self, url: str, timeout: float) -> Response:
        return self._request("GET", url, timeout, headers={"Accept": "application/json"})

    def close(self) -> None:
        self._session.close()

    def _request(self, method: str, url: str, timeout: float, **kwargs: Any) -> Response:
        deadline = time.monotonic() + timeout
        watch = _Watch(deadline)
        _CURRENT.watch = watch
        try:
            for _ in range(MAX_REDIRECTS + 1):
                left = max(0.001, deadline - time.monotonic())
                reply = self._session.request(method, url, timeout=(left, left), allow_redirects=False, stream=True,
                                              **kwargs)
                location = reply.headers.get("location")
                follow = reply.status_code in (_KEEPS_THE_BODY if method == "POST" else _REDIRECTS)
                if not (follow and location and same_origin(url, urljoin(url, location))):
                    return _response(reply, watch)
                reply.close()
                url = urljoin(url, location)
            return _response(reply, watch)
        except requests.RequestException:
            if watch.expired:
                raise DeadlineExceeded(f"no complete answer within {timeout:g} s") from None
            raise
        finally:
            _CURRENT.watch = None
            watch.cancel()
            if watch.expired:  # the pool may hold the connection that was shut: start afresh
                for adapter in self._session.adapters.values():
                    adapter.close()


def _response(reply: requests.Response, watch: _Watch) -> Response:
    """The response with its JSON body, read to at most :data:`MAX_RESPONSE_BYTES`."""
    content = bytearray()
    with reply:
        for chunk in reply.iter_content(64 * 1024):
            content += chunk
            if len(content) > MAX_RESPONSE_BYTES:
                raise ResponseTooLarge(f"the response body is over {MAX_RESPONSE_BYTES} bytes")
    if watch.expired:  # the body may look complete, cut short by the shut connection
        raise DeadlineExceeded("the answer was cut at the deadline")
    try:
        body = json.loads(bytes(content)) if content else None
    except (ValueError, RecursionError):
        body = None
    return Response(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, body)


class _Watch:
    """The connections one request uses; shuts them when its deadline passes, which ends any
    read or write blocked on them at once."""

    def __init__(self, deadline: float):
        self.expired = False
        self._connections: list[Any] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, connection: Any) -> None:
        with self._lock:
            self._connections.append(connection)
            if self.expired:
                _shut(connection)

    def cancel(self) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self._connections:
                _shut(connection)


def _shut(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Current(threading.local):
    watch: _Watch | None = None


_CURRENT = _Current()


class _WatchedPool:
    """Hands each connection it lends out to the current request's :class:`_Watch`."""

    def _get_conn(self, timeout: float | None = None) -> Any:
        connection = super()._get_conn(timeout)  # type: ignore[misc]
        if (watch := _CURRENT.watch) is not None:
            watch.add(connection)
        return connection


class _WatchedHTTPPool(_WatchedPool, HTTPConnectionPool):
    pass


class _WatchedHTTPSPool(_WatchedPool, HTTPSConnectionPool):
    pass


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter, with pools whose connections a deadline can shut."""

    _POOLS = {"http": _WatchedHTTPPool, "https": _WatchedHTTPSPool}

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = self._POOLS
        return manager
