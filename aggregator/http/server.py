"""``ldp-telemetry serve``: the aggregator under granian, configured from our settings.

granian's Rust front end reads request headers without holding a Python thread, and
:class:`~.rsgi.BufferedWSGI` reads the body on the event loop, so slow or idle connections cost a
socket each and stop nobody (under gunicorn's sync workers, two connections that sent half a
header line stopped all ingest). Each worker process imports :func:`~.rsgi.create_rsgi_app` by
name and builds its own app, so the scheduler threads start in the workers; the jobs themselves
make sure only one worker runs them at a time (:mod:`.jobs`). The workers read the settings from
``LDP_*`` variables: :func:`serve` puts the checked command-line values there first.

No access log unless asked for, and then one that cannot name a client: granian's format
without its address atom and without the query string (it may carry a read token). A malformed
request gets a 400 from granian and no log line at all.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

# What granian's access log may say: the request line without the query, the status, the time.
ACCESS_LOG_FORMAT = '"%(method)s %(path)s %(protocol)s" %(status)d %(dt_ms).1fms'
# Milliseconds a connection has to send its request headers (granian's default is 30 s).
HEADER_READ_MS = 10_000
# Bytes of request line and headers a connection may send (granian's default is 408 KiB); the
# body is read apart, in chunks, and bounded by LDP_MAX_BODY.
HEADER_BYTES = 64 * 1024
# Seconds a worker gets to finish its requests on stop before it is killed.
STOP_SECONDS = 20
TARGET = "ldp_telemetry.aggregator.http.rsgi:create_rsgi_app"


def serve(config: dict[str, Any], *, host: str, port: int, workers: int, access_log: bool = False) -> None:
    """Run the aggregator until stopped (SIGINT/SIGTERM). ``config`` must already be checked."""
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.server import Server

    for name, value in config.items():
        os.environ[name] = str(value)  # the workers build their app from the environment
    metrics_dir = None
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from ..metrics import share_between_processes

        metrics_dir = tempfile.mkdtemp(prefix="ldp-telemetry-metrics-")
        share_between_processes(metrics_dir)
    try:
        Server(TARGET, factory=True, interface=Interfaces.RSGI, address=host, port=port, workers=workers,
               http1_settings=HTTP1Settings(header_read_timeout=HEADER_READ_MS, max_buffer_size=HEADER_BYTES), websockets=False,
               log_access=access_log, log_access_format=ACCESS_LOG_FORMAT,
               respawn_failed_workers=True, workers_kill_timeout=STOP_SECONDS).serve()
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)
