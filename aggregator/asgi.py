"""The aggregator as an ASGI app for granian: slow clients cost a coroutine, never a thread.

A WSGI server gives each request a thread (or a process) from the first byte of its headers to
the last byte of its body, so a few connections that send half a request and then wait hold every
thread: two such connections stopped all ingest under gunicorn's sync workers. Here granian's
Rust front end reads the headers, and :class:`BufferedWSGI` reads the body on the event loop,
bounded in size (``LDP_MAX_BODY``) and in time (:data:`BODY_SECONDS` for the whole body), and
only then hands the complete request to the Flask app in one of a few threads. Responses are
small (the dashboard's largest page is a few hundred KB), so they are collected and sent whole.

No client address reaches the app: the WSGI environ has no ``REMOTE_ADDR``.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Iterable

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# Seconds a client has to deliver a whole request body once its headers are in.
BODY_SECONDS = 10.0
# Threads per worker process running the Flask app: enough for concurrent requests to share a
# commit (the store's group commit) while SQLite writes one transaction at a time anyway.
THREADS = 8


class BufferedWSGI:
    """ASGI in front of a WSGI app: the body is read whole before the app runs."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]], *, max_body: int, threads: int = THREADS,
                 body_seconds: float = BODY_SECONDS, trusted_proxies: Iterable[str] = ()):
        self.wsgi_app = wsgi_app
        self.max_body = max_body
        self.body_seconds = body_seconds
        self.trusted_proxies = frozenset(trusted_proxies)
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="ldp-request")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        declared = next((v for k, v in headers if k.lower() == "content-length"), None)
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _error(send, 413 if declared.isdigit() else 400,
                         "request body is larger than LDP_MAX_BODY allows" if declared.isdigit()
                         else "Content-Length must be a whole number")
            return
        try:
            body = await asyncio.wait_for(self._body(receive), self.body_seconds)
        except asyncio.TimeoutError:
            await _error(send, 408, f"the request body did not arrive within {self.body_seconds:g} s")
            return
        except _TooLarge:
            await _error(send, 413, "request body is larger than LDP_MAX_BODY allows")
            return
        except _Gone:
            # granian says "disconnect" for a body it cannot read (a malformed chunk) as well as for
            # a client that left; one that is still there hears why.
            try:
                await _error(send, 400, "the request body could not be read: it ended early or its "
                                        "chunked encoding is malformed")
            except Exception:  # the client is gone indeed: nobody to answer
                pass
            return
        environ = self._environ(scope, headers, body)
        loop = asyncio.get_running_loop()
        status, response_headers, content = await loop.run_in_executor(self.executor, _call, self.wsgi_app, environ)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response_headers]})
        await send({"type": "http.response.body", "body": content})

    async def _body(self, receive: Receive) -> bytes:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Gone
            body += message.get("body", b"")
            if len(body) > self.max_body:
                raise _TooLarge
            if not message.get("more_body", False):
                return bytes(body)

    def _environ(self, scope: Scope, headers: list[tuple[str, str]], body: bytes) -> dict[str, Any]:
        server = scope.get("server") or ("127.0.0.1", 80)
        scheme = scope.get("scheme", "http")
        client = scope.get("client")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": scope["method"],
            "SCRIPT_NAME": scope.get("root_path", ""),
            "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
            "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
            "SERVER_NAME": str(server[0]),
            "SERVER_PORT": str(server[1]),
            "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        for name, value in headers:
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            elif key != "CONTENT_LENGTH":
                key = "HTTP_" + key
                environ[key] = f"{environ[key]},{value}" if key in environ else value
        # A reverse proxy that terminates TLS says so; only a trusted one is believed.
        forwarded = environ.pop("HTTP_X_FORWARDED_PROTO", None)
        trusted = "*" in self.trusted_proxies or (client is not None and client[0] in self.trusted_proxies)
        if forwarded in ("http", "https") and trusted:
            scheme = forwarded
        environ["wsgi.url_scheme"] = scheme
        return environ


class _TooLarge(Exception):
    pass


class _Gone(Exception):
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


async def _error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": message, "details": []}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_asgi_app() -> BufferedWSGI:
    """The aggregator from its ``LDP_*`` environment, behind :class:`BufferedWSGI` (granian's factory)."""
    from . import create_app

    app = create_app()
    return BufferedWSGI(app, max_body=app.config["LDP_MAX_BODY"], trusted_proxies=app.config["LDP_PROXY_IPS"])
