"""What both stores do the same way, whatever their SQL dialect: one copy of each.

- :func:`increments`: what reports add to the counters, and :func:`with_rollup`: the same added
  to the rollup window;
- :func:`translating`: a driver's errors leave a store's methods as the store's own;
- :func:`schema_key_ok`: the names and versions a schema lookup can match at all;
- the SQL both dialects share, written with a placeholder mark (``?`` for SQLite, ``%s`` for
  psycopg): :func:`stale_windows_sql`, :func:`smallest_windows_sql`, :func:`estimates_sql`,
  :func:`activity_sql`, and the
  retention job, :func:`expire`.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any, Callable, ContextManager, Hashable, Sequence, TypeVar

from ...shared.reports import Report
from ...shared.schema import MAX_VERSION, NAME_RE, Schema
from ...shared.windows import ROLLUP
from .base import (Activity, AmountRow, EstimateRow, EstimatesQuery, Expired, Increments, ReportRow, TotalRow,
                   WindowCounters)
from .errors import StoreError

TABLES = ("schemas", "reports", "totals", "counters", "dirty", "estimates")
# Rows deleted per retention transaction: no lock is held long.
DELETE_CHUNK = 5_000
# Per expired window, the tables whose rows of that window go (the rollup keeps their sums).
WINDOW_TABLES = ("counters", "totals", "estimates", "dirty")
NEXT_GENERATION = "UPDATE generation SET n = n + 1"


def with_rollup(increments: Increments) -> Increments:
    """``increments`` summed per counter (a group of batches touches the same few), plus the same
    added to each schema version's rollup window; in key order, so that writers that lock the
    rows one after another all lock them in the same order."""
    totals: Counter[tuple[str, int, str, str]] = Counter()
    ends: dict[tuple[str, int, str, str], int | None] = {}
    amounts: Counter[tuple[str, int, str, str, str]] = Counter()
    for t in increments.totals:
        for window, end in ((t.window, t.window_end), (ROLLUP, None)):
            key = (t.schema, t.version, window, t.attribute)
            totals[key] += t.n
            ends[key] = end
    for a in increments.amounts:
        amounts[(a.schema, a.version, a.window, a.attribute, a.value)] += a.amount
        amounts[(a.schema, a.version, ROLLUP, a.attribute, a.value)] += a.amount
    return Increments([TotalRow(*key, totals[key], ends[key]) for key in sorted(totals)],
                      [AmountRow(*key, amounts[key]) for key in sorted(amounts) if amounts[key]])


T = TypeVar("T")


def translating(classify: Callable[[Any, Exception], StoreError | None]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A decorator for a store's methods: an exception that ``classify(store, exc)`` maps to a
    store error leaves as that error (the driver's chained to it); any other goes on as it is."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> T:
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:
                error = classify(self, exc)
                if error is None:
                    raise
                raise error from exc

        return wrapper

    return decorate


def increments(reports: Sequence[Report], window_ends: Sequence[int], weights: Sequence[int] | None = None,
               ) -> Increments:
    """The counter increments of ``reports`` (whose windows end at ``window_ends``), pre-aggregated;
    with ``weights``, report ``i`` stands for ``weights[i]`` reports alike.

    Every attribute a report carries adds one to that attribute's ``n`` in the report's window;
    each value key its mechanism's statistics name (:meth:`Mechanism.statistics`) gets its
    amount. Only non-zero amounts become rows: a report adds a few rows per attribute however
    many categories it has. Reports are first counted by wire value, so each distinct wire value
    is decoded once, not once a report.
    """
    wire: Counter[tuple[str, int, str, str, Hashable]] = Counter()
    schemas: dict[tuple[str, int], Schema] = {}
    ends: dict[str, int] = {}
    for report, end, weight in zip(reports, window_ends, weights or [1] * len(reports)):
        s = report.schema
        schemas[(s.name, s.version)] = s
        ends[report.window] = end
        for name, reported in report.values.items():
            wire[(s.name, s.version, report.window, name,
                  tuple(reported) if type(reported) is list else reported)] += weight  # OUE vectors as tuples
    n: Counter[tuple[str, int, str, str]] = Counter()
    amounts: Counter[tuple[str, int, str, str, str]] = Counter()
    for (schema, version, window, name, reported), count in wire.items():
        attribute = schemas[(schema, version)].by_name[name]
        n[(schema, version, window, name)] += count
        for key, amount in attribute.mech.statistics(attribute, reported):
            amounts[(schema, version, window, name, key)] += amount * count
    return Increments([TotalRow(*key, count, ends[key[2]]) for key, count in n.items()],
                      [AmountRow(*key, amount) for key, amount in amounts.items() if amount])


def dirty_windows(increments: Increments) -> list[tuple[str, int, str]]:
    """The windows ``increments`` change, in key order."""
    return sorted({(t.schema, t.version, t.window) for t in increments.totals})


def schema_key_ok(name: object, version: int | None) -> bool:
    """False for a name or version no published schema can have (nothing to look up)."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None and (
        version is None or 1 <= version <= MAX_VERSION)


def stale_windows_sql(mark: str) -> str:
    """Dirty windows with their marks, and windows estimated at another confidence (one parameter)."""
    return ('SELECT schema, version, "window", mark FROM dirty UNION ALL '
            'SELECT DISTINCT schema, version, "window", CAST(NULL AS BIGINT) FROM estimates e WHERE confidence != ' + mark
            + ' AND NOT EXISTS (SELECT 1 FROM dirty d WHERE (d.schema, d.version, d."window") '
            '= (e.schema, e.version, e."window")) ORDER BY 1, 2, 3')


def smallest_windows_sql(mark: str) -> str:
    """Each attribute's ``n`` in its smallest retained window of one schema version (parameters
    schema, version, :data:`ROLLUP`): what a memoised attribute's rollup interval is made from."""
    return (f'SELECT attribute, min(n) FROM totals WHERE schema = {mark} AND version = {mark} AND "window" != {mark} '
            'GROUP BY attribute')


def read_estimates(conn: Any, mark: str, query: EstimatesQuery) -> list[EstimateRow]:
    """The page of estimates ``query`` asks for, read on ``conn`` (a DB-API connection whose
    parameter mark is ``mark``). The rollup's name sorts after every window name (a letter after
    digits, compared bytewise), so the primary key's order is the order to show, and a page is a
    range of it."""
    sql = f"SELECT * FROM estimates WHERE schema = {mark} AND version = {mark}"
    params: list[Any] = [query.schema, query.version]
    if query.attribute is not None:
        sql += f" AND attribute = {mark}"
        params.append(query.attribute)
    if query.since is not None:
        sql += f' AND "window" >= {mark}'
        params.append(query.since)
    if query.until is not None:
        sql += f' AND ("window" <= {mark} OR "window" = {mark})'
        params += [query.until, ROLLUP]
    if query.after is not None:
        sql += f' AND ("window", rank) > ({mark}, {mark})'
        params += list(query.after)
    sql += f' ORDER BY "window", rank LIMIT {mark}'
    params.append(query.limit)
    cursor = conn.execute(sql, params)
    names = [column[0] for column in cursor.description or ()]
    return [EstimateRow(**dict(zip(names, row))) for row in cursor]


def read_window_counters(conn: Any, mark: str, schema: str, version: int,
                         windows: Sequence[str]) -> dict[str, WindowCounters]:
    """:meth:`Store.window_counters` read on ``conn`` (inside the store's snapshot)."""
    key_sql = f'schema = {mark} AND version = {mark} AND "window" = {mark}'
    out = {}
    for window in windows:
        key = (schema, version, window)
        totals = dict(conn.execute(f"SELECT attribute, n FROM totals WHERE {key_sql}", key).fetchall())
        amounts: dict[str, dict[str, int | float]] = {}
        for attribute, value, amount in conn.execute(f"SELECT attribute, value, amount FROM counters WHERE {key_sql}",
                                                     key):
            # Hits are whole numbers (kept exactly: below 2**53); sums of numeric values are not.
            whole = isinstance(amount, float) and amount.is_integer()
            amounts.setdefault(attribute, {})[value] = int(amount) if whole else amount
        smallest = {} if window != ROLLUP else dict(conn.execute(smallest_windows_sql(mark), key).fetchall())
        out[window] = WindowCounters(totals, amounts, smallest)
    return out


def rows_by_window(rows: Sequence[EstimateRow]) -> dict[tuple[str, int, str], list[EstimateRow]]:
    """Estimate rows grouped by their (schema, version, window), for :meth:`Store.save_estimates`."""
    out: dict[tuple[str, int, str], list[EstimateRow]] = {}
    for row in rows:
        out.setdefault((row.schema, row.version, row.window), []).append(row)
    return out


def read_activity(conn: Any, mark: str, schema: str, version: int) -> Activity:
    """:meth:`Store.activity` read on ``conn`` (a DB-API connection whose parameter mark is ``mark``)."""
    key = f"schema = {mark} AND version = {mark}"
    rollup = (schema, version, ROLLUP)
    carried = dict(conn.execute(f'SELECT attribute, n FROM totals WHERE {key} AND "window" = {mark}',
                                rollup).fetchall())
    windows = conn.execute(f'SELECT count(DISTINCT "window") FROM totals WHERE {key} AND "window" != {mark}',
                           rollup).fetchone()[0]
    computed_at = conn.execute(f'SELECT max(computed_at) FROM estimates WHERE {key} AND "window" = {mark}',
                               rollup).fetchone()[0]
    pending = conn.execute(f"SELECT 1 FROM dirty WHERE {key} LIMIT 1", (schema, version)).fetchone()
    return Activity(carried, windows, computed_at, pending is not None)


def expire(transaction: Callable[[], ContextManager[Any]], snapshot: Callable[[], ContextManager[Any]], mark: str,
           cutoff: int) -> Expired:
    """Delete what belongs to windows that ended at or before ``cutoff`` (:meth:`Store.expire`):
    reports in chunks, then each window's rows in a transaction of its own, so no lock is held
    long. ``transaction()`` is the store's write transaction and ``snapshot()`` a read, each
    yielding a DB-API connection.

    ``reports`` has no index on ``window_end``: it cost every stored report a second random page
    write, for a job that runs once an hour. So the expired reports are found by walking the id key
    in chunks, each read outside the write lock and then deleted by id; the walk runs only when a
    window is due (``totals`` is indexed by window end, and a window's totals go after its reports).
    """
    with snapshot() as conn:
        due = conn.execute(f"SELECT 1 FROM totals WHERE window_end <= {mark} LIMIT 1", (cutoff,)).fetchone()
    reports, after = 0, ""
    while due:
        with snapshot() as conn:
            ids = [i for (i,) in conn.execute(f"SELECT id FROM reports WHERE id > {mark} AND window_end <= {mark} "
                                              f"ORDER BY id LIMIT {mark}", (after, cutoff, DELETE_CHUNK))]
        if ids:
            with transaction() as conn:
                reports += conn.execute(f"DELETE FROM reports WHERE id IN ({', '.join([mark] * len(ids))})",
                                        ids).rowcount
            after = ids[-1]
        due = len(ids) == DELETE_CHUNK
    with transaction() as conn:
        windows = conn.execute(f'SELECT DISTINCT schema, version, "window" FROM totals WHERE window_end <= {mark}',
                               (cutoff,)).fetchall()
    for key in windows:  # a window per transaction: its rows are few (sparse counters)
        with transaction() as conn:
            for table in WINDOW_TABLES:
                conn.execute(f'DELETE FROM {table} WHERE schema = {mark} AND version = {mark} AND "window" = {mark}',
                             key)
            conn.execute(NEXT_GENERATION)
    return Expired(reports, len(windows))
