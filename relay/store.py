"""The relay's own durable store: encrypted requests waiting for a batch, the batch in flight,
and the cached answers of the aggregator (its keys and schemas).

What an operator who takes this file learns is what the relay must keep and no more: each
request's encrypted bytes and the hour it arrived (hours since the epoch, UTC). No address, no
header, no arrival order: a row's id is drawn at random (``secrets``), so neither the ids nor
the table's b-tree, which is ordered by them, say which request came first; the only other
ordering, a batch member's ``position``, is the batch's uniformly random order. Deleted rows are
overwritten with zeros (``secure_delete``), and the write-ahead log, which holds recent pages in
the order they were written, is truncated after each batch and every hour
(:meth:`RelayStore.checkpoint`). What remains: the file's pages are allocated as the table grows,
so a page's number says roughly when it was first used; within an hour, that is what is left.

Durability: WAL with ``synchronous=FULL``: a commit is on disk before :meth:`RelayStore.add`
returns, so a request answered 202 survives kill -9 and a power cut.

One batch at most is formed at a time: its members carry their place in it (``position``), set in
the same transaction that chose them, before the first send, so after a restart the relay sends
the same members in the same order: the same bytes.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# Seconds a connection waits for another's write lock (the HTTP writer's and the forwarder's).
BUSY_SECONDS = 30
_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,  -- drawn at random: never the order of arrival
    hour INTEGER NOT NULL,   -- hours since the epoch (UTC) in which it arrived
    position INTEGER,        -- its place in the formed batch; NULL while it waits
    body BLOB NOT NULL       -- the encapsulated request, as received
);
CREATE INDEX IF NOT EXISTS requests_waiting ON requests (hour, id) WHERE position IS NULL;
CREATE UNIQUE INDEX IF NOT EXISTS requests_batch ON requests (position) WHERE position IS NOT NULL;
CREATE TABLE IF NOT EXISTS cache (
    key TEXT PRIMARY KEY,    -- "keys", or "schema:<name>" and "schema:<name>/<version>"
    body BLOB NOT NULL       -- the aggregator's answer, byte for byte
);
"""
_ID_BITS = 63  # SQLite's rowid is a signed 64-bit integer


@dataclass
class Usage:
    """Requests stored and their bytes (the batch in flight included), kept in memory beside the
    database so that every POST can be checked against the limits without a count."""

    requests: int = 0
    bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def change(self, requests: int, size: int) -> None:
        with self.lock:
            self.requests += requests
            self.bytes += size

    def fits(self, size: int, max_requests: int, max_bytes: int) -> bool:
        """Whether one more request of ``size`` bytes stays within both limits."""
        with self.lock:
            return self.requests + 1 <= max_requests and self.bytes + size <= max_bytes


class StoreUnusable(ValueError):
    """The relay's file cannot be opened or written."""


# Tables only an aggregator's database has: a relay refuses such a file.
AGGREGATOR_TABLES = frozenset({"schemas", "reports", "counters"})


class RelayStore:
    """One connection to the relay's SQLite file; each thread that writes opens its own."""

    def __init__(self, path: str, usage: Usage) -> None:
        """Open (creating if missing) the file at ``path``; ``usage`` is changed by every write here.
        :class:`StoreUnusable` naming the file and the reason if it cannot be."""
        self.usage = usage
        try:
            self.db = sqlite3.connect(path, timeout=BUSY_SECONDS, isolation_level=None, check_same_thread=False)
            if self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0] != "wal":
                raise sqlite3.OperationalError("it cannot use a write-ahead log")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA secure_delete=ON")
            tables = {name for (name,) in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if AGGREGATOR_TABLES & tables:
                # The relay's requests and hours must never sit in a file the aggregator's operator keeps.
                raise StoreUnusable(f"{path!r} is an aggregator's database (it holds "
                                    f"{', '.join(sorted(AGGREGATOR_TABLES & tables))}): give the relay a file of its own")
            self.db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnusable(f"the relay's database {path!r} cannot be used: {exc}") from None

    def close(self) -> None:
        self.db.close()

    def measure(self) -> None:
        """Set :attr:`usage` from the table (at start: what an earlier run left)."""
        count, size = self.db.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM requests").fetchone()
        with self.usage.lock:
            self.usage.requests, self.usage.bytes = count, size

    def add(self, bodies: Sequence[bytes], hour: int) -> None:
        """Store ``bodies``, which arrived in ``hour``, in one transaction, synced when it returns."""
        with self._transaction():
            for body in bodies:
                while True:
                    try:
                        self.db.execute("INSERT INTO requests (id, hour, body) VALUES (?, ?, ?)",
                                        (secrets.randbits(_ID_BITS), hour, body))
                        break
                    except sqlite3.IntegrityError:  # an id drawn twice (one chance in 2**63 per row): draw again
                        continue
        self.usage.change(len(bodies), sum(map(len, bodies)))

    def waiting_since(self) -> int | None:
        """The oldest hour of a request waiting for a batch, or None when none waits."""
        hour: int | None = self.db.execute("SELECT min(hour) FROM requests WHERE position IS NULL").fetchone()[0]
        return hour

    def form_batch(self, max_requests: int, max_bytes: int, shuffle: Callable[[list[int]], None]) -> int:
        """Choose the waiting requests of the oldest hours, at most ``max_requests`` and, with each
        one's 4-byte length, ``max_bytes``; put them in the order ``shuffle`` makes; record it.
        Within the last hour taken the choice follows the random ids: a uniformly random subset.
        The number of members (0 when nothing waits or a batch is already formed)."""
        with self._transaction():
            if self.db.execute("SELECT 1 FROM requests WHERE position IS NOT NULL LIMIT 1").fetchone():
                return 0
            chosen: list[int] = []
            total = 0
            rows = self.db.execute("SELECT id, length(body) FROM requests WHERE position IS NULL ORDER BY hour, id")
            for row_id, size in rows:
                if len(chosen) == max_requests or total + size + 4 > max_bytes:
                    break
                chosen.append(row_id)
                total += size + 4
            shuffle(chosen)
            self.db.executemany("UPDATE requests SET position = ? WHERE id = ?", enumerate(chosen))
        return len(chosen)

    def formed(self) -> list[bytes]:
        """The formed batch's requests in its order; empty when none is formed."""
        return [body for (body,) in self.db.execute(
            "SELECT body FROM requests WHERE position IS NOT NULL ORDER BY position")]

    def delete_formed(self) -> int:
        """Delete the formed batch (the aggregator has it); how many requests it held."""
        with self._transaction():
            count, size = self.db.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM requests "
                                          "WHERE position IS NOT NULL").fetchone()
            self.db.execute("DELETE FROM requests WHERE position IS NOT NULL")
        self.usage.change(-count, -size)
        return int(count)

    def discard_before(self, hour: int) -> int:
        """Delete the requests that arrived before ``hour``; how many. A formed batch that held one
        is formed no more (it cannot be sent as formed): its other members, younger and
        acknowledged, wait for the next batch and its shuffle. Those the aggregator may have
        stored already from an earlier send are duplicates there and add to no crowd."""
        with self._transaction():
            count, size = self.db.execute("SELECT count(*), coalesce(sum(length(body)), 0) FROM requests "
                                          "WHERE hour < ?", (hour,)).fetchone()
            if count:
                self.db.execute("UPDATE requests SET position = NULL WHERE position IS NOT NULL AND "
                                "EXISTS (SELECT 1 FROM requests WHERE position IS NOT NULL AND hour < ?)", (hour,))
                self.db.execute("DELETE FROM requests WHERE hour < ?", (hour,))
        self.usage.change(-count, -size)
        return int(count)

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the file and truncate it, so that the order in which
        recent pages were written is not kept beside the table."""
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def cached(self, key: str) -> bytes | None:
        row = self.db.execute("SELECT body FROM cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def cache(self, entries: dict[str, bytes]) -> None:
        """Store the aggregator's answers by key, replacing earlier ones, in one transaction."""
        with self._transaction():
            self.db.executemany("INSERT INTO cache (key, body) VALUES (?, ?) "
                                "ON CONFLICT (key) DO UPDATE SET body = excluded.body", entries.items())

    def cache_entries(self) -> dict[str, bytes]:
        return {key: bytes(body) for key, body in self.db.execute("SELECT key, body FROM cache")}

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on an exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
