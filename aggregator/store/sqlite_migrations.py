"""The SQLite store's tables, versioned with sqlite-utils ``Migrations`` (their meaning is in
:mod:`.rows`). Each migration runs in the store's write transaction (:meth:`SQLiteBackend.migrate`),
so processes starting at once apply each exactly once.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import Any

from sqlite_utils import Database, Migrations

from ...shared.schema import parse_schema
from ...shared.windows import ROLLUP, window_end
from .wire import PACK_CHUNK, pack_stored_reports

MIGRATIONS = Migrations("ldp-telemetry-aggregator")


@MIGRATIONS()
def m001_initial(db: Database) -> None:
    db.table("schemas").create({"name": str, "version": int, "definition": str, "published_at": str},
                               pk=("name", "version"))
    db.table("reports").create({"id": str, "schema": str, "version": int, "window": str, "window_end": int,
                                "values": str}, pk="id")
    db.table("reports").create_index(["window_end"])
    key = {"schema": str, "version": int, "window": str, "attribute": str, "value": str}
    db.table("counters").create({**key, "n": int, "hits": int}, pk=tuple(key))
    db.table("dirty").create({"schema": str, "version": int, "window": str}, pk=("schema", "version", "window"))
    db.table("estimates").create({**key, "estimate": float, "estimate_clipped": float, "ci_low": float,
                                  "ci_high": float, "n": int, "hits": int, "epsilon": float,
                                  "computed_at": str}, pk=tuple(key))
    db.table("meta").create({"key": str, "value": str}, pk="key")


@MIGRATIONS()
def m002_sparse_counters(db: Database) -> None:
    """Sparse counters with the rollup kept up to date, dirty marks, ranked estimates at their own
    confidence, and reports in id order (WITHOUT ROWID: no insertion-ordered row id survives)."""
    conn = db.conn
    schemas = {(name, version): parse_schema(json.loads(definition))
               for name, version, definition in conn.execute("SELECT name, version, definition FROM schemas")}
    _run(conn, """
        CREATE TABLE totals (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            attribute TEXT NOT NULL, n INTEGER NOT NULL, window_end INTEGER,
            PRIMARY KEY (schema, version, "window", attribute)) WITHOUT ROWID;
        CREATE INDEX totals_window_end ON totals (window_end);
        -- NUMERIC affinity: hits stay integers, numeric sums are reals.
        CREATE TABLE sparse (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            attribute TEXT NOT NULL, value TEXT NOT NULL, amount NUMERIC NOT NULL,
            PRIMARY KEY (schema, version, "window", attribute, value)) WITHOUT ROWID;
        CREATE TABLE marks (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            mark INTEGER NOT NULL, PRIMARY KEY (schema, version, "window")) WITHOUT ROWID;
        CREATE TABLE ranked (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            rank INTEGER NOT NULL, attribute TEXT NOT NULL, value TEXT NOT NULL, estimate REAL NOT NULL,
            estimate_clipped REAL NOT NULL, ci_low REAL NOT NULL, ci_high REAL NOT NULL, n INTEGER NOT NULL,
            epsilon REAL NOT NULL, confidence REAL NOT NULL, computed_at TEXT NOT NULL,
            PRIMARY KEY (schema, version, "window", rank)) WITHOUT ROWID;
        CREATE TABLE reports_by_id (id TEXT PRIMARY KEY NOT NULL, schema TEXT NOT NULL, version INTEGER NOT NULL,
            "window" TEXT NOT NULL, window_end INTEGER NOT NULL, "values" TEXT NOT NULL) WITHOUT ROWID;
    """)
    # Every value of an attribute had the same n in a window; max() picks it once.
    dense = conn.execute('SELECT schema, version, "window", attribute, max(n) FROM counters '
                         'GROUP BY schema, version, "window", attribute').fetchall()
    totals = [(s, v, w, a, n, int(window_end(w, schemas[(s, v)].window).timestamp())) for s, v, w, a, n in dense]
    rollup: Counter[tuple[Any, ...]] = Counter()
    for s, v, _, a, n, _ in totals:
        rollup[(s, v, a)] += n
    conn.executemany('INSERT INTO totals VALUES (?, ?, ?, ?, ?, ?)',
                     totals + [(s, v, ROLLUP, a, n, None) for (s, v, a), n in rollup.items()])
    conn.execute('INSERT INTO sparse SELECT schema, version, "window", attribute, value, hits FROM counters '
                 'WHERE hits != 0')
    conn.execute('INSERT INTO sparse SELECT schema, version, ?, attribute, value, sum(hits) FROM counters '
                 'WHERE hits != 0 GROUP BY schema, version, attribute, value', (ROLLUP,))
    conn.execute('INSERT INTO marks SELECT schema, version, "window", random() FROM dirty')
    conn.execute('INSERT OR IGNORE INTO marks SELECT DISTINCT schema, version, ?, random() FROM dirty', (ROLLUP,))
    level = conn.execute("SELECT value FROM meta WHERE key = 'confidence'").fetchone()
    ranks = {key: schema.value_ranks for key, schema in schemas.items()}
    conn.executemany(
        "INSERT INTO ranked VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(s, v, w, ranks[(s, v)][(a, value)], a, value, e, ec, lo, hi, n, eps, float(level[0]), at)
         for s, v, w, a, value, e, ec, lo, hi, n, eps, at in conn.execute(
             'SELECT schema, version, "window", attribute, value, estimate, estimate_clipped, ci_low, ci_high, '
             "n, epsilon, computed_at FROM estimates")])
    # Ordered by id, a random token: the new table's pages keep no trace of arrival order.
    conn.execute("INSERT INTO reports_by_id SELECT * FROM reports ORDER BY id")
    _run(conn, """
        DROP TABLE counters; DROP TABLE dirty; DROP TABLE estimates; DROP TABLE meta; DROP TABLE reports;
        ALTER TABLE sparse RENAME TO counters; ALTER TABLE marks RENAME TO dirty;
        ALTER TABLE ranked RENAME TO estimates; ALTER TABLE reports_by_id RENAME TO reports;
        CREATE INDEX reports_window_end ON reports (window_end);
    """)


def _run(conn: sqlite3.Connection, script: str) -> None:
    """Run ``;``-separated statements inside the open transaction (``executescript`` would commit it)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


@MIGRATIONS()
def m003_estimates_generation(db: Database) -> None:
    """One row counting the writes to the estimates, so readers can cache what they derive."""
    db.conn.execute("CREATE TABLE generation (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL)")
    db.conn.execute("INSERT INTO generation VALUES (1, 0)")


@MIGRATIONS()
def m004_reports_without_window_index(db: Database) -> None:
    """Retention finds expired reports by walking the id key (:meth:`.store.Store.expire`): the index on
    ``window_end`` cost every stored report a second random page write."""
    db.conn.execute("DROP INDEX reports_window_end")


@MIGRATIONS()
def m005_retention_cutoff(db: Database) -> None:
    """The retention cutoff, kept: windows that ended at or before it are erased and refused, even
    after the clock moves back (:meth:`.store.Store.expire`)."""
    db.conn.execute("CREATE TABLE retention (id INTEGER PRIMARY KEY CHECK (id = 1), cutoff INTEGER NOT NULL)")


@MIGRATIONS()
def m006_candidates(db: Database) -> None:
    """Candidates added after publishing (or discovered), each in a batch back-filled over the stored
    reports' ids up to its watermark (NULL: done); a mark per schema version that changes with them."""
    _run(db.conn, """
        CREATE TABLE backfills (batch INTEGER PRIMARY KEY AUTOINCREMENT, schema TEXT NOT NULL,
            version INTEGER NOT NULL, attribute TEXT NOT NULL, watermark TEXT, deficit INTEGER);
        CREATE TABLE candidates (schema TEXT NOT NULL, version INTEGER NOT NULL, attribute TEXT NOT NULL,
            value TEXT NOT NULL, source TEXT NOT NULL CHECK (source IN ('added', 'discovered')),
            added_at TEXT NOT NULL, estimated INTEGER NOT NULL, rank INTEGER NOT NULL, batch INTEGER,
            PRIMARY KEY (schema, version, attribute, value)) WITHOUT ROWID;
        ALTER TABLE schemas ADD COLUMN candidates_mark INTEGER NOT NULL DEFAULT 0
    """)


@MIGRATIONS()
def m007_breakdowns(db: Database) -> None:
    """Breakdowns (DESIGN.md, "Breakdowns"): each of a schema version's, numbered, with its source
    and (for one added later) its back-fill's batch; their sums per window and their rows."""
    _run(db.conn, """
        CREATE TABLE breakdowns (schema TEXT NOT NULL, version INTEGER NOT NULL, id INTEGER NOT NULL,
            of_attribute TEXT NOT NULL, by_attribute TEXT NOT NULL,
            source TEXT NOT NULL CHECK (source IN ('listed', 'added')), added_at TEXT NOT NULL, batch INTEGER,
            PRIMARY KEY (schema, version, id), UNIQUE (schema, version, of_attribute, by_attribute)) WITHOUT ROWID;
        CREATE TABLE breakdown_counters (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            breakdown INTEGER NOT NULL, of_key TEXT NOT NULL, by_key TEXT NOT NULL, amount NUMERIC NOT NULL,
            PRIMARY KEY (schema, version, "window", breakdown, of_key, by_key)) WITHOUT ROWID;
        CREATE TABLE breakdown_estimates (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            rank INTEGER NOT NULL, breakdown INTEGER NOT NULL, value TEXT NOT NULL, by_value TEXT NOT NULL,
            estimate REAL, estimate_clipped REAL, ci_low REAL, ci_high REAL, by_share REAL, n INTEGER NOT NULL,
            reason TEXT, confidence REAL NOT NULL, computed_at TEXT NOT NULL,
            PRIMARY KEY (schema, version, "window", rank)) WITHOUT ROWID;
        -- A back-fill's batch is of candidates (of an attribute) or of a breakdown (no attribute).
        CREATE TABLE backfills_of_any (batch INTEGER PRIMARY KEY AUTOINCREMENT, schema TEXT NOT NULL,
            version INTEGER NOT NULL, attribute TEXT, watermark TEXT, deficit INTEGER);
        INSERT INTO backfills_of_any SELECT * FROM backfills;
        DROP TABLE backfills;
        ALTER TABLE backfills_of_any RENAME TO backfills
    """)


@MIGRATIONS()
def m008_relay(db: Database) -> None:
    """The relay (DESIGN.md, "Relay and amplification"): the Oblivious HTTP keys every node shares
    (a one-byte key id, reused once its private half is gone), and per (schema, version, window)
    the reports that came through relays and directly, the smallest crowd of a relay batch, and the
    central epsilon the refresh computed for a crowd at a delta. The reports stored before came
    directly: counted from those retained (the rollup over them too)."""
    _run(db.conn, """
        CREATE TABLE ohttp_keys (key_id INTEGER PRIMARY KEY CHECK (key_id BETWEEN 0 AND 255),
            public_key BLOB NOT NULL, private_key BLOB, created INTEGER NOT NULL, retired INTEGER);
        CREATE TABLE crowds (schema TEXT NOT NULL, version INTEGER NOT NULL, "window" TEXT NOT NULL,
            relayed INTEGER NOT NULL, direct INTEGER NOT NULL, crowd INTEGER, epsilon_crowd INTEGER,
            epsilon_delta REAL, epsilon_shuffled REAL, PRIMARY KEY (schema, version, "window")) WITHOUT ROWID
    """)
    db.conn.execute('INSERT INTO crowds (schema, version, "window", relayed, direct) SELECT schema, version, "window", '
                    '0, count(*) FROM reports GROUP BY schema, version, "window"')
    db.conn.execute('INSERT INTO crowds (schema, version, "window", relayed, direct) SELECT schema, version, ?, 0, '
                    "count(*) FROM reports GROUP BY schema, version", (ROLLUP,))


@MIGRATIONS()
def m009_wire(db: Database) -> None:
    """Each report's values in a numeric form (:mod:`.wire`), packed by the next migration for the
    reports stored before."""
    db.conn.execute("ALTER TABLE reports ADD COLUMN wire BLOB NOT NULL DEFAULT x''")


@MIGRATIONS()
def m010_wire_of_every_attribute(db: Database) -> None:
    """The numeric form of every attribute (first only a string attribute's, for its back-fill),
    so that counting parses no JSON: every stored report packed again in today's layout."""
    def update(packed: list[tuple[bytes, str]]) -> None:
        db.conn.executemany("UPDATE reports SET wire = ? WHERE id = ?", packed)

    pack_stored_reports(
        db.conn.execute("SELECT name, version, definition FROM schemas").fetchall(),
        lambda after: db.conn.execute('SELECT id, schema, version, "values" FROM reports WHERE id > ? ORDER BY id '
                                      "LIMIT ?", (after, PACK_CHUNK)).fetchall(),
        update)
