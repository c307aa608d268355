"""``ldp-telemetry serve``: the aggregator under granian, configured from our settings.

granian's Rust front end reads request headers without holding a Python thread, and
:class:`~.rsgi.BufferedWSGI` reads the body on the event loop, so slow or idle connections cost a
socket each and stop nobody (under gunicorn's sync workers, two connections that sent half a
header line stopped all ingest). Each worker process imports :func:`~.rsgi.create_rsgi_app` by
name and builds its own app, so the scheduler threads start in the workers; the jobs themselves
make sure only one worker runs them at a time (:mod:`..jobs`). The workers read the settings from
``LDP_*`` variables: :func:`serve` puts the checked command-line values there first.

Connections are bounded in number and in idle time. HTTP/1.1 only: TLS and HTTP/2 are the
reverse proxy's (``deploy/``), and granian's HTTP/1-or-2 detection waits for a connection's first
bytes with no timeout, so connections that never sent a byte were held for ever and, at granian's
default of 1,024 connections between the workers, stopped the whole server. Served as HTTP/1.1,
a connection has :data:`HEADER_READ_MS` from its acceptance (and from the end of each answer, when
kept alive) to send a request's headers, and each worker holds at most :data:`CONNECTIONS` at a
time; more wait in the listen queue until one closes. So a stranger holding connections open
without a word has each closed within :data:`HEADER_READ_MS`, and must open more than
:data:`CONNECTIONS` per worker within that time to make others wait at all. What a worker holds for clients that do not read their answers is
bounded per connection (:mod:`.rsgi`); ``LDP_WORKER_MAX_RSS`` replaces a worker that grows past it
anyway, gracefully (granian's resource monitor).

A worker that dies (the OOM killer, a native crash, ``kill -9``) is replaced, however often that
happens: granian's own guard ended the whole server when a worker it had respawned less than 5.5 s
before died again (granian 2.8 has no setting for it), and a server run bare then stayed down.
:class:`Supervisor` waits a backoff before each replacement instead (:func:`respawn_pause`), so a
worker that can never start costs a start every :data:`RESPAWN_MAX_SECONDS`, not a busy loop; the
other workers answer meanwhile, and what a dead worker acknowledged is counted by the others.

No access log unless asked for, and then one that cannot name a client: granian's format
without its address atom and without the query string (it may carry a read token). A malformed
request gets a 400 from granian and no log line at all. Every log line goes through
:class:`~.logs.EscapingFormatter`: nothing a request holds can start a line.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import tempfile
import threading
import time
from typing import Any

from ...serving.loop import EVENT_LOOP
from ..settings import load
from .logs import LOGGING
from .rsgi import HEADER_BYTES

# What granian's access log may say: the request line without the query, the status, the time.
ACCESS_LOG_FORMAT = '"%(method)s %(path)s %(protocol)s" %(status)d %(dt_ms).1fms'
# Milliseconds a connection has to send its request headers, from its acceptance or from its last
# answer (granian's default is 30 s).
HEADER_READ_MS = 10_000
# Connections a worker holds open at once (granian's default: 1,024 shared by the workers); an idle
# one costs a socket and a few KiB. Beyond it, connections wait in the kernel's listen queue.
CONNECTIONS = 2048
# Connections the kernel queues for the workers to accept (Linux caps it at net.core.somaxconn).
LISTEN_BACKLOG = 2048
# File descriptors a worker needs besides its connections (database, segments, logs, libraries).
SPARE_FILES = 256
# Seconds between two looks at the workers' memory (LDP_WORKER_MAX_RSS), and how many looks in a
# row over it replace a worker (one spike of a large answer being built is not enough).
RSS_SAMPLE_SECONDS = 5
RSS_SAMPLES = 2
# Seconds a worker gets to finish its requests on stop before it is killed.
STOP_SECONDS = 20
TARGET = "ldp_telemetry.aggregator.http.rsgi:create_rsgi_app"
# A dead worker is replaced after RESPAWN_FIRST_SECONDS, doubling with each death in a row of the
# same worker up to RESPAWN_MAX_SECONDS; one that lived RESPAWN_STABLE_SECONDS starts the row over.
RESPAWN_FIRST_SECONDS = 0.25
RESPAWN_MAX_SECONDS = 30.0
RESPAWN_STABLE_SECONDS = 60.0

log = logging.getLogger(__name__)


def respawn_pause(deaths: int) -> float:
    """Seconds to wait before replacing a worker that died ``deaths`` times in a row (from 1)."""
    doublings = min(deaths - 1, 32)  # past the cap long before; a bound keeps the float finite
    return min(RESPAWN_FIRST_SECONDS * 2.0 ** doublings, RESPAWN_MAX_SECONDS)


def open_files_for(workers: int) -> int:
    """Raise this process's soft limit on open files (the workers inherit it) to what ``workers``
    workers of :data:`CONNECTIONS` need, within the hard limit; the connections per worker that fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = workers * (CONNECTIONS + SPARE_FILES) + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY:
        return CONNECTIONS
    return max(64, min(CONNECTIONS, (soft - SPARE_FILES) // workers - SPARE_FILES))


def _supervisor_class() -> type:
    """granian's server (imported here: only ``serve`` needs granian) with dead workers replaced
    after a backoff, never the whole server ended for them."""
    from granian.server import Server

    class Supervisor(Server):  # type: ignore[misc, valid-type]  # granian picks Server at import (MPServer or MTServer): a variable mypy cannot subclass
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deaths: dict[int, int] = {}  # worker index -> deaths in a row
            self._stopping = threading.Event()

        def signal_handler_interrupt(self, *args: Any, **kwargs: Any) -> None:
            self._stopping.set()  # ends a backoff at once: a stop never waits for one
            super().signal_handler_interrupt(*args, **kwargs)

        def _respawn_workers(self, workers: list[int], spawn_target: Any, target_loader: Any,
                             delay: float = 0) -> None:
            # granian calls this for dead workers and for live ones it replaces on purpose (its
            # memory limit, a reload): only the dead wait a backoff.
            dead = [idx for idx in workers if not self.wrks[idx].is_alive()]
            if dead:
                pause = max(self._count_death(idx) for idx in dead)
                log.warning("replacing dead worker(s) %s in %.2f s", ", ".join(str(i + 1) for i in dead), pause)
                if self._stopping.wait(pause):
                    return
            super()._respawn_workers(workers, spawn_target, target_loader, delay)
            # What granian's crash-loop guard reads ("respawned less than 5.5 s ago": exit):
            # forgotten, since the backoff above replaces the guard.
            self.respawned_wrks.clear()

        def _count_death(self, idx: int) -> float:
            """Count a death of worker ``idx``; the pause before it is replaced."""
            lived = time.monotonic() - self.wrks[idx].birth
            deaths = 1 if lived >= RESPAWN_STABLE_SECONDS else self._deaths.get(idx, 0) + 1
            self._deaths[idx] = deaths
            return respawn_pause(deaths)

    return Supervisor


def serve(config: dict[str, Any], *, host: str, port: int, workers: int, access_log: bool = False) -> None:
    """Run the aggregator until stopped (SIGINT/SIGTERM). ``config`` must already be checked."""
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings

    for name, value in config.items():
        os.environ[name] = str(value)  # the workers build their app from the environment
    metrics_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from ..metrics import share_between_processes

        metrics_dir = tempfile.mkdtemp(prefix="ldp-telemetry-metrics-")
        share_between_processes(metrics_dir)
    connections = open_files_for(workers)
    max_rss = load(config)["LDP_WORKER_MAX_RSS"] or None
    try:
        supervisor = _supervisor_class()
        supervisor(TARGET, factory=True, interface=Interfaces.RSGI, loop=Loops(EVENT_LOOP), address=host, port=port,
                   workers=workers, http=HTTPModes.http1, websockets=False, backlog=LISTEN_BACKLOG,
                   backpressure=connections,
                   http1_settings=HTTP1Settings(header_read_timeout=HEADER_READ_MS, max_buffer_size=HEADER_BYTES),
                   log_dictconfig=LOGGING, log_access=access_log, log_access_format=ACCESS_LOG_FORMAT,
                   respawn_failed_workers=True, workers_kill_timeout=STOP_SECONDS, workers_max_rss=max_rss,
                   rss_sample_interval=RSS_SAMPLE_SECONDS, rss_samples=RSS_SAMPLES).serve()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
