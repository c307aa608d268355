"""The PostgreSQL store (``LDP_DB`` a ``postgresql://`` URL): any number of stateless aggregator
nodes share one database. Same tables and meaning as :mod:`.base`, through psycopg 3.

- **Connections**: a psycopg_pool pool per process, made on first use in the process that uses it
  (``serve`` migrates in its master, closes, then forks its workers: no socket crosses a fork).
  Connections are not tested before use (that is a round trip per request): one broken by a
  server restart fails the request that finds it (503; clients retry) and the pool replaces it.
  Every error leaves as the store's own: a lock wait past ``busy_timeout``, a deadlock, a
  serialization failure or a pool with no free connection is :class:`StoreBusy`; a server that
  does not answer (or anything else) is :class:`StoreUnavailable`.
- **Exactly once, across processes and nodes**: one transaction inserts the reports with
  ``ON CONFLICT (id) DO NOTHING RETURNING id`` and adds the counters of the returned (new) ids
  only. A second transaction inserting the same id waits on the first's index entry and then
  skips it, so an id is counted once whoever stores it. Batches handed in while a transaction
  commits share the next one (:class:`.groupcommit.GroupCommit`), and every writer locks rows in
  key order (reports sorted by id, counters by key), so concurrent ingests do not deadlock.
- **No arrival order**: reports are partitioned by hash of their id (:mod:`.postgres_migrations`)
  and inserted in id order. That spreads a request's reports over the partitions, but every row
  also carries the id of the transaction that wrote it (``xmin``, in commit order) and sits in its
  partition's heap in commit order (``ctid``): ``SELECT xmin, id FROM reports`` grouped a request's
  reports and ordered the requests. So ingest also notes each new id in ``unsettled``, and
  :meth:`PostgresStore.settle` (every refresh calls it) rewrites those reports: it takes up to
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
import functools
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from .base import (Activity, BackfillChunk, CandidateRow, EstimateRow, EstimatesQuery, Expired, Increments, Known, ReportRow,
                   Retention, Stale, Store, WindowCounters, WireColumns, estimates_by_window, schema_key_ok)
from .dialect import NEXT_GENERATION, POSTGRES, TABLES
from .errors import StoreBusy, StoreError, StoreUnavailable, translating
from .groupcommit import GroupCommit
from .postgres_migrations import MIGRATIONS
from .rollup import dirty_windows, with_rollup

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
# per call (several nodes settling at once share the work); what is left waits for the next settle.
SETTLE_CHUNK = 10_000
SETTLE_SECONDS = 5.0
# Tries of an ingest transaction that hit a deadlock or a serialization failure (each rolled back whole).
_TRIES = 3
_ESTIMATE_COLUMNS = EstimateRow._fields
_BUSY = (pg_errors.LockNotAvailable, pg_errors.DeadlockDetected, pg_errors.SerializationFailure,
         pg_errors.QueryCanceled, PoolTimeout)
_RETRY = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)

_INSERT_NEW_REPORTS = """
    WITH new AS (
        INSERT INTO reports (id, schema, version, "window", window_end, "values")
        SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[], %s::text[], %s::bigint[], %s::text[])
            AS r(id, schema, version, "window", window_end, "values") ORDER BY id COLLATE "C"
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
    WITH moved AS (DELETE FROM reports WHERE id = ANY(%s::text[]) RETURNING *)
    INSERT INTO reports SELECT * FROM moved
    WHERE NOT EXISTS (SELECT 1 FROM retention WHERE moved.window_end <= retention.cutoff)
    ORDER BY id COLLATE "C"
"""
_ADD_TOTALS = """
    INSERT INTO totals (schema, version, "window", attribute, n, window_end)
    SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[], %s::text[], %s::bigint[], %s::bigint[])
    ON CONFLICT (schema, version, "window", attribute) DO UPDATE SET n = totals.n + excluded.n"""
_ADD_COUNTERS = """
    INSERT INTO counters (schema, version, "window", attribute, value, amount)
    SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[], %s::text[], %s::text[], %s::double precision[])
    ON CONFLICT (schema, version, "window", attribute, value) DO UPDATE SET amount = counters.amount + excluded.amount"""
_MARK_DIRTY = """
    INSERT INTO dirty (schema, version, "window", mark)
    SELECT s, v, w, nextval('dirty_marks') FROM unnest(%s::text[], %s::integer[], %s::text[]) AS d(s, v, w)
    ON CONFLICT (schema, version, "window") DO UPDATE SET mark = excluded.mark"""
_SAVE_ESTIMATE = (f"INSERT INTO estimates ({', '.join(f'{chr(34)}{c}{chr(34)}' for c in _ESTIMATE_COLUMNS)}) "
                  f"VALUES ({', '.join(['%s'] * len(_ESTIMATE_COLUMNS))}) "
                  'ON CONFLICT (schema, version, "window", rank) DO UPDATE SET '
                  + ", ".join(f'"{c}" = excluded."{c}"' for c in _ESTIMATE_COLUMNS[4:]))

# What a schema version's candidates count as before they were read: a mark no version has, so the
# transaction reads them (and counts again).
_UNREAD = Known(-1)


class Batch(NamedTuple):
    """One ingest call's reports, handed to a group commit, with what they count if all are new:
    counted before any lock is taken, since most batches hold no id already stored (the rare one
    that does is counted again, for its new reports, inside the transaction), with the candidates'
    marks they were counted at (counted again if the transaction reads others)."""

    rows: Sequence[ReportRow]
    counted: Increments
    marks: dict[tuple[str, int], int]


def insert_batches(batches: Sequence[Batch], insert_new: Callable[[Sequence[ReportRow]], set[str]],
                   counts: Callable[[Sequence[ReportRow]], Increments]) -> tuple[list[int], Increments]:
    """Insert each batch's reports (``insert_new`` stores those whose id is not stored yet and
    returns their ids), batch after batch so an id in two batches is new in the first only; how
    many of each batch were new, and the increments of the new ones, rollup included."""
    news, increments = [], Increments()
    for b in batches:
        inserted = insert_new(b.rows)
        new = [r for r in b.rows if r.id in inserted]
        counted = b.counted if len(new) == len(b.rows) else counts(new)
        increments.totals += counted.totals
        increments.amounts += counted.amounts
        news.append(len(new))
    return news, with_rollup(increments)


def _classify(store: PostgresStore, exc: Exception) -> StoreError | None:
    """The store's own error for a psycopg one (busy is a class of error, never words in a message)."""
    if isinstance(exc, _BUSY):
        if isinstance(exc, PoolTimeout) and not store._answers():
            return StoreUnavailable(f"the database cannot be reached: {exc}")
        return StoreBusy(f"the database is busy: {exc}")
    if isinstance(exc, psycopg.Error):
        return StoreUnavailable(f"the database cannot be used: {exc}")
    return None


_translated = translating(_classify)


def _columns(rows: Sequence[tuple], width: int) -> list[list[Any]]:
    """Rows as ``width`` column lists: one array parameter per column for ``unnest``."""
    return [[row[i] for row in rows] for i in range(width)]


class PostgresStore(Store):
    """The database at the URL ``location``; a connection pool per process."""

    def __init__(self, location: str, busy_timeout: float = BUSY_TIMEOUT):
        self.location = location
        self.busy_timeout = busy_timeout
        self._kwargs: dict[str, Any] = {} if "connect_timeout" in conninfo_to_dict(location) else {
            "connect_timeout": CONNECT_TIMEOUT}
        self._pool_mutex = threading.Lock()
        self._pool: ConnectionPool | None = None
        self._pool_pid = 0
        self._group: GroupCommit[Batch] = GroupCommit(self._commit_batches)
        self._lock_mutex = threading.Lock()
        self._leader: psycopg.Connection | None = None
        self._leader_pid = 0
        self._held = False
        self._known: dict[tuple[str, int], Known] = {}  # counted candidates per schema version, by mark

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
                                            configure=self._configure, name="ldp-telemetry")
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
    def _transaction(self, snapshot: bool = False) -> Iterator[psycopg.Connection]:
        """A pooled connection in a transaction, committed at the end (rolled back on error).
        ``snapshot``: every read in it sees the database as of its first read."""
        with self._connections().connection() as conn:
            if snapshot:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield conn

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._transaction() as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._transaction() as conn:
            return conn.execute(sql, params).fetchall()

    @_translated
    def close(self) -> None:
        """Close this process's pool (the next call makes a new one) and resign the jobs' lock."""
        self.resign()
        with self._pool_mutex:
            if self._pool is not None and self._pool_pid == os.getpid():
                self._pool.close()
            self._pool = None

    @_translated
    def migrate(self) -> None:
        with self._connect() as conn:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(current_schema()))", (_MIGRATIONS_LOCK,))
                conn.execute("CREATE TABLE IF NOT EXISTS migrations (name text PRIMARY KEY, "
                             "applied_at timestamptz NOT NULL DEFAULT now())")
                applied = {name for (name,) in conn.execute("SELECT name FROM migrations")}
                for name, sql in MIGRATIONS:
                    if name not in applied:
                        conn.execute(sql)
                        conn.execute("INSERT INTO migrations (name) VALUES (%s)", (name,))

    @_translated
    def check(self) -> None:
        applied = {name for (name,) in self._all("SELECT name FROM migrations")}
        if {name for name, _ in MIGRATIONS} - applied:
            raise StoreUnavailable("the database has pending migrations")
        self._one("SELECT count(*) FROM schemas")

    # -- schemas -----------------------------------------------------------------------------

    @_translated
    def published_at(self, name: str, version: int) -> str | None:
        if not schema_key_ok(name, version):
            return None
        return self._one("SELECT published_at FROM schemas WHERE name = %s AND version = %s", (name, version))

    @_translated
    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        if not schema_key_ok(name, version):
            return None
        if version is None:
            definition = self._one("SELECT definition FROM schemas WHERE name = %s ORDER BY version DESC LIMIT 1",
                                   (name,))
        else:
            definition = self._one("SELECT definition FROM schemas WHERE name = %s AND version = %s", (name, version))
        return None if definition is None else json.loads(definition)

    @_translated
    def latest_schemas(self) -> list[dict[str, Any]]:
        rows = self._all("SELECT DISTINCT ON (name) definition FROM schemas ORDER BY name, version DESC")
        return [json.loads(definition) for (definition,) in rows]

    @_translated
    def schema_versions(self, name: str) -> list[int]:
        return [v for (v,) in self._all("SELECT version FROM schemas WHERE name = %s ORDER BY version", (name,))]

    @_translated
    def publish_schema(self, definition: dict[str, Any], published_at: str) -> str:
        name, version = definition["name"], definition["version"]
        with self._transaction() as conn:
            created = conn.execute("INSERT INTO schemas (name, version, definition, published_at) "
                                   "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                                   (name, version, json.dumps(definition), published_at)).fetchone()
            if created:
                return "created"
            (stored,) = conn.execute("SELECT definition FROM schemas WHERE name = %s AND version = %s",
                                     (name, version)).fetchone()
        return "identical" if json.loads(stored) == definition else "conflict"

    # -- ingest ------------------------------------------------------------------------------

    @_translated
    def ingest(self, rows: Sequence[ReportRow]) -> int:
        known = {(r.schema, r.version): self._known.get((r.schema, r.version), _UNREAD) for r in rows}
        return self._group.run(Batch(rows, self._counts()(rows, known), {k: v.mark for k, v in known.items()}))

    def _commit_batches(self, batches: Sequence[Batch]) -> list[int]:
        """Store a group of batches in one transaction: how many reports of each were new. A
        deadlock or serialization failure rolls it back whole; it is tried again a few times. The
        schema versions' rows are locked (shared) first and their candidates read: a batch counted
        at other marks is counted again, so no back-fill moves a watermark under it."""
        for attempt in range(_TRIES):
            try:
                with self._transaction() as conn:
                    known = POSTGRES.known(conn, {(r.schema, r.version) for b in batches for r in b.rows}, self._known)
                    counts = functools.partial(self._counts(), known=known)
                    batches = [b if b.marks == {k: known[k].mark for k in b.marks if k in known} else
                               Batch(b.rows, counts(b.rows), b.marks) for b in batches]
                    news, increments = insert_batches(batches, functools.partial(_insert_kept, conn), counts)
                    _add(conn, increments)
                return news
            except _RETRY:
                if attempt == _TRIES - 1:
                    raise
        raise AssertionError("unreachable")

    @_translated
    def settle(self, *, wait: bool = True) -> None:
        """Every report is counted as it is stored; what settling does here is take arrival order
        out of the reports stored since the last settle (see the module's "No arrival order"):
        rewrite them, :data:`SETTLE_CHUNK` per transaction, for at most :data:`SETTLE_SECONDS`.
        ``wait=False`` (a process starting up): nothing, the next refresh does it."""
        if not wait:
            return
        deadline = time.monotonic() + SETTLE_SECONDS
        after, moved = "", 0
        while True:
            with self._transaction() as conn:
                ids = _rewrite_unsettled(conn, after)
            moved += len(ids)
            # Fewer than a chunk: none left past ``after`` but those other settles are rewriting.
            if len(ids) < SETTLE_CHUNK or time.monotonic() >= deadline:
                break
            after = max(ids)
        if moved:
            self._vacuum_unsettled()

    def _vacuum_unsettled(self) -> None:
        """Reclaim the ids just taken from ``unsettled`` (they were in arrival order) and, if it is
        empty now and no one is writing it, cut its file back; never waits for a lock."""
        with self._connect(autocommit=True) as conn:
            conn.execute("VACUUM (SKIP_LOCKED) unsettled")

    @_translated
    def footprint(self) -> dict[str, int]:
        with self._transaction(snapshot=True) as conn:
            return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES}

    # -- estimation --------------------------------------------------------------------------

    @_translated
    def stale_windows(self, confidence: float) -> list[Stale]:
        try:
            self.settle()  # what a refresh reads first: the reports stored since the last one are rewritten
        except StoreBusy as exc:  # the counters are right as they are: it is tried again next time
            log.warning("could not rewrite the reports stored since the last settle: %s", exc)
        with self._transaction() as conn:
            return POSTGRES.stale_windows(conn, confidence)

    @_translated
    def window_counters(self, schema: str, version: int, windows: Sequence[str]) -> dict[str, WindowCounters]:
        with self._transaction(snapshot=True) as conn:
            return POSTGRES.window_counters(conn, schema, version, windows)

    @_translated
    def save_estimates(self, rows: Sequence[EstimateRow], done: Sequence[Stale]) -> None:
        by_window = estimates_by_window(rows)
        with self._transaction() as conn:
            for stale in done:
                key = (stale.schema, stale.version, stale.window)
                where = 'FROM dirty WHERE schema = %s AND version = %s AND "window" = %s'
                # Changed since it was read (or saved by a newer refresh): what we computed is
                # older than what is stored or due, so it is left for the next refresh. Deleting
                # the mark we read, and only it, decides that atomically against any ingest.
                if stale.mark is None:
                    current = conn.execute(f"SELECT 1 {where}", key).fetchone() is None
                else:
                    current = conn.execute(f"DELETE {where} AND mark = %s", (*key, stale.mark)).rowcount == 1
                if not current:
                    continue
                with conn.cursor() as cursor:
                    cursor.executemany(_SAVE_ESTIMATE, by_window.get(key, ()))
            conn.execute(NEXT_GENERATION)

    # -- retention ---------------------------------------------------------------------------

    @_translated
    def retention(self) -> Retention:
        with self._transaction() as conn:
            return POSTGRES.retention(conn)

    @_translated
    def retention_cutoff(self) -> int | None:
        with self._transaction() as conn:
            return POSTGRES.retention_cutoff(conn)

    @_translated
    def expire(self, cutoff: int) -> Expired:
        return POSTGRES.expire(self._transaction, functools.partial(self._transaction, snapshot=True), cutoff)

    # -- reading -----------------------------------------------------------------------------

    @_translated
    def estimates(self, query: EstimatesQuery) -> list[EstimateRow]:
        with self._transaction() as conn:
            return POSTGRES.estimates(conn, query)

    @_translated
    def estimates_generation(self) -> int:
        return self._one("SELECT n FROM generation")

    @_translated
    def activity(self, schema: str, version: int) -> Activity:
        with self._transaction(snapshot=True) as conn:
            return POSTGRES.activity(conn, schema, version)

    @_translated
    def wire_columns(self, schema: str, version: int, attribute: str, fields: Sequence[str], after: str, limit: int,
                     through: str | None = None) -> tuple[WireColumns, int, str | None]:
        with self._transaction() as conn:
            read, count, last, _ = POSTGRES.wire_columns(conn, schema, version, attribute, fields, after, limit,
                                                         through)
            return read, count, last

    # -- candidates --------------------------------------------------------------------------

    @_translated
    def candidates(self, schema: str, version: int) -> list[CandidateRow]:
        with self._transaction() as conn:
            return POSTGRES.candidates(conn, schema, version)

    @_translated
    def add_candidates(self, schema: str, version: int, attribute: str, values: Sequence[str], *, source: str,
                       estimated: bool, added_at: str, most: int) -> int | None:
        with self._transaction() as conn:
            return POSTGRES.add_candidates(conn, schema, version, attribute, values, source, estimated, added_at, most)

    @_translated
    def filling(self) -> list[tuple[str, int, int, int]]:
        with self._transaction() as conn:
            return POSTGRES.filling(conn)

    @_translated
    def backfill_read(self, schema: str, version: int, batch: int, reports: int) -> BackfillChunk | None:
        with self._transaction(snapshot=True) as conn:
            return POSTGRES.backfill_read(conn, schema, version, batch, reports, self._counts())

    @_translated
    def backfill_apply(self, chunk: BackfillChunk) -> bool:
        with self._transaction() as conn:
            return POSTGRES.backfill_apply(conn, chunk, self._counts(), _add)

    # -- scheduled jobs ----------------------------------------------------------------------

    @_translated
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
                self._held = self._leader.execute("SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))",
                                                  (_JOBS_LOCK,)).fetchone()[0]
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


def _rewrite_unsettled(conn: psycopg.Connection, after: str) -> list[str]:
    """One chunk of settling, in the caller's transaction: up to :data:`SETTLE_CHUNK` unsettled ids
    after ``after``, their reports deleted and inserted again in id order, less those of windows
    retention has erased. The ids taken.

    Retention reads the expired ids in a snapshot, then deletes them by id: a row rewritten by a
    transaction that commits in between is a new row that delete cannot see, and the report would
    outlive its window for good. So a chunk holds the retention table in SHARE mode: retention's
    raising of the cutoff waits for the chunks in progress (their new rows are then in its
    snapshot), and a chunk that starts later reads the new cutoff and leaves those reports out."""
    conn.execute("LOCK TABLE retention IN SHARE MODE")
    ids = [i for (i,) in conn.execute(_TAKE_UNSETTLED, (after, SETTLE_CHUNK))]
    if ids:
        conn.execute(_REWRITE_REPORTS, (ids,))
    return ids


def _insert_kept(conn: psycopg.Connection, rows: Sequence[ReportRow]) -> set[str]:
    """:func:`_insert_new` of the rows whose window retention has not erased."""
    return _insert_new(conn, POSTGRES.within_retention(conn, rows))


def _insert_new(conn: psycopg.Connection, rows: Sequence[ReportRow]) -> set[str]:
    """Insert ``rows`` in id order, skipping stored ids: the ids inserted."""
    return {i for (i,) in conn.execute(_INSERT_NEW_REPORTS, _columns(rows, len(ReportRow._fields)))}


def _add(conn: psycopg.Connection, increments: Increments) -> None:
    """Add ``increments`` (in key order: rows are locked in the same order by every writer) to the
    counters and mark their windows dirty with a fresh mark."""
    if increments.totals:
        conn.execute(_ADD_TOTALS, _columns(increments.totals, 6))
    if increments.amounts:
        amounts = [(*a[:5], float(a.amount)) for a in increments.amounts]
        conn.execute(_ADD_COUNTERS, _columns(amounts, 6))
    windows = dirty_windows(increments)
    if windows:
        conn.execute(_MARK_DIRTY, _columns(windows, 3))
