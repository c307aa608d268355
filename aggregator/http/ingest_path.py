"""The 202 to a plainly valid batch of reports, made without Flask's request machinery.

Almost every request a server gets is a client's ``POST /api/v1/reports`` with a batch the
one-pass reader takes (:class:`..ingest.reader.BatchReader`). Flask's part of answering it (a
request context, routing, a Response, the hooks that add headers) cost about 150 µs a request in
process: more than reading and storing a 100-report batch, and nine tenths of a 1-report one.
:class:`IngestPath` answers such a request itself, with the route's own steps: the same reader,
window policy and batch limit, :func:`.api.accept_batch` (which stores the rows and counts them in
``/metrics``), and the headers the app's hooks add to a JSON answer (:func:`.headers.not_a_page`,
:func:`.cors.headers_for`).

It answers nothing else: another path, method or Content-Type, a query string, a body cut short
or too large, a batch the reader leaves to the exact rules, or an app in debug mode (whose JSON is
indented) return None, and the bridge hands the request to the app, which decides as it always did
(and names every fault). So it decides nothing the route would not, and
``tests/test_agg_ingest_path.py`` holds its answers to the app's: the same status, headers (their
order aside) and bytes, the same rows stored and the same ``/metrics``. A store that refuses the
batch now (busy, unavailable), or any fault while storing, is handed over too, with its error
under :data:`.api.REFUSED`: the route raises it before anything else, so the app answers it (503,
or 500 and a log line) without reading or writing the batch a second time. A fault of this module
before the write is logged and the app reads the batch afresh; after it there is nothing left to
fail but rendering two integers.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask

from .. import context
from ..ingest.batch import window_policy
from ..store import StoreError
from .api import REFUSED, accept_batch
from .cors import headers_for
from .headers import not_a_page
from .rsgi import Answer, json_answer

log = logging.getLogger(__name__)

PATH = "/api/v1/reports"
# The Content-Types clients send (the Python client, the JavaScript client's fetch and its
# keepalive post); the app takes others too (a charset parameter, another spelling) and reads them.
CONTENT_TYPES = frozenset({"application/json", "text/plain;charset=UTF-8"})


class IngestPath:
    """Answers ``POST /api/v1/reports`` for a plainly valid batch (see the module); None otherwise."""

    def __init__(self, app: Flask):
        self.app = app
        self.reader = context.reader(app)
        self.max_batch: int = app.config["LDP_MAX_BATCH"]
        self.max_body: int = app.config["MAX_CONTENT_LENGTH"]
        self.origins: tuple[str, ...] = app.config["LDP_CORS_ORIGINS"]
        self.headers = list(not_a_page().items())

    def __call__(self, environ: dict[str, Any]) -> Answer | None:
        if (environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != PATH or environ["QUERY_STRING"]
                or environ.get("CONTENT_TYPE") not in CONTENT_TYPES or self.app.debug):
            return None
        body: bytes = environ["wsgi.input"].getvalue()  # not read: the app reads it whole if this declines
        if not 0 < len(body) <= self.max_body or str(len(body)) != environ["CONTENT_LENGTH"]:
            return None
        try:
            read = self.reader.rows(body, window_policy(self.app), self.max_batch)
            if read is None:
                return None
            cors = headers_for(PATH, "POST", environ.get("HTTP_ORIGIN"), self.origins)
        except StoreError as exc:  # reading the retention cutoff or a schema
            environ[REFUSED] = exc
            return None
        except Exception:  # nothing done yet: the app reads the batch afresh
            log.exception("reading a batch of reports before the app failed; the app reads it")
            return None
        try:
            accepted = accept_batch(self.app, *read)
        except Exception as exc:  # the store's refusal, or a fault while storing: never stored twice
            environ[REFUSED] = exc
            return None
        content = json_answer(accepted)
        return 202, [("Content-Type", "application/json"), ("Content-Length", str(len(content))),
                     *self.headers, *cors.items()], content
