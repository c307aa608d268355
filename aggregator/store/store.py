"""The store: one door to the database, whatever the database.

Every transaction goes through :meth:`Store.run_tx`, named: it opens the transaction on the
backend (:class:`Database`), runs the caller's function on a :class:`.tx.Tx`, commits, tries
again where the database says a retry can succeed (a deadlock, a serialization failure), turns
every driver error into the store's own (:mod:`.errors`), and records the transaction's duration
under its name (``ldp_store_transaction_seconds`` in ``/metrics``). The callers hold the logic
(ingest counts, the back-fill counts, the refresh estimates: Janus's ``run_tx``); the store only
stores, and never calls up into counting or the catalog.

A few operations span many transactions on purpose, so that no lock is held long: retention's
walk (:meth:`Store.expire`) and taking arrival order out of what was stored
(:meth:`Store.erase_arrival_order`).
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from .tx import Tx
from .errors import StoreError
from .rows import Expired

T = TypeVar("T")

# How long a starting process waits for another's migration (one that packs the reports stored
# before takes about a minute per million) before it gives up.
MIGRATION_WAIT = 1800.0

# Tries of a transaction that the database rolled back for a retry (deadlock, serialization).
TRIES = 3
# Rows deleted per retention transaction: no lock is held long.
DELETE_CHUNK = 5_000


class Backend(Protocol):
    """What a backend gives the store: connections, transactions and what only it knows."""

    location: str  # what LDP_DB named, for messages
    # Where acknowledged reports wait to be stored (SQLite: a commit per request would hold its one
    # write lock; :mod:`..ingest.inbox`), or None where ingest stores as it acknowledges.
    inbox_folder: Path | None
    durable: bool  # whether a commit (and an inbox append) survives a power cut, not only a killed process

    @property
    def tx(self) -> type[Tx]:
        """Its statements: what a transaction's function is given (on the transaction's connection)."""

    def transaction(self, write: bool) -> AbstractContextManager[Any]:
        """A connection in a transaction, committed at the end and rolled back on error: ``write``
        takes the write lock first; otherwise a snapshot that sees the database as of its first read."""

    def classify(self, exc: Exception) -> StoreError | None:
        """The store's own error for a driver's, or None for anything else (a bug: it goes on as it is)."""

    def retryable(self, exc: Exception) -> bool:
        """Whether a transaction that failed with ``exc`` was rolled back whole and may succeed if run again."""

    def migrate(self) -> None: ...

    def pending_migrations(self) -> bool: ...

    def probe_write(self, timeout: float) -> None:
        """Begin a write (the locks ingest takes) within ``timeout`` seconds and let go of it,
        writing nothing; a driver error if it could not (locked elsewhere, read-only)."""

    def erase_arrival_order(self, store: Store) -> bool:
        """Take arrival order out of what was stored since the last call; whether it is all done."""

    def lead(self) -> bool: ...

    def resign(self) -> None: ...

    def close(self) -> None: ...


class Store:
    """The aggregator's database (``db``) behind one door. ``observe(name, seconds)`` records
    each transaction's duration. Safe to share between the threads of one process."""

    def __init__(self, db: Backend, observe: Callable[[str, float], None] | None = None):
        self.db = db
        self._observe = observe or (lambda name, seconds: None)
        self._open = threading.local()  # the transaction this thread is in, if any

    @property
    def location(self) -> str:
        return self.db.location

    @property
    def inbox_folder(self) -> Path | None:
        """Where acknowledged reports wait to be stored (SQLite), or None (stored as acknowledged)."""
        return self.db.inbox_folder

    @property
    def durable(self) -> bool:
        """Whether a commit survives a power cut, not only a killed process."""
        return self.db.durable

    def run_tx(self, name: str, fn: Callable[[Tx], T], *, write: bool = True) -> T:
        """``fn(tx)`` in one transaction named ``name``, committed before it returns: its result.
        ``write=False``: a read-only snapshot. A driver's error leaves as the store's own; anything
        else ``fn`` raises (a caller's refusal, a bug) rolls the transaction back and goes on as it
        is. A transaction inside another on the same thread is a bug (SQLite has one connection
        per thread), refused at once: read what it needs (a schema) before opening the first."""
        if getattr(self._open, "name", None) is not None:
            raise RuntimeError(f"transaction {name!r} opened inside transaction {self._open.name!r}")
        for attempt in range(1, TRIES + 1):
            started = time.monotonic()
            self._open.name = name
            try:
                with self.db.transaction(write) as conn:
                    return fn(self.db.tx(conn))
            except StoreError:
                raise
            except Exception as exc:
                if attempt < TRIES and self.db.retryable(exc):
                    continue
                error = self.db.classify(exc)
                if error is None:
                    raise
                raise error from exc
            finally:
                self._open.name = None
                self._observe(name, time.monotonic() - started)
        raise AssertionError("unreachable")

    def _translated(self, fn: Callable[[], T]) -> T:
        """``fn()``, outside a transaction (set-up, locks), its driver errors as the store's own."""
        try:
            return fn()
        except StoreError:
            raise
        except Exception as exc:
            error = self.db.classify(exc)
            if error is None:
                raise
            raise error from exc

    # -- lifecycle ---------------------------------------------------------------------------

    def migrate(self) -> None:
        """Bring the tables up to date; safe when several processes start at once."""
        self._translated(self.db.migrate)

    def check(self) -> None:
        """Raise :class:`.errors.StoreUnavailable` unless the database answers and is migrated."""
        from .errors import StoreUnavailable

        if self._translated(self.db.pending_migrations):
            raise StoreUnavailable("the database has pending migrations")
        self.run_tx("check", lambda tx: tx.check(), write=False)

    def check_writable(self, timeout: float) -> None:
        """Raise :class:`.errors.StoreBusy` unless a write could begin within ``timeout`` seconds
        (another process holds the lock it needs), :class:`.errors.StoreUnavailable` if the database
        refuses writes. Writes nothing, and never waits longer (not the store's busy timeout)."""
        self._translated(lambda: self.db.probe_write(timeout))

    def close(self) -> None:
        """Close this thread's (SQLite) or this process's (PostgreSQL, which also resigns the jobs'
        lock) connections; the next transaction opens new ones."""
        self._translated(self.db.close)

    def lead(self) -> bool:
        """True if this process holds (or now takes) the jobs' lock: one process at a time runs the
        scheduled jobs. The lock goes when the process dies or calls :meth:`resign`."""
        return self._translated(self.db.lead)

    def resign(self) -> None:
        """Give up the jobs' lock, if held."""
        self._translated(self.db.resign)

    # -- what spans transactions -------------------------------------------------------------

    def erase_arrival_order(self) -> bool:
        """Take arrival order out of what was stored since the last call (DESIGN.md, "Storage"): the
        SQLite store truncates its WAL, the PostgreSQL store rewrites those reports in id order.
        Whether it is all done (else the next call goes on)."""
        return self._translated(lambda: self.db.erase_arrival_order(self))

    def expire(self, cutoff: int) -> Expired:
        """Raise the kept retention cutoff to ``cutoff`` (Unix seconds; it never goes down) and delete
        what belongs to windows that ended at or before it: raw reports in chunks, then each
        window's rows in a transaction of its own, so no lock is held long. The rollup keeps their
        sums. The cutoff is kept first, so an ingest that reads it in its own transaction refuses
        those windows from then on.

        ``reports`` has no index on ``window_end``: it cost every stored report a second random page
        write, for a job that runs once an hour. So the expired reports are found by walking the id
        key in chunks, each read outside the write lock and then deleted by id; the walk runs only
        when a window is due (``totals`` is indexed by window end, and a window's totals go after
        its reports)."""
        cutoff = self.run_tx("raise_cutoff", lambda tx: tx.raise_cutoff(cutoff))
        due = self.run_tx("expire_due", lambda tx: tx.any_window_due(cutoff), write=False)
        reports, after = 0, ""
        while due:
            ids = self.run_tx("expire_find", lambda tx: tx.expired_report_ids(after, cutoff, DELETE_CHUNK), write=False)
            if ids:
                reports += self.run_tx("expire_reports", lambda tx: tx.delete_reports(ids))
                after = ids[-1]
            due = len(ids) == DELETE_CHUNK
        windows = self.run_tx("expire_windows", lambda tx: tx.expired_windows(cutoff))
        for key in windows:  # a window per transaction: its rows are few (sparse counters)
            self.run_tx("expire_window", lambda tx: tx.delete_window(key))
        return Expired(reports, len(windows))
