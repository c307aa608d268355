"""The SQL both stores share, behind one dialect object per database.

A :class:`Dialect` knows its driver's parameter placeholder (``?`` for sqlite3, ``%s`` for psycopg)
and runs the statements that read the same on both: the stale windows, one window's counters,
a page of estimates, a schema version's activity, and the retention walk. Each store passes the
connection (or its transaction and snapshot factories); the dialect holds no connection itself.
What differs between the databases (inserting, upserting, locking) stays in each store.

Words used in both stores: a window is *dirty* while its counters changed since its estimates
were computed, and its *dirty mark* is a number that changes at every change, so a refresh that
read a window can tell, when it saves, whether the window changed meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Sequence

from ...shared.windows import ROLLUP
from .base import Activity, EstimateRow, EstimatesQuery, Expired, ReportRow, Retention, Stale, WindowCounters

TABLES = ("schemas", "reports", "totals", "counters", "dirty", "estimates")
# Rows deleted per retention transaction: no lock is held long.
DELETE_CHUNK = 5_000
# Per expired window, the tables whose rows of that window go (the rollup keeps their sums).
WINDOW_TABLES = ("counters", "totals", "estimates", "dirty")
NEXT_GENERATION = "UPDATE generation SET n = n + 1"


@dataclass(frozen=True)
class Dialect:
    """The shared statements, written with ``param``, the driver's placeholder."""

    param: str
    share_lock: str = ""  # what holds a row read until commit (SQLite's write lock already does)

    def stale_windows(self, conn: Any, confidence: float) -> list[Stale]:
        """:meth:`Store.stale_windows` read on ``conn``: dirty windows with their marks, and windows
        estimated at another confidence (their mark None)."""
        p = self.param
        sql = ('SELECT schema, version, "window", mark FROM dirty UNION ALL '
               'SELECT DISTINCT schema, version, "window", CAST(NULL AS BIGINT) FROM estimates e '
               f'WHERE confidence != {p} AND NOT EXISTS (SELECT 1 FROM dirty d '
               'WHERE (d.schema, d.version, d."window") = (e.schema, e.version, e."window")) ORDER BY 1, 2, 3')
        return [Stale(*row) for row in conn.execute(sql, (confidence,)).fetchall()]

    def _smallest_windows_sql(self) -> str:
        """Each attribute's ``n`` in its smallest retained window of one schema version (parameters
        schema, version, :data:`ROLLUP`): what a memoised attribute's rollup interval is made from."""
        p = self.param
        return (f'SELECT attribute, min(n) FROM totals WHERE schema = {p} AND version = {p} AND "window" != {p} '
                'GROUP BY attribute')

    def estimates(self, conn: Any, query: EstimatesQuery) -> list[EstimateRow]:
        """The page of estimates ``query`` asks for, read on ``conn`` (a DB-API connection). The rollup's name sorts after every window name (a letter after
        digits, compared bytewise), so the primary key's order is the order to show, and a page is a
        range of it."""
        p = self.param
        sql = f"SELECT * FROM estimates WHERE schema = {p} AND version = {p}"
        params: list[Any] = [query.schema, query.version]
        if query.attribute is not None:
            sql += f" AND attribute = {p}"
            params.append(query.attribute)
        if query.since is not None:
            sql += f' AND "window" >= {p}'
            params.append(query.since)
        if query.until is not None:
            sql += f' AND ("window" <= {p} OR "window" = {p})'
            params += [query.until, ROLLUP]
        if query.after is not None:
            sql += f' AND ("window", rank) > ({p}, {p})'
            params += list(query.after)
        sql += f' ORDER BY "window", rank LIMIT {p}'
        params.append(query.limit)
        cursor = conn.execute(sql, params)
        names = [column[0] for column in cursor.description or ()]
        return [EstimateRow(**dict(zip(names, row))) for row in cursor]

    def window_counters(self, conn: Any, schema: str, version: int,
                        windows: Sequence[str]) -> dict[str, WindowCounters]:
        """:meth:`Store.window_counters` read on ``conn`` (inside the store's snapshot)."""
        p = self.param
        key_sql = f'schema = {p} AND version = {p} AND "window" = {p}'
        out = {}
        for window in windows:
            key = (schema, version, window)
            totals = dict(conn.execute(f"SELECT attribute, n FROM totals WHERE {key_sql}", key).fetchall())
            amounts: dict[str, dict[str, int | float]] = {}
            rows = conn.execute(f"SELECT attribute, value, amount FROM counters WHERE {key_sql}", key)
            for attribute, value, amount in rows:
                # Hits are whole numbers (kept exactly: below 2**53); sums of numeric values are not.
                whole = isinstance(amount, float) and amount.is_integer()
                amounts.setdefault(attribute, {})[value] = int(amount) if whole else amount
            smallest = {} if window != ROLLUP else dict(conn.execute(self._smallest_windows_sql(), key).fetchall())
            out[window] = WindowCounters(totals, amounts, smallest)
        return out

    def activity(self, conn: Any, schema: str, version: int) -> Activity:
        """:meth:`Store.activity` read on ``conn`` (a DB-API connection)."""
        p = self.param
        key = f"schema = {p} AND version = {p}"
        rollup = (schema, version, ROLLUP)
        carried = dict(conn.execute(f'SELECT attribute, n FROM totals WHERE {key} AND "window" = {p}',
                                    rollup).fetchall())
        windows = conn.execute(f'SELECT count(DISTINCT "window") FROM totals WHERE {key} AND "window" != {p}',
                               rollup).fetchone()[0]
        computed_at = conn.execute(f'SELECT max(computed_at) FROM estimates WHERE {key} AND "window" = {p}',
                                   rollup).fetchone()[0]
        pending = conn.execute(f"SELECT 1 FROM dirty WHERE {key} LIMIT 1", (schema, version)).fetchone()
        return Activity(carried, windows, computed_at, pending is not None)

    def retention(self, conn: Any) -> Retention:
        """:meth:`Store.retention` read on ``conn``."""
        oldest = conn.execute("SELECT min(window_end) FROM totals").fetchone()[0]  # the rollup's is NULL
        return Retention(self.retention_cutoff(conn), oldest)

    def retention_cutoff(self, conn: Any) -> int | None:
        """:meth:`Store.retention_cutoff` read on ``conn``."""
        row = conn.execute("SELECT cutoff FROM retention").fetchone()
        return None if row is None else row[0]

    def expire(self, transaction: Callable[[], ContextManager[Any]], snapshot: Callable[[], ContextManager[Any]],
               cutoff: int) -> Expired:
        """Raise the kept cutoff to ``cutoff`` (it never goes down) and delete what belongs to
        windows that ended at or before the kept cutoff (:meth:`Store.expire`): reports in chunks,
        then each window's rows in a transaction of its own, so no lock is held long.
        ``transaction()`` is the store's write transaction and ``snapshot()`` a read, each yielding
        a DB-API connection. The cutoff is kept first, so an ingest that reads it in its own
        transaction refuses those windows from then on.

        ``reports`` has no index on ``window_end``: it cost every stored report a second random page
        write, for a job that runs once an hour. So the expired reports are found by walking the id key
        in chunks, each read outside the write lock and then deleted by id; the walk runs only when a
        window is due (``totals`` is indexed by window end, and a window's totals go after its reports).
        """
        p = self.param
        with transaction() as conn:
            conn.execute(f"INSERT INTO retention (id, cutoff) VALUES (1, {p}) ON CONFLICT (id) DO UPDATE SET cutoff = "
                         "CASE WHEN excluded.cutoff > retention.cutoff THEN excluded.cutoff ELSE retention.cutoff END",
                         (cutoff,))
            cutoff = conn.execute("SELECT cutoff FROM retention").fetchone()[0]
        with snapshot() as conn:
            due = conn.execute(f"SELECT 1 FROM totals WHERE window_end <= {p} LIMIT 1", (cutoff,)).fetchone()
        reports, after = 0, ""
        while due:
            with snapshot() as conn:
                ids = [i for (i,) in conn.execute(f"SELECT id FROM reports WHERE id > {p} AND window_end <= {p} "
                                                  f"ORDER BY id LIMIT {p}", (after, cutoff, DELETE_CHUNK))]
            if ids:
                with transaction() as conn:
                    reports += conn.execute(f"DELETE FROM reports WHERE id IN ({', '.join([p] * len(ids))})",
                                            ids).rowcount
                after = ids[-1]
            due = len(ids) == DELETE_CHUNK
        with transaction() as conn:
            windows = conn.execute(f'SELECT DISTINCT schema, version, "window" FROM totals WHERE window_end <= {p}',
                                   (cutoff,)).fetchall()
        for key in windows:  # a window per transaction: its rows are few (sparse counters)
            with transaction() as conn:
                for table in WINDOW_TABLES:
                    conn.execute(f'DELETE FROM {table} WHERE schema = {p} AND version = {p} AND "window" = {p}',
                                 key)
                conn.execute(NEXT_GENERATION)
        return Expired(reports, len(windows))

    def within_retention(self, conn: Any, rows: Sequence[ReportRow]) -> list[ReportRow]:
        """``rows`` less those of windows the kept cutoff has erased, read in the ingest's own
        transaction and held (``share_lock``) until it commits: a retention run raises the
        cutoff only after the ingests that read the old one are stored, so its walk finds their
        reports, and a retry of an erased report is never counted twice."""
        row = conn.execute("SELECT cutoff FROM retention" + self.share_lock).fetchone()
        return list(rows) if row is None else [r for r in rows if r.window_end > row[0]]


SQLITE = Dialect("?")
POSTGRES = Dialect("%s", share_lock=" FOR SHARE")
