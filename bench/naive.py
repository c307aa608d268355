"""The naive durable app to compare ingest with (issue 26): what a durable 202 costs with nothing else.

A small Flask app that parses the JSON body and stores each report's id and JSON text with one
``executemany`` into a SQLite table (WAL, ``synchronous=FULL``, ``INSERT OR IGNORE`` on the id),
commits, and answers 202 ``{"accepted", "duplicates"}``. No validation, no counters, no inbox:
what ours must stay ahead of on batches. The benchmark runs it on gunicorn's sync workers (as the
issue measured it), on the file ``BENCH_NAIVE_DB`` names.
"""

from __future__ import annotations

import json
import os
# Its own database, not the aggregator's: the rule that only aggregator/store/ imports a driver
# (tests/test_architecture.py) is about reaching the aggregator's data, which this app never does.
import sqlite3

from flask import Flask, jsonify, request

DB_VARIABLE = "BENCH_NAIVE_DB"


def _connect(path: str) -> sqlite3.Connection:
    # A generous busy timeout: the workers take turns at SQLite's one write lock.
    connection = sqlite3.connect(path, timeout=30)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    return connection


def create_app() -> Flask:
    app = Flask(__name__)
    path = os.environ[DB_VARIABLE]
    with _connect(path) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS reports (id TEXT PRIMARY KEY, body TEXT NOT NULL)")
    connection.close()

    def database() -> sqlite3.Connection:
        # One connection per worker for its life: opening one per request would be slower than naive.
        if "naive_db" not in app.extensions:
            app.extensions["naive_db"] = _connect(path)
        connection: sqlite3.Connection = app.extensions["naive_db"]
        return connection

    @app.post("/api/v1/reports")
    def post_reports():  # type: ignore[no-untyped-def]
        reports = request.get_json()["reports"]
        connection = database()
        with connection:  # commits (an fsync at FULL) before the 202
            stored = connection.executemany("INSERT OR IGNORE INTO reports (id, body) VALUES (?, ?)",
                                            [(r["id"], json.dumps(r)) for r in reports]).rowcount
        return jsonify(accepted=stored, duplicates=len(reports) - stored), 202

    @app.get("/healthz")
    def healthz():  # type: ignore[no-untyped-def]
        return {"status": "ok"}

    return app
