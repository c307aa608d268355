"""Shared fixtures: the real aggregator app on a fresh SQLite file, and a real server process.

- ``make_app(**config)``: a new app on its own database in ``tmp_path`` (scheduler off, admin
  token ``ADMIN_TOKEN``); ``config`` keys are settings (``LDP_MAX_BATCH=5``) or ``LDP_CLOCK``.
- ``app`` / ``client``: one such app and its ``test_client()``.
- ``publish_schema(client, schema=APP_USAGE)``: publish through the API; returns the derived schema.
- ``live_server``: ``ldp-telemetry serve`` on 127.0.0.1 (2 workers, scheduler off) with
  ``.url``, ``.db_path``, ``.admin_token``, ``.stop()``, ``.kill()`` (SIGKILL to every process)
  and ``.start()`` (again, on the same database); see :mod:`ldp_telemetry.aggregator.process`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from ldp_telemetry.aggregator.process import ServerProcess, free_port  # noqa: F401 (other tests import it from here)

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


def store_of(app: Any) -> Any:
    """The app's :class:`Store`: tests read what is stored through the store's own interface."""
    return app.extensions["ldp"]["store"]


def stored_counters(store: Any, schema: dict[str, Any], windows: list[str]) -> dict[tuple, tuple[int, int]]:
    """``(window, attribute, value) -> (n, hits)`` as the store holds them (through its interface),
    for every value of each attribute with reports in ``windows``: the shape of :func:`expected_counters`."""
    from ldp_telemetry.shared import parse_schema

    parsed = parse_schema(schema)
    out: dict[tuple, tuple[int, int]] = {}
    for window, counters in store.window_counters(parsed.name, parsed.version, sorted(set(windows))).items():
        for name, n in counters.totals.items():
            for key in parsed.attribute(name).keys:
                out[(window, name, key)] = (n, counters.amounts.get(name, {}).get(key, 0))
    return out


def db_state(app: Any) -> dict[str, list[tuple]]:
    """:func:`file_state` of the app's database."""
    return file_state(app.config["LDP_DB"])


def file_state(path: Any) -> dict[str, list[tuple]]:
    """Every row of every table of the SQLite file, sorted: compare before and after to prove
    nothing was physically written (so it opens the file, not the store)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        tables = ("schemas", "reports", "totals", "counters", "dirty", "estimates")
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in tables}
    finally:
        conn.close()


class LiveServer(ServerProcess):
    """A real ``ldp-telemetry serve`` (scheduler off, admin token :data:`ADMIN_TOKEN`)."""

    def __init__(self, db_path: Path, workers: int = 2, env: dict[str, str | None] | None = None):
        self.admin_token = ADMIN_TOKEN
        # The server makes its own metrics directory, whatever this process has.
        super().__init__(db_path, workers=workers, env={
            "LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "PROMETHEUS_MULTIPROC_DIR": None, **(env or {})})


@pytest.fixture
def live_server(tmp_path: Path):
    server = LiveServer(tmp_path / "live.db")
    server.start()
    try:
        yield server
    finally:
        server.stop()
