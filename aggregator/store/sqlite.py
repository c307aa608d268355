"""The SQLite store (the embedded default; ``LDP_DB`` a file path), through sqlite-utils.

Tables are versioned with sqlite-utils ``Migrations``; their meaning is in :mod:`.base`. Every
write runs in ``BEGIN IMMEDIATE``: it takes SQLite's write lock before reading, so a transaction
never has to upgrade a read lock (which SQLite refuses without waiting when another process
writes), and a read inside it (which ids are already stored?) cannot go stale before the commit.
Each thread gets its own connection. Every ``sqlite3`` error leaves as the store's own
(:mod:`.errors`). Ingest appends to the process's inbox and answers; the reports are stored and
counted when the inbox is folded in (:mod:`.inbox`), a moment later.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from sqlite_utils import Database, Migrations

from ...shared.reports import Report
from ...shared.schema import Schema, parse_schema
from ...shared.windows import ROLLUP, window_end
from . import common
from .base import (Activity, EstimateRow, EstimatesQuery, Expired, Increments, ReportRow, Stale, Store,
                   WindowCounters)
from .common import (NEXT_GENERATION, TABLES, dirty_windows, increments, read_activity, read_estimates,
                     read_window_counters, rows_by_window, schema_key_ok, stale_windows_sql, translating, with_rollup)
from .errors import StoreBusy, StoreError, StoreUnavailable
from .inbox import SETTLE_SECONDS, Inbox

# Seconds a writer waits for another process's write lock before the store is busy.
BUSY_TIMEOUT = 10.0
# SQLite's limit on bound variables is 32766; a multi-row INSERT binds 6 per report.
_CHUNK = 500
# Reports folded in from the inbox per transaction: the write lock is held some 50 ms at most.
FOLD_CHUNK = 5_000
CACHE_KIB = 64 * 1024  # page cache per connection
WAL_CHECKPOINT_PAGES = 10_000
_REPORT_COLUMNS = '(id, schema, version, "window", window_end, "values")'  # ReportRow's fields
_ESTIMATE_COLUMNS = EstimateRow._fields
# How often a writer tries again for the write lock: from 0.5 ms, doubling, to at most 4 ms.
_FIRST_PAUSE, _MAX_PAUSE = 0.0005, 0.004
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


@lru_cache(maxsize=8)
def _insert_new_reports_sql(rows: int) -> str:
    """Insert ``rows`` reports, skipping stored ids, and return the ids actually inserted."""
    return (f"INSERT OR IGNORE INTO reports {_REPORT_COLUMNS} VALUES "
            + ",".join(["(?, ?, ?, ?, ?, ?)"] * rows) + " RETURNING id")


log = logging.getLogger(__name__)
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
    rollup: Counter[tuple] = Counter()
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
    """Retention finds expired reports by walking the id key (:func:`.common.expire`): the index on
    ``window_end`` cost every stored report a second random page write."""
    db.conn.execute("DROP INDEX reports_window_end")


def _classify(store: Any, exc: Exception) -> StoreError | None:
    """The store's own error for a ``sqlite3`` one (busy is a code, not words in a message)."""
    if not isinstance(exc, sqlite3.Error):
        return None
    if getattr(exc, "sqlite_errorcode", None) is not None and exc.sqlite_errorcode & 0xFF in _BUSY_CODES:
        return StoreBusy(f"the database is busy: {exc}")
    return StoreUnavailable(f"the database cannot be used: {exc}")


_translated = translating(_classify)


class SQLiteStore(Store):
    """The database in the file ``path``; one connection per thread."""

    def __init__(self, path: str, synchronous: str = "full", busy_timeout: float = BUSY_TIMEOUT):
        self.location = self.path = str(path)
        self.busy_timeout = busy_timeout
        self.synchronous = {"full": "FULL", "normal": "NORMAL"}[synchronous]
        self._local = threading.local()
        self._lock_fd: int | None = None
        self._lock_mutex = threading.Lock()
        self._inbox = Inbox(Path(self.path + "-inbox"), self._fold, durable=self.synchronous == "FULL",
                            on_duplicates=lambda n: self.on_late_duplicates(n))
        self._schemas: dict[tuple[str, int], Schema] = {}  # published schemas never change

    # -- connections and transactions -------------------------------------------------------

    @property
    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: no implicit transactions; every write opens its own.
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
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

    @_translated
    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the database's write lock from its first statement."""
        conn = self._conn
        self._begin_immediate(conn)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself fails (a full disk): a transaction left open on this thread's
            # connection would make every later BEGIN on it fail.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the write lock, trying again every few milliseconds until ``busy_timeout``.

        Not SQLite's own busy handler: it sleeps ever longer (up to 100 ms a try), so a one-report
        ingest waiting beside a refresh, which takes the lock again every few milliseconds, would
        miss every gap and wait for the whole refresh.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = _FIRST_PAUSE
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    return
                except sqlite3.OperationalError as exc:
                    if exc.sqlite_errorcode & 0xFF not in _BUSY_CODES or time.monotonic() >= deadline:
                        raise
                time.sleep(pause)
                pause = min(2 * pause, _MAX_PAUSE)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every read in it sees the database as of its first read (WAL)."""
        conn = self._conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    @_translated
    def migrate(self) -> None:
        with self._write() as conn:
            MIGRATIONS.apply(Database(conn, execute_plugins=False))

    @_translated
    def check(self) -> None:
        if MIGRATIONS.pending(Database(self._conn, execute_plugins=False)):
            raise StoreUnavailable("the database has pending migrations")
        self._conn.execute("SELECT count(*) FROM schemas").fetchone()

    # -- schemas -----------------------------------------------------------------------------

    @_translated
    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        if not schema_key_ok(name, version):
            return None
        if version is None:
            row = self._conn.execute("SELECT definition FROM schemas WHERE name = ? ORDER BY version DESC LIMIT 1",
                                     (name,)).fetchone()
        else:
            row = self._conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                                     (name, version)).fetchone()
        return None if row is None else json.loads(row[0])

    @_translated
    def latest_schemas(self) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT definition FROM schemas s WHERE version = "
            "(SELECT max(version) FROM schemas WHERE name = s.name) ORDER BY name")
        return [json.loads(definition) for (definition,) in rows]

    @_translated
    def schema_versions(self, name: str) -> list[int]:
        return [v for (v,) in self._conn.execute("SELECT version FROM schemas WHERE name = ? ORDER BY version",
                                                 (name,))]

    @_translated
    def publish_schema(self, definition: dict[str, Any], published_at: str) -> str:
        name, version = definition["name"], definition["version"]
        with self._write() as conn:
            row = conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                               (name, version)).fetchone()
            if row is not None:
                return "identical" if json.loads(row[0]) == definition else "conflict"
            conn.execute("INSERT INTO schemas (name, version, definition, published_at) VALUES (?, ?, ?, ?)",
                         (name, version, json.dumps(definition), published_at))
        return "created"

    # -- ingest ------------------------------------------------------------------------------

    @_translated
    def ingest(self, rows: Sequence[ReportRow], count: Callable[[list[int]], Increments]) -> int:
        """Append the reports to this process's inbox segment (:mod:`.inbox`); they are stored and
        counted a moment later, when it is folded in (``count`` is not needed: the fold counts
        from the rows). An id appended here and not yet folded is a duplicate now; one stored
        already, or in another process's segment, is found when it is folded (a read of the
        stored ids here cost as much as storing them)."""
        return self._inbox.append(rows)

    @_translated
    def settle(self, *, wait: bool = True) -> None:
        self._inbox.settle(SETTLE_SECONDS if wait else 0.0)

    def _fold(self, rows: list[ReportRow]) -> int:
        """Store the rows whose id is not stored and add their counts, :data:`FOLD_CHUNK` at a
        time in id order; how many were stored already. Under the write lock no other process
        can store an id between our check and our insert, so each is counted once. A row that
        cannot be counted (a damaged line of a dead process's segment) is left out, with a warning."""
        unique: dict[str, ReportRow] = {}
        for row in rows:
            unique.setdefault(row.id, row)  # the first appended wins, as in a batch
        values: dict[str, Any] = {}  # wire values -> decoded: most reports share a few
        countable = [r for r in sorted(unique.values()) if self._decodes(r, values)]
        new_count = 0
        for start in range(0, len(countable), FOLD_CHUNK):
            chunk = countable[start:start + FOLD_CHUNK]
            with self._write() as conn:
                inserted = _insert_new(conn, chunk)
                new = [r for r in chunk if r.id in inserted]
                _add(conn, with_rollup(self._count(new, values)))
            new_count += len(new)
        return len(countable) - new_count

    def _decodes(self, row: ReportRow, values: dict[str, Any]) -> bool:
        if row.values not in values:
            try:
                values[row.values] = json.loads(row.values)
            except ValueError:
                values[row.values] = None
        if type(values[row.values]) is dict and self._schema(row.schema, row.version) is not None:
            return True
        log.warning("left out a report of the inbox that cannot be counted (schema %r version %s)",
                    row.schema[:64], row.version)
        return False

    def _count(self, rows: Sequence[ReportRow], values: dict[str, Any]) -> Increments:
        """The counter increments of ``rows``, whose wire values ``values`` decodes: reports alike
        (same window, same wire values, which is most of them) are counted once, with a weight."""
        alike = Counter((r.schema, r.version, r.window, r.window_end, r.values) for r in rows)
        reports = [Report("", self._schema(schema, version), window, values[wire])  # type: ignore[arg-type]
                   for schema, version, window, _, wire in alike]
        return increments(reports, [key[3] for key in alike], list(alike.values()))

    def _schema(self, name: str, version: int) -> Schema | None:
        key = (name, version)
        if key not in self._schemas:
            definition = self.get_schema(name, version)
            if definition is None:
                return None
            self._schemas[key] = parse_schema(definition)
        return self._schemas[key]

    @_translated
    def footprint(self) -> dict[str, int]:
        self._inbox.settle()
        with self._snapshot() as conn:
            return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}

    # -- estimation --------------------------------------------------------------------------

    @_translated
    def stale_windows(self, confidence: float) -> list[Stale]:
        self._inbox.settle()
        rows = self._conn.execute(stale_windows_sql("?"), (confidence,))
        return [Stale(*row) for row in rows]

    @_translated
    def window_counters(self, schema: str, version: int, windows: Sequence[str]) -> dict[str, WindowCounters]:
        self._inbox.settle()
        with self._snapshot() as conn:
            return read_window_counters(conn, "?", schema, version, windows)

    @_translated
    def save_estimates(self, rows: Sequence[EstimateRow], done: Sequence[Stale]) -> None:
        by_window = rows_by_window(rows)
        names = ", ".join(f'"{c}"' for c in _ESTIMATE_COLUMNS)
        with self._write() as conn:
            for stale in done:
                key = (stale.schema, stale.version, stale.window)
                current = conn.execute('SELECT mark FROM dirty WHERE schema = ? AND version = ? AND "window" = ?',
                                       key).fetchone()
                # Changed since it was read (or saved by a newer refresh): what we computed is
                # older than what is stored or due, so it is left for the next refresh.
                if (current[0] if current else None) != stale.mark:
                    continue
                conn.executemany(f"INSERT OR REPLACE INTO estimates ({names}) "
                                 f"VALUES ({', '.join('?' * len(_ESTIMATE_COLUMNS))})",
                                 by_window.get(key, ()))
                conn.execute('DELETE FROM dirty WHERE schema = ? AND version = ? AND "window" = ?', key)
            conn.execute(NEXT_GENERATION)
        # The refresh writes many pages; it copies them back from the WAL itself, a little at a time,
        # so that a one-report ingest is never the commit that finds a big WAL to checkpoint.
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # -- retention ---------------------------------------------------------------------------

    @_translated
    def expire(self, cutoff: int) -> Expired:
        self._inbox.settle()
        return common.expire(self._write, self._snapshot, "?", cutoff)

    # -- reading -----------------------------------------------------------------------------

    @_translated
    def estimates(self, query: EstimatesQuery) -> list[EstimateRow]:
        return read_estimates(self._conn, "?", query)

    @_translated
    def estimates_generation(self) -> int:
        return self._conn.execute("SELECT n FROM generation").fetchone()[0]

    @_translated
    def activity(self, schema: str, version: int) -> Activity:
        return read_activity(self._conn, "?", schema, version)

    # -- scheduled jobs ----------------------------------------------------------------------

    def lead(self) -> bool:
        # An exclusive flock beside the database: the kernel drops it when the process dies, so
        # the next worker to try becomes the leader without any lease to expire.
        with self._lock_mutex:
            if self._lock_fd is None:
                try:
                    fd = os.open(self.path + ".jobs.lock", os.O_RDWR | os.O_CREAT, 0o600)
                except OSError as exc:
                    raise StoreUnavailable(f"cannot open the jobs' lock file: {exc}") from exc
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    return False
                self._lock_fd = fd
            return True

    def resign(self) -> None:
        with self._lock_mutex:
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # closing the descriptor drops the flock
                self._lock_fd = None


def _insert_new(conn: sqlite3.Connection, rows: Sequence[ReportRow]) -> set[str]:
    """Insert ``rows``, skipping stored ids: the ids inserted. One statement checks and inserts
    (RETURNING yields only the rows not ignored), so under the write lock no id goes in twice."""
    width = len(ReportRow._fields)
    params = [value for row in rows for value in row]
    inserted: set[str] = set()
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start:start + _CHUNK]
        inserted.update(i for (i,) in conn.execute(_insert_new_reports_sql(len(chunk)),
                                                   params[width * start:width * (start + len(chunk))]))
    return inserted


def _add(conn: sqlite3.Connection, increments: Increments) -> None:
    """Add ``increments`` to the counters and mark their windows dirty with a fresh mark."""
    conn.executemany('INSERT INTO totals (schema, version, "window", attribute, n, window_end) '
                     'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET n = n + excluded.n', increments.totals)
    conn.executemany('INSERT INTO counters (schema, version, "window", attribute, value, amount) '
                     'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET amount = amount + excluded.amount',
                     increments.amounts)
    # random(): a mark is never reused, so a refresh that read an older mark never clears a newer one.
    conn.executemany('INSERT INTO dirty (schema, version, "window", mark) VALUES (?, ?, ?, random()) '
                     "ON CONFLICT DO UPDATE SET mark = excluded.mark",
                     dirty_windows(increments))
