"""The servers a benchmark measures: always on 127.0.0.1, always stopped after.

Two HTTP servers, so that each figure sits beside the ceiling measured on the same one:
``granian`` (what ``ldp-telemetry serve`` runs: granian's RSGI front end and our body-buffering
bridge to the Flask app) and ``gunicorn`` (sync workers running the Flask app directly, the
server the aggregator used before). Both with :data:`WORKERS` worker processes.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

import requests

from ldp_telemetry.aggregator.process import ServerProcess

ADMIN_TOKEN = "bench-admin-token"
WORKERS = 2
HTTP_SERVERS = ("granian", "gunicorn")
ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def _running(server: ServerProcess) -> Iterator[str]:
    server.start(timeout=60)
    try:
        yield server.url
    finally:
        server.stop()


def _command(http_server: str, target: str) -> list[str]:
    """``target`` (a module:factory) under ``http_server`` on ``{port}``, WORKERS processes."""
    if http_server == "granian":
        return [sys.executable, "-m", "granian", "--interface", "rsgi", "--factory", "--workers", str(WORKERS),
                "--host", "127.0.0.1", "--port", "{port}", "--no-ws", "--working-dir", str(ROOT), target]
    return [sys.executable, "-m", "gunicorn", "--workers", str(WORKERS), "--worker-class", "sync",
            "--bind", "127.0.0.1:{port}", "--chdir", str(ROOT), f"{target}()"]


def aggregator(db: Path, *, synchronous: str = "full", http_server: str = "granian") -> ContextManager[str]:
    """The aggregator on ``db``; scheduler off, so only requests are measured.

    On granian it is ``ldp-telemetry serve`` itself; on gunicorn, the same Flask app under
    gunicorn's sync workers.
    """
    env = {"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "LDP_SYNCHRONOUS": synchronous,
           "LDP_DB": str(db), "PROMETHEUS_MULTIPROC_DIR": None}
    command = None if http_server == "granian" else _command(http_server, "ldp_telemetry.aggregator:create_app")
    return _running(ServerProcess(db, workers=WORKERS, env=env, command=command))


def ceiling(folder: Path, *, http_server: str = "granian") -> ContextManager[str]:
    """:mod:`bench.ceiling` (no database) under ``http_server``, on the same path as the aggregator."""
    target = "bench.ceiling:create_rsgi_app" if http_server == "granian" else "bench.ceiling:create_app"
    return _running(ServerProcess(folder / f"ceiling-{http_server}", command=_command(http_server, target)))


def publish(url: str, schema: dict) -> None:
    response = requests.post(url + "/api/v1/schemas", json=schema,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    response.raise_for_status()
