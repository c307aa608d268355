"""The gateway, POST /api/v1/relay/batches (DESIGN.md, "Relay and amplification"): each request of
a relay's batch opened alone, the valid reports stored exactly once with the batch's crowd per
window, the rows' relay fields, and the refusals of a whole batch changing nothing. On both stores,
through the real app; the body limits and the key bytes also through a real server."""

from __future__ import annotations

import csv
import io
import json
import random
from datetime import datetime, timedelta, timezone

import pytest
import requests
from conftest import (ADMIN, APP_USAGE, LiveServer, db_state, expected_counters, publish, read, settle, sql, store_of,
                      stored_counters)

from ldp_telemetry.aggregator import ohttp_keys
from ldp_telemetry.aggregator.store import CrowdRow
from ldp_telemetry.shared import ohttp, parse_schema, randomize
from ldp_telemetry.shared.amplification import shuffle_epsilon

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
TODAY, YESTERDAY = "2026-11-21", "2026-11-20"
RELAY_TOKEN = "relay-token-0123456789"
RELAY = {"Authorization": f"Bearer {RELAY_TOKEN}", "Content-Type": ohttp.BATCH_MEDIA_TYPE}
SCHEMA = parse_schema(APP_USAGE)
SMALLEST_RELAY_BODY = ohttp.MAX_REQUEST_BYTES + 4  # LDP_MAX_RELAY_BODY's least: one request and its length


@pytest.fixture
def app(make_app):
    return make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN)


@pytest.fixture
def client(app):
    client = app.test_client()
    publish(client)
    return client


def reports(count: int, window: str = TODAY) -> list[dict]:
    return [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"}, window=window) for _ in range(count)]


def key_config(client) -> ohttp.KeyConfig:
    """The key a client would use: the first usable one the aggregator serves."""
    return ohttp.choose_key_config(client.get("/api/v1/ohttp-keys").data)


def content(*sent: dict) -> bytes:
    """What a client puts in a request: ``{"reports": [...]}`` as compact JSON."""
    return json.dumps({"reports": list(sent)}, separators=(",", ":")).encode()


def request_of(config: ohttp.KeyConfig, *sent: dict, message: bytes | None = None) -> bytes:
    """One encapsulated request holding ``sent`` (a client sends one report a request), padded to
    the schema's size."""
    return ohttp.encapsulate(config, message or ohttp.bhttp_request(content(*sent), ohttp.padded_size(SCHEMA)))


def post_batch(client, requests_: list[bytes], headers=RELAY):
    return client.post("/api/v1/relay/batches", data=ohttp.frame_batch(requests_), headers=headers)


def crowds(app, window: str = TODAY) -> CrowdRow | None:
    return read(store_of(app), "crowds", "app-usage", 1).get(window)


def refused_metric(client) -> dict[str, float]:
    text = client.get("/metrics").get_data(as_text=True)
    out = {}
    for line in text.splitlines():
        if line.startswith("ldp_relay_refused_total{"):
            reason = line.split('reason="')[1].split('"')[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def bad_requests(config: ohttp.KeyConfig) -> dict[str, list[bytes]]:
    """Requests that fail at each step, by the reason they are refused for."""
    good = request_of(config, *reports(1))
    unknown_key = ohttp.KeyConfig((config.key_id + 7) % 256, ohttp.public_key_of(ohttp.generate_private_key()))
    other_suite = bytearray(good)
    other_suite[1:3] = b"\x00\x10"  # KEM P-256: not ours
    tampered = bytearray(good)
    tampered[-1] ^= 1  # the AEAD tag no longer verifies
    padded = ohttp.bhttp_request(content(*reports(1)), ohttp.padded_size(SCHEMA))
    nonzero_padding = padded[:-1] + b"\x01"
    wrong_epsilon = {**reports(1)[0], "epsilon": 3.0}
    future = reports(1, window="2026-11-23")[0]
    # Values nested past the parser's depth: one request refused, never the batch failing with it.
    deep = json.dumps({"reports": [{**reports(1)[0], "values": "@"}]}).replace('"@"', "[" * 3000 + "]" * 3000)
    return {
        "key": [request_of(unknown_key, *reports(1)), bytes(other_suite), b"\x00" * 10],
        "decrypt": [bytes(tampered)],
        "request": [request_of(config, message=nonzero_padding), request_of(config, message=b"not binary http"),
                    request_of(config, *reports(2))],  # two reports in one request: one device's, so refused
        "report": [request_of(config, wrong_epsilon), request_of(config, future),
                   request_of(config, message=ohttp.bhttp_request(b"{not json", 1024)),
                   request_of(config, message=ohttp.bhttp_request(deep.encode(), len(deep) + 64))],
    }


def test_a_batch_with_bad_requests_mixed_in_counts_exactly_the_good_ones(app, client):
    config = key_config(client)
    good = reports(20)
    bad = bad_requests(config)
    batch = [request_of(config, r) for r in good] + [r for rs in bad.values() for r in rs]
    random.Random(1).shuffle(batch)
    response = post_batch(client, batch)
    refused = sum(map(len, bad.values()))
    assert (response.status_code, response.get_json()) == (200, {"accepted": 20, "duplicates": 0,
                                                                 "refused": refused})
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, good)
    assert refused_metric(client) == {reason: float(len(rs)) for reason, rs in bad.items()}
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 20, 0, 20)
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(20,)]


def test_a_resent_batch_is_all_duplicates_and_leaves_the_crowd_as_it_was(app, client):
    config = key_config(client)
    sent = reports(12)
    batch = [request_of(config, r) for r in sent]
    assert post_batch(client, batch).get_json() == {"accepted": 12, "duplicates": 0, "refused": 0}
    before = stored_counters(app, APP_USAGE, [TODAY])
    assert post_batch(client, batch).get_json() == {"accepted": 0, "duplicates": 12, "refused": 0}
    # the same reports in new requests (a relay that re-encapsulated nothing can do this; a retry can)
    again = [request_of(config, r) for r in sent]
    assert post_batch(client, again).get_json() == {"accepted": 0, "duplicates": 12, "refused": 0}
    assert stored_counters(app, APP_USAGE, [TODAY]) == before
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 12, 0, 12)


def test_ids_repeated_in_a_batch_and_reports_posted_directly_are_no_part_of_the_crowd(app, client):
    config = key_config(client)
    direct = reports(5)
    assert client.post("/api/v1/reports", json={"reports": direct}).status_code == 202
    new = reports(7)
    # the 5 posted directly (acknowledged, perhaps not yet folded in), one new report twice, and a
    # request holding one report twice (refused: a request carries one report)
    batch = [request_of(config, r) for r in direct + new] + [request_of(config, new[0]),
                                                             request_of(config, new[1], new[1])]
    assert post_batch(client, batch).get_json() == {"accepted": 7, "duplicates": 5 + 1, "refused": 1}
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, direct + new)
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 7, 5, 7)


def test_the_crowd_is_the_smallest_of_any_batch_and_the_rows_carry_it(app, client):
    config = key_config(client)
    first = reports(30) + reports(8, YESTERDAY)
    assert post_batch(client, [request_of(config, r) for r in first]).get_json()["accepted"] == 38
    # a later batch: 10 new reports of today, 6 of yesterday, and 5 of the first batch again
    second = reports(10) + reports(6, YESTERDAY)
    assert post_batch(client, [request_of(config, r) for r in second + first[:5]]).get_json() == {
        "accepted": 16, "duplicates": 5, "refused": 0}
    direct = reports(20)
    assert client.post("/api/v1/reports", json={"reports": direct}).status_code == 202
    settle(app)
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 40, 20, 10)
    assert crowds(app, YESTERDAY) == CrowdRow("app-usage", 1, YESTERDAY, 14, 0, 6)
    assert crowds(app, "all") == CrowdRow("app-usage", 1, "all", 54, 20, 6)

    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    rows = client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]
    delta = app.config["LDP_SHUFFLE_DELTA"]
    expected = {TODAY: (40 / 60, 10), YESTERDAY: (1.0, 6), "all": (54 / 74, 6)}
    assert {r["window"] for r in rows} == set(expected)
    for r in rows:
        share, crowd = expected[r["window"]]
        assert (r["relayed"], r["crowd"], r["delta"]) == (pytest.approx(share), crowd, delta)
        assert r["epsilon_shuffled"] == shuffle_epsilon(crowd, SCHEMA.epsilon, delta) <= SCHEMA.epsilon

    # CSV: the same fields, the same numbers
    text = client.get("/api/v1/estimates?schema=app-usage&format=csv").get_data(as_text=True)
    for row, r in zip(csv.DictReader(io.StringIO(text)), rows, strict=True):
        assert (float(row["relayed"]), int(row["crowd"]), float(row["epsilon_shuffled"]), float(row["delta"])) == \
               (r["relayed"], r["crowd"], r["epsilon_shuffled"], r["delta"])


def test_a_crowd_counts_only_requests_that_look_alike_by_key_id_and_size(app, client):
    # The aggregator reads each request's key id (its first byte) and size: reports under the key a
    # client held before a rotation, or padded to another size, are crowds of their own.
    old = key_config(client)
    batch = [request_of(old, r) for r in reports(20)]
    batch += [ohttp.encapsulate(old, ohttp.bhttp_request(content(r), ohttp.padded_size(SCHEMA) + ohttp.PAD_UNIT))
              for r in reports(4)]  # a client that pads to another size
    assert post_batch(client, batch).get_json() == {"accepted": 24, "duplicates": 0, "refused": 0}
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 24, 0, 4)

    ohttp_keys.rotate(store_of(app), int(NOW.timestamp()))
    new = key_config(client)
    assert new.key_id != old.key_id
    batch = [request_of(new, r) for r in reports(30)] + [request_of(old, r) for r in reports(3)]
    assert post_batch(client, batch).get_json() == {"accepted": 33, "duplicates": 0, "refused": 0}
    assert crowds(app) == CrowdRow("app-usage", 1, TODAY, 57, 0, 3)  # the three still under the old key


def test_breakdown_rows_carry_the_relay_fields_in_json_and_csv(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN)
    client = app.test_client()
    publish(client, {**APP_USAGE, "breakdowns": [{"of": "dark_mode", "by": "os"}]})
    config = key_config(client)
    assert post_batch(client, [request_of(config, r) for r in reports(9)]).get_json()["accepted"] == 9
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    rows = client.get("/api/v1/breakdowns?schema=app-usage").get_json()["breakdowns"]
    assert rows and all((r["relayed"], r["crowd"]) == (1.0, 9) for r in rows)
    assert all(r["epsilon_shuffled"] == shuffle_epsilon(9, SCHEMA.epsilon, 1e-8) and r["delta"] == 1e-8 for r in rows)
    text = client.get("/api/v1/breakdowns?schema=app-usage&format=csv").get_data(as_text=True)
    for row, r in zip(csv.DictReader(io.StringIO(text)), rows, strict=True):
        assert (float(row["relayed"]), int(row["crowd"]), float(row["epsilon_shuffled"]), float(row["delta"])) == \
               (r["relayed"], r["crowd"], r["epsilon_shuffled"], r["delta"])


def physical_reports(location: str) -> list[tuple]:
    """The stored reports in the order the database keeps them, with what else it keeps of their
    writing: SQLite's table order; PostgreSQL's partition, place in it and transaction id."""
    if location.startswith("postgresql://"):
        return sql(location, "SELECT tableoid::regclass::text, id, xmin::text FROM reports "
                             "ORDER BY tableoid::regclass::text, ctid")
    return sql(location, 'SELECT id, "window", "values" FROM reports')


def test_nothing_stored_tells_the_order_within_a_batch(make_app):
    sent = reports(60)
    orders = []
    for seed in (1, 2):
        app = make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN)
        client = app.test_client()
        publish(client)
        config = key_config(client)
        batch = [request_of(config, r) for r in sent]
        random.Random(seed).shuffle(batch)
        assert post_batch(client, batch).get_json()["accepted"] == 60
        stored = physical_reports(app.config["LDP_DB"])
        if app.config["LDP_DB"].startswith("postgresql://"):
            assert len({xmin for _, _, xmin in stored}) == 1  # one transaction: no request is apart
            for partition in {p for p, _, _ in stored}:
                ids = [i for p, i, _ in stored if p == partition]
                assert ids == sorted(ids)  # each partition in id order, a random token's
            orders.append([(p, i) for p, i, _ in stored])
        else:
            assert [i for i, _, _ in stored] == sorted(r["id"] for r in sent)
            orders.append(stored)
    assert orders[0] == orders[1]  # two shuffles of one batch leave the very same database


def test_refusals_of_the_whole_batch_change_nothing(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN, LDP_MAX_RELAY_BODY=SMALLEST_RELAY_BODY)
    client = app.test_client()
    publish(client)
    config = key_config(client)
    batch = ohttp.frame_batch([request_of(config, r) for r in reports(3)])
    before = db_state(app)
    url = "/api/v1/relay/batches"
    answers = [
        client.post(url, data=batch, headers={"Content-Type": ohttp.BATCH_MEDIA_TYPE}),
        client.post(url, data=batch, headers={**RELAY, "Authorization": "Bearer wrong-token-0123456789"}),
        client.post(url, data=batch, headers={**RELAY, "Authorization": f"Bearer {ADMIN['Authorization'][7:]}"}),
        client.post(url, data=batch, headers={**RELAY, "Content-Type": "application/octet-stream"}),
        client.post(url, data=batch + b"\x00" * SMALLEST_RELAY_BODY, headers=RELAY),
        client.post(url, data=batch[:-3], headers=RELAY),
        client.post(url, data=b"", headers=RELAY),
    ]
    statuses = [a.status_code for a in answers]
    assert statuses == [401, 403, 403, 415, 413, 400, 400]
    assert "LDP_MAX_RELAY_BODY" in answers[4].get_json()["error"]  # the setting the relay's operator must ask about
    assert db_state(app) == before
    assert refused_metric(client) == {"key": 0.0, "decrypt": 0.0, "request": 0.0, "report": 0.0}


def test_more_requests_than_a_batch_may_hold_are_refused_whole(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN)
    client = app.test_client()
    publish(client)
    config = key_config(client)
    body = ohttp.frame_batch([request_of(config, *reports(1))] + [b""] * ohttp.MAX_BATCH_REQUESTS)
    answer = client.post("/api/v1/relay/batches", data=body, headers=RELAY)
    assert answer.status_code == 400 and f"{ohttp.MAX_BATCH_REQUESTS:,}" in answer.get_json()["error"]
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(0,)]


def test_a_real_server_reads_a_relay_batch_past_ldp_max_body_only_for_a_relay(tmp_path, backend, new_db):
    location = new_db() if backend == "postgres" else str(tmp_path / "live.db")
    server = LiveServer(location, workers=1, log_path=tmp_path / "live.log",
                        env={"LDP_RELAY_TOKENS": RELAY_TOKEN, "LDP_MAX_BODY": "8192", "LDP_MAX_RELAY_BODY": str(SMALLEST_RELAY_BODY)})
    server.start()
    try:
        assert requests.post(server.url + "/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 201
        keys = requests.get(server.url + "/api/v1/ohttp-keys")
        assert keys.headers["Content-Type"] == ohttp.KEYS_MEDIA_TYPE
        assert keys.headers["Cache-Control"] == "max-age=3600"
        config = ohttp.choose_key_config(keys.content)
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        sent = reports(40, today)
        body = ohttp.frame_batch([request_of(config, r) for r in sent])
        assert len(body) > 4 * 8192
        url = server.url + "/api/v1/relay/batches"
        stranger = requests.post(url, data=body, headers={"Content-Type": ohttp.BATCH_MEDIA_TYPE})
        assert stranger.status_code == 401
        answer = requests.post(url, data=body, headers=RELAY)
        assert (answer.status_code, answer.json()) == (200, {"accepted": 40, "duplicates": 0, "refused": 0})
        too_big = requests.post(url, data=b"\x00" * (SMALLEST_RELAY_BODY + 1), headers=RELAY)
        assert too_big.status_code == 413
    finally:
        server.stop()
    assert sql(location, "SELECT relayed, direct, crowd FROM crowds WHERE \"window\" = 'all'") == [(40, 0, 40)]


@pytest.mark.sqlite_only
def test_reports_stored_before_the_relay_came_are_counted_as_direct(tmp_path, make_app):
    from sqlite_utils import Database

    from ldp_telemetry.aggregator.store.sqlite_migrations import MIGRATIONS

    path = tmp_path / "before.db"
    db = Database(str(path))
    MIGRATIONS.apply(db, stop_before="m008_relay")
    db["schemas"].insert({"name": "app-usage", "version": 1, "definition": json.dumps(SCHEMA.to_dict()),
                          "published_at": "2026-11-01T00:00:00Z", "candidates_mark": 0})
    sent = reports(6) + reports(4, YESTERDAY)
    db["reports"].insert_all([{"id": r["id"], "schema": "app-usage", "version": 1, "window": r["window"],
                               "window_end": 0, "values": json.dumps(r["values"])} for r in sent])
    db.conn.close()
    app = make_app(LDP_DB=str(path), LDP_CLOCK=lambda: NOW)
    assert read(store_of(app), "crowds", "app-usage", 1) == {
        TODAY: CrowdRow("app-usage", 1, TODAY, 0, 6, None), YESTERDAY: CrowdRow("app-usage", 1, YESTERDAY, 0, 4, None),
        "all": CrowdRow("app-usage", 1, "all", 0, 10, None)}


def test_retention_erases_a_windows_crowd_and_the_rollup_keeps_it(make_app):
    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RELAY_TOKENS=RELAY_TOKEN, LDP_RETENTION_DAYS=1)
    client = app.test_client()
    publish(client)
    config = key_config(client)
    assert post_batch(client, [request_of(config, r) for r in reports(4, YESTERDAY) + reports(9)]).get_json()[
        "accepted"] == 13
    from ldp_telemetry.aggregator import retention

    clock[0] = NOW + timedelta(days=1)
    retention.expire(app)
    assert set(read(store_of(app), "crowds", "app-usage", 1)) == {TODAY, "all"}
    assert crowds(app, "all") == CrowdRow("app-usage", 1, "all", 13, 0, 4)


def test_the_refresh_keeps_each_crowds_epsilon_and_a_read_uses_it_while_it_holds(app, client):
    config = key_config(client)
    assert post_batch(client, [request_of(config, r) for r in reports(50)]).get_json()["accepted"] == 50
    delta = app.config["LDP_SHUFFLE_DELTA"]
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    kept = crowds(app)
    assert (kept.epsilon_crowd, kept.epsilon_delta, kept.epsilon_shuffled) == (
        50, delta, shuffle_epsilon(50, SCHEMA.epsilon, delta))
    assert crowds(app, "all").epsilon_shuffled == kept.epsilon_shuffled

    def shown() -> set:
        rows = client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]
        return {(r["window"], r["crowd"], r["epsilon_shuffled"]) for r in rows}

    # A read shows what the refresh kept (marked here behind the store's back to tell it from a computation).
    sql(app.config["LDP_DB"], "UPDATE crowds SET epsilon_shuffled = 0.125")
    assert shown() == {(TODAY, 50, 0.125), ("all", 50, 0.125)}
    # A smaller crowd since: computed at the read until the next refresh keeps it.
    assert post_batch(client, [request_of(config, r) for r in reports(3)]).get_json()["accepted"] == 3
    fresh = shuffle_epsilon(3, SCHEMA.epsilon, delta)
    assert shown() == {(TODAY, 3, fresh), ("all", 3, fresh)}
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    assert crowds(app).epsilon_shuffled == fresh and crowds(app).epsilon_crowd == 3


def test_exactly_once_with_relay_batches_and_direct_posts_at_once(app, client):
    """Threads post overlapping relay batches and direct batches of the same reports at once: each
    report is stored and counted once, and every stored report is counted as relayed or direct once."""
    import threading

    config = key_config(client)
    sent = reports(120)
    relayed_parts = [sent[0:60], sent[30:90], sent[60:120]]
    direct_parts = [sent[10:40], sent[80:110]]
    answers: list[dict] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(relayed_parts) + len(direct_parts), timeout=30)

    def relay(part: list[dict]) -> None:
        batch = [request_of(config, r) for r in part]
        start.wait()
        try:
            answers.append(post_batch(app.test_client(), batch).get_json())
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    def direct(part: list[dict]) -> None:
        start.wait()
        try:
            assert app.test_client().post("/api/v1/reports", json={"reports": part}).status_code == 202
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=relay, args=(p,)) for p in relayed_parts] + [
        threading.Thread(target=direct, args=(p,)) for p in direct_parts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    assert stored_counters(app, APP_USAGE, [TODAY]) == expected_counters(APP_USAGE, sent)
    row = crowds(app)
    assert row.relayed + row.direct == 120
    assert row.relayed == sum(a["accepted"] for a in answers)
    assert sum(a["accepted"] + a["duplicates"] for a in answers) == sum(map(len, relayed_parts))
    assert row.crowd == min(a["accepted"] for a in answers if a["accepted"])


def test_a_request_whose_content_passes_ldp_max_body_is_refused_alone(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_RELAY_TOKENS=RELAY_TOKEN, LDP_MAX_BODY=4096)
    client = app.test_client()
    publish(client)
    config = key_config(client)
    many = reports(40)
    large = content(*many)
    assert len(large) > 4096
    oversize = request_of(config, message=ohttp.bhttp_request(large, -(-(len(large) + 200) // 1024) * 1024))
    answer = post_batch(client, [oversize, request_of(config, many[0])])
    assert answer.get_json() == {"accepted": 1, "duplicates": 0, "refused": 1}
    assert refused_metric(client)["request"] == 1.0


def test_without_relay_tokens_no_batch_is_taken(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client)
    batch = ohttp.frame_batch([request_of(key_config(client), *reports(1))])
    assert post_batch(client, [], headers={"Content-Type": ohttp.BATCH_MEDIA_TYPE}).status_code == 401
    for token in (RELAY_TOKEN, ADMIN["Authorization"][7:]):
        answer = client.post("/api/v1/relay/batches", data=batch,
                             headers={**RELAY, "Authorization": f"Bearer {token}"})
        assert answer.status_code == 403 and "LDP_RELAY_TOKENS" in answer.get_json()["error"]
    assert sql(app.config["LDP_DB"], "SELECT count(*) FROM reports") == [(0,)]
