"""``ldp-telemetry relay``: the relay under granian, as ``serve`` runs the aggregator.

One worker process serves and forwards: the forwarder is one loop with one batch in flight, and
the relay's work per request (a header check and an append) is small. granian's Rust front end
reads the headers, so slow or idle connections hold no Python thread; a connection has
:data:`HEADER_READ_MS` to send its headers, HTTP/1.1 only (TLS is a reverse proxy's), and a worker
that dies is started again (what it answered 202 is on disk), and on Linux the worker dies with
the main process (:func:`.app.create_rsgi_app`), so a ``kill -9`` of the relay ends it. No access log: the relay keeps
nothing of who sent what, and its log says nothing of any request.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from ..serving.loop import EVENT_LOOP
from .settings import PREFIX, RelaySettings

TARGET = "ldp_telemetry.relay.app:create_rsgi_app"
# Milliseconds a connection has to send its request headers (from acceptance or its last answer).
HEADER_READ_MS = 10_000
# Bytes of request line and headers granian's HTTP/1.1 parser buffers (more is a 431).
HEADER_BYTES = 64 * 1024
BACKLOG = 1024
# Seconds the worker gets to finish its requests on stop (it also ends its threads).
STOP_SECONDS = 20

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"generic": {"format": "[%(asctime)s] [%(levelname)s] %(message)s"}},
    "handlers": {"console": {"formatter": "generic", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
    "loggers": {
        "_granian": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "ldp_telemetry.relay": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
}


def serve(settings: RelaySettings, environ: MutableMapping[str, str]) -> None:
    """Run the relay until stopped (SIGINT/SIGTERM). ``environ`` is this process's environment:
    the checked settings go into it, so that the worker reads the same ones."""
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.server import Server

    for field, value in vars(settings).items():
        environ[PREFIX + field.upper()] = str(value)
    Server(TARGET, factory=True, interface=Interfaces.RSGI, loop=Loops(EVENT_LOOP), address=settings.host,
           port=settings.port, workers=1, http=HTTPModes.http1, websockets=False, backlog=BACKLOG,
           http1_settings=HTTP1Settings(header_read_timeout=HEADER_READ_MS, max_buffer_size=HEADER_BYTES),
           log_dictconfig=LOGGING, log_access=False, respawn_failed_workers=True,
           workers_kill_timeout=STOP_SECONDS).serve()
