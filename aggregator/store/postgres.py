"""The PostgreSQL store (``LDP_DB`` a ``postgresql://`` URL): any number of stateless aggregator
nodes share one database. Same tables and meaning as :mod:`.rows`, through psycopg 3.

- **Connections**: a psycopg_pool pool per process, made on first use in the process that uses it
  (``serve`` migrates in its master, closes, then forks its workers: no socket crosses a fork).
  Connections are not tested before use (that is a round trip per request): one broken by a
  server restart fails the request that finds it (503; clients retry) and the pool replaces it.
  Every error leaves as the store's own: a lock wait past ``busy_timeout``, a deadlock, a
  serialization failure or a pool with no free connection is :class:`StoreBusy`; a server that
  does not answer (or anything else) is :class:`StoreUnavailable`.
- **Exactly once, across processes and nodes**: one transaction inserts the reports with
  ``ON CONFLICT (id) DO NOTHING RETURNING id`` and adds the counters of the returned (new) ids
  only (:mod:`..ingest.writer`). A second transaction inserting the same id waits on the first's
  index entry and then skips it, so an id is counted once whoever stores it. Every writer locks
  rows in key order (reports sorted by id, counters by key), so concurrent ingests do not
  deadlock; one that does anyway (or fails to serialize) is rolled back and run again by the door
  (:meth:`.store.Store.run_tx`).
- **No arrival order**: reports are partitioned by hash of their id (:mod:`.postgres_migrations`)
  and inserted in id order. That spreads a request's reports over the partitions, but every row
  also carries the id of the transaction that wrote it (``xmin``, in commit order) and sits in its
  partition's heap in commit order (``ctid``): ``SELECT xmin, id FROM reports`` grouped a request's
  reports and ordered the requests. So ingest also notes each new id in ``unsettled``, and
  :meth:`PostgresBackend.erase_arrival_order` (the first step of every refresh) rewrites those reports: it takes up to
  :data:`SETTLE_CHUNK` ids from ``unsettled`` in id order (``FOR UPDATE SKIP LOCKED``: nodes
  settling at once take different ones), deletes the reports and inserts them again in id order,
  in one transaction, chunk after chunk for at most :data:`SETTLE_SECONDS`. Then the reports
  that arrived between two settles share one ``xmin`` and lie in id order, which is random: what is
  left of arrival order is which refresh interval a report arrived in. An ingest of an id being
  rewritten waits for the rewrite's index entry and finds it stored: exactly once still holds.
  A chunk holds ``retention`` in SHARE mode and leaves out reports of erased windows, so that
  retention (which deletes by ids read in a snapshot) never misses a report rewritten meanwhile.
  The old row versions stay in the table files until (auto)vacuum reclaims them, as deleted rows do.
- **Retention** deletes expired reports in chunks found by walking the id key (no index on
  ``window_end``: it cost every report a write); the hash partitions cannot be dropped by window
  (partitions by window would put a request's backlog of windows side by side again).
  Deleted rows stay in the table files until (auto)vacuum reuses their space.
- **Jobs' leader**: ``pg_try_advisory_lock`` on a connection of its own; the server releases it
  when that session ends (the process died, or the connection broke).
- **Migrations** (:mod:`.postgres_migrations`) are versioned in the table ``migrations``, applied
  under a transaction-level advisory lock so that nodes starting at once apply each exactly once.

Locks and tables are per PostgreSQL schema (``current_schema()``), so one database can hold
several deployments (or test runs) side by side, chosen with ``?options=-csearch_path%3D...``.
``LDP_SYNCHRONOUS`` does not apply: a commit is as durable as the server's ``synchronous_commit``
makes it (on by default: it survives a crash of the server).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence, cast

import numpy as np
import psycopg
from psycopg import errors as pg_errors
from psycopg import IsolationLevel
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from .tx import CROWDS_UPSERT, Tx
from .errors import StoreBusy, StoreError, StoreUnavailable
from .postgres_migrations import MIGRATIONS
from .rollup import dirty_windows
from .store import MIGRATION_WAIT
from .rows import CROWD_COUNTS, Increments, ReportRow
from .wire import Layout

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger(__name__)

# Seconds a statement waits for a row or table lock (and a thread for a pooled connection)
# before the store is busy: as long as the SQLite store waits for its write lock.
BUSY_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5  # seconds, unless the URL says otherwise
# Connections per process: the request threads of one worker (the RSGI bridge's pool) and the scheduler.
POOL_SIZE = 10
# Advisory lock keys (the first of the two int4 keys; the second is the schema's hash).
_JOBS_LOCK, _MIGRATIONS_LOCK = 0x1D9_0001, 0x1D9_0002
# Settling rewrites this many reports per transaction, chunk after chunk for at most SETTLE_SECONDS
# per call (several nodes settling at once share the work); what is left waits for the next call.
SETTLE_CHUNK = 10_000
SETTLE_SECONDS = 5.0
_BUSY = (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
         pg_errors.QueryCanceled, PoolTimeout)
_RETRY = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)

# Many rows go as one array parameter a column, for unnest; %b sends the arrays in binary, which
# psycopg need not quote element by element.
_INSERT_NEW_REPORTS = """
    WITH new AS (
        INSERT INTO reports (id, schema, version, "window", window_end, "values", wire)
        SELECT * FROM unnest(%b::text[], %b::text[], %b::integer[], %b::text[], %b::bigint[], %b::text[], %b::bytea[])
            AS r(id, schema, version, "window", window_end, "values", wire) ORDER BY id COLLATE "C"
        ON CONFLICT (id) DO NOTHING RETURNING id),
    noted AS (INSERT INTO unsettled (id) SELECT id FROM new)  -- rewritten by the next settle
    SELECT id FROM new"""
# Settling: take a chunk of unsettled ids (those other settles hold are skipped), in id order from
# where the last chunk ended; then rewrite their reports in one statement, in id order.
_TAKE_UNSETTLED = """
    DELETE FROM unsettled WHERE id IN (
        SELECT id FROM unsettled WHERE id > %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
    RETURNING id"""
_REWRITE_REPORTS = """
    WITH moved AS (DELETE FROM reports WHERE id = ANY(%b::text[]) RETURNING *)
    INSERT INTO reports SELECT * FROM moved
    WHERE NOT EXISTS (SELECT 1 FROM retention WHERE moved.window_end <= retention.cutoff)
    ORDER BY id COLLATE "C"
"""
_ADD_TOTALS = """
    INSERT INTO totals (schema, version, "window", attribute, n, window_end)
    SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::text[], %b::bigint[], %b::bigint[])
    ON CONFLICT (schema, version, "window", attribute) DO UPDATE SET n = totals.n + excluded.n"""
_ADD_COUNTERS = """
    INSERT INTO counters (schema, version, "window", attribute, value, amount)
    SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::text[], %b::text[], %b::double precision[])
    ON CONFLICT (schema, version, "window", attribute, value) DO UPDATE SET amount = counters.amount + excluded.amount"""
_ADD_BREAKDOWN_SUMS = """
    INSERT INTO breakdown_counters (schema, version, "window", breakdown, of_key, by_key, amount)
    SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::integer[], %b::text[], %b::text[],
                         %b::double precision[])
    ON CONFLICT (schema, version, "window", breakdown, of_key, by_key)
    DO UPDATE SET amount = breakdown_counters.amount + excluded.amount"""
_ADD_CROWDS = """
    INSERT INTO crowds (schema, version, "window", relayed, direct, crowd)
    SELECT * FROM unnest(%b::text[], %b::integer[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[])""" + CROWDS_UPSERT
_MARK_DIRTY = """
    INSERT INTO dirty (schema, version, "window", mark)
    SELECT s, v, w, nextval('dirty_marks') FROM unnest(%b::text[], %b::integer[], %b::text[]) AS d(s, v, w)
    ON CONFLICT (schema, version, "window") DO UPDATE SET mark = excluded.mark"""


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as ``width`` column lists: one array parameter per column for ``unnest``."""
    return [[row[i] for row in rows] for i in range(width)]


class PostgresTx(Tx):
    """PostgreSQL's statements: row locks for what SQLite's write lock holds, arrays for many rows,
    a page of reports' numeric form joined into one value by the database."""

    param = "%s"
    share_lock = " FOR SHARE"
    update_lock = " FOR UPDATE"
    new_mark = "nextval('dirty_marks')"
    # Two nodes starting at once each find no key: the second waits here, then finds the first's.
    keys_lock = "LOCK TABLE ohttp_keys IN SHARE ROW EXCLUSIVE MODE"

    def insert_new(self, rows: Sequence[ReportRow]) -> set[str]:
        # Each new id is also noted in ``unsettled``: rewritten by the next erase_arrival_order.
        return {i for (i,) in self.conn.execute(_INSERT_NEW_REPORTS, _columns(rows, len(ReportRow._fields)))}

    def add(self, increments: Increments) -> None:
        if increments.totals:
            self.conn.execute(_ADD_TOTALS, _columns(increments.totals, 6))
        if increments.amounts:
            amounts = [(*a[:5], float(a.amount)) for a in increments.amounts]
            self.conn.execute(_ADD_COUNTERS, _columns(amounts, 6))
        if increments.breakdowns:
            sums = [(*b[:6], float(b.amount)) for b in increments.breakdowns]
            self.conn.execute(_ADD_BREAKDOWN_SUMS, _columns(sums, 7))
        if increments.crowds:
            self.conn.execute(_ADD_CROWDS, _columns(increments.crowds, CROWD_COUNTS))
        windows = dirty_windows(increments)
        if windows:
            self.conn.execute(_MARK_DIRTY, _columns(windows, 3))

    def wire_read(self, source: str, params: Sequence[Any], layout: Layout
                  ) -> tuple[int, str | None, str, np.ndarray, np.ndarray]:
        # One row for the whole page: the database joins the ids into one text and the window ends
        # (int8send: big-endian) and the wires into bytes (a wire of another size reads as damaged).
        count, last, ids, ends, wires = self.conn.execute(
            "SELECT count(*), max(id), string_agg(id, ' '), string_agg(int8send(window_end), ''::bytea), "
            f"string_agg(CASE WHEN length(wire) = %s THEN wire ELSE %s END, ''::bytea) FROM (SELECT id, window_end, wire "
            f"{source}) AS r", [layout.size, layout.damaged(), *params]).fetchone()
        return (count, last, ids or "", np.frombuffer(ends or b"", dtype=">i8").astype(np.int64),
                layout.joined(wires or b""))

    def rewrite_unsettled(self, after: str) -> list[str]:
        """One chunk of settling: up to :data:`SETTLE_CHUNK` unsettled ids after ``after``, their
        reports deleted and inserted again in id order, less those of windows retention has
        erased. The ids taken.

        Retention reads the expired ids in a snapshot, then deletes them by id: a row rewritten by a
        transaction that commits in between is a new row that delete cannot see, and the report would
        outlive its window for good. So a chunk holds the retention table in SHARE mode: retention's
        raising of the cutoff waits for the chunks in progress (their new rows are then in its
        snapshot), and a chunk that starts later reads the new cutoff and leaves those reports out."""
        self.conn.execute("LOCK TABLE retention IN SHARE MODE")
        ids = [i for (i,) in self.conn.execute(_TAKE_UNSETTLED, (after, SETTLE_CHUNK))]
        if ids:
            self.conn.execute(_REWRITE_REPORTS, (ids,))
        return ids


def _reset(conn: psycopg.Connection) -> None:
    """A connection goes back to the pool as it came: the next user (a write, the health probe)
    must not begin a read's read-only snapshot."""
    conn.isolation_level = None
    conn.read_only = None


class PostgresBackend:
    """The database at the URL ``location``; a connection pool per process."""

    tx = PostgresTx
    inbox_folder: Path | None = None  # a commit per request is cheap enough: stored as acknowledged
    durable = True  # as durable as the server's synchronous_commit makes a commit

    def __init__(self, location: str, busy_timeout: float = BUSY_TIMEOUT):
        self.location = location
        self.busy_timeout = busy_timeout
        self._kwargs: dict[str, Any] = {} if "connect_timeout" in conninfo_to_dict(location) else {
            "connect_timeout": CONNECT_TIMEOUT}
        self._pool_mutex = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._pool_pid = 0
        self._lock_mutex = threading.Lock()
        self._leader: psycopg.Connection | None = None
        self._leader_pid = 0
        self._held = False

    # -- connections and transactions -------------------------------------------------------

    def _configure(self, conn: psycopg.Connection) -> None:
        conn.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}")
        conn.commit()

    def _connect(self, autocommit: bool = False) -> psycopg.Connection:
        """A connection of its own, outside the pool (migrations, the leader's lock)."""
        conn = psycopg.connect(self.location, autocommit=autocommit, **self._kwargs)
        self._configure(conn)
        return conn

    def _connections(self) -> ConnectionPool:
        """This process's pool, made on first use. After a fork the parent's pool is left alone
        (its sockets are the parent's; its threads did not come along) and a new one is made."""
        with self._pool_mutex:
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ConnectionPool(self.location, min_size=1, max_size=POOL_SIZE, open=True,
                                            timeout=self.busy_timeout, kwargs=self._kwargs,
                                            configure=self._configure, reset=_reset, name="ldp-telemetry")
                self._pool_pid = os.getpid()
            return self._pool

    def _answers(self) -> bool:
        """Whether a new connection to the server can be made right now (a pool timeout is busy
        if so, unavailable if not)."""
        try:
            psycopg.connect(self.location, **self._kwargs).close()
            return True
        except psycopg.Error:
            return False

    @contextmanager
    def transaction(self, write: bool) -> Iterator[psycopg.Connection]:
        with self._connections().connection() as conn:
            if not write:
                # psycopg writes these into the transaction's BEGIN: a read costs no round trip of
                # its own to say what it is (one snapshot for every statement, no writes); the
                # pool's reset (_reset) takes them off again.
                conn.isolation_level = IsolationLevel.REPEATABLE_READ
                conn.read_only = True
            yield conn

    def classify(self, exc: Exception) -> StoreError | None:
        # Busy is a class of error, never words in a message.
        if isinstance(exc, _BUSY):
            if isinstance(exc, PoolTimeout) and not self._answers():
                return StoreUnavailable(f"the database cannot be reached: {exc}")
            return StoreBusy(f"the database is busy: {exc}")
        if isinstance(exc, psycopg.Error):
            return StoreUnavailable(f"the database cannot be used: {exc}")
        return None

    def retryable(self, exc: Exception) -> bool:
        return isinstance(exc, _RETRY)

    def close(self) -> None:
        """Close this process's pool (the next call makes a new one) and resign the jobs' lock."""
        self.resign()
        with self._pool_mutex:
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.close()
            self._pool = None

    def migrate(self) -> None:
        with self._connect() as conn:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {int(MIGRATION_WAIT * 1000)}")  # another node may be migrating
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_MIGRATIONS_LOCK,))
                conn.execute("CREATE TABLE IF NOT EXISTS migrations (name text PRIMARY KEY, "
                             "applied_at timestamptz NOT NULL DEFAULT now())")
                applied = {name for (name,) in conn.execute("SELECT name FROM migrations")}
                for name, migration in MIGRATIONS:
                    if name not in applied:
                        if callable(migration):
                            migration(conn)
                        else:
                            conn.execute(migration)
                        conn.execute("INSERT INTO migrations (name) VALUES (%s)", (name,))

    def pending_migrations(self) -> bool:
        with self.transaction(write=False) as conn:
            applied = {name for (name,) in conn.execute("SELECT name FROM migrations")}
        return bool({name for name, _ in MIGRATIONS} - applied)

    def probe_write(self, timeout: float) -> None:
        milliseconds = int(timeout * 1000)
        with self._connections().connection(timeout=timeout) as conn:
            conn.execute(f"SET LOCAL lock_timeout = {milliseconds}")
            conn.execute(f"SET LOCAL statement_timeout = {milliseconds}")
            # The locks ingest takes (another session's EXCLUSIVE or stronger lock waits us out), and
            # a write that changes no row: refused in a read-only transaction or on a standby.
            conn.execute("LOCK TABLE reports, unsettled, totals, counters, dirty, crowds IN ROW EXCLUSIVE MODE")
            conn.execute("UPDATE generation SET n = n WHERE false")
            conn.rollback()

    def erase_arrival_order(self, store: Store) -> bool:
        """Every report is counted as it is stored; what is left is to take arrival order out of the
        reports stored since the last call (see the module's "No arrival order"): rewrite them,
        :data:`SETTLE_CHUNK` per transaction, for at most :data:`SETTLE_SECONDS`."""
        deadline = time.monotonic() + SETTLE_SECONDS
        after, moved = "", 0
        while True:
            ids = store.run_tx("rewrite_unsettled", lambda tx: cast(PostgresTx, tx).rewrite_unsettled(after))
            moved += len(ids)
            # Fewer than a chunk: none left past ``after`` but those other settles are rewriting.
            if len(ids) < SETTLE_CHUNK:
                done = True
                break
            if time.monotonic() >= deadline:
                done = False
                break
            after = max(ids)
        if moved:
            # Reclaim the ids just taken from ``unsettled`` (they were in arrival order) and, if it
            # is empty now and no one is writing it, cut its file back; never waits for a lock.
            with self._connect(autocommit=True) as conn:
                conn.execute("VACUUM (SKIP_LOCKED) unsettled")
        return done

    # -- the jobs' leader --------------------------------------------------------------------

    def lead(self) -> bool:
        # A session-level advisory lock on a connection of its own: the server drops it when the
        # session ends, so when a leader dies (or its connection breaks) the next to try leads.
        with self._lock_mutex:
            if self._leader is not None and self._leader_pid != os.getpid():
                self._leader, self._held = None, False  # the parent's session: not ours to use
            if self._leader is not None:
                try:
                    self._leader.execute("SELECT 1")  # still the same session, so still the lock's
                except psycopg.Error:
                    self._leader.close()
                    self._leader, self._held = None, False
            if self._leader is None:
                self._leader, self._leader_pid = self._connect(autocommit=True), os.getpid()
            if not self._held:
                row = self._leader.execute("SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))",
                                           (_JOBS_LOCK,)).fetchone()
                self._held = bool(row and row[0])
            return self._held

    def resign(self) -> None:
        with self._lock_mutex:
            if self._leader is not None and self._leader_pid == os.getpid():
                # Unlocked before the session ends: a closed connection's backend lets go of its
                # locks only a moment after the client returns, and the next leader may ask sooner.
                if self._held:
                    with contextlib.suppress(psycopg.Error):
                        self._leader.execute("SELECT pg_advisory_unlock(%s, hashtext(current_schema()))",
                                             (_JOBS_LOCK,))
                self._leader.close()
            self._leader, self._held = None, False
