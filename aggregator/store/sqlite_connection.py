"""SQLite connections as the store uses them: one per thread, set up once (WAL, durability, cache,
checkpoints, secure delete), write transactions that take the write lock first, read snapshots,
the WAL's truncation, and which of the store's own errors (:mod:`.errors`) a ``sqlite3`` error is.

Every write runs in ``BEGIN IMMEDIATE``: it takes SQLite's write lock before reading, so a
transaction never has to upgrade a read lock (which SQLite refuses without waiting when another
process writes), and a read inside it (which ids are already stored?) cannot go stale before the
commit.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from .errors import StoreBusy, StoreError, StoreUnavailable

# Seconds a writer waits for another process's write lock before the store is busy.
BUSY_TIMEOUT = 10.0
CACHE_KIB = 64 * 1024  # page cache per connection
# What SQLite may hold in all the connections of a process together: past it, a connection's cache
# reuses its own pages instead of growing. Each thread that folds the inbox or settles (the folding
# thread, each scheduler thread, a request's refresh) has a connection of its own, and each filled
# its own CACHE_KIB as the database outgrew it; two caches' worth keeps the fold's whole.
HEAP_LIMIT_KIB = 2 * CACHE_KIB
WAL_CHECKPOINT_PAGES = 10_000
# The WAL is cut back to this many bytes whenever it starts over after a complete checkpoint, so a
# WAL that grew while a reader kept every checkpoint from completing does not stay that big, nor
# keep old frames (in commit order) beyond its new end. 0: cut back to nothing.
WAL_SIZE_LIMIT = 0
# How often a writer tries again for the write lock: from 0.5 ms, doubling, to at most 4 ms.
_FIRST_PAUSE, _MAX_PAUSE = 0.0005, 0.004
_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
SYNCHRONOUS = {"full": "FULL", "normal": "NORMAL"}


def classify(exc: Exception) -> StoreError | None:
    """The store's own error for a ``sqlite3`` one (busy is a code, not words in a message)."""
    if not isinstance(exc, sqlite3.Error):
        return None
    if getattr(exc, "sqlite_errorcode", None) is not None and exc.sqlite_errorcode & 0xFF in _BUSY_CODES:
        return StoreBusy(f"the database is busy: {exc}")
    return StoreUnavailable(f"the database cannot be used: {exc}")


class Connections:
    """This thread's connection to the file ``path``, and transactions on it."""

    def __init__(self, path: str, synchronous: str, busy_timeout: float = BUSY_TIMEOUT):
        self.path = path
        self.synchronous = SYNCHRONOUS[synchronous]
        self.busy_timeout = busy_timeout
        self._local = threading.local()

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection, opened and set up on first use."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level=None: no implicit transactions; every write opens its own.
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None)
            # Processes opening a new file at once race to make it WAL; SQLite answers the loser
            # busy at once, without its busy handler.
            _until_not_busy(conn, "PRAGMA journal_mode=WAL", self.busy_timeout)
            # In WAL mode NORMAL already keeps every commit across a crash of the process (kill -9);
            # FULL also syncs each commit to the disk, so it survives a power cut too.
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            # Report ids are random, so every stored report dirties its own leaf of the id index:
            # a large page cache keeps the index in memory, and checkpointing every 10,000 pages
            # (~40 MiB of WAL) instead of 1,000 lets one checkpoint absorb many rewrites of a page.
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute(f"PRAGMA soft_heap_limit={HEAP_LIMIT_KIB * 1024}")  # the process's, not the connection's
            conn.execute(f"PRAGMA wal_autocheckpoint={WAL_CHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            # Retention must erase: deleted reports are overwritten, not left in free pages.
            conn.execute("PRAGMA secure_delete=ON")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @contextmanager
    def write(self, timeout: float | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds the database's write lock from its first statement,
        waiting for it up to ``timeout`` seconds (``busy_timeout`` if None)."""
        conn = self.conn
        self._begin_immediate(conn, self.busy_timeout if timeout is None else timeout)
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also when COMMIT itself fails (a full disk): a transaction left open on this thread's
            # connection would make every later BEGIN on it fail.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _begin_immediate(self, conn: sqlite3.Connection, timeout: float) -> None:
        """Take the write lock, trying again every few milliseconds for ``timeout`` seconds.

        Not SQLite's own busy handler: it sleeps ever longer (up to 100 ms a try), so a one-report
        ingest waiting beside a refresh, which takes the lock again every few milliseconds, would
        miss every gap and wait for the whole refresh.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            _until_not_busy(conn, "BEGIN IMMEDIATE", timeout)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")

    def truncate_wal(self) -> bool:
        """Copy the whole WAL into the database and truncate it to zero bytes, without waiting:
        if a writer or a reader of an older snapshot is in the way, copy what can be copied
        (as a passive checkpoint does) and leave the rest for the next call. Whether it was cut.

        Each commit appends the pages it wrote to the WAL, so the WAL holds the recent folds in
        the order they were made (arrival order, DESIGN.md "Storage"); a checkpoint alone leaves
        them in the file, to be overwritten only as far as later commits reach."""
        conn = self.conn
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            blocked, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        return not blocked

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every read in it sees the database as of its first read (WAL)."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")


def _until_not_busy(conn: sqlite3.Connection, statement: str, timeout: float) -> None:
    """Run ``statement``, trying again every few milliseconds while the database is busy, for up
    to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = _FIRST_PAUSE
    while True:
        try:
            conn.execute(statement)
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in _BUSY_CODES or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, _MAX_PAUSE)
