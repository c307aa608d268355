"""Start and stop the servers a benchmark measures: always on 127.0.0.1, always stopped after."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import requests

ADMIN_TOKEN = "bench-admin-token"
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(command: list[str], *, env: dict[str, str] | None = None, port: int) -> Iterator[str]:
    """Run ``command`` (a server listening on ``port``) until the block ends; yield its URL."""
    process = subprocess.Popen(command, env={**os.environ, **(env or {})}, cwd=REPO, start_new_session=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _wait_ready(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if requests.get(url + "/healthz", timeout=1).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server at {url} did not answer within 60 s")


@contextmanager
def aggregator(db: Path, *, workers: int = 2, synchronous: str = "full") -> Iterator[str]:
    """``ldp-telemetry serve`` (gunicorn) on ``db``, scheduler off so that only requests are measured."""
    port = free_port()
    command = [sys.executable, "-m", "ldp_telemetry.aggregator.cli", "serve", "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers), "--db", str(db)]
    env = {"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "LDP_SYNCHRONOUS": synchronous}
    with running(command, env=env, port=port) as url:
        yield url


@contextmanager
def ceiling(*, workers: int = 2) -> Iterator[str]:
    """The no-database app of :mod:`bench.ceiling` under gunicorn with the same workers."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--workers", str(workers), "--worker-class", "sync",
               "--bind", f"127.0.0.1:{port}", "bench.ceiling:create_app()"]
    with running(command, port=port) as url:
        yield url


def publish(url: str, schema: dict) -> None:
    response = requests.post(url + "/api/v1/schemas", json=schema,
                             headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
    response.raise_for_status()
