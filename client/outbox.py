"""The durable outbox: randomised reports waiting to be sent, the ledger, the cached schema.

One SQLite file per schema (standard library ``sqlite3``, WAL). The ledger (:mod:`.ledger`, which
owns its rules and its table) is the device's, per schema, whichever server the reports go to;
each report is kept for the endpoint it was made for, and a client sends only its own
endpoint's. Only randomised reports are ever written here; a true value never is. A report and
its ledger row are committed in one transaction, so a crash can lose a report that was never
sent, but never forget a window that was spent. Only the sender thread writes reports here.

Every failure of the file (locked by another process for long, a full disk, a damaged file) leaves
this module as :class:`OutboxError`, so its callers handle one error of the outbox's own and
never depend on which database keeps it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from . import ledger

LOG = logging.getLogger("ldp_telemetry.client")
_CHUNK = 500  # SQL variables per statement: old SQLite builds allow 999
MEMORY = Path(":memory:")  # an outbox in memory (SQLite's name for it): no file, gone with the process

_TABLES = """
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, endpoint TEXT NOT NULL,
                                   body TEXT NOT NULL, size INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS outbox_endpoint ON outbox (endpoint, seq);
CREATE TABLE IF NOT EXISTS schemas (endpoint TEXT NOT NULL, name TEXT NOT NULL, definition TEXT NOT NULL,
                                    PRIMARY KEY (endpoint, name));
CREATE TABLE IF NOT EXISTS relay_keys (endpoint TEXT PRIMARY KEY, keys BLOB NOT NULL, fetched REAL NOT NULL,
                                       asked REAL NOT NULL, posted REAL);
""" + ledger.TABLE


class KeptKeys(NamedTuple):
    """A relay route's agreed key configurations and its times (Unix seconds), kept in the outbox."""

    keys: bytes
    fetched: float  # when both parties served them
    asked: float  # when the aggregator last answered a key fetch
    posted: float | None  # the last post to the relay


class OutboxError(Exception):
    """The outbox file could not be used; what was asked of it did not happen (a write is
    rolled back whole)."""


@contextmanager
def _failing_as(what: str) -> Iterator[None]:
    """Turn a database (or file) error inside the block into :class:`OutboxError` saying ``what`` failed."""
    try:
        yield
    except (sqlite3.Error, OSError) as exc:
        raise OutboxError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _create_owner_only(path: Path) -> None:
    """Create the outbox file, if missing, readable and writable by its owner alone (0600), before
    SQLite opens it: SQLite would create it as the umask allows (0644: anyone on the machine could
    read the reports), and gives its ``-wal`` and ``-shm`` files the database file's mode."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


@dataclass(frozen=True)
class Appended:
    """What :meth:`Outbox.append` did with the reports it was given."""

    stored: int
    refused: dict[str, int]  # the ledger on disk refused these (another process spent first): reason -> count
    evicted: int  # oldest reports dropped to keep the outbox within its bounds


class Outbox:
    """A FIFO of randomised reports for ``endpoint`` on disk, bounded in count and in bytes,
    shared safely by threads and by processes."""

    def __init__(self, path: Path, endpoint: str, *, max_reports: int, max_bytes: int):
        self.path = path
        self.endpoint = endpoint
        self.max_reports = max_reports
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        with _failing_as(f"could not open the outbox {path}"):
            if path != MEMORY:
                _create_owner_only(path)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                # In WAL mode NORMAL is durable across an app crash; only an OS crash may lose the
                # last commits, and those reports were never acknowledged, so nothing is double-counted.
                self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.executescript(_TABLES)
                if "size" not in {row[1] for row in self._db.execute("PRAGMA table_info(outbox)")}:  # an older file
                    self._db.execute("ALTER TABLE outbox ADD COLUMN size INTEGER NOT NULL DEFAULT 0")
                self._db.execute("UPDATE outbox SET size = length(CAST(body AS BLOB)) WHERE size = 0")
                self.count, self.bytes = self._db.execute(
                    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox WHERE endpoint = ?", (endpoint,)
                ).fetchone()
            except BaseException:
                self._db.close()
                raise

    def ledger_rows(self, since: str) -> list[tuple[str, str, float]]:
        """Every (schema, window, ε) the ledger holds from the window ``since`` on; older rows
        are deleted (window names sort in time order)."""
        with self._lock, _failing_as("could not read the ledger"):
            self._db.execute('DELETE FROM ledger WHERE "window" < ?', (since,))
            return self._db.execute('SELECT schema, "window", epsilon FROM ledger').fetchall()

    def append(self, reports: list[dict[str, Any]], spending: ledger.Ledger) -> Appended:
        """Store ``reports``, each only if ``spending`` commits its ledger row in the same
        transaction, then evict the oldest beyond the bounds."""
        stored = evicted = added = 0
        refused: dict[str, int] = {}
        with self._lock, _failing_as("could not store reports in the outbox"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for report in reports:
                    reason = spending.commit(self._db, report)
                    if reason is not None:
                        refused[reason] = refused.get(reason, 0) + 1
                        continue
                    body = _dumps(report)
                    size = len(body.encode("utf-8"))
                    self._db.execute("INSERT INTO outbox (endpoint, body, size) VALUES (?, ?, ?)",
                                     (self.endpoint, body, size))
                    stored += 1
                    added += size
                evicted, freed = self._evict(self.count + stored, self.bytes + added)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self.count += stored - evicted
            self.bytes += added - freed
        return Appended(stored, refused, evicted)

    def _evict(self, count: int, size: int) -> tuple[int, int]:
        """Delete the oldest reports until ``count`` reports of ``size`` bytes fit the bounds."""
        if count <= self.max_reports and size <= self.max_bytes:
            return 0, 0
        doomed: list[tuple[int]] = []
        freed = 0
        for seq, bytes_ in self._db.execute("SELECT seq, size FROM outbox WHERE endpoint = ? ORDER BY seq",
                                            (self.endpoint,)):
            if count - len(doomed) <= self.max_reports and size - freed <= self.max_bytes:
                break
            doomed.append((seq,))
            freed += bytes_
        self._db.executemany("DELETE FROM outbox WHERE seq = ?", doomed)
        return len(doomed), freed

    def peek(self, *, limit: int, max_bytes: int, max_windows: int) -> list[tuple[int, dict[str, Any]]]:
        """The oldest reports, as ``(seq, report)``, left in place until removed: at most ``limit``
        of them, naming at most ``max_windows`` windows, and (but for a first report that is
        bigger on its own) at most ``max_bytes`` as a ``{"reports": [...]}`` body."""
        with self._lock, _failing_as("could not read the outbox"):
            rows = self._db.execute(
                "SELECT seq, body, size FROM outbox WHERE endpoint = ? ORDER BY seq LIMIT ?", (self.endpoint, limit)
            ).fetchall()
        reports: list[tuple[int, dict[str, Any]]] = []
        unreadable: list[int] = []
        windows: set[Any] = set()
        total = len('{"reports":[]}')
        for seq, body, size in rows:
            report = _loads(body)
            if not isinstance(report, dict):
                unreadable.append(seq)
                continue
            window = report.get("window")
            if reports and (total + size + 1 > max_bytes or (window not in windows and len(windows) >= max_windows)):
                break
            windows.add(window)
            total += size + 1
            reports.append((seq, report))
        if unreadable:  # a damaged row must not stop the sender for good: it would block every later report
            LOG.error("dropped %d unreadable report(s) from the outbox %s", len(unreadable), self.path)
            self.remove(unreadable)
            return reports or self.peek(limit=limit, max_bytes=max_bytes, max_windows=max_windows)
        return reports

    def remove(self, seqs: list[int]) -> None:
        """Delete reports the server acknowledged or rejected for good."""
        count = size = 0
        with self._lock, _failing_as("could not remove reports from the outbox"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(seqs), _CHUNK):
                    chunk = seqs[start:start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    found, freed = self._db.execute(
                        f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM outbox WHERE seq IN ({marks})", chunk).fetchone()
                    self._db.execute(f"DELETE FROM outbox WHERE seq IN ({marks})", chunk)
                    count, size = count + found, size + freed
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self.count -= count
            self.bytes -= size

    def cached_schema(self, name: str) -> dict[str, Any] | None:
        """The schema called ``name`` as last fetched from this endpoint, if any."""
        with self._lock, _failing_as("could not read the cached schema"):
            row = self._db.execute(
                "SELECT definition FROM schemas WHERE endpoint = ? AND name = ?", (self.endpoint, name)
            ).fetchone()
        definition = _loads(row[0]) if row else None
        return definition if isinstance(definition, dict) else None  # a damaged copy is no copy

    def cache_schema(self, definition: dict[str, Any]) -> None:
        with self._lock, _failing_as("could not cache the schema"):
            self._db.execute(
                "INSERT OR REPLACE INTO schemas VALUES (?, ?, ?)", (self.endpoint, definition["name"], _dumps(definition))
            )

    def kept_relay_keys(self) -> KeptKeys | None:
        """The key configurations the relay and the aggregator last both served for this route, with
        when (Unix seconds) they were taken, when the aggregator answered, and the last post to the
        relay; None if none were kept."""
        with self._lock, _failing_as("could not read the kept relay keys"):
            row = self._db.execute("SELECT keys, fetched, asked, posted FROM relay_keys WHERE endpoint = ?",
                                   (self.endpoint,)).fetchone()
        return None if row is None else KeptKeys(bytes(row[0]), row[1], row[2], row[3])

    def keep_relay_keys(self, kept: KeptKeys) -> None:
        """Keep the agreed keys and the minute's times across starts: a short-lived process (a
        command, a job) would otherwise fetch the keys at every start and never wait out the minute
        before its first post."""
        with self._lock, _failing_as("could not keep the relay keys"):
            self._db.execute("INSERT OR REPLACE INTO relay_keys VALUES (?, ?, ?, ?, ?)",
                             (self.endpoint, kept.keys, kept.fetched, kept.asked, kept.posted))

    def close(self) -> None:
        with self._lock, _failing_as("could not close the outbox"):
            self._db.close()


def _loads(text: Any) -> Any:
    """The JSON value of a stored row, or None if it is damaged."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
