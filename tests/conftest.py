"""Shared fixtures: the real aggregator app on a fresh SQLite file, and a real server process.

- ``make_app(**config)``: a new app on its own database in ``tmp_path`` (scheduler off, admin
  token ``ADMIN_TOKEN``); ``config`` keys are settings (``LDP_MAX_BATCH=5``) or ``LDP_CLOCK``.
- ``app`` / ``client``: one such app and its ``test_client()``.
- ``publish_schema(client, schema=APP_USAGE)``: publish through the API; returns the derived schema.
- ``live_server``: ``ldp-telemetry serve`` on 127.0.0.1 (2 workers, scheduler off) with
  ``.url``, ``.db_path``, ``.admin_token``, ``.stop()``, ``.kill()`` (SIGKILL to every process)
  and ``.start()`` (again, on the same database).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import requests

ADMIN_TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

APP_USAGE: dict[str, Any] = {
    "name": "app-usage",
    "version": 1,
    "epsilon": 2.0,
    "window": "day",
    "split": "equal",
    "description": "Which features people use.",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
    ],
}


@pytest.fixture
def make_app(tmp_path: Path) -> Callable[..., Any]:
    from ldp_telemetry.aggregator import create_app

    count = 0

    def make(**config: Any) -> Any:
        nonlocal count
        count += 1
        settings = {"LDP_DB": str(tmp_path / f"aggregator-{count}.db"), "LDP_ADMIN_TOKEN": ADMIN_TOKEN,
                    "LDP_SCHEDULER": False, "TESTING": True}
        return create_app({**settings, **config})

    return make


@pytest.fixture
def app(make_app: Callable[..., Any]) -> Any:
    return make_app()


@pytest.fixture
def client(app: Any) -> Any:
    return app.test_client()


def publish(client: Any, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """Publish ``schema`` (default :data:`APP_USAGE`) through the API; the derived schema."""
    response = client.post("/api/v1/schemas", json=schema or APP_USAGE, headers=ADMIN)
    assert response.status_code in (200, 201), response.get_json()
    return response.get_json()


@pytest.fixture
def publish_schema() -> Callable[..., dict[str, Any]]:
    return publish


def expected_counters(schema: dict[str, Any], reports: list[dict]) -> dict[tuple, tuple[int, int]]:
    """``(window, attribute, value) -> (n, hits)`` counted straight from the wire values.

    Each attribute a report carries adds 1 to ``n`` of each of its values, and 1 to ``hits`` of
    the value it reports (``true`` for a boolean, the category for GRR). OUE is not counted here.
    """
    from ldp_telemetry.shared import parse_schema

    out: dict[tuple, tuple[int, int]] = {}
    for report in reports:
        for attribute in parse_schema(schema).attributes:
            if attribute.name not in report["values"]:
                continue
            sent = report["values"][attribute.name]
            for value in attribute.values:
                key = (report["window"], attribute.name, "true" if value is True else value)
                n, hits = out.get(key, (0, 0))
                out[key] = (n + 1, hits + (sent is True if value is True else sent == value))
    return out


def db_state(app: Any) -> dict[str, list[tuple]]:
    """Every row of every aggregator table, sorted: compare before and after to see nothing changed."""
    import sqlite3

    conn = sqlite3.connect(app.config["LDP_DB"])
    try:
        tables = ("schemas", "reports", "counters", "dirty", "estimates", "meta")
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real ``ldp-telemetry serve`` process group on 127.0.0.1, restartable on one database."""

    def __init__(self, db_path: Path, workers: int = 2, env: dict[str, str] | None = None):
        self.db_path = db_path
        self.admin_token = ADMIN_TOKEN
        self.workers = workers
        self.env = env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log_path = db_path.with_suffix(".log")

    def start(self, timeout: float = 30.0) -> None:
        env = {**os.environ, "LDP_ADMIN_TOKEN": self.admin_token, "LDP_SCHEDULER": "false", **self.env}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ldp_telemetry.aggregator.cli", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", str(self.workers), "--db", str(self.db_path)],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                if requests.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"server did not answer /healthz in {timeout} s: {self.log_path.read_text()[-2000:]}")

    def _signal_group(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop (SIGTERM to the master), SIGKILL if it takes too long."""
        if self.process is None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            self.process.wait()
        self._reap_group()

    def kill(self) -> None:
        """``kill -9`` the master and its workers at once, as a crash would."""
        if self.process is None:
            return
        self._signal_group(signal.SIGKILL)
        self.process.wait()
        self._reap_group()

    def _reap_group(self) -> None:
        # Workers are in the master's process group; make sure none outlives it.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.fixture
def live_server(tmp_path: Path):
    server = LiveServer(tmp_path / "live.db")
    server.start()
    try:
        yield server
    finally:
        server.stop()
