"""What can be done inside one transaction: :class:`Tx`, the SQL both databases share.

A :class:`Tx` wraps the connection of one transaction that :meth:`.store.Store.run_tx` opened, and
its methods are the statements the aggregator runs, each written once with ``param``, the
driver's placeholder (``?`` for sqlite3, ``%s`` for psycopg). What differs between the databases
(inserting many rows at once, reading a page of reports' numeric form, locking clauses) is a class attribute or a
method that :class:`.sqlite.SQLiteTx` and :class:`.postgres.PostgresTx` give. A transaction
never commits, retries or translates errors itself: the door (``run_tx``) does.

Words used here: a window is *dirty* while its counters changed since its estimates were
computed, and its *dirty mark* is a number that changes at every change, so a refresh that read a
window can tell, when it saves, whether the window changed meanwhile.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Iterable, Sequence

import numpy as np

from ...shared.schema import Schema
from ...shared.windows import ROLLUP
from .rows import (BATCH_N_PREFIX, Activity, BreakdownEstimateRow, BreakdownsQuery, CandidateBatch,
                   CandidateRow, CrowdRow, EstimateRow, EstimatesQuery, Increments, Known, ReportRow, Retention, Stale,
                   StoredBreakdown, StoredKey, WindowCounters, WireColumns, estimates_by_window, schema_key_ok)
from .wire import Layout, NumericPage, layout

TABLES = ("schemas", "reports", "totals", "counters", "dirty", "estimates", "candidates", "backfills", "breakdowns",
          "breakdown_counters", "breakdown_estimates", "crowds", "ohttp_keys")
# Ids per "IN (...)" list (SQLite binds at most 32,766 parameters).
IN_CHUNK = 500
# Per expired window, the tables whose rows of that window go (the rollup keeps their sums).
WINDOW_TABLES = ("counters", "totals", "estimates", "dirty", "breakdown_counters", "breakdown_estimates", "crowds")
ESTIMATE_COLUMNS = EstimateRow._fields
# Adding how a window's reports arrived (:class:`CrowdRow`, one row per window and batch): the
# reports added up, the smaller crowd kept (NULL is none: coalesce makes min() skip it), as
# :func:`.rollup.merge_crowds` does. The VALUES (or SELECT) it follows is each backend's.
CROWDS_UPSERT = (' ON CONFLICT (schema, version, "window") DO UPDATE SET relayed = crowds.relayed + excluded.relayed, '
                 "direct = crowds.direct + excluded.direct, crowd = CASE WHEN excluded.crowd IS NULL THEN crowds.crowd "
                 "WHEN crowds.crowd IS NULL OR excluded.crowd < crowds.crowd THEN excluded.crowd ELSE crowds.crowd END")
BREAKDOWN_ESTIMATE_COLUMNS = BreakdownEstimateRow._fields


class Tx:
    """One transaction's statements on ``conn`` (a DB-API connection)."""

    param: ClassVar[str] = "?"
    share_lock: ClassVar[str] = ""  # what holds a row read until commit (SQLite's write lock already does)
    update_lock: ClassVar[str] = ""  # what holds a row read until commit against share_lock readers too
    new_mark: ClassVar[str] = "random()"  # a dirty mark never used before
    keys_lock: ClassVar[str | None] = None  # what keeps the keys from changing until commit (SQLite's write lock does)

    def __init__(self, conn: Any):
        self.conn = conn

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params).fetchall())

    def _in(self, values: Sequence[Any]) -> str:
        return ", ".join([self.param] * len(values))

    # -- what differs between the databases ---------------------------------------------------

    def insert_new(self, rows: Sequence[ReportRow]) -> set[str]:
        """Insert ``rows`` in id order, skipping stored ids: the ids inserted (one statement checks
        and inserts, so no id goes in twice)."""
        raise NotImplementedError

    def add(self, increments: Increments) -> None:
        """Add ``increments`` (summed, in key order: :func:`.rollup.with_rollup`) to the counters and
        mark their windows dirty with a fresh mark."""
        raise NotImplementedError

    # -- schemas -------------------------------------------------------------------------------

    def check(self) -> None:
        """A read the database must answer."""
        self._one("SELECT count(*) FROM schemas")

    def published_at(self, name: str, version: int) -> str | None:
        """When schema ``name`` version ``version`` was published (ISO 8601 UTC), or None."""
        if not schema_key_ok(name, version):
            return None
        p = self.param
        published: str | None = self._one(f"SELECT published_at FROM schemas WHERE name = {p} AND version = {p}",
                                          (name, version))
        return published

    def get_schema(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        """The definition of ``name`` at ``version`` (latest if None), or None if unpublished."""
        if not schema_key_ok(name, version):
            return None
        p = self.param
        if version is None:
            text = self._one(f"SELECT definition FROM schemas WHERE name = {p} ORDER BY version DESC LIMIT 1", (name,))
        else:
            text = self._one(f"SELECT definition FROM schemas WHERE name = {p} AND version = {p}", (name, version))
        return None if text is None else json.loads(text)

    def latest_schemas(self) -> list[dict[str, Any]]:
        """The latest version of every schema, by name."""
        rows = self._all("SELECT definition FROM schemas s WHERE version = "
                         "(SELECT max(version) FROM schemas WHERE name = s.name) ORDER BY name")
        return [json.loads(definition) for (definition,) in rows]

    def schema_versions(self, name: str) -> list[int]:
        """Every published version of ``name``, oldest first."""
        return [v for (v,) in self._all(f"SELECT version FROM schemas WHERE name = {self.param} ORDER BY version",
                                        (name,))]

    def publish_schema(self, definition: dict[str, Any], published_at: str,
                       breakdowns: Sequence[tuple[str, str]] = ()) -> str:
        """Store a derived schema and its listed ``breakdowns`` (``(of, by)``, numbered in order; kept
        apart from the definition, which clients fetch): ``"created"``, ``"identical"`` (already
        stored with those listed breakdowns) or ``"conflict"``."""
        p = self.param
        name, version = definition["name"], definition["version"]
        created = self._one(f"INSERT INTO schemas (name, version, definition, published_at) VALUES ({p}, {p}, {p}, {p}) "
                            "ON CONFLICT DO NOTHING RETURNING 1", (name, version, json.dumps(definition), published_at))
        if created:
            self.conn.cursor().executemany(
                "INSERT INTO breakdowns (schema, version, id, of_attribute, by_attribute, source, added_at) "
                f"VALUES ({p}, {p}, {p}, {p}, {p}, 'listed', {p})",
                [(name, version, i, of, by, published_at) for i, (of, by) in enumerate(breakdowns)])
            return "created"
        stored = self._one(f"SELECT definition FROM schemas WHERE name = {p} AND version = {p}", (name, version))
        listed = [(b.of, b.by) for b in self.breakdowns(name, version) if b.source == "listed"]
        same = json.loads(stored) == definition and listed == [tuple(b) for b in breakdowns]
        return "identical" if same else "conflict"

    def breakdowns(self, schema: str, version: int) -> list[StoredBreakdown]:
        """The breakdowns of a schema version, listed and added, by number, each added one with its
        back-fill's watermark."""
        p = self.param
        return [StoredBreakdown(*row) for row in self._all(
            "SELECT d.id, d.of_attribute, d.by_attribute, d.source, d.added_at, d.batch, b.watermark "
            "FROM breakdowns d LEFT JOIN backfills b ON b.batch = d.batch "
            f"WHERE d.schema = {p} AND d.version = {p} ORDER BY d.id", (schema, version))]

    def add_breakdown(self, schema: str, version: int, of: str, by: str, added_at: str) -> bool:
        """Add the breakdown of ``of`` by ``by`` to a schema version, to be back-filled (a batch of
        its own, watermark ``''``: no report counted yet); False if it is there. The schema
        version's row is locked first (``update_lock``): a report is counted for it by ingest or by
        the back-fill, never both."""
        p = self.param
        self.lock_schema(schema, version)
        if any((b.of, b.by) == (of, by) for b in self.breakdowns(schema, version)):
            return False
        batch = self._one(f"INSERT INTO backfills (schema, version, attribute, watermark) "
                          f"VALUES ({p}, {p}, NULL, '') RETURNING batch", (schema, version))
        number = self._one(f"SELECT coalesce(max(id), -1) + 1 FROM breakdowns WHERE schema = {p} AND version = {p}",
                           (schema, version))
        self.conn.execute("INSERT INTO breakdowns (schema, version, id, of_attribute, by_attribute, source, added_at, "
                          f"batch) VALUES ({p}, {p}, {p}, {p}, {p}, 'added', {p}, {p})",
                          (schema, version, number, of, by, added_at, batch))
        self.candidates_moved(schema, version)
        return True

    def footprint(self) -> dict[str, int]:
        """Rows per table (full counts: for operators and the bench, never on a request's path)."""
        return {table: self._one(f"SELECT count(*) FROM {table}") for table in TABLES}

    # -- ingest ----------------------------------------------------------------------------------

    # Exactly once for questions added later: a batch's counters hold the supports of the stored
    # reports with id up to its watermark. Counting a report for it (ingest: iff its id is at most
    # the watermark, or the batch is complete) and moving the watermark (the back-fill: count the
    # stored reports up to the new one) both run while the schema version's row is locked: shared
    # by ingest (``share_lock``; under SQLite's write lock anyway), exclusive by the back-fill and by
    # adding (``update_lock``). So no report is stored between a back-fill's read and its new
    # watermark without ingest seeing it.

    def known(self, pairs: Iterable[tuple[str, int]], cache: dict[tuple[str, int], Known]
              ) -> dict[tuple[str, int], Known]:
        """The counted candidates of each schema version in ``pairs``, with the schema's row locked
        (``share_lock``) until commit; ``cache`` keeps what was read, reloaded when a schema
        version's mark moved."""
        p = self.param
        out = {}
        for schema, version in sorted(set(pairs)):
            mark = self._one(f"SELECT candidates_mark FROM schemas WHERE name = {p} AND version = {p}"
                             + self.share_lock, (schema, version))
            if mark is None:
                continue
            known = cache.get((schema, version))
            if known is None or known.mark != mark:
                known = cache[(schema, version)] = self._read_known(schema, version, mark)
            out[(schema, version)] = known
        return out

    def _read_known(self, schema: str, version: int, mark: int) -> Known:
        """The batches of estimated candidates of a schema version: each one being back-filled on
        its own, the complete ones of an attribute together (they count every report)."""
        p = self.param
        rows = self._all(
            "SELECT b.batch, b.attribute, b.watermark, c.value FROM backfills b JOIN candidates c "
            "ON (c.schema, c.version, c.attribute, c.batch) = (b.schema, b.version, b.attribute, b.batch) "
            f"WHERE b.schema = {p} AND b.version = {p} ORDER BY b.attribute, c.rank", (schema, version))
        filling: dict[int, tuple[str, str, list[str]]] = {}
        complete: dict[str, list[str]] = {}
        for batch, attribute, watermark, value in rows:
            if watermark is None:
                complete.setdefault(attribute, []).append(value)
            else:
                filling.setdefault(batch, (attribute, watermark, []))[2].append(value)
        batches = [CandidateBatch(-1, a, tuple(values), None) for a, values in complete.items()]
        batches += [CandidateBatch(b, a, tuple(values), w) for b, (a, w, values) in sorted(filling.items())]
        return Known(mark, tuple(batches), tuple(self.breakdowns(schema, version)))

    def crowds(self, schema: str, version: int) -> dict[str, CrowdRow]:
        """How the reports of each window of a schema version arrived (the rollup's too), by window:
        a row per retained window, so reading them all costs as little as a page of estimates."""
        p = self.param
        return {row[2]: CrowdRow(*row) for row in self._all(
            f"SELECT {self._columns(CrowdRow._fields)} FROM crowds WHERE schema = {p} AND version = {p}",
            (schema, version))}

    def epsilons_due(self, delta: float) -> list[CrowdRow]:
        """The windows (the rollups among them) whose crowd has no central epsilon computed at
        ``delta`` for it yet: a relay batch made it smaller, or LDP_SHUFFLE_DELTA changed."""
        return [CrowdRow(*row) for row in self._all(
            f"SELECT {self._columns(CrowdRow._fields)} FROM crowds WHERE crowd IS NOT NULL AND (epsilon_crowd IS NULL "
            f"OR epsilon_crowd != crowd OR epsilon_delta != {self.param}) ORDER BY schema, version, \"window\"",
            (delta,))]

    def save_epsilons(self, rows: Sequence[CrowdRow]) -> None:
        """Keep each row's computed ``epsilon_*`` unless its window's crowd changed since it was read;
        a new generation (what is derived from the rows, the dashboard's pages, is made again)."""
        p = self.param
        self.conn.cursor().executemany(
            f"UPDATE crowds SET epsilon_crowd = {p}, epsilon_delta = {p}, epsilon_shuffled = {p} "
            f'WHERE schema = {p} AND version = {p} AND "window" = {p} AND crowd = {p}',
            [(r.epsilon_crowd, r.epsilon_delta, r.epsilon_shuffled, r.schema, r.version, r.window, r.epsilon_crowd)
             for r in rows])
        self.next_generation()

    # -- Oblivious HTTP keys ---------------------------------------------------------------------

    def ohttp_keys(self, *, lock: bool = False) -> list[StoredKey]:
        """Every stored key (those whose private half is gone too), newest first. ``lock``: no other
        transaction changes them until this one ends (making the first key, rotating)."""
        if lock and self.keys_lock is not None:
            self.conn.execute(self.keys_lock)
        return [StoredKey(i, bytes(pub), None if priv is None else bytes(priv), created, retired)
                for i, pub, priv, created, retired in self._all(
                    "SELECT key_id, public_key, private_key, created, retired FROM ohttp_keys "
                    "ORDER BY created DESC, key_id DESC")]

    def add_ohttp_key(self, key: StoredKey, retire_at: int) -> None:
        """Store ``key`` as the current one (replacing the key of its id, which the caller found no
        longer accepted) and retire the current one at ``retire_at``."""
        p = self.param
        self.conn.execute(f"UPDATE ohttp_keys SET retired = {p} WHERE retired IS NULL", (retire_at,))
        self.conn.execute(f"DELETE FROM ohttp_keys WHERE key_id = {p}", (key.key_id,))
        self.conn.execute("INSERT INTO ohttp_keys (key_id, public_key, private_key, created, retired) "
                          f"VALUES ({p}, {p}, {p}, {p}, {p})", key)

    def forget_private_keys(self, retired_before: int) -> list[int]:
        """Delete the private half of the keys retired at or before ``retired_before``: the ids."""
        p = self.param
        return sorted(i for (i,) in self._all(
            f"UPDATE ohttp_keys SET private_key = NULL WHERE retired <= {p} AND private_key IS NOT NULL RETURNING key_id",
            (retired_before,)))

    # -- estimation ------------------------------------------------------------------------------

    def stale_windows(self, confidence: float) -> list[Stale]:
        """Windows (the rollup included) whose counters changed since their estimates were computed
        (with their marks), or whose estimates are at another confidence level (mark None); by
        schema and version."""
        p = self.param
        sql = ('SELECT schema, version, "window", mark FROM dirty UNION ALL '
               'SELECT DISTINCT schema, version, "window", CAST(NULL AS BIGINT) FROM estimates e '
               f'WHERE confidence != {p} AND NOT EXISTS (SELECT 1 FROM dirty d '
               'WHERE (d.schema, d.version, d."window") = (e.schema, e.version, e."window")) ORDER BY 1, 2, 3')
        return [Stale(*row) for row in self._all(sql, (confidence,))]

    def window_counters(self, schema: str, version: int, windows: Sequence[str]) -> dict[str, WindowCounters]:
        """The counters of ``windows`` of one schema version (read from one snapshot: run it in a
        read transaction). For the rollup also each attribute's ``n`` in its smallest retained
        window (what a memoised attribute's rollup interval is made from)."""
        p = self.param
        key_sql = f'schema = {p} AND version = {p} AND "window" = {p}'
        out = {}
        for window in windows:
            key = (schema, version, window)
            totals = dict(self._all(f"SELECT attribute, n FROM totals WHERE {key_sql}", key))
            amounts: dict[str, dict[str, int | float]] = {}
            for attribute, value, amount in self._all(f"SELECT attribute, value, amount FROM counters WHERE {key_sql}",
                                                      key):
                # Hits are whole numbers (kept exactly: below 2**53); sums of numeric values are not.
                whole = isinstance(amount, float) and amount.is_integer()
                amounts.setdefault(attribute, {})[value] = int(amount) if whole else amount
            smallest = {} if window != ROLLUP else dict(self._all(
                f'SELECT attribute, min(n) FROM totals WHERE schema = {p} AND version = {p} AND "window" != {p} '
                "GROUP BY attribute", key))
            sums: dict[int, dict[tuple[str, str], int | float]] = {}
            for breakdown, of_key, by_key, amount in self._all(
                    f"SELECT breakdown, of_key, by_key, amount FROM breakdown_counters WHERE {key_sql}", key):
                whole = isinstance(amount, float) and amount.is_integer()
                sums.setdefault(breakdown, {})[(of_key, by_key)] = int(amount) if whole else amount
            out[window] = WindowCounters(totals, amounts, smallest, sums)
        return out

    def window_estimates(self, schema: str, version: int, windows: Sequence[str],
                         columns: Sequence[str]) -> dict[str, dict[int, tuple[Any, ...]]]:
        """``columns`` of the stored estimates of ``windows`` of one schema version, per window by rank
        (a plain tuple each, no object per row: a refresh reads them all to write only the rows
        that changed)."""
        p = self.param
        read = ", ".join(f'"{c}"' for c in ("rank", *columns))
        return {window: {row[0]: row[1:] for row in self._all(
            f'SELECT {read} FROM estimates WHERE schema = {p} AND version = {p} AND "window" = {p}',
            (schema, version, window))} for window in windows}

    def window_breakdown_estimates(self, schema: str, version: int,
                                   windows: Sequence[str]) -> dict[str, dict[int, BreakdownEstimateRow]]:
        """The stored breakdown rows of ``windows`` of one schema version, per window by rank: what a
        refresh compares its rows with."""
        p = self.param
        out: dict[str, dict[int, BreakdownEstimateRow]] = {}
        for window in windows:
            rows = self._all(f"SELECT {self._columns(BREAKDOWN_ESTIMATE_COLUMNS)} FROM breakdown_estimates "
                             f'WHERE schema = {p} AND version = {p} AND "window" = {p}', (schema, version, window))
            out[window] = {r.rank: r for r in map(BreakdownEstimateRow._make, rows)}
        return out

    def save_estimates(self, rows: Sequence[EstimateRow], done: Sequence[Stale],
                       breakdown_rows: Sequence[BreakdownEstimateRow] = ()) -> None:
        """Replace estimates with ``rows`` and breakdown rows with ``breakdown_rows``; clear the
        ``done`` windows' dirty marks unless they changed since they were read (then what was
        computed is older than what is due, so it is left for the next refresh). Deleting the mark
        that was read, and only it, decides that atomically against any ingest."""
        p = self.param
        by_window = estimates_by_window(rows)
        breakdowns_by_window = estimates_by_window(breakdown_rows)
        where = f'FROM dirty WHERE schema = {p} AND version = {p} AND "window" = {p}'
        upsert, upsert_breakdown = self._upsert("estimates", ESTIMATE_COLUMNS), self._upsert(
            "breakdown_estimates", BREAKDOWN_ESTIMATE_COLUMNS)
        for stale in done:
            key = (stale.schema, stale.version, stale.window)
            if stale.mark is None:
                current = self._one(f"SELECT 1 {where}", key) is None
            else:
                current = self.conn.execute(f"DELETE {where} AND mark = {p}", (*key, stale.mark)).rowcount == 1
            if current:
                self.conn.cursor().executemany(upsert, by_window.get(key, ()))
                self.conn.cursor().executemany(upsert_breakdown, breakdowns_by_window.get(key, ()))
        self.next_generation()

    def _upsert(self, table: str, columns: Sequence[str]) -> str:
        """Insert a row of ``columns`` (the key first: schema, version, window, rank), or replace the
        stored row's other columns."""
        return (f"INSERT INTO {table} ({self._columns(columns)}) VALUES ({', '.join([self.param] * len(columns))}) "
                'ON CONFLICT (schema, version, "window", rank) DO UPDATE SET '
                + ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c not in ("schema", "version", "window",
                                                                                     "rank")))

    @staticmethod
    def _columns(columns: Sequence[str]) -> str:
        return ", ".join(f'"{c}"' for c in columns)

    def next_generation(self) -> None:
        """Stored estimates changed: what was derived from them is stale."""
        self.conn.execute("UPDATE generation SET n = n + 1")

    # -- retention -------------------------------------------------------------------------------

    def retention(self) -> Retention:
        """The kept retention cutoff and the oldest retained window's end."""
        return Retention(self.cutoff(), self._one("SELECT min(window_end) FROM totals"))

    def cutoff(self, *, lock: bool = False) -> int | None:
        """The kept retention cutoff (Unix seconds; None before retention first ran): windows that
        ended at or before it are erased. ``lock``: held (``share_lock``) until the transaction
        ends, so a retention run raises it only after the transactions that read the old one (an
        ingest, a back-fill) are stored: its walk finds what they stored, and a retry of an erased
        report is never counted twice."""
        cutoff: int | None = self._one("SELECT cutoff FROM retention" + (self.share_lock if lock else ""))
        return cutoff

    def raise_cutoff(self, cutoff: int) -> int:
        """Raise the kept cutoff to ``cutoff`` (it never goes down): the cutoff kept now."""
        self.conn.execute(
            f"INSERT INTO retention (id, cutoff) VALUES (1, {self.param}) ON CONFLICT (id) DO UPDATE SET cutoff = "
            "CASE WHEN excluded.cutoff > retention.cutoff THEN excluded.cutoff ELSE retention.cutoff END", (cutoff,))
        return int(self._one("SELECT cutoff FROM retention"))

    def any_window_due(self, cutoff: int) -> bool:
        return self._one(f"SELECT 1 FROM totals WHERE window_end <= {self.param} LIMIT 1", (cutoff,)) is not None

    def expired_report_ids(self, after: str, cutoff: int, limit: int) -> list[str]:
        """Ids of reports of windows that ended at or before ``cutoff``, after ``after``, in id order."""
        p = self.param
        return [i for (i,) in self._all(f"SELECT id FROM reports WHERE id > {p} AND window_end <= {p} "
                                        f"ORDER BY id LIMIT {p}", (after, cutoff, limit))]

    def delete_reports(self, ids: Sequence[str]) -> int:
        return int(self.conn.execute(f"DELETE FROM reports WHERE id IN ({self._in(ids)})", list(ids)).rowcount)

    def expired_windows(self, cutoff: int) -> list[tuple[str, int, str]]:
        return [tuple(r) for r in self._all(
            f'SELECT DISTINCT schema, version, "window" FROM totals WHERE window_end <= {self.param}', (cutoff,))]

    def delete_window(self, key: tuple[str, int, str]) -> None:
        """A window's counters, totals, estimates and dirty mark (the rollup keeps their sums)."""
        p = self.param
        for table in WINDOW_TABLES:
            self.conn.execute(f'DELETE FROM {table} WHERE schema = {p} AND version = {p} AND "window" = {p}', key)
        self.next_generation()

    # -- reading ---------------------------------------------------------------------------------

    def estimates(self, query: EstimatesQuery) -> list[EstimateRow]:
        """The page of estimates ``query`` asks for: windows in time order with the rollup last, values
        in schema order. The rollup's name sorts after every window name (a letter after digits,
        compared bytewise), so the primary key's order is the order to show, and a page is a range of it."""
        p = self.param
        sql = f"SELECT * FROM estimates WHERE schema = {p} AND version = {p}"
        params: list[Any] = [query.schema, query.version]
        if query.attribute is not None:
            sql += f" AND attribute = {p}"
            params.append(query.attribute)
        page, page_params = self._page(query.since, query.until, query.after, query.limit)
        cursor = self.conn.execute(sql + page, params + page_params)
        names = [column[0] for column in cursor.description or ()]
        return [EstimateRow(**dict(zip(names, row))) for row in cursor]

    def breakdown_estimates(self, query: BreakdownsQuery) -> list[BreakdownEstimateRow]:
        """The page of breakdown rows ``query`` asks for, in the order :meth:`estimates` reads: windows
        in time order with the rollup last, then by rank (breakdown, then cell)."""
        p = self.param
        sql = (f"SELECT {self._columns(BREAKDOWN_ESTIMATE_COLUMNS)} FROM breakdown_estimates "
               f"WHERE schema = {p} AND version = {p}")
        params: list[Any] = [query.schema, query.version]
        if query.breakdowns is not None:
            if not query.breakdowns:
                return []
            sql += f" AND breakdown IN ({self._in(query.breakdowns)})"
            params += list(query.breakdowns)
        page, page_params = self._page(query.since, query.until, query.after, query.limit)
        return [BreakdownEstimateRow._make(row) for row in self._all(sql + page, params + page_params)]

    def _page(self, since: str | None, until: str | None, after: tuple[str, int] | None,
              limit: int) -> tuple[str, list[Any]]:
        """SQL (after a WHERE) and its parameters: windows ``since``..``until`` (the rollup always),
        from after the position ``after`` (``(window, rank)``), at most ``limit`` rows in key order."""
        p = self.param
        sql, params = "", list[Any]()
        if since is not None:
            sql += f' AND "window" >= {p}'
            params.append(since)
        if until is not None:
            sql += f' AND ("window" <= {p} OR "window" = {p})'
            params += [until, ROLLUP]
        if after is not None:
            sql += f' AND ("window", rank) > ({p}, {p})'
            params += list(after)
        return sql + f' ORDER BY "window", rank LIMIT {p}', [*params, limit]

    def estimates_generation(self) -> int:
        """A number that changes whenever stored estimates change: what is derived from the
        estimates may be kept until it moves. Cheap: one row."""
        return int(self._one("SELECT n FROM generation"))

    def activity(self, schema: str, version: int) -> Activity:
        """Report counts per attribute, windows, last refresh and pending changes of one schema version."""
        p = self.param
        key = f"schema = {p} AND version = {p}"
        rollup = (schema, version, ROLLUP)
        carried = dict(self._all(f'SELECT attribute, n FROM totals WHERE {key} AND "window" = {p}', rollup))
        windows = self._one(f'SELECT count(DISTINCT "window") FROM totals WHERE {key} AND "window" != {p}', rollup)
        computed_at = self._one(f'SELECT max(computed_at) FROM estimates WHERE {key} AND "window" = {p}', rollup)
        pending = self._one(f"SELECT 1 FROM dirty WHERE {key} LIMIT 1", (schema, version))
        return Activity(carried, windows, computed_at, pending is not None)

    # -- candidates (questions added later) ------------------------------------------------------

    def candidates(self, schema: str, version: int) -> list[CandidateRow]:
        """The stored candidates of a schema version, by attribute and rank."""
        p = self.param
        rows = self._all(
            "SELECT c.attribute, c.value, c.source, c.added_at, c.estimated, c.rank, c.batch, b.watermark, b.deficit "
            "FROM candidates c LEFT JOIN backfills b ON b.batch = c.batch "
            f"WHERE c.schema = {p} AND c.version = {p} ORDER BY c.attribute, c.rank", (schema, version))
        return [CandidateRow(a, v, s, at, bool(e), r, b, b is not None and w is None, d)
                for a, v, s, at, e, r, b, w, d in rows]

    def add_candidates(self, schema: str, version: int, attribute: str, values: Sequence[str], *, source: str,
                       estimated: bool, added_at: str, most: int) -> int | None:
        """Store those of ``values`` (prepared, distinct) not stored for the attribute yet, as one
        batch to back-fill (``estimated``) or never counted; how many were new. None, and nothing
        stored, if the attribute would then have more than ``most`` stored candidates. The schema
        version's row is locked first (``update_lock``): a report is counted for them by ingest or
        by the back-fill, never both."""
        p = self.param
        key = (schema, version, attribute)
        self.lock_schema(schema, version)
        where = f"schema = {p} AND version = {p} AND attribute = {p}"
        stored = {v for (v,) in self._all(f"SELECT value FROM candidates WHERE {where}", key)}
        new = [v for v in dict.fromkeys(values) if v not in stored]
        if len(stored) + len(new) > most:
            return None
        if not new:
            return 0
        batch = None
        if estimated:  # watermark '': no report counted yet (every id is longer)
            batch = self._one(f"INSERT INTO backfills (schema, version, attribute, watermark) "
                              f"VALUES ({p}, {p}, {p}, '') RETURNING batch", key)
        first = self._one(f"SELECT coalesce(max(rank), -1) + 1 FROM candidates WHERE schema = {p} AND version = {p}",
                          key[:2])
        self.conn.cursor().executemany(
            "INSERT INTO candidates (schema, version, attribute, value, source, added_at, estimated, rank, batch) "
            f"VALUES ({', '.join([p] * 9)})",
            [(*key, value, source, added_at, estimated, first + i, batch) for i, value in enumerate(new)])
        self.candidates_moved(schema, version)
        return len(new)

    def lock_schema(self, schema: str, version: int) -> None:
        """Hold the schema version's row against ingest's counting until commit (``update_lock``)."""
        p = self.param
        self.conn.execute(f"SELECT 1 FROM schemas WHERE name = {p} AND version = {p}" + self.update_lock,
                          (schema, version))

    def candidates_moved(self, schema: str, version: int) -> None:
        """A new mark for the schema version's candidates: counting reloads them."""
        p = self.param
        self.conn.execute(f"UPDATE schemas SET candidates_mark = candidates_mark + 1 WHERE name = {p} AND version = {p}",
                          (schema, version))

    def filling(self) -> list[tuple[str, int, int, int]]:
        """The batches not yet back-filled: ``(schema, version, batch, how many candidates)`` (0 for
        a breakdown's)."""
        return [tuple(r) for r in self._all(
            "SELECT b.schema, b.version, b.batch, count(c.value) FROM backfills b LEFT JOIN candidates c "
            "ON (c.schema, c.version, c.attribute, c.batch) = (b.schema, b.version, b.attribute, b.batch) "
            "WHERE b.watermark IS NOT NULL GROUP BY b.schema, b.version, b.batch ORDER BY b.batch")]

    def batch(self, schema: str, version: int, batch: int) -> CandidateBatch | StoredBreakdown | None:
        """A batch with its watermark (None: back-filled over every report): of candidates, or a
        breakdown's; None if there is no such batch."""
        p = self.param
        row = self.conn.execute(f"SELECT attribute, watermark FROM backfills WHERE batch = {p}", (batch,)).fetchone()
        if row is None:
            return None
        attribute, watermark = row
        if attribute is None:
            return next((b for b in self.breakdowns(schema, version) if b.batch == batch), None)
        values = tuple(v for (v,) in self._all(
            f"SELECT value FROM candidates WHERE schema = {p} AND version = {p} AND attribute = {p} AND batch = {p} "
            "ORDER BY rank", (schema, version, attribute, batch)))
        return CandidateBatch(batch, attribute, values, watermark)

    def watermark(self, batch: int) -> tuple[bool, str | None]:
        """Whether ``batch`` exists, and its watermark."""
        row = self.conn.execute(f"SELECT watermark FROM backfills WHERE batch = {self.param}", (batch,)).fetchone()
        return (False, None) if row is None else (True, row[0])

    def move_watermark(self, batch: int, through: str) -> None:
        self.conn.execute(f"UPDATE backfills SET watermark = {self.param} WHERE batch = {self.param}", (through, batch))

    def wire_page(self, schema: Schema, after: str, limit: int, through: str | None = None
                  ) -> tuple[int, str | None, str, NumericPage]:
        """The stored reports of a schema version after the id ``after`` (and at most ``through``), in
        id order, at most ``limit``: how many were read, the last id, every id read (separated by
        spaces), and the reports in their numeric form (:mod:`.wire`). A job reads the retained
        reports a page at a time, never all at once, and never as a Python object per report it keeps."""
        p = self.param
        bound, bound_params = ("", []) if through is None else (f" AND id <= {p}", [through])
        packing = layout(schema)
        count, last, ids, ends, records = self.wire_read(
            f"FROM reports WHERE id > {p}{bound} AND schema = {p} AND version = {p} ORDER BY id LIMIT {p}",
            [after, *bound_params, schema.name, schema.version, limit], packing)
        return count, last, ids, NumericPage(schema, packing, ends, records)

    def wire_columns(self, schema: Schema, attribute: str, after: str, limit: int, through: str | None = None
                     ) -> tuple[WireColumns, int, str | None, str]:
        """:meth:`wire_page` as ``attribute``'s columns (:class:`WireColumns`), with how many were
        read, the last id and every id read."""
        count, last, ids, page = self.wire_page(schema, after, limit, through)
        return page.columns(attribute), count, last, ids

    def wire_read(self, source: str, params: Sequence[Any], layout: Layout
                  ) -> tuple[int, str | None, str, np.ndarray, np.ndarray]:
        """The reports ``source`` (SQL from ``FROM``, and its ``params``) selects: how many, the
        last id, their ids (separated by spaces), their window ends and their ``wire`` as an array
        of records (:meth:`.wire.Layout.records`)."""
        rows = self._all(f"SELECT id, window_end, wire {source}", params)
        ends = np.array([end for _, end, _ in rows], dtype=np.int64)
        return (len(rows), rows[-1][0] if rows else None, " ".join(i for i, _, _ in rows), ends,
                layout.records(w for _, _, w in rows))

    def count_in_range(self, schema: str, version: int, after: str, through: str | None, cutoff: float) -> int:
        """Stored reports of a schema version with id in (``after``, ``through``] and a window after ``cutoff``."""
        sql, params = self._range(schema, version, after, through)
        return int(self._one(f"SELECT count(*) {sql} AND window_end > {self.param}", [*params, cutoff]))

    def rows_in_range_except(self, schema: str, version: int, after: str, through: str | None,
                             read: set[str]) -> list[ReportRow]:
        """The stored reports of the range (as :meth:`count_in_range`) whose id is not in ``read``."""
        sql, params = self._range(schema, version, after, through)
        late = [i for (i,) in self._all(f"SELECT id {sql}", params) if i not in read]
        return [ReportRow._make(r) for start in range(0, len(late), IN_CHUNK) for r in self._all(
            f'SELECT id, schema, version, "window", window_end, "values", wire FROM reports WHERE id IN '
            f"({self._in(late[start:start + IN_CHUNK])})", late[start:start + IN_CHUNK])]

    def _range(self, schema: str, version: int, after: str, through: str | None) -> tuple[str, list[Any]]:
        p = self.param
        bound, params = "", [schema, version, after]
        if through is not None:
            bound, params = f" AND id <= {p}", [*params, through]
        return f"FROM reports WHERE schema = {p} AND version = {p} AND id > {p}{bound}", params

    def complete_batch(self, schema: str, version: int, attribute: str | None, batch: int) -> None:
        """A batch back-filled over every stored report: for candidates (of ``attribute``) keep its
        deficit (the attribute's reports in the rollup it was not counted over) and drop its count
        of reports; mark the schema version's windows dirty so it is estimated at the next refresh."""
        p = self.param
        if attribute is None:  # a breakdown's: its sums count their own reports
            self.conn.execute(f"UPDATE backfills SET watermark = NULL WHERE batch = {p}", (batch,))
            self._mark_version_dirty(schema, version)
            return
        key = (schema, version, ROLLUP, attribute)
        n = self._one(f'SELECT n FROM totals WHERE schema = {p} AND version = {p} AND "window" = {p} '
                      f"AND attribute = {p}", key)
        counted = self._one(f'SELECT amount FROM counters WHERE schema = {p} AND version = {p} AND "window" = {p} '
                            f"AND attribute = {p} AND value = {p}", (*key, f"{BATCH_N_PREFIX}{batch}"))
        deficit = (n or 0) - int(counted or 0)
        self.conn.execute(f"UPDATE backfills SET watermark = NULL, deficit = {p} WHERE batch = {p}", (deficit, batch))
        self.conn.execute(f"DELETE FROM counters WHERE schema = {p} AND version = {p} AND attribute = {p} AND value = {p}",
                          (schema, version, attribute, f"{BATCH_N_PREFIX}{batch}"))
        self._mark_version_dirty(schema, version)

    def _mark_version_dirty(self, schema: str, version: int) -> None:
        """Every window of a schema version (the rollup included) marked dirty with a fresh mark."""
        p = self.param
        # (WHERE true: SQLite would read ON CONFLICT as a join's ON otherwise.)
        self.conn.execute(f'INSERT INTO dirty (schema, version, "window", mark) SELECT schema, version, "window", '
                          f'{self.new_mark} FROM (SELECT DISTINCT schema, version, "window" FROM totals '
                          f'WHERE schema = {p} AND version = {p}) AS t WHERE true '
                          'ON CONFLICT (schema, version, "window") DO UPDATE SET mark = excluded.mark',
                          (schema, version))
