"""The relay's HTTP face, written for granian's RSGI interface (as ``serve`` runs the aggregator),
and the threads it starts: the writer, the forwarder and the refresher.

Routes (DESIGN.md, "Relay"):

- ``POST /relay``: one encapsulated request, ``message/ohttp-req`` or ``text/plain`` (what a page
  sends without a preflight), of 55 bytes plus a positive multiple of 1,024, at most 64 KiB (else
  400, or 413 past 64 KiB; another content type 415). Its 7-byte header must name a key of the
  aggregator's key list as last fetched (else 400 ``application/problem+json`` with the
  ``ohttp-key`` problem type of RFC 9458 §5.3: the client refetches the keys and sends again). It
  is stored with the hour it arrived, synced, then answered 202 with no body. A full store, or no
  key list fetched yet, answers 503 with ``Retry-After``.
- ``GET /ohttp-keys``: the aggregator's ``GET /api/v1/ohttp-keys``, byte for byte, same media type
  and caching; ``GET /api/v1/schemas/<name>[/<version>]``: the aggregator's schema, byte for byte.
- ``GET /healthz`` and ``GET /metrics``.

CORS as for the aggregator's ``POST /api/v1/reports`` and schema reads, on the three routes a
page uses, for every origin (what a relay takes is anonymous by design, and an origin list is no
defence against posts made without a browser): every answer there, errors included, carries
``Access-Control-Allow-Origin: *`` and exposes ``Retry-After``; the preflight ``OPTIONS`` answers
204 before any other rule.

Nothing of a request but its body and the hour is kept, and nothing of it is logged: the relay
has no access log and never reads the client's address. Writes go through one thread that commits
whatever has arrived meanwhile in one transaction (one sync for many requests); each answer waits
for its own commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import re
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from ..serving.body import read_body
from ..serving.process import die_with_master
from ..shared import ohttp
from ..shared.checks import parse_digits
from .forwarder import Forwarder, hour_of
from .metrics import RelayMetrics
from .settings import RelaySettings, load
from .store import RelayStore, Usage
from .upstream import KEYS, Cache, Refresher, schema_key

if TYPE_CHECKING:  # granian's types; this module never imports granian
    from granian.rsgi import HTTPProtocol, Scope

log = logging.getLogger(__name__)

# Seconds a client has to deliver the whole body once its headers are in.
BODY_SECONDS = 10.0
# What the aggregator's key list may be cached for (it says max-age=3600 itself: the same bytes).
KEYS_CACHE_CONTROL = "max-age=3600"
# Seconds a client is told to wait when the store is full (a batch frees room) or no key list
# has been fetched yet (the refresher tries every 30 s).
FULL_RETRY_SECONDS = 600
NO_KEYS_RETRY_SECONDS = 30
# Browsers cap a preflight's lifetime (Chromium at 2 hours); longer would only be ignored.
PREFLIGHT_MAX_AGE = "7200"
_SCHEMA_PATH = re.compile(r"/api/v1/schemas/([^/]+)(?:/([^/]+))?")
_VERSION_DIGITS = 9
_ALWAYS = [("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer"),
           ("content-security-policy", "default-src 'none'; frame-ancestors 'none'; base-uri 'none'")]
_CORS = [("access-control-allow-origin", "*"), ("access-control-expose-headers", "Retry-After")]
_KEY_PROBLEM = json.dumps({"type": ohttp.KEY_PROBLEM_TYPE, "title": "key identifier unknown"}).encode()
_ACCEPTED_TYPES = (ohttp.REQUEST_MEDIA_TYPE, "text/plain")


def _route(path: str) -> tuple[str, str] | None:
    """The route of ``path`` and the one method it answers (besides HEAD for a GET, and OPTIONS)."""
    if path == "/relay":
        return "relay", "POST"
    if path == "/ohttp-keys":
        return "keys", "GET"
    if _SCHEMA_PATH.fullmatch(path):
        return "schema", "GET"
    if path in ("/healthz", "/metrics"):
        return path[1:], "GET"
    return None


def request_size_problem(size: int) -> str | None:
    """Why a body of ``size`` bytes is no padded encapsulated request, or None if it may be one:
    55 bytes of header, ``enc`` and tag, and a padded message of a positive multiple of 1,024."""
    padded = size - ohttp.REQUEST_OVERHEAD
    if padded <= 0 or padded % ohttp.PAD_UNIT or size > ohttp.MAX_REQUEST_BYTES:
        return (f"an encapsulated request is {ohttp.REQUEST_OVERHEAD} bytes plus a positive multiple of "
                f"{ohttp.PAD_UNIT}, at most {ohttp.MAX_REQUEST_BYTES}; got {size}")
    return None


class Writer:
    """Stores requests in one thread, committing all that queued up meanwhile in one transaction."""

    def __init__(self, store: RelayStore) -> None:
        self.store = store
        self.queue: queue.SimpleQueue[tuple[bytes, Future[None]] | None] = queue.SimpleQueue()
        self.failing: str | None = None  # the last commit's error, None once one succeeds

    def submit(self, body: bytes) -> Future[None]:
        future: Future[None] = Future()
        self.queue.put((body, future))
        return future

    def close(self) -> None:
        self.queue.put(None)

    def run(self) -> None:
        while (item := self.queue.get()) is not None:
            items = [item]
            while True:
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self.queue.put(None)  # stop after this commit
                    break
                items.append(more)
            # A request whose client went away meanwhile (its future cancelled) is not stored.
            items = [(body, future) for body, future in items if future.set_running_or_notify_cancel()]
            if not items:
                continue
            try:
                self.store.add([body for body, _ in items], hour_of(time.time()))
            except Exception as exc:  # noqa: BLE001 - a full disk, a lock held too long: each waiting request gets a 503
                self.failing = f"{type(exc).__name__}: {exc}"
                log.error("relay: storing %d request(s) failed: %s", len(items), self.failing)
                for _, future in items:
                    future.set_exception(exc)
                continue
            self.failing = None
            for _, future in items:
                future.set_result(None)


class RelayApp:
    """The RSGI application, built in the worker (the store opened, the aggregator asked once);
    granian calls :meth:`__rsgi_init__` before serving, which starts the threads, and
    :meth:`__rsgi_del__` when it stops."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        self.usage = Usage()
        self.metrics = RelayMetrics(self.usage)
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        store = RelayStore(settings.db, self.usage)
        store.measure()
        self.cache = Cache(store.cache_entries())
        self.writer = Writer(store)
        self.forwarder = Forwarder(settings, RelayStore(settings.db, self.usage), self.metrics)
        self.refresher = Refresher(settings.aggregator, RelayStore(settings.db, self.usage), self.cache)
        # Once before the first answer, so that a relay that can reach its aggregator serves its
        # keys and schemas from its first request on (the connections wait in the listen queue).
        self.refreshed = self.refresher.refresh()

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        for name, target in (("writer", self.writer.run), ("forwarder", lambda: self.forwarder.run(self.stop)),
                             ("refresher", lambda: self.refresher.run(self.stop, self.refreshed))):
            thread = threading.Thread(target=target, name=f"relay-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stop.set()
        self.writer.close()
        for thread in self.threads:
            thread.join(timeout=5)
        # The write-ahead log holds the latest pages in the order they were written: fold it in.
        last = RelayStore(self.settings.db, Usage())
        last.checkpoint()
        last.close()

    async def __rsgi__(self, scope: Scope, proto: HTTPProtocol) -> None:
        if scope.proto != "http":
            return
        route = _route(scope.path)
        if route is None:
            self._error(proto, [], 404, "no such route on this relay")
            return
        name, method = route
        cors = _CORS if name in ("relay", "keys", "schema") else []
        if scope.method == "OPTIONS" and cors:
            proto.response_empty(204, [*cors, ("access-control-allow-methods", f"{method}, OPTIONS"),
                                       ("access-control-allow-headers", "Content-Type"),
                                       ("access-control-max-age", PREFLIGHT_MAX_AGE)])
            return
        if scope.method != method and not (method == "GET" and scope.method == "HEAD"):
            self._error(proto, cors, 405, f"{scope.path} answers {method} only", [("allow", method)])
            return
        if name == "relay":
            await self._relay(scope, proto)
        elif name == "keys":
            self._keys(proto, head=scope.method == "HEAD")
        elif name == "schema":
            self._schema(scope.path, proto, head=scope.method == "HEAD")
        elif name == "healthz":
            self._healthz(proto)
        else:
            body, content_type = self.metrics.exposition()
            self._answer(proto, 200, [("content-type", content_type)], body)

    async def _relay(self, scope: Scope, proto: HTTPProtocol) -> None:
        declared = scope.headers.get("content-length")
        length = None if declared is None else _digits(declared)
        if declared is not None and length is None:
            self._error(proto, _CORS, 400, "Content-Length must be a whole number", close=True)
            return
        if length is not None and length > ohttp.MAX_REQUEST_BYTES:
            self.metrics.refused.labels("size").inc()
            self._error(proto, _CORS, 413, f"a relayed request is at most {ohttp.MAX_REQUEST_BYTES} bytes, "
                                           f"got {length}", close=True)
            return
        media_type = (scope.headers.get("content-type") or "").split(";")[0].strip().lower()
        if media_type not in _ACCEPTED_TYPES:
            self.metrics.refused.labels("media_type").inc()
            self._error(proto, _CORS, 415, f"Content-Type must be {' or '.join(_ACCEPTED_TYPES)}", close=True)
            return
        try:
            body = await asyncio.wait_for(read_body(proto, length is not None, ohttp.MAX_REQUEST_BYTES), BODY_SECONDS)
        except asyncio.TimeoutError:
            self._error(proto, _CORS, 408, f"the request body did not arrive within {BODY_SECONDS:g} s", close=True)
            return
        except Exception:  # noqa: BLE001 - granian's protocol error: a malformed chunk, a body cut off
            self._error(proto, _CORS, 400, "the request body could not be read: it ended early or its chunked "
                                           "encoding is malformed", close=True)
            return
        if len(body) > ohttp.MAX_REQUEST_BYTES:
            self.metrics.refused.labels("size").inc()
            self._error(proto, _CORS, 413, f"a relayed request is at most {ohttp.MAX_REQUEST_BYTES} bytes",
                        close=True)
            return
        problem = request_size_problem(len(body))
        if problem:
            self.metrics.refused.labels("size").inc()
            self._error(proto, _CORS, 400, problem)
            return
        if not self.cache.keys_known():
            self.metrics.refused.labels("no_keys").inc()
            self._error(proto, _CORS, 503, "the relay has not fetched the aggregator's keys yet",
                        [("retry-after", str(NO_KEYS_RETRY_SECONDS))])
            return
        try:
            key_id: int | None = ohttp.request_key_id(body)
        except ValueError:
            key_id = None
        if key_id not in self.cache.key_ids:
            self.metrics.refused.labels("key").inc()
            self._answer(proto, 400, [*_CORS, ("content-type", "application/problem+json")], _KEY_PROBLEM)
            return
        if not self.usage.fits(len(body), self.settings.max_stored, self.settings.max_stored_bytes):
            self.metrics.refused.labels("full").inc()
            self._error(proto, _CORS, 503, "the relay's store is full until its next batch is delivered",
                        [("retry-after", str(FULL_RETRY_SECONDS))])
            return
        try:
            await asyncio.wrap_future(self.writer.submit(body))
        except Exception:  # noqa: BLE001 - logged by the writer; the client keeps its report and retries
            self._error(proto, _CORS, 503, "the relay could not store the request; try again later",
                        [("retry-after", str(NO_KEYS_RETRY_SECONDS))])
            return
        self.metrics.received.inc()
        self._answer(proto, 202, _CORS, b"")

    def _keys(self, proto: HTTPProtocol, *, head: bool) -> None:
        keys = self.cache.get(KEYS)
        if keys is None:
            self._error(proto, _CORS, 503, "the relay has not fetched the aggregator's keys yet",
                        [("retry-after", str(NO_KEYS_RETRY_SECONDS))])
            return
        self._answer(proto, 200, [*_CORS, ("content-type", ohttp.KEYS_MEDIA_TYPE)], b"" if head else keys,
                     cache_control=KEYS_CACHE_CONTROL)

    def _schema(self, path: str, proto: HTTPProtocol, *, head: bool) -> None:
        match = _SCHEMA_PATH.fullmatch(path)
        assert match is not None  # routed here by it
        name, version_text = match.groups()
        version = None if version_text is None else _digits(version_text, _VERSION_DIGITS)
        schema = None if version_text is not None and version is None else self.cache.get(schema_key(name, version))
        if schema is None:
            self._error(proto, _CORS, 404, "this relay knows no such schema (it copies the aggregator's every "
                                           "few minutes)")
            return
        self._answer(proto, 200, [*_CORS, ("content-type", "application/json")], b"" if head else schema)

    def _healthz(self, proto: HTTPProtocol) -> None:
        state = {"status": "ok", "writes": "ok" if self.writer.failing is None else "failing",
                 "keys": "ok" if self.cache.keys_known() else "missing",
                 "forwarding": "ok" if self.forwarder.stopped is None else f"stopped (HTTP {self.forwarder.stopped})"}
        status = 200 if self.writer.failing is None else 503
        if status != 200:
            state["status"] = "error"
        self._answer(proto, status, [("content-type", "application/json")], json.dumps(state).encode())

    def _error(self, proto: HTTPProtocol, cors: list[tuple[str, str]], status: int, message: str,
               extra: list[tuple[str, str]] | None = None, *, close: bool = False) -> None:
        body = json.dumps({"error": message, "details": []}).encode()
        headers = [*cors, *(extra or []), ("content-type", "application/json")]
        self._answer(proto, status, [*headers, ("connection", "close")] if close else headers, body)

    @staticmethod
    def _answer(proto: HTTPProtocol, status: int, headers: list[tuple[str, str]], body: bytes, *,
                cache_control: str = "no-store") -> None:
        proto.response_bytes(status, [*headers, ("cache-control", cache_control), *_ALWAYS], body)


def _digits(text: str, most: int = 19) -> int | None:
    return parse_digits(text.strip(), most)


def create_rsgi_app() -> RelayApp:
    """The relay from its ``LDP_RELAY_*`` environment (granian's factory, in the worker)."""
    die_with_master()
    return RelayApp(load(os.environ))
