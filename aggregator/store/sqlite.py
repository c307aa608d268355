"""The SQLite database (the embedded default; ``LDP_DB`` a file path), through sqlite-utils.

Its tables and their migrations are in :mod:`.sqlite_migrations`, its connections and
transactions in :mod:`.sqlite_connection`. SQLite has one write lock for the whole file, and a
durable commit holds it through an fsync, so ingest does not commit per request: acknowledged
reports wait in an inbox beside the file (:attr:`SQLiteBackend.inbox_folder`,
:mod:`..ingest.inbox`) and are stored a moment later, thousands per transaction. The jobs' leader
holds a ``flock`` beside the database file.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from contextlib import AbstractContextManager
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from sqlite_utils import Database as SqliteUtilsDatabase

from .tx import CROWDS_UPSERT, Tx
from .errors import StoreError, StoreUnavailable
from .rollup import dirty_windows
from .store import MIGRATION_WAIT
from .rows import CROWD_COUNTS, Increments, ReportRow
from .sqlite_connection import BUSY_TIMEOUT, Connections, classify
from .sqlite_migrations import MIGRATIONS

if TYPE_CHECKING:
    from .store import Store

# SQLite's limit on bound variables is 32766; a multi-row INSERT binds 7 per report.
_CHUNK = 500
_REPORT_COLUMNS = '(id, schema, version, "window", window_end, "values", wire)'  # ReportRow's fields
_FIRST = itemgetter(0)


@lru_cache(maxsize=8)
def _insert_new_reports_sql(rows: int) -> str:
    """Insert ``rows`` reports, skipping stored ids, and return the ids actually inserted."""
    return (f"INSERT OR IGNORE INTO reports {_REPORT_COLUMNS} VALUES "
            + ",".join(["(?, ?, ?, ?, ?, ?, ?)"] * rows) + " RETURNING id")


class SQLiteTx(Tx):
    """SQLite's statements: its write lock already holds what is read, so no locking clauses."""

    def insert_new(self, rows: Sequence[ReportRow]) -> set[str]:
        # RETURNING yields only the rows not ignored: under the write lock no id goes in twice.
        ordered = sorted(rows, key=_FIRST)  # by id: a key sorts strings, faster than comparing tuples
        inserted: set[str] = set()
        for start in range(0, len(ordered), _CHUNK):
            chunk = ordered[start:start + _CHUNK]
            inserted.update(map(_FIRST, self.conn.execute(_insert_new_reports_sql(len(chunk)),
                                                          list(chain.from_iterable(chunk)))))
        return inserted

    def add(self, increments: Increments) -> None:
        self.conn.executemany('INSERT INTO totals (schema, version, "window", attribute, n, window_end) '
                              'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET n = n + excluded.n',
                              increments.totals)
        self.conn.executemany('INSERT INTO counters (schema, version, "window", attribute, value, amount) '
                              'VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET amount = amount + excluded.amount',
                              increments.amounts)
        self.conn.executemany('INSERT INTO breakdown_counters (schema, version, "window", breakdown, of_key, by_key, '
                              "amount) VALUES (?, ?, ?, ?, ?, ?, ?) "
                              "ON CONFLICT DO UPDATE SET amount = amount + excluded.amount", increments.breakdowns)
        self.conn.executemany('INSERT INTO crowds (schema, version, "window", relayed, direct, crowd) '
                              "VALUES (?, ?, ?, ?, ?, ?)" + CROWDS_UPSERT, [c[:CROWD_COUNTS] for c in increments.crowds])
        # random(): a mark is never reused, so a refresh that read an older mark never clears a newer one.
        self.conn.executemany('INSERT INTO dirty (schema, version, "window", mark) VALUES (?, ?, ?, random()) '
                              "ON CONFLICT DO UPDATE SET mark = excluded.mark", dirty_windows(increments))


# The tables of a relay's database (relay/store.py): an aggregator refuses such a file.
RELAY_TABLES = frozenset({"requests", "cache"})


class SQLiteBackend:
    """The database in the file ``path``; one connection per thread."""

    tx = SQLiteTx

    def __init__(self, path: str, synchronous: str = "full", busy_timeout: float = BUSY_TIMEOUT):
        self.location = self.path = str(path)
        self.connections = Connections(self.path, synchronous, busy_timeout)
        self.inbox_folder: Path | None = Path(self.path + "-inbox")
        self.durable = self.connections.synchronous == "FULL"
        self._lock_fd: int | None = None
        self._lock_mutex = threading.Lock()

    @property
    def busy_timeout(self) -> float:
        """Seconds a writer waits for another process's write lock before the store is busy."""
        return self.connections.busy_timeout

    @busy_timeout.setter
    def busy_timeout(self, seconds: float) -> None:
        self.connections.busy_timeout = seconds

    def transaction(self, write: bool) -> AbstractContextManager[sqlite3.Connection]:
        return self.connections.write() if write else self.connections.snapshot()

    def classify(self, exc: Exception) -> StoreError | None:
        return classify(exc)

    def retryable(self, exc: Exception) -> bool:
        return False  # a write waits for the lock itself (Connections.write); nothing is rolled back to retry

    def migrate(self) -> None:
        # Read first: a database already up to date needs no write lock, so a start beside a busy
        # writer (another process's long transaction) is not held up by it.
        if not self.pending_migrations():
            return
        tables = {name for (name,) in self.connections.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if RELAY_TABLES <= tables:
            # A relay's file holds who sent when, by the hour: the aggregator's operator must not keep it.
            raise StoreUnavailable(f"{self.path} is a relay's database (it holds the tables requests and cache): "
                                   "give the aggregator a file of its own")
        with self.connections.write(MIGRATION_WAIT) as conn:
            MIGRATIONS.apply(SqliteUtilsDatabase(conn, execute_plugins=False))

    def pending_migrations(self) -> bool:
        return bool(MIGRATIONS.pending(SqliteUtilsDatabase(self.connections.conn, execute_plugins=False)))

    def probe_write(self, timeout: float) -> None:
        with self.connections.write(timeout):
            pass  # the write lock taken and let go: nothing written

    def erase_arrival_order(self, store: Store) -> bool:
        """The WAL holds the folds in the order they were made (arrival order): copy it into the
        database and cut it to nothing as soon as no reader is in the way (else on the next try).
        Then the reports are only in the id-ordered table."""
        return self.connections.truncate_wal()

    def close(self) -> None:
        self.connections.close()

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
