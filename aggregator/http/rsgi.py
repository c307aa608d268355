"""The aggregator behind granian's RSGI interface: slow clients cost a coroutine, never a thread.

A WSGI server gives each request a thread (or a process) from the first byte of its headers to
the last byte of its body, so a few connections that send half a request and then wait hold every
thread: two such connections stopped all ingest under gunicorn's sync workers. Here granian's
Rust front end reads the headers, and :class:`BufferedWSGI` has the body read on the event loop,
bounded in size (``LDP_MAX_BODY``) and in time (:data:`BODY_SECONDS` for the whole body), and
only then hands the complete request to the Flask app in one of a few threads (several requests
in flight let the store's group commit share one transaction between them). Responses are small
(the dashboard's largest page is a few hundred KB), so they are collected and sent whole.

RSGI (granian's own protocol) rather than ASGI: the body arrives as bytes read by Rust, not as
per-chunk message dicts (the no-database ceiling served 1,622 single-report requests/s this way
against 1,224 on ASGI, one noisy run each; ``make bench`` compares granian with gunicorn).

No client address reaches the app: the WSGI environ has no ``REMOTE_ADDR``.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable

from .cors import headers_for

# Seconds a client has to deliver a whole request body once its headers are in.
BODY_SECONDS = 10.0
# Threads per worker process running the Flask app: enough for concurrent requests to share a
# commit (the store's group commit) while SQLite writes one transaction at a time anyway.
THREADS = 8


class BufferedWSGI:
    """RSGI in front of a WSGI app: the body is read whole before the app runs."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], *, max_body: int, threads: int = THREADS,
                 body_seconds: float = BODY_SECONDS, trusted_proxies: Iterable[str] = (),
                 cors_origins: tuple[str, ...] = ("*",)):
        self.wsgi_app = wsgi_app
        self.max_body = max_body
        # The errors answered here, before the app runs, carry CORS headers as the app's own do.
        self.cors_origins = cors_origins
        self.body_seconds = body_seconds
        self.trusted_proxies = frozenset(trusted_proxies)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="ldp-request")

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        cors = [(k.lower(), v) for k, v in headers_for(scope.path, scope.method, scope.headers.get("origin"),
                                                       self.cors_origins).items()]
        declared = scope.headers.get("content-length")
        if declared is not None and not declared.isdigit():
            _error(proto, cors, 400, "Content-Length must be a whole number")
            return
        if declared is not None and int(declared) > self.max_body:
            _error(proto, cors, 413, "request body is larger than LDP_MAX_BODY allows")
            return
        try:
            body = await asyncio.wait_for(self._body(proto, declared is not None), self.body_seconds)
        except asyncio.TimeoutError:
            _error(proto, cors, 408, f"the request body did not arrive within {self.body_seconds:g} s")
            return
        except _TooLarge:
            _error(proto, cors, 413, "request body is larger than LDP_MAX_BODY allows")
            return
        except Exception:  # granian's protocol error: a malformed chunk, or a body cut off
            _error(proto, cors, 400, "the request body could not be read: it ended early or its chunked "
                               "encoding is malformed")
            return
        environ = self._environ(scope, body)
        loop = asyncio.get_running_loop()
        status, headers, content = await loop.run_in_executor(self.executor, _call, self.wsgi_app, environ)
        proto.response_bytes(status, headers, content)

    async def _body(self, proto: Any, length_known: bool) -> bytes:
        if length_known:  # already checked against max_body: Rust reads it in one go
            return await proto()
        body = bytearray()
        async for chunk in proto:
            body += chunk
            if len(body) > self.max_body:
                raise _TooLarge
        return bytes(body)

    def _environ(self, scope: Any, body: bytes) -> dict[str, Any]:
        host, _, port = scope.server.rpartition(":")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": scope.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": scope.path.encode("utf-8", "surrogateescape").decode("latin-1"),
            "QUERY_STRING": scope.query_string,
            "SERVER_NAME": host or "127.0.0.1",
            "SERVER_PORT": port or "80",
            "SERVER_PROTOCOL": f"HTTP/{scope.http_version}",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for name, value in scope.headers.items():
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            elif key != "CONTENT_LENGTH":
                key = "HTTP_" + key
                environ[key] = f"{environ[key]},{value}" if key in environ else value
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


def _call(app: Callable[..., Iterable[bytes]], environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
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


def _error(proto: Any, cors: list[tuple[str, str]], status: int, message: str) -> None:
    body = json.dumps({"error": message, "details": []}).encode()
    proto.response_bytes(status, [("content-type", "application/json"), ("cache-control", "no-store"),
                                  ("connection", "close"), *cors], body)


def create_rsgi_app() -> BufferedWSGI:
    """The aggregator from its ``LDP_*`` environment, behind :class:`BufferedWSGI` (granian's factory)."""
    from .. import create_app

    app = create_app()
    return BufferedWSGI(app, max_body=app.config["LDP_MAX_BODY"], trusted_proxies=app.config["LDP_PROXY_IPS"],
                        cors_origins=app.config["LDP_CORS_ORIGINS"])
