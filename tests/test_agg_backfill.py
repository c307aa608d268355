"""Candidates added after publishing (POST .../candidates) and the back-fill of their counters from
the retained reports: validation, exactly once beside concurrent ingest and across nodes, and
retention erasing a window before the back-fill reached it."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import random
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from conftest import settle, read, write, ADMIN, db_state, publish, sql, store_of

from ldp_telemetry.aggregator import retention
from ldp_telemetry.aggregator.cells import Limit
from ldp_telemetry.aggregator.questions import candidates
from ldp_telemetry.aggregator.questions import backfill
from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.shared.windows import ROLLUP

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
LISTED = ["example.org", "caf\u00e9.fr"]
SCHEMA = {"name": "homes", "version": 1, "epsilon": 3.0, "window": "hour", "attributes": [
    {"name": "home", "type": "string", "max_length": 16, "candidates": LISTED, "epsilon": 2.0},
    {"name": "dark_mode", "type": "boolean", "epsilon": 1.0}]}
G = 8  # floor(e^2 + 1/2) + 1
P = 2**31 - 1
ADDED = [f"site-{i}.example" for i in range(23)]
URL = "/api/v1/schemas/homes/1/candidates"


def x(s: str) -> int:
    return int.from_bytes(hashlib.sha256(b"ldp-telemetry/string/v1\x00" + s.encode()).digest()[:8], "big") % P


def reports(rng: random.Random, count: int, window: str) -> list[dict]:
    """Valid reports with arbitrary (a, b, y): supports are a function of them alone."""
    return [{"id": "%032x" % rng.getrandbits(128), "schema": "homes", "version": 1, "window": window, "epsilon": 3.0,
             "values": {"home": {"a": rng.randrange(1, P), "b": rng.randrange(P), "y": rng.randrange(G)},
                        "dark_mode": rng.random() < 0.5}} for _ in range(count)]


def app_with_reports(make_app, location: str, rng: random.Random, count: int):
    """An app on ``location`` with SCHEMA published and ``count`` reports of one window posted; its client."""
    app = make_app(LDP_DB=location, LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, SCHEMA)
    post(client, reports(rng, count, "2026-11-21T11"))
    return app, client


def post(client, batch: list[dict]) -> None:
    answer = client.post("/api/v1/reports", json={"reports": batch})
    assert answer.status_code == 202, answer.get_json()


def reference(location: str, strings: list[str]) -> dict[tuple[str, str], int]:
    """(window or "all", string) -> supports among the stored reports, decoded here in Python
    integers from their (a, b, y); ("window", "\\n") -> the reports of the window."""
    out: dict[tuple[str, str], int] = {}
    for window, values in sql(location, 'SELECT "window", "values" FROM reports'):
        r = json.loads(values)["home"]
        for w in (window, ROLLUP):
            out[(w, "\n")] = out.get((w, "\n"), 0) + 1
            for s in strings:
                out[(w, s)] = out.get((w, s), 0) + (((r["a"] * x(s) + r["b"]) % P) % G == r["y"])
    return out


def counting_of(app):
    return app.extensions["ldp"]["writer"].counting


def supports(app, strings: list[str]) -> dict[tuple[str, str], int]:
    """The same, as the store's counters hold them."""
    store = store_of(app)
    settle(app)
    windows = sorted({w for (w,) in sql(app.config["LDP_DB"], 'SELECT DISTINCT "window" FROM totals')})
    out = {}
    for window, counters in read(store, "window_counters", "homes", 1, windows).items():
        out[(window, "\n")] = counters.totals.get("home", 0)
        for s in strings:
            out[(window, s)] = int(counters.amounts.get("home", {}).get(s, 0))
    return out


def backfill_in_chunks(app, client, rng: random.Random, chunk: int, window: str) -> int:
    """Back-fill every batch ``chunk`` reports at a time, posting reports between a chunk's read
    and its apply and between chunks (ids random, so some fall below the watermark, some in the
    chunk's range, some above); how many chunks it took."""
    store, counting, chunks = store_of(app), counting_of(app), 0
    for schema, version, batch, _ in read(store, "filling"):
        while (chunk_read := store.run_tx("backfill_read", lambda tx: backfill.read_chunk(
                tx, counting, schema, version, batch, chunk), write=False)) is not None:
            chunks += 1
            post(client, reports(rng, 9, window))
            settle(app)  # stored now (SQLite: folded from the inbox), beside the watermark
            done = store.run_tx("backfill_apply", lambda tx: backfill.apply_chunk(tx, counting, chunk_read))
            post(client, reports(rng, 9, window))
            settle(app)
            if done:
                break
    return chunks


@pytest.fixture
def clocked(make_app):
    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RETENTION_DAYS=3)
    client = app.test_client()
    publish(client, SCHEMA)
    return clock, app, client


TOO_MANY = [f"s{i}" for i in range(10_000 - len(LISTED) + 1)]


@pytest.mark.parametrize("body, status, field", [
    ({"candidates": ["a"]}, 400, "attribute"),
    ({"attribute": 5, "candidates": ["a"]}, 400, "attribute"),
    ({"attribute": "nope", "candidates": ["a"]}, 400, "attribute"),
    ({"attribute": "dark_mode", "candidates": ["a"]}, 400, "attribute"),
    ({"attribute": "home"}, 400, "candidates"),
    ({"attribute": "home", "candidates": "a"}, 400, "candidates"),
    ({"attribute": "home", "candidates": ["ok", 5]}, 400, "candidates[1]"),
    ({"attribute": "home", "candidates": ["ok", "x" * 17]}, 400, "candidates[1]"),
    ({"attribute": "home", "candidates": ["caf\u00e9", "cafe\u0301"]}, 400, "candidates[1]"),
    ({"attribute": "home", "candidates": TOO_MANY}, 400, "candidates"),
    ({"attribute": "home", "candidates": ["a"], "source": "listed"}, 400, "source"),
])
def test_a_bad_candidates_request_names_the_field_and_changes_nothing(make_app, body, status, field):
    app = make_app()
    client = app.test_client()
    publish(client, SCHEMA)
    before = db_state(app)
    answer = client.post(URL, json=body, headers=ADMIN)
    assert answer.status_code == status
    assert answer.get_json()["details"][0]["field"] == field
    assert db_state(app) == before


def test_adding_needs_the_admin_token_and_counts_only_new_candidates(make_app):
    app = make_app(LDP_MAX_CELLS=10**8)  # 10,000 hourly candidates: the candidate limit binds first
    client = app.test_client()
    publish(client, SCHEMA)
    before = db_state(app)
    assert client.post(URL, json={"attribute": "home", "candidates": ["a"]}).status_code == 401
    assert client.post(URL, json={"attribute": "home", "candidates": ["a"]},
                       headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.post("/api/v1/schemas/homes/2/candidates", json={"attribute": "home", "candidates": ["a"]},
                       headers=ADMIN).status_code == 404
    assert db_state(app) == before
    # The total limit counts what is stored: one more than the limit allows, across two adds.
    first = client.post(URL, json={"attribute": "home", "candidates": TOO_MANY[:-2]}, headers=ADMIN)
    assert first.status_code == 202 and first.get_json() == {"added": len(TOO_MANY) - 2}
    middle = db_state(app)
    assert client.post(URL, json={"attribute": "home", "candidates": TOO_MANY[-2:]}, headers=ADMIN).status_code == 400
    assert db_state(app) == middle
    # A listed or already added one (after preparation) is simply not new.
    again = client.post(URL, json={"attribute": "home", "candidates": ["cafe\u0301.fr", TOO_MANY[0], TOO_MANY[-2]]},
                        headers=ADMIN)
    assert again.status_code == 202 and again.get_json() == {"added": 1}


def test_added_candidates_are_back_filled_exactly_once_beside_ingest_and_estimated(clocked):
    clock, app, client = clocked
    rng = random.Random(7)
    windows = ["2026-11-21T10", "2026-11-21T11"]
    for window in windows:
        post(client, reports(rng, 150, window))
    answer = client.post(URL, json={"attribute": "home", "candidates": ADDED[:15]}, headers=ADMIN)
    assert answer.status_code == 202 and answer.get_json() == {"added": 15}
    post(client, reports(rng, 40, windows[1]))  # before any chunk: all above the watermark ''
    # A second batch, added while the first is half done; and one never estimated.
    store = store_of(app)
    settle(app)
    (schema, version, first, size), = read(store, "filling")
    assert size == 15 and not backfill.backfill_chunk(store, counting_of(app), schema, version, first, 60)
    assert candidates.add_candidates(app.extensions["ldp"]["catalog"], "homes", 1, "home", ADDED[15:],
                                     source="discovered", limit=Limit.of(app.config)) == len(ADDED) - 15
    assert candidates.add_candidates(app.extensions["ldp"]["catalog"], "homes", 1, "home", ["ab\ufffd"],
                                     source="discovered", estimated=False,
                                     limit=Limit.of(app.config)) == 1
    assert backfill_in_chunks(app, client, rng, 37, windows[1]) >= 8
    assert read(store, "filling") == []
    post(client, reports(rng, 30, windows[0]))  # after: counted by ingest alone
    expected = reference(app.config["LDP_DB"], LISTED + ADDED + ["ab\ufffd"])
    assert supports(app, LISTED + ADDED + ["ab\ufffd"]) == {k: v for k, v in expected.items() if k[1] != "ab\ufffd"} | {
        (w, "ab\ufffd"): 0 for w in [*windows, ROLLUP]}
    # Estimated from those counters, over every report (none was erased), with their source.
    refresh.refresh(app)
    rows = client.get("/api/v1/estimates?schema=homes&attribute=home").get_json()["estimates"]
    by_key = {(r["window"], r["value"]): r for r in rows}
    e = math.exp(2.0)
    p, q = e / (e + G - 1), 1 / G
    for window in [*windows, ROLLUP]:
        n = expected[(window, "\n")]
        for s in LISTED + ADDED:
            row = by_key[(window, s)]
            assert row["n"] == n
            assert row["estimate"] == pytest.approx((expected[(window, s)] / n - q) / (p - q), abs=1e-9)
    assert not any(r["value"] == "ab\ufffd" for r in rows)
    assert [by_key[(ROLLUP, s)]["source"] for s in LISTED + ADDED] == (
        ["listed"] * len(LISTED) + ["added"] * 15 + ["discovered"] * (len(ADDED) - 15))
    text = client.get("/api/v1/estimates?schema=homes&attribute=home&format=csv").get_data(as_text=True)
    shown = {(r["window"], r["value"]): (r["source"], int(r["n"])) for r in csv.DictReader(io.StringIO(text))}
    assert shown == {k: (r["source"], r["n"]) for k, r in by_key.items()}
    page = client.get("/schemas/homes").get_data(as_text=True)
    assert '<td class="source">discovered</td>' in page and ADDED[20] in page
    listed = client.get(URL).get_json()["candidates"]
    assert [(r["value"], r["source"], r["estimated"]) for r in listed] == (
        [(s, "listed", True) for s in LISTED] + [(s, "added", True) for s in ADDED[:15]]
        + [(s, "discovered", True) for s in ADDED[15:]] + [("ab\ufffd", "discovered", False)])
    assert all(r["fingerprint"] == x(r["value"]) for r in listed)


def test_a_window_erased_before_the_back_fill_has_no_estimate_and_leaves_the_rollup(clocked):
    clock, app, client = clocked
    rng = random.Random(11)
    post(client, reports(rng, 60, "2026-11-21T09"))
    clock[0] = NOW + timedelta(days=3, hours=1)
    post(client, reports(rng, 80, "2026-11-24T12"))
    expected_old = reference(app.config["LDP_DB"], ADDED[:5])
    # Retention erases the first window; then candidates are added and back-filled.
    while retention.expire(app).windows == 0:
        pass
    assert client.post(URL, json={"attribute": "home", "candidates": ADDED[:5]}, headers=ADMIN).status_code == 202
    backfill.backfill(app)
    refresh.refresh(app)
    expected = reference(app.config["LDP_DB"], ADDED[:5])
    assert expected[(ROLLUP, "\n")] == 80 and expected_old[(ROLLUP, "\n")] == 140
    rows = client.get("/api/v1/estimates?schema=homes&attribute=home").get_json()["estimates"]
    by_key = {(r["window"], r["value"]): r for r in rows}
    assert {w for w, _ in by_key} == {"2026-11-24T12", ROLLUP}
    for s in ADDED[:5]:
        assert by_key[(ROLLUP, s)]["n"] == 80 and by_key[("2026-11-24T12", s)]["n"] == 80
    assert by_key[(ROLLUP, LISTED[0])]["n"] == 140
    # Their supports, in the rollup too, are those of the retained reports alone.
    held = supports(app, ADDED[:5])
    assert {k: v for k, v in held.items() if k[1] != "\n"} == {k: v for k, v in expected.items() if k[1] != "\n"}
    assert held[(ROLLUP, "\n")] == 140


def test_two_nodes_back_fill_at_once_beside_ingest_and_count_each_report_once(make_app, new_db, monkeypatch):
    location = new_db()
    nodes = [make_app(LDP_DB=location, LDP_CLOCK=lambda: NOW) for _ in range(2)]
    clients = [node.test_client() for node in nodes]
    publish(clients[0], SCHEMA)
    rng = random.Random(3)
    post(clients[0], reports(rng, 400, "2026-11-21T11"))
    assert clients[1].post(URL, json={"attribute": "home", "candidates": ADDED}, headers=ADMIN).status_code == 202
    monkeypatch.setattr(backfill, "BACKFILL_CELLS", 30 * len(ADDED))
    monkeypatch.setattr(backfill, "MIN_BACKFILL_REPORTS", 1)
    batches = [reports(rng, 10, "2026-11-21T11") for _ in range(12)]
    errors = []

    def run(job):
        try:
            job()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(lambda node=node: backfill.backfill(node, seconds=60),))
               for node in nodes]
    threads.append(threading.Thread(target=run, args=(lambda: [post(clients[i % 2], b) for i, b in enumerate(batches)],)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert read(store_of(nodes[0]), "filling") == []
    assert supports(nodes[1], ADDED) == reference(location, ADDED)


def test_a_chunk_whose_watermark_another_back_fill_moved_adds_nothing_and_the_job_reads_on(make_app, new_db):
    """The job reads a chunk ahead while the one before it is applied (backfill.fill): a chunk read
    from a watermark that has moved since is dropped whole (None), and the job, reading again from
    where the watermark is, still counts every report once."""
    location = new_db()
    app = make_app(LDP_DB=location, LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, SCHEMA)
    post(client, reports(random.Random(5), 300, "2026-11-21T11"))
    settle(app)  # stored now (SQLite: folded from the inbox), for the back-fill to read
    assert client.post(URL, json={"attribute": "home", "candidates": ADDED}, headers=ADMIN).status_code == 202
    store, counting = store_of(app), counting_of(app)
    (schema, version, batch, _), = read(store, "filling")
    stale = store.run_tx("backfill_read", lambda tx: backfill.read_chunk(tx, counting, schema, version, batch, 70),
                         write=False)
    assert backfill.backfill_chunk(store, counting, schema, version, batch, 70) is False  # another back-fill's chunk
    before = supports(app, ADDED)
    assert store.run_tx("backfill_apply", lambda tx: backfill.apply_chunk(tx, counting, stale)) is None
    assert supports(app, ADDED) == before
    with ThreadPoolExecutor(1) as applying:
        assert backfill.fill(store, counting, applying, schema, version, batch, 70, math.inf)
    assert read(store, "filling") == []
    assert supports(app, ADDED) == reference(location, ADDED)


def test_the_scheduler_back_fills_right_after_an_add(make_app):
    from ldp_telemetry.aggregator import jobs

    # The back-fill's interval is seconds; the add asks for a run at once.
    app = make_app(LDP_SCHEDULER=True, LDP_ESTIMATE_INTERVAL=3600, LDP_CLOCK=lambda: NOW)
    try:
        client = app.test_client()
        publish(client, SCHEMA)
        post(client, reports(random.Random(5), 50, "2026-11-21T11"))
        settle(app)
        assert client.post(URL, json={"attribute": "home", "candidates": ADDED[:3]}, headers=ADMIN).status_code == 202
        deadline = time.monotonic() + 30
        while read(store_of(app), "filling"):
            assert time.monotonic() < deadline, "no back-fill within 30 s"
            time.sleep(0.05)
    finally:
        jobs.stop(app)
    assert supports(app, ADDED[:3]) == reference(app.config["LDP_DB"], ADDED[:3])


# Numeric forms no ingest stores (:mod:`ldp_telemetry.aggregator.store.wire`: the flag that the report
# carries "home" (a byte), then its a, b and y (four bytes each), then dark_mode's flag and bit (a
# byte each), little-endian), put behind the store's back: a field out of its range (a from 1, y
# below g = 8 at epsilon 2), a negative one, a home flagged damaged, and forms of another size. The
# back-fill leaves each out, with a warning, and counts the others.
def _wire(*numbers: int) -> bytes:
    return struct.pack("<biiibb", *numbers)


DAMAGED = [_wire(1, 0, 2, 3, 0, 0), _wire(1, 1, 2, 8, 1, 1), _wire(1, -1, 2, 3, 0, 0), _wire(-1, 1, 2, 3, 0, 0),
           _wire(1, 1, 2, 3, 0, 0)[:-1], b""]


def test_damaged_stored_values_are_left_out_of_the_back_fill_and_the_others_counted(clocked, caplog):
    clock, app, client = clocked
    location = app.config["LDP_DB"]
    rng = random.Random(13)
    post(client, reports(rng, 120, "2026-11-21T11"))
    expected = reference(location, ADDED[:5])
    (end,), = sql(location, "SELECT DISTINCT window_end FROM reports")

    def insert(prefix: str, wires: list[bytes]) -> None:
        for i, wire in enumerate(wires):
            blob = f"'\\x{wire.hex()}'::bytea" if location.startswith("postgresql://") else f"X'{wire.hex()}'"
            sql(location, 'INSERT INTO reports (id, schema, version, "window", window_end, "values", wire) VALUES '
                          f"""('{prefix}{i:030d}', 'homes', 1, '2026-11-21T11', {end}, '{{"home": {{}}}}', {blob})""")

    # Some stored before the chunk is read (read a page at a time), some stored in its range between
    # the read and the apply (read by id, as rows).
    insert("0", DAMAGED)
    assert client.post(URL, json={"attribute": "home", "candidates": ADDED[:5]}, headers=ADMIN).status_code == 202
    store = store_of(app)
    (schema, version, batch, _), = read(store, "filling")
    counting = counting_of(app)
    chunk = store.run_tx("backfill_read", lambda tx: backfill.read_chunk(tx, counting, schema, version, batch, 10_000),
                         write=False)
    insert("1", DAMAGED)
    with caplog.at_level("WARNING"):
        assert store.run_tx("backfill_apply", lambda tx: backfill.apply_chunk(tx, counting, chunk))
    assert sum("cannot be counted" in r.getMessage() for r in caplog.records) == 2
    held = supports(app, ADDED[:5])
    assert {k: v for k, v in held.items() if k[1] != "\n"} == {k: v for k, v in expected.items() if k[1] != "\n"}


def test_a_process_that_never_read_the_schema_back_fills_what_another_added(make_app, new_db):
    # A restarted leader, or one whose worker never saw a report of the schema: its catalog reads
    # the schema when counting first asks for it, which must happen before the back-fill's
    # transaction (on SQLite a transaction inside another fails).
    location = new_db()
    first, client = app_with_reports(make_app, location, random.Random(11), 60)
    settle(first)
    assert client.post(URL, json={"attribute": "home", "candidates": ADDED[:4]}, headers=ADMIN).status_code == 202
    fresh = make_app(LDP_DB=location, LDP_CLOCK=lambda: NOW)
    assert backfill.backfill(fresh) == 1
    assert supports(fresh, ADDED[:4]) == reference(location, ADDED[:4])


def test_a_transaction_inside_another_is_refused_as_a_bug(make_app):
    app = make_app()
    store = store_of(app)
    with pytest.raises(RuntimeError, match="inside transaction 'outer'"):
        store.run_tx("outer", lambda tx: store.run_tx("inner", lambda inner: None))
    assert read(store, "filling") == []  # the door opens again


def test_reports_stored_before_their_numeric_form_are_packed_by_the_migration_and_back_filled(make_app, new_db):
    location = new_db()
    app, _ = app_with_reports(make_app, location, random.Random(17), 80)
    packed_at_ingest = dict(sql(location, "SELECT id, wire FROM reports"))
    expected = reference(location, ADDED[:4])
    store_of(app).close()
    # The database as the release before left it: no numeric form, its migration not applied.
    postgres = location.startswith("postgresql://")
    sql(location, "ALTER TABLE reports DROP COLUMN wire")
    sql(location, "DELETE FROM migrations WHERE name IN ('m008_wire', 'm009_wire_of_every_attribute')" if postgres
        else "DELETE FROM _sqlite_migrations WHERE name IN ('m009_wire', 'm010_wire_of_every_attribute')")

    again = make_app(LDP_DB=location, LDP_CLOCK=lambda: NOW)
    assert dict(sql(location, "SELECT id, wire FROM reports")) == packed_at_ingest
    answer = again.test_client().post(URL, json={"attribute": "home", "candidates": ADDED[:4]}, headers=ADMIN)
    assert answer.status_code == 202 and backfill.backfill(again) == 1
    assert supports(again, ADDED[:4]) == expected
