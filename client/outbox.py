"""The durable outbox: randomised reports waiting to be sent, the ledger, the cached schema.

One SQLite file per schema (standard library ``sqlite3``, WAL). The ledger is the device's, per
schema, whichever server the reports go to; each report is kept for the endpoint it was made
for, and a client sends only its own endpoint's. Only randomised reports are ever written
here; a true value never is. A report and its ledger entry are committed in one transaction, so
a crash can lose a report that was never sent, but never forget a window that was spent.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ldp_telemetry.shared import windows

LOG = logging.getLogger("ldp_telemetry.client")

_TABLES = """
CREATE TABLE IF NOT EXISTS outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, endpoint TEXT NOT NULL,
                                   body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_endpoint ON outbox (endpoint, seq);
CREATE TABLE IF NOT EXISTS ledger (schema TEXT NOT NULL, window TEXT NOT NULL, epsilon REAL NOT NULL,
                                   PRIMARY KEY (schema, window));
CREATE TABLE IF NOT EXISTS schemas (endpoint TEXT NOT NULL, name TEXT NOT NULL, definition TEXT NOT NULL,
                                    PRIMARY KEY (endpoint, name));
"""


@dataclass(frozen=True)
class Appended:
    """What :meth:`Outbox.append` did with the reports it was given."""

    stored: int
    already_spent: int  # another client on this outbox had already reported in that window
    evicted: int  # oldest reports dropped to keep the outbox within its bound


class Outbox:
    """A bounded FIFO of randomised reports for ``endpoint`` on disk, shared safely by threads."""

    def __init__(self, path: Path, endpoint: str, *, max_reports: int):
        self.path = path
        self.endpoint = endpoint
        self.max_reports = max_reports
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # In WAL mode NORMAL is durable across an app crash; only an OS crash may lose the
            # last commits, and those reports were never acknowledged, so nothing is double-counted.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_TABLES)
            self.count: int = self._db.execute(
                "SELECT COUNT(*) FROM outbox WHERE endpoint = ?", (endpoint,)
            ).fetchone()[0]
        except BaseException:
            self._db.close()
            raise

    def ledger(self, since: str) -> dict[tuple[str, str], float]:
        """Every (schema, window) a report was recorded in, with the ε it spent, from the window
        ``since`` on; older entries are deleted (window names sort in time order)."""
        with self._lock:
            self._db.execute("DELETE FROM ledger WHERE window < ?", (since,))
            rows = self._db.execute("SELECT schema, window, epsilon FROM ledger").fetchall()
        return {(schema, window): epsilon for schema, window, epsilon in rows}

    def append(self, reports: list[dict[str, Any]]) -> Appended:
        """Store ``reports`` with their ledger entries, then evict the oldest beyond the bound."""
        stored = spent = evicted = 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for report in reports:
                    if self._spent(report["schema"], report["window"]):
                        spent += 1
                        continue
                    self._db.execute("INSERT INTO ledger VALUES (?, ?, ?)",
                                     (report["schema"], report["window"], report["epsilon"]))
                    self._db.execute("INSERT INTO outbox (endpoint, body) VALUES (?, ?)", (self.endpoint, _dumps(report)))
                    stored += 1
                evicted = max(0, self.count + stored - self.max_reports)
                if evicted:
                    self._db.execute(
                        "DELETE FROM outbox WHERE seq IN "
                        "(SELECT seq FROM outbox WHERE endpoint = ? ORDER BY seq LIMIT ?)", (self.endpoint, evicted)
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self.count += stored - evicted
        return Appended(stored, spent, evicted)

    def _spent(self, schema: str, window: str) -> bool:
        """Whether any client on this file reported in ``window`` or a window overlapping it."""
        names = windows.overlapping(window)
        marks = ",".join("?" * len(names))
        return self._db.execute(f"SELECT 1 FROM ledger WHERE schema = ? AND window IN ({marks}) LIMIT 1",
                                (schema, *names)).fetchone() is not None

    def peek(self, limit: int) -> list[tuple[int, dict[str, Any]]]:
        """The oldest ``limit`` reports, as ``(seq, report)``, left in place until removed."""
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, body FROM outbox WHERE endpoint = ? ORDER BY seq LIMIT ?", (self.endpoint, limit)
            ).fetchall()
        reports, unreadable = [], []
        for seq, body in rows:
            report = _loads(body)
            (reports.append((seq, report)) if isinstance(report, dict) else unreadable.append(seq))
        if unreadable:  # a damaged row must not stop the sender for good: it would block every later report
            LOG.error("dropped %d unreadable report(s) from the outbox %s", len(unreadable), self.path)
            self.remove(unreadable)
            return reports or self.peek(limit)
        return reports

    def remove(self, seqs: list[int]) -> None:
        """Delete reports the server acknowledged or rejected for good."""
        with self._lock:
            deleted = self._db.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in seqs]).rowcount
            self.count -= deleted

    def cached_schema(self, name: str) -> dict[str, Any] | None:
        """The schema called ``name`` as last fetched from this endpoint, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT definition FROM schemas WHERE endpoint = ? AND name = ?", (self.endpoint, name)
            ).fetchone()
        definition = _loads(row[0]) if row else None
        return definition if isinstance(definition, dict) else None  # a damaged copy is no copy

    def cache_schema(self, definition: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO schemas VALUES (?, ?, ?)", (self.endpoint, definition["name"], _dumps(definition))
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _loads(text: Any) -> Any:
    """The JSON value of a stored row, or None if it is damaged."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        return None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))
