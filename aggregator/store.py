"""The aggregator's database: the only module that speaks SQL (SQLite through sqlite-utils).

Tables (versioned with sqlite-utils ``Migrations``):

- ``schemas``: name, version, the derived definition (JSON).
- ``reports``: the randomised reports as received, id primary key; the window is the finest time
  kept (no receive time, no IP, no user agent). ``window_end`` (Unix seconds) drives retention.
- ``counters``: per (schema, version, window, attribute, value) ``n`` and ``hits``, updated in the
  transaction that stores the reports, so estimation costs O(counters), never O(reports).
- ``dirty``: the (schema, version, window) whose counters changed since the last refresh.
- ``estimates``: the latest estimate per (schema, version, window or ``all``, attribute, value).
- ``meta``: key/value facts, e.g. the confidence level the stored estimates were computed at.

Every write runs in ``BEGIN IMMEDIATE``: it takes SQLite's write lock before reading, so a
transaction never has to upgrade a read lock (which SQLite refuses without waiting when another
process writes), and a read inside it (which ids are already stored?) cannot go stale before the
commit. Each thread gets its own connection. Keeping all SQL here leaves room for a PostgreSQL
backend later.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Iterator, NamedTuple, Sequence

from sqlite_utils import Database, Migrations

from ..shared.schema import MAX_VERSION, NAME_RE

# Seconds a writer waits for another process's write lock before "database is locked".
BUSY_TIMEOUT = 10.0
# SQLite's limit on bound variables is 32766; a multi-row INSERT binds 6 per report.
_CHUNK = 500
CACHE_KIB = 64 * 1024  # page cache per connection
WAL_CHECKPOINT_PAGES = 10_000
_REPORT_COLUMNS = '(id, schema, version, "window", window_end, "values")'  # ReportRow's fields


@lru_cache(maxsize=8)
def _insert_new_reports_sql(rows: int) -> str:
    """Insert ``rows`` reports, skipping stored ids, and return the ids actually inserted."""
    return (f"INSERT OR IGNORE INTO reports {_REPORT_COLUMNS} VALUES "
            + ",".join(["(?, ?, ?, ?, ?, ?)"] * rows) + " RETURNING id")

MIGRATIONS = Migrations("ldp-telemetry-aggregator")


@MIGRATIONS()
def m001_initial(db: Database) -> None:
    db["schemas"].create({"name": str, "version": int, "definition": str, "published_at": str},
                         pk=("name", "version"))
    db["reports"].create({"id": str, "schema": str, "version": int, "window": str, "window_end": int,
                          "values": str}, pk="id")
    db["reports"].create_index(["window_end"])
    key = {"schema": str, "version": int, "window": str, "attribute": str, "value": str}
    db["counters"].create({**key, "n": int, "hits": int}, pk=tuple(key))
    db["dirty"].create({"schema": str, "version": int, "window": str}, pk=("schema", "version", "window"))
    db["estimates"].create({**key, "estimate": float, "estimate_clipped": float, "ci_low": float,
                            "ci_high": float, "n": int, "hits": int, "epsilon": float,
                            "computed_at": str}, pk=tuple(key))
    db["meta"].create({"key": str, "value": str}, pk="key")


class ReportRow(NamedTuple):
    """A validated report as stored (a tuple in column order, bound straight into the INSERT)."""

    id: str
    schema: str
    version: int
    window: str
    window_end: int  # Unix seconds
    values: str  # JSON


# (schema, version, window, attribute, value, n, hits): an increment of one counter.
CounterRow = tuple[str, int, str, str, str, int, int]
WindowKey = tuple[str, int, str]  # (schema, version, window)


class Store:
    """The database at ``path``; safe to share between threads (one connection per thread)."""

    def __init__(self, path: str, synchronous: str = "full"):
        self.path = str(path)
        self.synchronous = {"full": "FULL", "normal": "NORMAL"}[synchronous]
        self._local = threading.local()

    # -- connections and transactions -------------------------------------------------------

    @property
    def conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: no implicit transactions; every write opens its own.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL already keeps every commit across a crash of the process (kill -9);
            # FULL also syncs each commit to the disk, so it survives a power cut too.
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            # Report ids are random, so every stored report dirties its own leaf of the id index:
            # a large page cache keeps the index in memory, and checkpointing every 10,000 pages
            # (~40 MiB of WAL) instead of 1,000 lets one checkpoint absorb many rewrites of a page.
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            # Retention must erase: deleted reports are overwritten, not left in free pages.
            conn.execute("PRAGMA secure_delete=ON")
            self._local.conn = conn
        return conn

    @property
    def db(self) -> Database:
        return Database(self.conn, execute_plugins=False)

    def close(self) -> None:
        """Close this thread's connection (others close when their thread's objects go)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the database's write lock from its first statement."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself fails (a full disk): a transaction left open on this thread's
            # connection would make every later BEGIN on it fail.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def migrate(self) -> None:
        """Bring the tables up to date; safe when several processes start at once."""
        with self.write():
            MIGRATIONS.apply(self.db)

    def check(self) -> None:
        """Raise ``sqlite3.Error`` unless the database answers and is migrated."""
        if MIGRATIONS.pending(self.db):
            raise sqlite3.DatabaseError("the database has pending migrations")
        self.conn.execute("SELECT count(*) FROM schemas").fetchone()

    # -- schemas -----------------------------------------------------------------------------

    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        """The definition of ``name`` at ``version`` (latest if None), or None if unpublished."""
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            return None
        if version is None:
            row = self.conn.execute("SELECT definition FROM schemas WHERE name = ? ORDER BY version DESC LIMIT 1",
                                    (name,)).fetchone()
        elif not 1 <= version <= MAX_VERSION:
            return None
        else:
            row = self.conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                                    (name, version)).fetchone()
        return None if row is None else json.loads(row[0])

    def latest_schemas(self) -> list[dict[str, Any]]:
        """The latest version of every schema, by name."""
        rows = self.conn.execute(
            "SELECT definition FROM schemas s WHERE version = "
            "(SELECT max(version) FROM schemas WHERE name = s.name) ORDER BY name")
        return [json.loads(definition) for (definition,) in rows]

    def publish_schema(self, definition: dict[str, Any], published_at: str) -> str:
        """Store a derived schema: ``"created"``, ``"identical"`` (already stored) or ``"conflict"``."""
        name, version = definition["name"], definition["version"]
        with self.write() as conn:
            row = conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                               (name, version)).fetchone()
            if row is not None:
                return "identical" if json.loads(row[0]) == definition else "conflict"
            conn.execute("INSERT INTO schemas (name, version, definition, published_at) VALUES (?, ?, ?, ?)",
                         (name, version, json.dumps(definition), published_at))
        return "created"

    # -- ingest ------------------------------------------------------------------------------

    def ingest(self, rows: Sequence[ReportRow], count: Callable[[list[int]], list[CounterRow]]) -> int:
        """Store the reports whose id is new, and add ``count(new indices)`` to the counters.

        One transaction: under the write lock no other process can store an id between our check
        and our insert, so an id is stored and counted exactly once. ``rows`` must have distinct
        ids. Returns how many reports were new.
        """
        # Counted before the write lock, which every worker waits for: most batches hold no id
        # already stored, and the rare one that does is counted again inside.
        counters = count(list(range(len(rows))))
        params = [value for row in rows for value in row]
        width = len(ReportRow._fields)
        with self.write() as conn:
            inserted: set[str] = set()
            for start in range(0, len(rows), _CHUNK):
                chunk = rows[start:start + _CHUNK]
                # One statement checks and inserts: RETURNING yields only the rows not ignored.
                inserted.update(i for (i,) in conn.execute(_insert_new_reports_sql(len(chunk)),
                                                           params[width * start:width * (start + len(chunk))]))
            new = [i for i, r in enumerate(rows) if r.id in inserted]
            if len(new) < len(rows):
                counters = count(new)
            conn.executemany(
                'INSERT INTO counters (schema, version, "window", attribute, value, n, hits) '
                'VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (schema, version, "window", attribute, value) '
                "DO UPDATE SET n = n + excluded.n, hits = hits + excluded.hits",
                counters)
            conn.executemany('INSERT OR IGNORE INTO dirty (schema, version, "window") VALUES (?, ?, ?)',
                             {c[:3] for c in counters})
        return len(new)

    def delete_reports_ended_by(self, cutoff: int) -> int:
        """Delete raw reports whose window ended at or before ``cutoff`` (Unix seconds); counters stay."""
        with self.write() as conn:
            return conn.execute("DELETE FROM reports WHERE window_end <= ?", (cutoff,)).rowcount

    # -- estimation (call these inside ``write()``) --------------------------------------------

    def stale_windows(self, confidence: float) -> list[WindowKey]:
        """Windows whose estimates are out of date: counters changed, or computed at another confidence."""
        stored = self.estimates_confidence()
        if stored is not None and stored != confidence:
            sql = 'SELECT DISTINCT schema, version, "window" FROM counters'
        else:
            sql = 'SELECT schema, version, "window" FROM dirty'
        return [tuple(r) for r in self.conn.execute(sql + " ORDER BY 1, 2, 3")]  # type: ignore[misc]

    def window_counters(self, schema: str, version: int, window: str) -> list[tuple[str, str, int, int]]:
        """``(attribute, value, n, hits)`` of one window."""
        return self.conn.execute(
            'SELECT attribute, value, n, hits FROM counters WHERE schema = ? AND version = ? AND "window" = ?',
            (schema, version, window)).fetchall()

    def rollup_counters(self, schema: str, version: int) -> list[tuple[str, str, int, int]]:
        """``(attribute, value, n, hits)`` summed over every window of a schema version."""
        return self.conn.execute(
            "SELECT attribute, value, sum(n), sum(hits) FROM counters WHERE schema = ? AND version = ? "
            "GROUP BY attribute, value", (schema, version)).fetchall()

    def save_estimates(self, rows: Sequence[dict[str, Any]], done: Sequence[WindowKey], confidence: float) -> None:
        """Replace estimates with ``rows``, mark ``done`` windows clean, record the confidence."""
        columns = ("schema", "version", "window", "attribute", "value", "estimate", "estimate_clipped",
                   "ci_low", "ci_high", "n", "hits", "epsilon", "computed_at")
        names = ", ".join(f'"{c}"' for c in columns)
        self.conn.executemany(f"INSERT OR REPLACE INTO estimates ({names}) VALUES ({', '.join('?' * len(columns))})",
                              [tuple(r[c] for c in columns) for r in rows])
        self.conn.executemany('DELETE FROM dirty WHERE schema = ? AND version = ? AND "window" = ?', done)
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('confidence', ?)", (repr(confidence),))

    # -- reading estimates -------------------------------------------------------------------

    def estimates_confidence(self) -> float | None:
        """The confidence level the stored estimates were computed at (None before any refresh)."""
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'confidence'").fetchone()
        return None if row is None else float(row[0])

    def estimates(self, schema: str, version: int, attribute: str | None = None, since: str | None = None,
                  until: str | None = None) -> list[dict[str, Any]]:
        """Stored estimates of a schema version; ``since``/``until`` bound the windows (``all`` always)."""
        sql = "SELECT * FROM estimates WHERE schema = ? AND version = ?"
        params: list[Any] = [schema, version]
        if attribute is not None:
            sql += " AND attribute = ?"
            params.append(attribute)
        if since is not None:
            sql += ' AND ("window" = \'all\' OR "window" >= ?)'
            params.append(since)
        if until is not None:
            sql += ' AND ("window" = \'all\' OR "window" <= ?)'
            params.append(until)
        cursor = self.conn.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor]


# -- dashboard reads (read-only; added for the dashboard) ----------------------------------------


@dataclass(frozen=True)
class Activity:
    """What a schema version has received, from its counters, and when it was last estimated."""

    carried: dict[str, int]  # attribute -> reports that carried it, over every window
    windows: int  # windows with at least one report
    computed_at: str | None  # latest estimate refresh, ISO 8601 UTC
    pending: bool  # counters changed since the last refresh


def schema_versions(store: Store, name: str) -> list[int]:
    """Every published version of ``name``, oldest first."""
    return [v for (v,) in store.conn.execute("SELECT version FROM schemas WHERE name = ? ORDER BY version", (name,))]


def activity(store: Store, name: str, version: int) -> Activity:
    """Report counts per attribute, windows, last refresh and pending changes of one schema version."""
    conn = store.conn
    # Every value of an attribute has the same n in a window; max() picks that n once per window.
    carried = dict(conn.execute(
        'SELECT attribute, sum(n) FROM (SELECT "window", attribute, max(n) AS n FROM counters '
        'WHERE schema = ? AND version = ? GROUP BY "window", attribute) GROUP BY attribute', (name, version)))
    windows = conn.execute('SELECT count(DISTINCT "window") FROM counters WHERE schema = ? AND version = ?',
                           (name, version)).fetchone()[0]
    computed_at = conn.execute("SELECT max(computed_at) FROM estimates WHERE schema = ? AND version = ?",
                               (name, version)).fetchone()[0]
    pending = conn.execute("SELECT 1 FROM dirty WHERE schema = ? AND version = ? LIMIT 1",
                           (name, version)).fetchone() is not None
    return Activity(carried, windows, computed_at, pending)
