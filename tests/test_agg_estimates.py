"""Estimates: the shared estimator on exactly the hits and n sent; refresh; filters; CSV."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timedelta, timezone

import pytest
from conftest import ADMIN, APP_USAGE, publish

from ldp_telemetry.shared import estimate, new_report_id, parse_schema

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
SCHEMA = parse_schema(APP_USAGE)
# (window, dark_mode, os) -> how many reports carry exactly these wire values
SENT = {
    ("2026-11-19", True, "linux"): 7, ("2026-11-19", False, "macos"): 3,
    ("2026-11-20", True, "windows"): 2, ("2026-11-20", False, "linux"): 9, ("2026-11-20", True, "other"): 1,
    ("2026-11-21", False, "other"): 4,
}


def wire(window: str, dark_mode: bool, os: str) -> dict:
    return {"id": new_report_id(), "schema": "app-usage", "version": 1, "window": window, "epsilon": 2.0,
            "values": {"dark_mode": dark_mode, "os": os}}


def expected(windows: set[str]) -> dict[tuple, tuple[int, int]]:
    """(attribute, value) -> (hits, n) over ``windows``, counted from SENT."""
    out = {}
    for attribute in SCHEMA.attributes:
        for value in attribute.values:
            hits = n = 0
            for (window, dark_mode, os), count in SENT.items():
                if window in windows:
                    n += count
                    hits += count * ((dark_mode is True) if value is True else (os == value))
            out[(attribute.name, value)] = (hits, n)
    return out


@pytest.fixture
def clock():
    now = [NOW]
    return now


@pytest.fixture
def client(make_app, clock):
    client = make_app(LDP_CLOCK=lambda: clock[0]).test_client()
    publish(client)
    reports = [wire(*key) for key, count in SENT.items() for _ in range(count)]
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
    return client


def refresh(client) -> dict:
    response = client.post("/api/v1/estimates/refresh", headers=ADMIN)
    assert response.status_code == 200
    return response.get_json()


def get(client, query: str = "") -> dict:
    response = client.get("/api/v1/estimates?schema=app-usage" + query)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_estimates_are_the_shared_estimator_on_exactly_what_was_sent(client):
    refresh(client)
    body = get(client)
    assert (body["schema"], body["version"], body["confidence"]) == ("app-usage", 1, 0.95)
    windows = sorted({key[0] for key in SENT})
    for window in windows + ["all"]:
        counts = expected(set(windows) if window == "all" else {window})
        rows = [e for e in body["estimates"] if e["window"] == window]
        assert [(r["attribute"], r["value"]) for r in rows] == [(a, v) for a, v in counts]  # schema order
        for row in rows:
            hits, n = counts[(row["attribute"], row["value"])]
            attribute = SCHEMA.attribute(row["attribute"])
            e = estimate(hits, n, attribute.p, attribute.q, 0.95)
            assert (row["estimate"], row["estimate_clipped"], row["ci_low"], row["ci_high"], row["n"]) == \
                   (e.estimate, e.estimate_clipped, e.ci_low, e.ci_high, e.n)
            assert row["epsilon"] == attribute.epsilon == 1.0
            assert row["computed_at"] == "2026-11-21T12:00:00Z"
    assert [e["window"] for e in body["estimates"]][-5:] == ["all"] * 5


def test_no_estimates_before_the_first_refresh(client):
    assert get(client)["estimates"] == []


def test_refresh_recomputes_only_what_changed(client, clock):
    first = refresh(client)
    assert first == {"written": 3 * 5 + 5, "windows": 3}  # 5 values per window, and the rollup
    assert refresh(client) == {"written": 0, "windows": 0}
    clock[0] = NOW + timedelta(minutes=5)
    more = [wire("2026-11-20", True, "linux")]
    client.post("/api/v1/reports", json={"reports": more})
    assert refresh(client) == {"written": 5 + 5, "windows": 1}
    stamps = {(e["window"], e["computed_at"]) for e in get(client)["estimates"]}
    assert stamps == {("2026-11-19", "2026-11-21T12:00:00Z"), ("2026-11-20", "2026-11-21T12:05:00Z"),
                      ("2026-11-21", "2026-11-21T12:00:00Z"), ("all", "2026-11-21T12:05:00Z")}
    rollup = {(e["attribute"], e["value"]): e["n"] for e in get(client, "&attribute=dark_mode")["estimates"]
              if e["window"] == "all"}
    assert rollup == {("dark_mode", True): sum(SENT.values()) + 1}


def test_a_new_confidence_recomputes_every_window(make_app, new_db, clock):
    db = new_db()
    first = make_app(LDP_DB=db, LDP_CLOCK=lambda: clock[0]).test_client()
    publish(first)
    first.post("/api/v1/reports", json={"reports": [wire(*k) for k in SENT]})
    refresh(first)
    second = make_app(LDP_DB=db, LDP_CONFIDENCE=0.9, LDP_CLOCK=lambda: clock[0]).test_client()
    assert get(second)["confidence"] == 0.95  # what the stored intervals were computed at
    assert refresh(second)["windows"] == 3
    body = get(second, "&attribute=dark_mode")
    row = next(e for e in body["estimates"] if e["window"] == "all")
    attribute = SCHEMA.attribute("dark_mode")
    hits = sum(1 for k in SENT if k[1])
    assert body["confidence"] == 0.9
    assert row["ci_low"] == estimate(hits, len(SENT), attribute.p, attribute.q, 0.9).ci_low


def test_filters(client):
    refresh(client)
    rows = get(client, "&attribute=os&since=2026-11-20&until=2026-11-20")["estimates"]
    assert {(e["window"], e["attribute"]) for e in rows} == {("2026-11-20", "os"), ("all", "os")}
    rows = get(client, "&since=2026-11-21")["estimates"]
    assert {e["window"] for e in rows} == {"2026-11-21", "all"}
    rows = get(client, "&until=2026-11-19&version=1")["estimates"]
    assert {e["window"] for e in rows} == {"2026-11-19", "all"}


def test_the_latest_version_unless_one_is_asked_for(client):
    publish(client, {**APP_USAGE, "version": 2, "epsilon": 4.0})
    client.post("/api/v1/reports", json={"reports": [{**wire("2026-11-21", True, "linux"), "version": 2,
                                                     "epsilon": 4.0}]})
    refresh(client)
    latest = get(client)
    assert latest["version"] == 2 and {e["n"] for e in latest["estimates"]} == {1}
    assert get(client, "&version=1")["version"] == 1


def test_csv_has_the_same_columns_and_numbers(client):
    refresh(client)
    data = get(client)["estimates"]
    response = client.get("/api/v1/estimates?schema=app-usage&format=csv")
    assert response.status_code == 200 and response.mimetype == "text/csv"
    rows = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
    assert list(rows[0]) == ["window", "attribute", "value", "estimate", "estimate_clipped", "ci_low", "ci_high",
                             "n", "epsilon", "computed_at", "relayed", "crowd", "epsilon_shuffled", "delta"]
    assert len(rows) == len(data)
    for row, e in zip(rows, data):
        assert row["value"] == ("true" if e["value"] is True else e["value"])
        assert [float(row[c]) for c in ("estimate", "estimate_clipped", "ci_low", "ci_high", "epsilon")] == \
               [e[c] for c in ("estimate", "estimate_clipped", "ci_low", "ci_high", "epsilon")]
        assert (int(row["n"]), row["window"], row["computed_at"]) == (e["n"], e["window"], e["computed_at"])
        # Reports posted directly: none relayed, no crowd, no central guarantee claimed.
        assert (float(row["relayed"]), row["crowd"], row["epsilon_shuffled"], row["delta"]) == (0.0, "", "", "")
        assert (e["relayed"], e["crowd"], e["epsilon_shuffled"], e["delta"]) == (0.0, None, None, None)


def test_since_after_until_is_a_clear_400(client, publish_schema):
    publish_schema(client)
    response = client.get("/api/v1/estimates?schema=app-usage&since=2026-11-21&until=2026-11-01")
    assert response.status_code == 400 and "after until" in response.get_json()["error"]
