"""POST /api/v1/reports through the test client: exactly-once counting, windows, limits."""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timezone

import pytest
from conftest import settle, read, write, APP_USAGE, db_state, expected_counters, publish, store_of, stored_counters

from ldp_telemetry.aggregator.store import is_postgres
from ldp_telemetry.shared import randomize

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
TODAY = "2026-11-21"


@pytest.fixture
def app(make_app):
    return make_app(LDP_CLOCK=lambda: NOW)


@pytest.fixture
def client(app):
    client = app.test_client()
    publish(client)
    return client


def reports(count: int, window: str = TODAY, record=None) -> list[dict]:
    record = record or {"dark_mode": True, "os": "linux"}
    return [randomize(APP_USAGE, record, window=window) for _ in range(count)]


def counters(app, windows=(TODAY,)) -> dict[tuple, tuple[int, int]]:
    return stored_counters(app, APP_USAGE, list(windows))


def test_a_batch_is_stored_and_counted(app, client):
    batch = reports(25)
    response = client.post("/api/v1/reports", json={"reports": batch})
    assert (response.status_code, response.get_json()) == (202, {"accepted": 25, "duplicates": 0})
    assert counters(app) == expected_counters(APP_USAGE, batch)


def test_repeated_ids_in_a_batch_are_duplicates_and_count_once(app, client):
    batch = reports(10)
    response = client.post("/api/v1/reports", json={"reports": batch + batch[:4] + batch[:1]})
    assert response.get_json() == {"accepted": 10, "duplicates": 5}
    assert counters(app) == expected_counters(APP_USAGE, batch)


def test_a_retried_batch_changes_no_counter(app, client):
    batch = reports(10)
    client.post("/api/v1/reports", json={"reports": batch})
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": batch})
    assert response.status_code == 202
    answer = response.get_json()
    assert db_state(app) == before
    # PostgreSQL finds them stored before it answers; SQLite's inbox when it counts them (a
    # moment later: DESIGN.md allows it), and /metrics says so.
    late = re.search(r"^ldp_reports_duplicate_late_total (\S+)$", client.get("/metrics").get_data(as_text=True), re.M)
    assert answer["accepted"] + answer["duplicates"] == 10 and answer["accepted"] == float(late.group(1))
    assert answer == ({"accepted": 0, "duplicates": 10} if is_postgres(app.config["LDP_DB"]) else
                      {"accepted": 10, "duplicates": 0})


def test_an_id_stored_before_is_a_duplicate_even_with_other_content(app, client):
    first = reports(1)[0]
    client.post("/api/v1/reports", json={"reports": [first]})
    impostor = {**reports(1, record={"dark_mode": False, "os": "macos"})[0], "id": first["id"]}
    fresh = reports(2)
    response = client.post("/api/v1/reports", json={"reports": [impostor, *fresh]})
    assert response.get_json() == {"accepted": 2, "duplicates": 1}
    assert counters(app) == expected_counters(APP_USAGE, [first, *fresh])


@pytest.mark.sqlite_only
def test_raw_reports_keep_only_the_window(app, client):
    batch = reports(3)
    client.post("/api/v1/reports", json={"reports": batch}, headers={"User-Agent": "secret-agent/1.0"},
                environ_base={"REMOTE_ADDR": "203.0.113.9"})
    settle(app)
    with sqlite3.connect(app.config["LDP_DB"]) as conn:  # the file itself: what is physically stored
        columns = [row[1] for row in conn.execute("PRAGMA table_info(reports)")]
        dump = "\n".join(conn.iterdump())
    assert columns == ["id", "schema", "version", "window", "window_end", "values", "wire"]
    assert "203.0.113.9" not in dump and "secret-agent" not in dump


def test_one_bad_report_rejects_the_whole_batch_with_its_index(app, client):
    batch = reports(5)
    batch[3] = {**batch[3], "values": {"dark_mode": 1, "os": "linux"}}
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": batch})
    assert response.status_code == 400
    body = response.get_json()
    assert body["details"] == [{"index": 3, "field": "values.dark_mode", "message": "must be JSON true or false"}]
    assert "1 of 5 reports are invalid" in body["error"]
    assert db_state(app) == before


def test_every_bad_report_gets_a_detail(client):
    batch = reports(4)
    batch[0] = {**batch[0], "epsilon": 3.0}
    batch[2] = {**batch[2], "id": "short"}
    details = client.post("/api/v1/reports", json={"reports": batch}).get_json()["details"]
    assert [(d["index"], d["field"]) for d in details] == [(0, "epsilon"), (2, "id")]


@pytest.mark.parametrize("window, accepted", [
    ("2026-11-21", True),    # today
    ("2026-11-22", False),   # tomorrow: starts 12 h after NOW, beyond 300 s of skew
    ("2026-10-23", True),    # ends 2026-10-24 00:00, after the cutoff 2026-10-22 12:00
    ("2026-10-22", True),    # ends 2026-10-23 00:00, still after the cutoff
    ("2026-10-21", False),   # ended 2026-10-22 00:00, before the 30-day cutoff
])
def test_day_windows_against_skew_and_retention(client, window, accepted):
    response = client.post("/api/v1/reports", json={"reports": reports(1, window=window)})
    assert response.status_code == (202 if accepted else 400)
    if not accepted:
        detail = response.get_json()["details"][0]
        assert detail["field"] == "window"
        assert ("future" in detail["message"]) == (window > TODAY)
        assert ("retention" in detail["message"]) == (window < TODAY)


def test_clock_skew_allows_a_window_starting_just_ahead(make_app):
    hourly = {**APP_USAGE, "name": "hourly", "window": "hour"}
    almost = datetime(2026, 11, 21, 12, 56, tzinfo=timezone.utc)  # the 13:00 window starts in 240 s
    for skew, status in ((300, 202), (60, 400)):
        client = make_app(LDP_CLOCK=lambda: almost, LDP_CLOCK_SKEW=skew).test_client()
        publish(client, hourly)
        report = randomize(hourly, {"dark_mode": False, "os": "other"}, window="2026-11-21T13")
        assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == status


def test_retention_setting_moves_the_cutoff(make_app):
    client = make_app(LDP_CLOCK=lambda: NOW, LDP_RETENTION_DAYS=2).test_client()
    publish(client)
    assert client.post("/api/v1/reports", json={"reports": reports(1, window="2026-11-19")}).status_code == 202
    assert client.post("/api/v1/reports", json={"reports": reports(1, window="2026-11-18")}).status_code == 400


def test_batch_limit(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_MAX_BATCH=3)
    client = app.test_client()
    publish(client)
    assert client.post("/api/v1/reports", json={"reports": reports(3)}).status_code == 202
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": reports(4)})
    assert response.status_code == 400 and "LDP_MAX_BATCH" in response.get_json()["error"]
    assert db_state(app) == before


def test_body_limit_by_content_length(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW, LDP_MAX_BODY=4096)
    client = app.test_client()
    publish(client)
    before = db_state(app)
    response = client.post("/api/v1/reports", json={"reports": reports(60)})
    assert response.status_code == 413 and response.get_json()["error"]
    assert db_state(app) == before


def test_sample_split_counts_only_the_carried_attribute(make_app):
    sample = {**APP_USAGE, "name": "sampled", "split": "sample"}
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, sample)
    batch = [randomize(sample, {"dark_mode": True, "os": "macos"}, window=TODAY) for _ in range(40)]
    assert client.post("/api/v1/reports", json={"reports": batch}).status_code == 202
    carried = {name: sum(name in r["values"] for r in batch) for name in ("dark_mode", "os")}
    settle(app)
    totals = read(store_of(app), "window_counters", "sampled", 1, [TODAY])[TODAY].totals
    assert totals == {k: v for k, v in carried.items() if v}


@pytest.mark.sqlite_only
def test_oue_with_1024_categories_counts_every_bit(make_app):
    wide = {"name": "wide", "version": 1, "epsilon": 1.0,
            "attributes": [{"name": "page", "type": "categorical", "mechanism": "oue",
                            "categories": [f"page-{i}" for i in range(1024)]}]}
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    publish(client, wide)
    batch = [randomize(wide, {"page": f"page-{i % 7}"}, window=TODAY) for i in range(60)]
    assert client.post("/api/v1/reports", json={"reports": batch}).get_json() == {"accepted": 60, "duplicates": 0}
    rows = {value: nh for (_, _, value), nh in stored_counters(app, wide, [TODAY]).items()}
    assert len(rows) == 1024
    assert all(rows[f"page-{j}"] == (60, sum(r["values"]["page"][j] for r in batch)) for j in range(1024))
    # Sparse: a counter row only for a bit some report set, in the window and in the rollup (the
    # file itself is opened to count what is physically stored).
    set_bits = sum(any(r["values"]["page"][j] for r in batch) for j in range(1024))
    settle(app)
    with sqlite3.connect(app.config["LDP_DB"]) as conn:
        assert conn.execute("SELECT count(*) FROM counters").fetchone()[0] == 2 * set_bits
