"""The aggregator behind granian's RSGI interface: slow clients cost a coroutine, never a thread.

A WSGI server gives each request a thread (or a process) from the first byte of its headers to
the last byte of its body, so a few connections that send half a request and then wait hold every
thread: two such connections stopped all ingest under gunicorn's sync workers. Here granian's
Rust front end reads the headers, and :class:`BufferedWSGI` has the body read on the event loop,
bounded in size (one byte past the app's ``MAX_CONTENT_LENGTH``, which is ``LDP_MAX_BODY``; a relay's
batch with a relay's token: ``LDP_MAX_RELAY_BODY``) and in time (:data:`BODY_SECONDS` for the whole
body; :data:`LARGER_BODY_SECONDS` for a relay's batch), and only then hands the complete request to the
Flask app in one of a few threads (several requests in flight let the store's group commit share
one transaction between them); reads whose answers grow with the data run in a lane of their own
(:data:`HEAVY_THREADS`). In that thread a client's plainly valid batch of reports is answered
before the app, without Flask's request machinery (``answer_first``, :mod:`.ingest_path`);
everything else goes to the app. Responses are collected and sent whole: granian's RSGI stream has no
backpressure (what is sent waits in the worker's memory until the client reads it), so streaming
would bound nothing. What a worker holds for a client that does not read is bounded instead by
the size of an answer (an anonymous page of estimates is capped, :mod:`.api`) and by HTTP/1.1's
one answer at a time per connection; the kernel's send buffer takes the first megabytes of it.

RSGI (granian's own protocol) rather than ASGI: the body arrives as bytes read by Rust, not as
per-chunk message dicts (``make bench`` compares the two servers; the README has the figures).

Whether a body is too large is decided in one place, Werkzeug's ``MAX_CONTENT_LENGTH`` check in the
app (:mod:`.body`): the bridge only stops reading one byte past it, so that a worker never holds
more, and tells the app how many bytes it got. A chunked body reaches the app de-chunked, with its
length, and ``wsgi.input_terminated`` set.

Request headers are bounded too: :data:`HEADER_BYTES` in all (as granian's HTTP/1.1 parser
refuses more with a 431), and repeated ones are joined once, in linear time.

No client address reaches the app: the WSGI environ has no ``REMOTE_ADDR``.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ...serving.body import read_body
from ...serving.process import die_with_master
from ...shared.checks import parse_digits
from .cors import headers_for
from .gateway import larger_body
from .headers import not_a_page

if TYPE_CHECKING:  # granian's types; the bridge itself never imports granian
    from granian.rsgi import HTTPProtocol, Scope

# Seconds a client has to deliver a whole request body once its headers are in.
BODY_SECONDS = 10.0
# Seconds a relay has to deliver a batch of up to LDP_MAX_RELAY_BODY (128 MiB: about 3.6 Mbit/s).
LARGER_BODY_SECONDS = 300.0
# Bytes of request line and headers a request may carry: what ``serve`` lets granian's HTTP/1.1
# parser buffer (more is a 431 there), and what the bridge itself accepts from any front end.
HEADER_BYTES = 64 * 1024
# A Content-Length longer than this is no body we would read (LDP_MAX_BODY is far smaller).
CONTENT_LENGTH_DIGITS = 19
# Threads per worker process running the Flask app: enough for concurrent requests to share a
# commit (the store's group commit) while SQLite writes one transaction at a time anyway.
THREADS = 8
# Reads whose answer can be large (a page of estimates, a dashboard page) run in a lane of their
# own, HEAVY_THREADS threads, so that a burst of them queues there, on the event loop, and never
# takes the threads that ingest and health checks need.
HEAVY_THREADS = 2
# An answer: its status, headers and whole body.
Answer = tuple[int, list[tuple[str, str]], bytes]
# Request headers the bridge consumes itself: the body arrives whole, with its length.
_BODY_FRAMING = {"CONTENT_LENGTH", "TRANSFER_ENCODING"}


class BufferedWSGI:
    """RSGI in front of a WSGI app: the body is read whole (to ``max_body + 1`` bytes) before the app runs."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], *, max_body: int, threads: int = THREADS,
                 body_seconds: float = BODY_SECONDS, trusted_proxies: Iterable[str] = (),
                 cors_origins: tuple[str, ...] = ("*",),
                 heavy: Callable[[str, str], bool] = lambda method, path: False, heavy_threads: int = HEAVY_THREADS,
                 larger_body: Callable[[str, str, str | None], int | None] = lambda method, path, authorization: None,
                 larger_body_seconds: float = LARGER_BODY_SECONDS,
                 answer_first: Callable[[dict[str, Any]], Answer | None] = lambda environ: None):
        """``heavy(method, path)`` says whether a request's answer can be large (see :data:`HEAVY_THREADS`);
        ``larger_body(method, path, Authorization)`` the larger body a request may have (a relay's
        batch: :func:`.gateway.larger_body`), read within ``larger_body_seconds``, or None.
        ``answer_first(environ)`` answers a complete request before the app, or None to leave it to
        the app (:class:`.ingest_path.IngestPath`)."""
        self.wsgi_app = wsgi_app
        self.answer_first = answer_first
        self.max_body = max_body
        # The errors answered here, before the app runs, carry CORS headers as the app's own do.
        self.cors_origins = cors_origins
        self.body_seconds = body_seconds
        self.trusted_proxies = frozenset(trusted_proxies)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="ldp-request")
        self.heavy = heavy
        self.heavy_executor = ThreadPoolExecutor(heavy_threads, thread_name_prefix="ldp-read")
        self.larger_body = larger_body
        self.larger_body_seconds = larger_body_seconds

    async def __rsgi__(self, scope: Scope, proto: HTTPProtocol) -> None:
        if scope.proto != "http":
            return
        cors = [(k.lower(), v) for k, v in headers_for(scope.path, scope.method, scope.headers.get("origin"),
                                                       self.cors_origins).items()]
        try:
            headers = _headers(scope.headers.items())
        except _TooLarge:
            _error(proto, cors, 431, f"the request headers are larger than {HEADER_BYTES} bytes")
            return
        declared_text = headers.get("CONTENT_LENGTH")
        declared = None if declared_text is None else parse_digits(declared_text, CONTENT_LENGTH_DIGITS)
        if declared_text is not None and declared is None:
            _error(proto, cors, 400, "Content-Length must be a whole number")
            return
        complete = True  # whether the whole body was read (else the connection cannot be reused)
        larger = self.larger_body(scope.method, scope.path, headers.get("AUTHORIZATION"))
        max_body, seconds = (self.max_body, self.body_seconds) if larger is None else (larger, self.larger_body_seconds)
        if declared is not None and declared > max_body:
            # Not read at all: the app sees the declared length and refuses it (413).
            body, length, complete = b"", declared, False
        else:
            try:
                async with asyncio.timeout(seconds):  # no task of its own, as wait_for would make
                    body = await read_body(proto, declared is not None, max_body)
            except asyncio.TimeoutError:
                _error(proto, cors, 408, f"the request body did not arrive within {seconds:g} s")
                return
            except Exception:  # granian's protocol error: a malformed chunk, or a body cut off
                _error(proto, cors, 400, "the request body could not be read: it ended early or its chunked "
                                   "encoding is malformed")
                return
            length = len(body)
            complete = length <= max_body
        environ = self._environ(scope, headers, body, length)
        lane = self.heavy_executor if self.heavy(scope.method, scope.path) else self.executor
        loop = asyncio.get_running_loop()
        status, response_headers, content = await loop.run_in_executor(lane, _answer, self.answer_first,
                                                                       self.wsgi_app, environ)
        if not complete:
            response_headers = [*response_headers, ("Connection", "close")]
        proto.response_bytes(status, response_headers, content)

    def _environ(self, scope: Scope, headers: dict[str, str], body: bytes, length: int) -> dict[str, Any]:
        host, _, port = scope.server.rpartition(":")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": scope.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": scope.path.encode("utf-8", "surrogateescape").decode("latin-1"),
            "QUERY_STRING": scope.query_string,
            "SERVER_NAME": host or "127.0.0.1",
            "SERVER_PORT": port or "80",
            "SERVER_PROTOCOL": f"HTTP/{scope.http_version}",
            "CONTENT_LENGTH": str(length),
            "wsgi.version": (1, 0),
            "wsgi.input": io.BytesIO(body),
            # The input ends where the body ends: a reader may read to EOF (a chunked body too).
            "wsgi.input_terminated": True,
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for key, value in headers.items():
            if key == "CONTENT_TYPE":
                environ[key] = value
            elif key not in _BODY_FRAMING:
                environ["HTTP_" + key] = value
        # A reverse proxy that terminates TLS says so; only a trusted one is believed.
        scheme = scope.scheme
        forwarded = environ.pop("HTTP_X_FORWARDED_PROTO", None)
        peer = scope.client.rpartition(":")[0].strip("[]")
        if forwarded in ("http", "https") and ("*" in self.trusted_proxies or peer in self.trusted_proxies):
            scheme = forwarded
        environ["wsgi.url_scheme"] = scheme
        return environ


class _TooLarge(Exception):
    pass


def _headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Request headers by their WSGI key (``Content-Type`` -> ``CONTENT_TYPE``), repeated ones joined
    with commas (RFC 9110 5.3); :class:`_TooLarge` past :data:`HEADER_BYTES` in all.

    Each value is collected once and joined once: joining as they come would copy the growing
    value at every repeat, quadratic in the number of repeats.
    """
    values: dict[str, list[str]] = {}
    size = 0
    for name, value in pairs:
        size += len(name) + len(value) + 4  # ": " and CRLF, as on the wire
        if size > HEADER_BYTES:
            raise _TooLarge
        values.setdefault(name.upper().replace("-", "_"), []).append(value)
    return {key: ",".join(parts) for key, parts in values.items()}


def _answer(first: Callable[[dict[str, Any]], Answer | None], app: Callable[..., Iterable[bytes]],
            environ: dict[str, Any]) -> Answer:
    """``first``'s answer to a complete request, else the app's."""
    answered = first(environ)
    return _call(app, environ) if answered is None else answered


def _call(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> Answer:
    """Run the WSGI app on a complete request; its status, headers and whole body."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [int(status[:3]), headers]
        return lambda data: None  # the legacy write() callable: Flask never uses it

    result = app(environ, start_response)
    try:
        content = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return started[0], started[1], content


def json_answer(obj: Any) -> bytes:
    """``obj`` as the app's ``jsonify`` writes it outside debug mode: compact, in its own order, and
    a newline."""
    return (json.dumps(obj, separators=(",", ":")) + "\n").encode()


def _error(proto: HTTPProtocol, cors: list[tuple[str, str]], status: int, message: str) -> None:
    """The bridge's own refusal, written as the app writes its errors (compact JSON, a newline, the
    headers every answer carries)."""
    body = json_answer({"error": message, "details": []})
    proto.response_bytes(status, [("content-type", "application/json"), *not_a_page().items(),
                                  ("connection", "close"), *cors], body)


def create_rsgi_app() -> BufferedWSGI:
    """The aggregator from its ``LDP_*`` environment, behind :class:`BufferedWSGI` (granian's factory)."""
    from .. import create_app
    from .ingest_path import IngestPath

    die_with_master()
    app = create_app()
    return BufferedWSGI(app, max_body=app.config["MAX_CONTENT_LENGTH"], trusted_proxies=app.config["LDP_PROXY_IPS"],
                        cors_origins=app.config["LDP_CORS_ORIGINS"], heavy=large_answer,
                        larger_body=larger_body(app.config), answer_first=IngestPath(app))


def large_answer(method: str, path: str) -> bool:
    """The aggregator's reads whose answer grows with the data: estimates and dashboard pages."""
    return method == "GET" and (path in ("/", "/api/v1/estimates") or path.startswith("/schemas/"))
