"""Operations and cross-cutting behaviour: /healthz, /metrics, JSON errors, the minimal dashboard."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from typing import Iterator

import pytest
import requests
from conftest import ADMIN, APP_USAGE, LiveServer, expected_counters, publish, settle, sql, store_of, stored_counters

from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.errors import error_response
from ldp_telemetry.aggregator.http import ops
from ldp_telemetry.aggregator.store import StoreError
from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.backends


HEALTHY = {"status": "ok", "database": "ok", "writes": "ok"}


def test_healthz(client):
    response = client.get("/healthz")
    assert (response.status_code, response.get_json()) == (200, HEALTHY)


def test_healthz_reports_a_broken_database(app, client):
    sql(app.config["LDP_DB"], "DROP TABLE schemas")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.get_json() == {"status": "error", "database": "unavailable", "writes": "unknown",
                                   "problem": "the database cannot be read"}


@contextlib.contextmanager
def write_lock_held_elsewhere(location: str) -> Iterator[None]:
    """Another session holding what ingest must lock: SQLite's write lock (``BEGIN EXCLUSIVE`` on a
    plain sqlite3 connection), or PostgreSQL's ``reports`` in EXCLUSIVE mode."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location) as conn:
            conn.execute("LOCK TABLE reports IN EXCLUSIVE MODE")
            yield
            conn.rollback()
        return
    conn = sqlite3.connect(location, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


def test_healthz_says_so_while_another_session_holds_the_write_lock_and_is_ok_after(app, client):
    # Issue 27, finding 3: it answered "ok" while every fold failed.
    with write_lock_held_elsewhere(app.config["LDP_DB"]):
        response = client.get("/healthz")
    assert (response.status_code, response.get_json()) == (503, {
        "status": "error", "database": "ok", "writes": "locked",
        "problem": f"another process held the database's write lock for over {ops.WRITE_PROBE_SECONDS:g} s"})
    assert client.get("/healthz").get_json() == HEALTHY


@pytest.mark.postgres_only
def test_a_read_only_postgres_is_not_writable(app):
    from ldp_telemetry.aggregator import open_database
    from ldp_telemetry.aggregator.store import StoreUnavailable

    # The same schema, through sessions the server makes read-only (as on a standby).
    store = open_database(app.config["LDP_DB"].replace("options=", "options=-cdefault_transaction_read_only%3Don%20")).store
    try:
        store.check()  # it can be read
        with pytest.raises(StoreUnavailable, match="read-only"):
            store.check_writable(ops.WRITE_PROBE_SECONDS)
    finally:
        store.close()


@pytest.mark.sqlite_only
def test_reports_acknowledged_while_the_file_is_locked_are_counted_once_and_failing_folds_are_unhealthy(
        app, client, monkeypatch):
    from ldp_telemetry.aggregator.ingest import inbox

    monkeypatch.setattr(inbox, "FAILING_SECONDS", 0.0)  # the first failed fold already counts
    monkeypatch.setattr(inbox, "FOLD_INTERVAL", 60.0)  # only this test folds (settle), not the thread
    store_of(app).db.busy_timeout = 0.2  # a fold gives up on the lock soon, and tries again
    publish(client)
    reports = [randomize(APP_USAGE, {"dark_mode": i % 2 == 0, "os": "linux"}) for i in range(40)]
    with write_lock_held_elsewhere(app.config["LDP_DB"]):
        assert client.post("/api/v1/reports", json={"reports": reports}).json == {"accepted": 40, "duplicates": 0}
        with pytest.raises(StoreError):
            app.extensions["ldp"]["writer"].settle(wait=False)  # a fold, as the folding thread makes it: fails
    # The lock is gone, and yet no fold has succeeded since: still unhealthy, for the folds.
    failing = client.get("/healthz")
    settle(app)
    healthy = client.get("/healthz")
    assert (failing.status_code, failing.get_json()["writes"]) == (503, "failing")
    assert (healthy.status_code, healthy.get_json()) == (200, HEALTHY)
    assert stored_counters(app, APP_USAGE, [r["window"] for r in reports]) == expected_counters(APP_USAGE, reports)
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(40,)]


def metric(client, name: str) -> float:
    for line in client.get("/metrics").get_data(as_text=True).splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


@pytest.mark.sqlite_only
def test_a_server_whose_file_another_process_locks_says_so_then_counts_every_acknowledged_report_once(tmp_path):
    # Issue 27, finding 3, as it was found: `ldp-telemetry serve` (2 workers), and a plain sqlite3
    # connection in another process holding BEGIN EXCLUSIVE while reports arrive.
    server = LiveServer(tmp_path / "locked.db")
    server.start()
    reports = [randomize(APP_USAGE, {"dark_mode": i % 3 == 0, "os": "macos"}) for i in range(60)]
    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN, timeout=10).status_code == 201
        holder = subprocess.Popen([sys.executable, "-c", (
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()"), server.db],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline() == "locked\n"
            for i in range(0, 60, 10):  # acknowledged into the inbox, counted once the lock goes
                answer = requests.post(server.url + "/api/v1/reports", json={"reports": reports[i:i + 10]}, timeout=30)
                assert (answer.status_code, answer.json()) == (202, {"accepted": 10, "duplicates": 0})
            locked = requests.get(server.url + "/healthz", timeout=30)
        finally:
            holder.communicate("")  # the lock goes with the process
        assert (locked.status_code, locked.json()["writes"]) == (503, "locked")
        assert server.db not in locked.text
        deadline = time.monotonic() + 30
        while (healthy := requests.get(server.url + "/healthz", timeout=30)).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert healthy.json() == HEALTHY
    finally:
        server.stop()
    assert sorted(i for (i,) in sql(server.db, "SELECT id FROM reports")) == sorted(r["id"] for r in reports)
    database = open_database(server.db)
    try:
        assert stored_counters(database, APP_USAGE, [r["window"] for r in reports]) == expected_counters(APP_USAGE, reports)
    finally:
        database.store.close()


def test_metrics_count_reports_batches_and_refreshes(client):
    publish(client)
    batch = [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}) for _ in range(4)]
    client.post("/api/v1/reports", json={"reports": batch + batch[:1]})
    client.post("/api/v1/reports", json={"reports": [{**batch[0], "epsilon": 9}, {"id": 1}]})
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    response = client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    assert metric(client, "ldp_reports_accepted_total") == 4
    assert metric(client, "ldp_reports_duplicate_total") == 1
    assert metric(client, "ldp_reports_rejected_total") == 2
    assert metric(client, "ldp_batches_rejected_total") == 1
    assert metric(client, "ldp_batch_size_count") == 1 and metric(client, "ldp_batch_size_sum") == 5
    assert metric(client, "ldp_refresh_duration_seconds_count") == 1


def test_the_error_shape(app):
    with app.app_context():
        response = error_response(400, "bad thing", [{"index": 0, "field": "id", "message": "too short"}])
    assert response.get_json() == {"error": "bad thing",
                                   "details": [{"index": 0, "field": "id", "message": "too short"}]}


def test_405_keeps_the_allow_header(client):
    response = client.get("/api/v1/reports")
    assert response.status_code == 405 and response.headers["Allow"]
    assert set(response.get_json()) == {"error", "details"}


def test_dashboard_lists_schemas_escaped(client):
    publish(client, {**APP_USAGE, "description": "<script>alert(1)</script>"})
    page = client.get("/").get_data(as_text=True)
    assert "app-usage" in page and "&lt;script&gt;" in page and "<script>alert" not in page
    assert client.get("/schemas/app-usage").status_code == 200
    assert client.get("/schemas/nope").status_code == 404
