"""The SQLite store (the embedded default; ``LDP_DB`` a file path), through sqlite-utils.

Its tables and their migrations are in :mod:`.sqlite_migrations`, its connections and
transactions in :mod:`.sqlite_connection`. Ingest appends to the process's inbox and answers;
the reports are stored and counted when the inbox is *folded* in (:mod:`.inbox`), a moment later;
:meth:`settle` folds everything acknowledged so far before the counters are read. The jobs'
leader holds a ``flock`` beside the database file.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from sqlite_utils import Database

from .base import (Activity, BackfillChunk, CandidateRow, EstimateRow, EstimatesQuery, Expired, Increments, Known, ReportRow, Retention,
                   Stale, Store, WindowCounters, WireColumns, estimates_by_window, first_of_each_id, schema_key_ok)
from .dialect import NEXT_GENERATION, SQLITE, TABLES
from .errors import StoreUnavailable
from .inbox import SETTLE_SECONDS, Inbox
from .rollup import dirty_windows, with_rollup
from .sqlite_connection import BUSY_TIMEOUT, Connections, translated
from .sqlite_migrations import MIGRATIONS

# SQLite's limit on bound variables is 32766; a multi-row INSERT binds 6 per report.
_CHUNK = 500
# Reports folded in from the inbox per transaction: a bound on how long the write lock is held.
FOLD_CHUNK = 5_000
_REPORT_COLUMNS = '(id, schema, version, "window", window_end, "values")'  # ReportRow's fields
_ESTIMATE_COLUMNS = EstimateRow._fields


@lru_cache(maxsize=8)
def _insert_new_reports_sql(rows: int) -> str:
    """Insert ``rows`` reports, skipping stored ids, and return the ids actually inserted."""
    return (f"INSERT OR IGNORE INTO reports {_REPORT_COLUMNS} VALUES "
            + ",".join(["(?, ?, ?, ?, ?, ?)"] * rows) + " RETURNING id")


class SQLiteStore(Store):
    """The database in the file ``path``; one connection per thread."""

    def __init__(self, path: str, synchronous: str = "full", busy_timeout: float = BUSY_TIMEOUT):
        self.location = self.path = str(path)
        self._db = Connections(self.path, synchronous, busy_timeout)
        self._lock_fd: int | None = None
        self._lock_mutex = threading.Lock()
        self._known: dict[tuple[str, int], Known] = {}  # counted candidates per schema version, by mark
        self._inbox = Inbox(Path(self.path + "-inbox"), self._fold, durable=self._db.synchronous == "FULL",
                            on_duplicates=lambda n: self.on_late_duplicates(n), after_folding=self._truncate_wal)

    @property
    def busy_timeout(self) -> float:
        """Seconds a writer waits for another process's write lock before the store is busy."""
        return self._db.busy_timeout

    @busy_timeout.setter
    def busy_timeout(self, seconds: float) -> None:
        self._db.busy_timeout = seconds

    @translated
    def close(self) -> None:
        self._db.close()

    @translated
    def migrate(self) -> None:
        # Read first: a database already up to date needs no write lock, so a start beside a busy
        # writer (another process's long transaction) is not held up by it.
        if not MIGRATIONS.pending(Database(self._db.conn, execute_plugins=False)):
            return
        with self._db.write() as conn:
            MIGRATIONS.apply(Database(conn, execute_plugins=False))

    @translated
    def check(self) -> None:
        if MIGRATIONS.pending(Database(self._db.conn, execute_plugins=False)):
            raise StoreUnavailable("the database has pending migrations")
        self._db.conn.execute("SELECT count(*) FROM schemas").fetchone()

    # -- schemas -----------------------------------------------------------------------------

    @translated
    def published_at(self, name: str, version: int) -> str | None:
        if not schema_key_ok(name, version):
            return None
        row = self._db.conn.execute("SELECT published_at FROM schemas WHERE name = ? AND version = ?",
                                    (name, version)).fetchone()
        return None if row is None else row[0]

    @translated
    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        if not schema_key_ok(name, version):
            return None
        if version is None:
            row = self._db.conn.execute("SELECT definition FROM schemas WHERE name = ? ORDER BY version DESC LIMIT 1",
                                     (name,)).fetchone()
        else:
            row = self._db.conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                                     (name, version)).fetchone()
        return None if row is None else json.loads(row[0])

    @translated
    def latest_schemas(self) -> list[dict[str, Any]]:
        rows = self._db.conn.execute(
            "SELECT definition FROM schemas s WHERE version = "
            "(SELECT max(version) FROM schemas WHERE name = s.name) ORDER BY name")
        return [json.loads(definition) for (definition,) in rows]

    @translated
    def schema_versions(self, name: str) -> list[int]:
        return [v for (v,) in self._db.conn.execute("SELECT version FROM schemas WHERE name = ? ORDER BY version",
                                                    (name,))]

    @translated
    def publish_schema(self, definition: dict[str, Any], published_at: str) -> str:
        name, version = definition["name"], definition["version"]
        with self._db.write() as conn:
            row = conn.execute("SELECT definition FROM schemas WHERE name = ? AND version = ?",
                               (name, version)).fetchone()
            if row is not None:
                return "identical" if json.loads(row[0]) == definition else "conflict"
            conn.execute("INSERT INTO schemas (name, version, definition, published_at) VALUES (?, ?, ?, ?)",
                         (name, version, json.dumps(definition), published_at))
        return "created"

    # -- ingest ------------------------------------------------------------------------------

    @translated
    def ingest(self, rows: Sequence[ReportRow]) -> int:
        """Append the reports to this process's inbox segment (:mod:`.inbox`); they are stored and
        counted a moment later, when it is folded in. An id appended here and not yet folded is a
        duplicate now; one stored already, or in another process's segment, is found when it is
        folded (a read of the stored ids here cost as much as storing them)."""
        return self._inbox.append(rows)

    @translated
    def settle(self, *, wait: bool = True) -> None:
        self._inbox.settle(SETTLE_SECONDS if wait else 0.0)

    @translated
    def _fold(self, rows: list[ReportRow], validated: bool) -> int:
        """Fold inbox rows in: store the rows whose id is not stored and add what they count,
        :data:`FOLD_CHUNK` at a time in id order; how many were stored already. Under the write
        lock no other process can store an id between our check and our insert, so each is counted
        once, and no back-fill moves a watermark between our reading it and our counting. A row that cannot be counted (a damaged line of a dead process's segment: only rows
        not ``validated`` by this process's ingest are checked), or whose window retention erased
        meanwhile, is left out."""
        counts = self._counts()
        unique = first_of_each_id(rows)
        countable = sorted(unique if validated else counts.countable(unique))
        new_count = 0
        for start in range(0, len(countable), FOLD_CHUNK):
            chunk = countable[start:start + FOLD_CHUNK]
            with self._db.write() as conn:
                inserted = _insert_new(conn, SQLITE.within_retention(conn, chunk))
                new = [r for r in chunk if r.id in inserted]
                known = SQLITE.known(conn, {(r.schema, r.version) for r in new}, self._known)
                _add(conn, with_rollup(counts(new, known)))
            new_count += len(new)
        return len(countable) - new_count

    @translated
    def _truncate_wal(self) -> bool:
        """After a fold: the WAL holds the folds in the order they were made (arrival order), so it
        is copied into the database and cut to nothing as soon as no reader is in the way (else
        on the next try). Then the reports are only in the id-ordered table."""
        return self._db.truncate_wal()

    @translated
    def footprint(self) -> dict[str, int]:
        self._inbox.settle()
        with self._db.snapshot() as conn:
            return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}

    # -- estimation --------------------------------------------------------------------------

    @translated
    def stale_windows(self, confidence: float) -> list[Stale]:
        self._inbox.settle()
        return SQLITE.stale_windows(self._db.conn, confidence)

    @translated
    def window_counters(self, schema: str, version: int, windows: Sequence[str]) -> dict[str, WindowCounters]:
        self._inbox.settle()
        with self._db.snapshot() as conn:
            return SQLITE.window_counters(conn, schema, version, windows)

    @translated
    def save_estimates(self, rows: Sequence[EstimateRow], done: Sequence[Stale]) -> None:
        by_window = estimates_by_window(rows)
        names = ", ".join(f'"{c}"' for c in _ESTIMATE_COLUMNS)
        with self._db.write() as conn:
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
        self._db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    # -- retention ---------------------------------------------------------------------------

    @translated
    def retention(self) -> Retention:
        self._inbox.settle()  # the oldest window may still be in the inbox
        return SQLITE.retention(self._db.conn)

    @translated
    def retention_cutoff(self) -> int | None:
        return SQLITE.retention_cutoff(self._db.conn)

    @translated
    def expire(self, cutoff: int) -> Expired:
        # No settle of its own: the retention job has just settled through retention(), and a
        # report of an erased window folded later is left out by the fold (within_retention).
        return SQLITE.expire(self._db.write, self._db.snapshot, cutoff)

    # -- reading -----------------------------------------------------------------------------

    @translated
    def estimates(self, query: EstimatesQuery) -> list[EstimateRow]:
        return SQLITE.estimates(self._db.conn, query)

    @translated
    def estimates_generation(self) -> int:
        return self._db.conn.execute("SELECT n FROM generation").fetchone()[0]

    @translated
    def activity(self, schema: str, version: int) -> Activity:
        return SQLITE.activity(self._db.conn, schema, version)

    @translated
    def wire_columns(self, schema: str, version: int, attribute: str, fields: Sequence[str], after: str, limit: int,
                     through: str | None = None) -> tuple[WireColumns, int, str | None]:
        read, count, last, _ = SQLITE.wire_columns(self._db.conn, schema, version, attribute, fields, after, limit,
                                                   through)
        return read, count, last

    # -- candidates --------------------------------------------------------------------------

    @translated
    def candidates(self, schema: str, version: int) -> list[CandidateRow]:
        return SQLITE.candidates(self._db.conn, schema, version)

    @translated
    def add_candidates(self, schema: str, version: int, attribute: str, values: Sequence[str], *, source: str,
                       estimated: bool, added_at: str, most: int) -> int | None:
        with self._db.write() as conn:
            return SQLITE.add_candidates(conn, schema, version, attribute, values, source, estimated, added_at, most)

    @translated
    def filling(self) -> list[tuple[str, int, int, int]]:
        return SQLITE.filling(self._db.conn)

    @translated
    def backfill_read(self, schema: str, version: int, batch: int, reports: int) -> BackfillChunk | None:
        with self._db.snapshot() as conn:
            return SQLITE.backfill_read(conn, schema, version, batch, reports, self._counts())

    @translated
    def backfill_apply(self, chunk: BackfillChunk) -> bool:
        # Under the write lock, as a fold's chunk: reports still in an inbox are counted when folded,
        # by the watermark then.
        with self._db.write() as conn:
            return SQLITE.backfill_apply(conn, chunk, self._counts(), _add)

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
