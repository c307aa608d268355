"""The servers a benchmark measures: always on 127.0.0.1, always stopped after."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import ContextManager, Iterator

import requests

from ldp_telemetry.aggregator.process import ServerProcess

ADMIN_TOKEN = "bench-admin-token"
WORKERS = 2


@contextmanager
def _running(server: ServerProcess) -> Iterator[str]:
    server.start(timeout=60)
    try:
        yield server.url
    finally:
        server.stop()


def aggregator(db: Path, *, synchronous: str = "full") -> ContextManager[str]:
    """``ldp-telemetry serve`` (gunicorn, 2 sync workers) on ``db``; scheduler off, so only requests are measured."""
    env = {"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "LDP_SYNCHRONOUS": synchronous}
    return _running(ServerProcess(db, workers=WORKERS, env=env))


def ceiling(folder: Path) -> ContextManager[str]:
    """:mod:`bench.ceiling` (no database) under gunicorn with the same workers."""
    command = [sys.executable, "-m", "gunicorn", "--workers", str(WORKERS), "--worker-class", "sync",
               "--bind", "127.0.0.1:{port}", "--chdir", str(Path(__file__).resolve().parent.parent),
               "bench.ceiling:create_app()"]
    return _running(ServerProcess(folder / "ceiling", command=command))


def publish(url: str, schema: dict) -> None:
    response = requests.post(url + "/api/v1/schemas", json=schema,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    response.raise_for_status()
