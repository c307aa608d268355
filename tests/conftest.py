"""Shared fixtures: the real aggregator app on a fresh database, and a real server process.

- ``backend``: ``"sqlite"``, unless the test (or its module) is marked ``backends``: then it runs
  once per store backend, SQLite always and PostgreSQL when a server answers at
  ``LDP_TEST_POSTGRES_URL`` (default :data:`POSTGRES_URL`; skipped, saying so, when none does).
  The PostgreSQL runs share one database made for the test session (``ldp_test_<random>``,
  dropped after); each store in it gets a PostgreSQL schema of its own, so each starts empty.
- ``new_db()``: a fresh, empty database location (``LDP_DB``) of the test's backend.
- ``make_app(**config)``: a new app on its own ``new_db()`` (scheduler off, admin
  token ``ADMIN_TOKEN``); ``config`` keys are settings (``LDP_MAX_BATCH=5``) or ``LDP_CLOCK``.
- ``app`` / ``client``: one such app and its ``test_client()``.
- ``publish_schema(client, schema=APP_USAGE)``: publish through the API; returns the derived schema.
- ``live_server``: ``ldp-telemetry serve`` on 127.0.0.1 (2 workers, scheduler off) with
  ``.url``, ``.db_path``, ``.admin_token``, ``.stop()``, ``.kill()`` (SIGKILL to every process)
  and ``.start()`` (again, on the same database); see :mod:`ldp_telemetry.tools.process`.
"""

from __future__ import annotations

import functools
import os
import secrets
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from ldp_telemetry.tools.process import ServerProcess, free_port  # noqa: F401 (other tests import it from here)

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


POSTGRES_URL = os.environ.get("LDP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgres")


@functools.cache
def postgres_missing() -> str | None:
    """Why the PostgreSQL runs are skipped here, or None when a server answers."""
    try:
        import psycopg
    except ModuleNotFoundError:
        return "PostgreSQL store tests skipped: psycopg is not installed"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL store tests skipped: no server answers at LDP_TEST_POSTGRES_URL={POSTGRES_URL} ({str(exc).splitlines()[0]})"
    return None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker
    if "backend" not in metafunc.fixturenames or marker("sqlite_only"):
        return
    backends = ("postgres",) if marker("postgres_only") else BACKENDS if marker("backends") else ()
    if backends:
        missing = postgres_missing()
        params = [pytest.param(b, marks=pytest.mark.skip(reason=missing) if b == "postgres" and missing else ())
                  for b in backends]
        metafunc.parametrize("backend", params, indirect=True, scope="session")


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", "sqlite")


def with_database(url: str, database: str, search_path: str | None = None) -> str:
    """``url`` naming ``database`` instead, its connections in PostgreSQL schema ``search_path``
    (and named after it in ``pg_stat_activity``)."""
    parts = urlsplit(url)
    query = parts.query
    if search_path:
        query = "&".join(filter(None, [query, "options=" + quote(f"-csearch_path={search_path}"),
                                       f"application_name={search_path}"]))
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, query, parts.fragment))


def postgres_admin(sql: str) -> None:
    """Run one statement (CREATE/DROP DATABASE) on the server's maintenance database."""
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A database of its own for this test session; dropped after (connections left are ended)."""
    name = f"ldp_test_{secrets.token_hex(6)}"
    postgres_admin(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        postgres_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def postgres_location(database: str) -> str:
    """A fresh PostgreSQL schema in ``database``: the URL of an empty store."""
    import psycopg

    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(with_database(POSTGRES_URL, database), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return with_database(POSTGRES_URL, database, schema)


@pytest.fixture
def new_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Callable[[], str]:
    count = 0

    def location() -> str:
        nonlocal count
        count += 1
        if backend == "postgres":
            return postgres_location(request.getfixturevalue("postgres_database"))
        return str(tmp_path / f"aggregator-{count}.db")

    return location


@pytest.fixture
def make_app(new_db: Callable[[], str]) -> Iterator[Callable[..., Any]]:
    from ldp_telemetry.aggregator import create_app

    made = []

    def make(**config: Any) -> Any:
        settings = {"LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": False, "TESTING": True}
        app = create_app({**settings, "LDP_DB": config.pop("LDP_DB", None) or new_db(), **config})
        made.append(app)
        return app

    yield make
    for app in made:  # a PostgreSQL store's pool holds connections until closed
        store_of(app).close()


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


def read(store: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``tx.<name>(*args, **kwargs)`` in a read transaction of ``store``: what a test reads through
    the store's door."""
    return store.run_tx(name, lambda tx: getattr(tx, name)(*args, **kwargs), write=False)


def write(store: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """``tx.<name>(*args, **kwargs)`` in a write transaction of ``store``."""
    return store.run_tx(name, lambda tx: getattr(tx, name)(*args, **kwargs))


def store_of(app: Any) -> Any:
    """The app's :class:`Store`: tests read what is stored through the store's own interface."""
    return app.extensions["ldp"]["store"]


def stored_counters(where: Any, schema: dict[str, Any], windows: list[str]) -> dict[tuple, tuple[int, int]]:
    """``(window, attribute, value) -> (n, hits)`` as the store holds them (through its interface)
    once every acknowledged report is counted, for every value of each attribute with reports in
    ``windows``: the shape of :func:`expected_counters`. ``where``: an app, or an
    :func:`open_database` of its location."""
    from ldp_telemetry.shared import parse_schema

    parsed = parse_schema(schema)
    database = where if hasattr(where, "writer") else None
    settle(where if database is None else database)
    store = database.store if database else store_of(where)
    out: dict[tuple, tuple[int, int]] = {}
    for window, counters in read(store, "window_counters", parsed.name, parsed.version, sorted(set(windows))).items():
        for name, n in counters.totals.items():
            for key in parsed.attribute(name).keys:
                out[(window, name, key)] = (n, counters.amounts.get(name, {}).get(key, 0))
    return out


def db_state(app: Any) -> dict[str, list[tuple]]:
    """Every row of every table of the app's database, sorted, once every acknowledged report is
    counted: :func:`file_state` of a SQLite file, :func:`postgres_state` of a PostgreSQL one."""
    settle(app)  # what was acknowledged is counted (the SQLite store counts a moment later)
    location = app.config["LDP_DB"]
    return postgres_state(location) if location.startswith("postgresql://") else file_state(location)


STATE_TABLES = ("schemas", "reports", "totals", "counters", "dirty", "estimates", "candidates", "backfills",
                "breakdowns", "breakdown_counters", "breakdown_estimates", "crowds", "ohttp_keys")


def settle(where: Any) -> None:
    """Count every report acknowledged so far: ``where`` an app (its writer settles), an
    :func:`open_database`, or a database location (what a restarted server does first). The SQLite writer counts a moment after it
    answers (its inbox); a read of the store never settles by itself."""
    if hasattr(where, "writer"):  # an open_database()
        where.writer.settle()
        return
    if not isinstance(where, str):
        where.extensions["ldp"]["writer"].settle()
        return
    from ldp_telemetry.aggregator import open_database

    database = open_database(where)
    try:
        database.writer.settle()
    finally:
        database.store.close()


def sql(location: str, statement: str) -> list[tuple]:
    """Run one statement on the database itself (a SQLite file or a PostgreSQL URL), not through
    the store, once what was acknowledged is counted (:func:`settle`): what is physically there,
    or a change behind the store's back."""
    settle(location)
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as conn:
            cursor = conn.execute(statement)
            return cursor.fetchall() if cursor.description else []
    import sqlite3

    with sqlite3.connect(location) as conn:
        return conn.execute(statement).fetchall()


def postgres_state(url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the PostgreSQL store at ``url``, sorted (read with psycopg,
    not through the store)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in STATE_TABLES}


def file_state(path: Any) -> dict[str, list[tuple]]:
    """Every row of every table of the SQLite file, sorted: compare before and after to prove
    nothing was physically written (so it opens the file, not the store)."""
    import sqlite3

    settle(str(path))

    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in STATE_TABLES}
    finally:
        conn.close()


class LiveServer(ServerProcess):
    """A real ``ldp-telemetry serve`` (scheduler off, admin token :data:`ADMIN_TOKEN`)."""

    def __init__(self, db_path: Path | str, workers: int = 2, env: dict[str, str | None] | None = None,
                 log_path: Path | None = None):
        self.admin_token = ADMIN_TOKEN
        # The server makes its own metrics directory, whatever this process has.
        super().__init__(db_path, workers=workers, log_path=log_path, env={
            "LDP_ADMIN_TOKEN": ADMIN_TOKEN, "LDP_SCHEDULER": "false", "PROMETHEUS_MULTIPROC_DIR": None, **(env or {})})


@pytest.fixture
def live_server(tmp_path: Path, backend: str, new_db: Callable[[], str]):
    server = LiveServer(new_db() if backend == "postgres" else tmp_path / "live.db", log_path=tmp_path / "live.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
