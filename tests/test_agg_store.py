"""The store behind its interface: its own errors, refreshes that cannot overwrite newer
estimates, reads in pages, the bound on windows per batch, and the migration from dense counters."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from conftest import (ADMIN, APP_USAGE, db_state, expected_counters, free_port, publish, read, settle, sql,
                      store_of, stored_counters, write)
from sqlite_utils import Database

from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.aggregator.store import EstimatesQuery, StoreBusy, StoreUnavailable, is_postgres
from ldp_telemetry.aggregator import open_database
from ldp_telemetry.aggregator.store.sqlite import MIGRATIONS
from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.reports import MAX_BATCH_WINDOWS
from ldp_telemetry.shared.windows import ROLLUP

pytestmark = pytest.mark.backends

# The ingest tests' clock and app with the schema published: the same fixtures here.
from test_agg_ingest import NOW, TODAY, app, client  # noqa: E402,F401

YESTERDAY = "2026-11-20"


def reports(count: int, window: str = TODAY) -> list[dict]:
    return [randomize(APP_USAGE, {"dark_mode": i % 3 == 0, "os": "linux" if i % 2 else "macos"}, window=window)
            for i in range(count)]


# -- the store's own errors --------------------------------------------------------------------


def test_a_file_that_is_no_database_is_unavailable(tmp_path):
    path = tmp_path / "not.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailable):
        open_database(str(path)).store.migrate()


def test_an_unreachable_postgresql_server_is_unavailable():
    pytest.importorskip("psycopg")
    with pytest.raises(StoreUnavailable, match="cannot"):
        open_database(f"postgresql://postgres@127.0.0.1:{free_port()}/nothing").store.migrate()


def hold_writes(location: str):
    """Another process's writer, in effect: SQLite's write lock, or PostgreSQL locks on the
    tables a publish and an ingest write."""
    if location.startswith("postgresql://"):
        import psycopg

        holder = psycopg.connect(location)
        holder.execute("LOCK TABLE schemas, reports IN EXCLUSIVE MODE")  # reads go on; writes wait
        return holder
    holder = sqlite3.connect(location, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_writer_held_up_by_another_is_busy_and_the_api_says_503(app, client):
    store = store_of(app)
    store.db.busy_timeout = 0.2
    store.close()  # the next connection waits 0.2 s, not 10 s
    holder = hold_writes(app.config["LDP_DB"])
    try:
        with pytest.raises(StoreBusy):
            write(store, "publish_schema", {"name": "x", "version": 1}, "2026-11-21T00:00:00Z")
        sent = reports(1)
        response = client.post("/api/v1/reports", json={"reports": sent})
        if is_postgres(store.location):
            assert response.status_code == 503 and response.headers["Retry-After"] == "1"
            assert "busy" in response.get_json()["error"]
        else:  # acknowledged from the inbox; counted once the lock is free (below)
            assert response.status_code == 202
    finally:
        holder.rollback()
        holder.close()
    if not is_postgres(store.location):
        assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, sent)


# -- refresh from a snapshot ---------------------------------------------------------------------


def test_a_refresh_computed_before_a_change_does_not_overwrite_or_clear_it(app, client):
    client.post("/api/v1/reports", json={"reports": reports(5)})
    settle(app)
    store = store_of(app)
    schema = parse_schema(APP_USAGE)
    stale = read(store, "stale_windows", 0.95)
    assert {s.window for s in stale} == {TODAY, ROLLUP}
    counters = read(store, "window_counters", "app-usage", 1, [s.window for s in stale])
    rows = [r for s in stale for r in refresh.estimate_rows(schema, s.window, counters[s.window], 0.95, "t0")]
    client.post("/api/v1/reports", json={"reports": reports(3)})  # the counters change while it computes
    settle(app)
    write(store, "save_estimates", rows, stale)
    assert read(store, "estimates", EstimatesQuery("app-usage", 1)) == []  # nothing older than the counters written
    assert {s.window for s in read(store, "stale_windows", 0.95)} == {TODAY, ROLLUP}  # and still due
    refresh.refresh(app)
    assert {r.n for r in read(store, "estimates", EstimatesQuery("app-usage", 1))} == {8}
    assert read(store, "stale_windows", 0.95) == []


def test_a_new_confidence_level_makes_every_window_stale_once(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client)
    client.post("/api/v1/reports", json={"reports": reports(4) + reports(2, YESTERDAY)})
    refresh.refresh(app)
    app.config["LDP_CONFIDENCE"] = 0.99
    assert {s.window for s in read(store_of(app), "stale_windows", 0.99)} == {TODAY, YESTERDAY, ROLLUP}
    assert client.get("/api/v1/estimates?schema=app-usage").get_json()["confidence"] == 0.95  # as stored
    refresh.refresh(app)
    assert read(store_of(app), "stale_windows", 0.99) == []
    assert client.get("/api/v1/estimates?schema=app-usage").get_json()["confidence"] == 0.99


# -- reads in pages ----------------------------------------------------------------------------------


def test_pages_follow_each_other_to_exactly_the_whole(app, client):
    client.post("/api/v1/reports", json={"reports": reports(4) + reports(3, YESTERDAY)})
    refresh.refresh(app)
    whole = client.get("/api/v1/estimates?schema=app-usage").get_json()
    assert whole["next"] is None and len(whole["estimates"]) == 3 * 5
    pages, url = [], "/api/v1/estimates?schema=app-usage&limit=4"
    while url:
        response = client.get(url)
        page = response.get_json()
        assert len(page["estimates"]) <= 4
        pages += page["estimates"]
        url = response.headers.get("Link", "").partition(">")[0].lstrip("<") or None
        assert (url is None) == (page["next"] is None)
    assert pages == whole["estimates"]
    assert [e["window"] for e in pages] == [YESTERDAY] * 5 + [TODAY] * 5 + [ROLLUP] * 5


# A string attribute beside a category, under split "sample": some reports carry it, some do not.
STRINGS = {"name": "homes", "version": 1, "epsilon": 2.0, "split": "sample", "attributes": [
    {"name": "os", "type": "categorical", "categories": ["linux", "macos"]},
    {"name": "home", "type": "string", "candidates": ["a.org", "b.org"]}]}


def test_stored_reports_are_read_a_page_at_a_time_in_id_order_for_one_schema_version(app, client):
    publish(client, STRINGS)
    sent = [randomize(STRINGS, {"os": "linux", "home": "a.org"}, window=TODAY) for _ in range(7)]
    assert client.post("/api/v1/reports", json={"reports": sent}).status_code == 202
    store = store_of(app)
    settle(app)
    schema = app.extensions["ldp"]["catalog"].lookup("homes", 1)
    by_id = {r["id"]: r["values"].get("home") for r in sent}
    ids = sorted(by_id)
    lasts, after = [], ""
    while True:
        columns, count, last, _ = read(store, "wire_columns", schema, "home", after, 3)
        assert count <= 3 and columns.carried.shape == (count,)
        if not count:
            break
        page = ids[len(lasts) * 3:len(lasts) * 3 + count]
        # Each report's columns are its own wire value's, in id order; 0 where it does not carry it.
        assert list(columns.carried) == [by_id[i] is not None for i in page]
        assert [[int(columns.fields[f][j]) for f in "aby"] for j in range(count)] == [
            [by_id[i][f] for f in "aby"] if by_id[i] else [0, 0, 0] for i in page]
        assert columns.windows == (TODAY,) and set(columns.window) == {0}
        lasts.append(last)
        after = last
    assert lasts == [ids[2], ids[5], ids[6]]  # pages of 3 in id order: every report once
    assert read(store, "wire_columns", schema, "home", "", 10, through=ids[3])[1] == 4
    other = parse_schema({**STRINGS, "version": 2})
    assert read(store, "wire_columns", other, "home", "", 10)[1] == 0


@pytest.mark.parametrize("query, field", [("limit=0", "limit"), ("limit=100001", "limit"), ("limit=ten", "limit"),
                                          ("next=nonsense", "next"), ("next=2026-11-21:x", "next"),
                                          ("next=2026-13-01:3", "next")])
def test_a_bad_page_request_is_a_400_naming_the_parameter(client, query, field):
    response = client.get(f"/api/v1/estimates?schema=app-usage&{query}")
    assert response.status_code == 400 and response.get_json()["details"][0]["field"] == field


def test_csv_cells_a_spreadsheet_would_run_are_escaped(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    risky = {"name": "risky", "version": 1, "epsilon": 2.0, "attributes": [
        {"name": "choice", "type": "categorical", "categories": ["=1+1", "+cmd", "-x", "@sum", "plain"]}]}
    publish(client, risky)
    batch = [randomize(risky, {"choice": "plain"}, window=TODAY) for _ in range(20)]
    client.post("/api/v1/reports", json={"reports": batch})
    refresh.refresh(app)
    text = client.get("/api/v1/estimates?schema=risky&format=csv").get_data(as_text=True)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [row["value"] for row in rows][:5] == ["'=1+1", "'+cmd", "'-x", "'@sum", "plain"]
    # Numbers stay numbers: a negative estimate (likely for the four unchosen values) is not escaped.
    assert all(float(row[c]) == float(row[c]) for row in rows for c in ("estimate", "ci_low", "ci_high"))


# -- bounded work per batch ----------------------------------------------------------------------------


def test_a_batch_naming_too_many_windows_is_refused_and_changes_nothing(make_app):
    hourly = {**APP_USAGE, "name": "hourly", "window": "hour"}
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, hourly)
    windows = [f"2026-11-{20 + h // 24:02d}T{h % 24:02d}" for h in range(36)]  # 36 hours back to 2026-11-20T00
    batch = [randomize(hourly, {"dark_mode": True, "os": "linux"}, window=w) for w in windows]
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": batch[:MAX_BATCH_WINDOWS + 1]})
    assert response.status_code == 400 and str(MAX_BATCH_WINDOWS) in response.get_json()["error"]
    assert db_state(app) == before
    assert client.post("/api/v1/reports", json={"reports": batch[:MAX_BATCH_WINDOWS]}).status_code == 202


# -- the migration from dense counters -----------------------------------------------------------------


@pytest.mark.sqlite_only
def test_a_database_with_dense_counters_is_brought_over(tmp_path, make_app):
    # The previous layout is written by hand into the file (m001 only): every value of every
    # attribute had a counter row, estimates had a hits column and the level lived in meta.
    path = tmp_path / "old.db"
    db = Database(str(path))
    MIGRATIONS.apply(db, stop_before="m002_sparse_counters")
    derived = parse_schema(APP_USAGE).to_dict()
    db["schemas"].insert({"name": "app-usage", "version": 1, "definition": json.dumps(derived),
                          "published_at": "2026-11-01T00:00:00Z"})
    sent = reports(6) + reports(4, YESTERDAY)
    db["reports"].insert_all([{"id": r["id"], "schema": "app-usage", "version": 1, "window": r["window"],
                               "window_end": 0, "values": json.dumps(r["values"])} for r in sent])
    dense = expected_counters(APP_USAGE, sent)
    db["counters"].insert_all([{"schema": "app-usage", "version": 1, "window": w, "attribute": a, "value": v,
                                "n": n, "hits": h} for (w, a, v), (n, h) in dense.items()])
    db["dirty"].insert_all([{"schema": "app-usage", "version": 1, "window": w} for w in (TODAY, YESTERDAY)])
    db["estimates"].insert({"schema": "app-usage", "version": 1, "window": YESTERDAY, "attribute": "dark_mode",
                            "value": "true", "estimate": 0.5, "estimate_clipped": 0.5, "ci_low": 0.1, "ci_high": 0.9,
                            "n": 4, "hits": 2, "epsilon": 1.0, "computed_at": "2026-11-20T23:00:00Z"})
    db["meta"].insert({"key": "confidence", "value": "0.9"})
    db.conn.close()

    app = make_app(LDP_DB=str(path), LDP_CLOCK=lambda: NOW)
    store = store_of(app)
    assert stored_counters(app, APP_USAGE, [TODAY, YESTERDAY]) == dense
    assert read(store, "activity", "app-usage", 1).carried == {"dark_mode": 10, "os": 10}  # the rollup, built from them
    kept = read(store, "estimates", EstimatesQuery("app-usage", 1))
    assert [(r.window, r.attribute, r.value, r.confidence, r.rank) for r in kept] == [
        (YESTERDAY, "dark_mode", "true", 0.9, 0)]
    assert {s.window for s in read(store, "stale_windows", 0.9)} == {TODAY, YESTERDAY, ROLLUP}  # still due
    assert read(store, "footprint")["reports"] == len(sent)
    with sqlite3.connect(path) as conn:  # the file itself: no insertion-ordered rowid survives
        with pytest.raises(sqlite3.OperationalError, match="rowid"):
            conn.execute("SELECT rowid FROM reports")
    # From here it is the same as a database that never was dense.
    fresh = make_app(LDP_CLOCK=lambda: NOW)
    publish(fresh.test_client())
    fresh.test_client().post("/api/v1/reports", json={"reports": sent})
    for a in (app, fresh):
        a.config["LDP_CONFIDENCE"] = 0.9
        refresh.refresh(a)

    def shown(a):
        return [{k: v for k, v in e.items() if k != "computed_at"}
                for e in a.test_client().get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]]
    assert shown(app) == shown(fresh)


# -- no arrival order in what is stored --------------------------------------------------------


@pytest.mark.sqlite_only
def test_the_reports_of_one_request_are_not_stored_together(app, client):
    """Reads the file itself, to prove what is physically stored: the reports table has no
    insertion-ordered row id, and its rows (kept in id order, WITHOUT ROWID) interleave requests.

    A device's backlog of three windows, sent in one request, was stored as rowids 202-204.
    Ids are random tokens, so the 50 reports of request A and the 50 of request B fall at random
    places of the id order: the number of runs (maximal stretches from one request) of such a
    shuffle is 51 on average with a standard deviation of about 5; stored together it is 2.
    Fewer than 20 runs happens with probability below 1e-9 (Wald-Wolfowitz runs distribution).
    """
    first, second = reports(50), reports(50, window=YESTERDAY)
    for batch in (first, second):
        assert client.post("/api/v1/reports", json={"reports": batch}).status_code == 202
    origin = {r["id"]: "A" for r in first} | {r["id"]: "B" for r in second}
    settle(app)
    with sqlite3.connect(app.config["LDP_DB"]) as conn:
        with pytest.raises(sqlite3.OperationalError, match="rowid"):
            conn.execute("SELECT rowid FROM reports")
        # The table itself in page order (its only b-tree: reports have no secondary index).
        scan = 'SELECT id, "values" FROM reports'
        assert [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + scan)] == ["SCAN reports"]
        physical = [origin[i] for i, _ in conn.execute(scan)]
    assert sorted(physical) == sorted(origin.values())
    runs = 1 + sum(a != b for a, b in zip(physical, physical[1:]))
    assert runs >= 20, physical


@pytest.mark.sqlite_only
def test_the_wal_keeps_no_arrival_order_once_folded(app, client):
    """Issue 21, item 8. Reads the ``-wal`` file itself. Each fold appends the pages it wrote to the
    WAL, so 20 requests folded one after another (a quiet server folds each request a moment after
    it) left the 20 ids at strictly increasing offsets: arrival order, kept until 10,000 pages of
    WAL were checkpointed, and then still in the file beyond its new end. A fold now copies the WAL
    into the database and truncates it when no reader is in the way: nothing of it is left."""
    from pathlib import Path

    store = store_of(app)
    sent = []
    for _ in range(20):
        batch = reports(1)
        assert client.post("/api/v1/reports", json={"reports": batch}).status_code == 202
        settle(app)  # folded on its own
        sent += batch
    wal = Path(app.config["LDP_DB"] + "-wal")
    data = wal.read_bytes() if wal.exists() else b""
    offsets = [data.find(r["id"].encode()) for r in sent]
    assert offsets == [-1] * len(sent) and len(data) == 0, offsets
    with sqlite3.connect(app.config["LDP_DB"]) as conn:  # the reports are in the database itself
        assert conn.execute("SELECT count(*) FROM reports").fetchone()[0] == len(sent)
        # The WAL is bounded when a reader keeps it from being truncated: cut back at its next reset.
        assert store.db.connections.conn.execute("PRAGMA journal_size_limit").fetchone()[0] == 0


@pytest.mark.sqlite_only
def test_the_folding_thread_truncates_the_wal_by_itself(app, client):
    """Without a settle: the folding thread folds a request a moment after it, and truncates the
    WAL within about a second after that (at most once a second under load)."""
    import time
    from pathlib import Path

    sent = reports(3)
    assert client.post("/api/v1/reports", json={"reports": sent}).status_code == 202
    wal, folder = Path(app.config["LDP_DB"] + "-wal"), Path(app.config["LDP_DB"] + "-inbox")
    deadline = time.monotonic() + 15
    while (list(folder.glob("*.log")) or wal.exists() and wal.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(folder.glob("*.log")) == [] and (not wal.exists() or wal.stat().st_size == 0)
    with sqlite3.connect(app.config["LDP_DB"]) as conn:
        assert conn.execute("SELECT count(*) FROM reports").fetchone()[0] == len(sent)


@pytest.mark.postgres_only
def test_the_reports_of_one_request_are_not_stored_together_in_postgresql(app, client):
    """Reads the tables themselves, in their physical order (partition by partition, each in heap
    order: a sequential scan). PostgreSQL's heap keeps insertion order, so the store hash-partitions
    reports by their random id and inserts in id order: the 50 reports of request A and the 50 of
    B spread over 64 partitions, about one of each per partition, A's before B's where both land.
    Stored together, a scan shows 2 runs; spread, the runs are as for a random order of 100 with
    pairs fixed inside each partition (about 40 or more). Fewer than 20 runs would take ~30
    partitions in a row holding only one request's reports, far below 1e-9.
    """
    import psycopg

    first, second = reports(50), reports(50, window=YESTERDAY)
    for batch in (first, second):
        assert client.post("/api/v1/reports", json={"reports": batch}).status_code == 202
    origin = {r["id"]: "A" for r in first} | {r["id"]: "B" for r in second}
    with psycopg.connect(app.config["LDP_DB"]) as conn:
        columns = [c for (c,) in conn.execute("SELECT column_name FROM information_schema.columns WHERE "
                                              "table_schema = current_schema() AND table_name = 'reports' "
                                              "ORDER BY ordinal_position")]
        assert columns == ["id", "schema", "version", "window", "window_end", "values", "wire"]  # no serial, no time
        conn.execute("SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off")
        physical = [origin[i] for (i,) in conn.execute('SELECT id FROM reports')]
    assert sorted(physical) == sorted(origin.values())
    runs = 1 + sum(a != b for a, b in zip(physical, physical[1:]))
    assert runs >= 20, physical


def request_order(rows: list[tuple[int, str]]) -> tuple[int, int]:
    """Of the pairs of reports from different requests that ``rows`` (request number, in stored
    order) put one before the other: how many are in arrival order, how many against it."""
    forward = backward = 0
    for i, (a, _) in enumerate(rows):
        for b, _ in rows[i + 1:]:
            forward += a < b
            backward += a > b
    return forward, backward


@pytest.mark.postgres_only
def test_settling_leaves_no_request_order_in_xmin_or_in_the_heap_in_postgresql(app, client):
    """Issue 21, item 7. Reads the system columns: ``xmin`` is the id of the transaction that
    wrote a row, and ``ctid`` its place in its partition's heap, both in commit order. Each
    request's reports were written by one transaction, so ``SELECT xmin, id FROM reports`` grouped
    them by request, in arrival order, and within each partition the heap kept them in arrival
    order too, undoing the hash partitioning. Settling (every refresh does) now rewrites the
    reports stored since the last settle in one transaction, in id order: they share one xmin and
    sit in each partition in id order, a random order of the requests.

    10 requests of 20 reports: before, every xmin held one request and no pair within a partition
    was out of arrival order. After, the ~260 pairs of reports of different requests that share a
    partition are in random order, half of them backwards on average; fewer than a quarter
    backwards is over 5 standard deviations away.
    """
    import psycopg

    batches = [reports(20) for _ in range(10)]
    for batch in batches:
        assert client.post("/api/v1/reports", json={"reports": batch}).status_code == 202
    origin = {r["id"]: k for k, batch in enumerate(batches) for r in batch}
    settle(app)
    with psycopg.connect(app.config["LDP_DB"]) as conn:
        rows = conn.execute("SELECT xmin::text, tableoid, id FROM reports ORDER BY tableoid, ctid").fetchall()
    assert sorted(i for _, _, i in rows) == sorted(origin)
    requests_of_xmin: dict[str, set[int]] = {}
    for xmin, _, i in rows:
        requests_of_xmin.setdefault(xmin, set()).add(origin[i])
    assert all(len(requests) == len(batches) for requests in requests_of_xmin.values()), requests_of_xmin
    forward = backward = 0
    for partition in {p for _, p, _ in rows}:
        f, b = request_order([(origin[i], i) for _, p, i in rows if p == partition])
        forward, backward = forward + f, backward + b
    assert backward >= (forward + backward) / 4, (forward, backward)
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(len(origin),)]
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(
        APP_USAGE, [r for batch in batches for r in batch])


@pytest.mark.postgres_only
def test_nodes_settling_at_once_beside_retried_ingests_keep_every_report_exactly_once(app, client, monkeypatch):
    """Three other nodes settle over and over, in chunks of 37 reports (so their transactions
    interleave), while requests come in, each followed by a retry of the one before: a retry's ids
    are being rewritten meanwhile. Every id is stored once, answered new once, counted once, and
    once all is settled nothing is left unsettled."""
    import threading

    from ldp_telemetry.aggregator.store import postgres

    monkeypatch.setattr(postgres, "SETTLE_CHUNK", 37)
    location = app.config["LDP_DB"]
    nodes = [open_database(location) for _ in range(3)]  # a pool each, as other nodes have
    stop, errors = threading.Event(), []

    def settle_until_stopped(node) -> None:
        while not stop.is_set():
            try:
                node.writer.settle()
            except Exception as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)
                return

    threads = [threading.Thread(target=settle_until_stopped, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    sent = [reports(10) for _ in range(60)]
    answers = []
    try:
        for k, batch in enumerate(sent):
            answers.append(client.post("/api/v1/reports", json={"reports": batch}).get_json())
            if k:
                answers.append(client.post("/api/v1/reports", json={"reports": sent[k - 1]}).get_json())
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        for node in nodes:
            node.store.close()
    assert errors == []
    assert answers[0::2] == [{"accepted": 10, "duplicates": 0}] * 1 + [{"accepted": 0, "duplicates": 10}] * 59
    assert answers[1::2] == [{"accepted": 10, "duplicates": 0}] * 59
    every = [r for batch in sent for r in batch]
    assert sql(location, "SELECT count(*) FROM unsettled") == [(0,)]
    assert sorted(sql(location, 'SELECT id, "values" FROM reports')) == sorted(
        (r["id"], json.dumps(r["values"], separators=(",", ":"))) for r in every)
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, every)


@pytest.mark.postgres_only
def test_a_settle_rewrites_a_bounded_number_of_reports_and_the_next_one_goes_on(app, client, monkeypatch):
    from ldp_telemetry.aggregator.store import postgres

    monkeypatch.setattr(postgres, "SETTLE_CHUNK", 7)
    monkeypatch.setattr(postgres, "SETTLE_SECONDS", 0.0)  # one chunk per settle
    location = app.config["LDP_DB"]
    sent = reports(20)
    assert client.post("/api/v1/reports", json={"reports": sent}).status_code == 202
    left = []
    for _ in range(4):
        settle(app)
        with psycopg_connection(location) as conn:
            left.append(conn.execute("SELECT count(*) FROM unsettled").fetchone()[0])
    assert left == [13, 6, 0, 0]
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, sent)


def psycopg_connection(location: str):
    import psycopg

    return psycopg.connect(location)


@pytest.mark.postgres_only
def test_a_report_rewritten_while_retention_erases_its_window_is_erased_all_the_same(app, client, monkeypatch):
    """Retention reads the expired ids in a snapshot and then deletes them by id. A settle that
    rewrote one of them meanwhile, and had not committed yet, left a new row that delete could not
    see: the report outlived its window for good (its window's totals went, so no later run looks
    for it). Retention now waits for a rewrite in progress, and a rewrite that starts later leaves
    out what retention erased."""
    import threading
    import time

    from ldp_telemetry.aggregator.store import postgres
    from ldp_telemetry.shared.windows import window_end

    rewrite = postgres.PostgresTx.rewrite_unsettled
    rewritten = threading.Event()

    def slow_rewrite(tx, after):
        ids = rewrite(tx, after)
        if ids:
            rewritten.set()
            time.sleep(1.5)  # still in its transaction, as a large chunk would be
        return ids

    monkeypatch.setattr(postgres.PostgresTx, "rewrite_unsettled", slow_rewrite)
    sent = reports(5, window=YESTERDAY)
    assert client.post("/api/v1/reports", json={"reports": sent}).status_code == 202
    settling = threading.Thread(target=settle, args=(app,))
    settling.start()
    assert rewritten.wait(30)
    other = open_database(app.config["LDP_DB"]).store  # another node's retention job
    try:
        other.expire(int(window_end(YESTERDAY, "day").timestamp()))
    finally:
        other.close()
    settling.join(30)
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(0,)]


@pytest.mark.postgres_only
def test_connections_the_server_ended_are_replaced(app, client):
    """The pool does not test a connection before each use: one the server ended (a restart, an
    operator's pg_terminate_backend) fails the request that finds it, as unavailable (503, which
    clients retry), and is replaced; nothing is lost or counted twice."""
    from ldp_telemetry.aggregator.store.postgres import POOL_SIZE

    first, second = reports(5), reports(5)
    assert client.post("/api/v1/reports", json={"reports": first}).status_code == 202
    location = app.config["LDP_DB"]
    ended = sql(location, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = "
                f"'{location.rpartition('application_name=')[2]}' AND pid <> pg_backend_pid()")
    # A backend that was exiting already when listed (a connection the app just closed) answers false.
    assert any(ok for (ok,) in ended)
    # Each ended connection the pool still holds fails one request at most: a busy run may have grown
    # the pool past the one or two connections a quiet one holds, up to its size.
    statuses = []
    while 202 not in statuses and len(statuses) <= POOL_SIZE:
        statuses.append(client.post("/api/v1/reports", json={"reports": second}).status_code)
    assert statuses[-1] == 202 and set(statuses[:-1]) <= {503}, statuses
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, first + second)


# -- the one door --------------------------------------------------------------------------------


def test_every_transaction_is_timed_under_its_name_in_metrics(app, client):
    client.post("/api/v1/reports", json={"reports": reports(3)})
    settle(app)
    refresh.refresh(app)
    text = client.get("/metrics").get_data(as_text=True)
    write_path = "ingest" if is_postgres(app.config["LDP_DB"]) else "fold"
    for name in ("publish_schema", write_path, "stale_windows", "window_counters", "save_estimates"):
        assert f'ldp_store_transaction_seconds_count{{name="{name}"}}' in text, name


def test_a_driver_error_leaves_the_door_as_the_store_s_own_and_anything_else_as_it_is(app, client):
    store = store_of(app)
    with pytest.raises(StoreUnavailable):
        store.run_tx("broken", lambda tx: tx.conn.execute("SELECT * FROM no_such_table"))

    def bug(tx):
        raise KeyError("not the database's")

    with pytest.raises(KeyError):
        store.run_tx("bug", bug)
    assert read(store, "schema_versions", "app-usage") == [1]  # the door still opens


@pytest.mark.postgres_only
def test_a_deadlock_is_rolled_back_and_run_again_by_the_door(app, client):
    """Two transactions take the same two rows in opposite orders: PostgreSQL aborts one of them
    (deadlock detected); the door runs it again, so both commit and the victim ran twice."""
    import threading

    store = store_of(app)
    write(store, "publish_schema", {"name": "b", "version": 1}, "2026-11-21T00:00:00Z")
    both_hold_one = threading.Barrier(2, timeout=30)
    runs = {"ab": 0, "ba": 0}

    def lock(order: str):
        def fn(tx):
            runs[order] += 1
            first, second = ("app-usage", "b") if order == "ab" else ("b", "app-usage")
            tx.conn.execute("SELECT 1 FROM schemas WHERE name = %s FOR UPDATE", (first,))
            if runs[order] == 1:
                both_hold_one.wait()
            tx.conn.execute("SELECT 1 FROM schemas WHERE name = %s FOR UPDATE", (second,))
        return fn

    errors = []

    def run(order: str) -> None:
        try:
            store.run_tx(order, lock(order))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(o,)) for o in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and sorted(runs.values()) == [1, 2]
