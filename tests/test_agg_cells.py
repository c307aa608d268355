"""Bounded work per schema: a schema version's cells, and LDP_MAX_CELLS refusing a publish, an add
of candidates and the strings discovery finds beyond it (DESIGN.md, "Bounded work per schema")."""

from __future__ import annotations

import logging

import pytest
from conftest import ADMIN, read, store_of

from ldp_telemetry.aggregator.questions import discovery
from ldp_telemetry.aggregator.cells import Limit
from ldp_telemetry.shared.mechanisms.randomness import HmacStream
from ldp_telemetry.shared.reports import randomize
from ldp_telemetry.shared.schema import parse_schema

pytestmark = pytest.mark.backends


def strings(count: int, name: str = "finding") -> dict:
    """Issue 27's schema: hourly, ε = 0.3 (so g = 2), one string attribute of ``count`` listed candidates."""
    return {"name": name, "version": 1, "epsilon": 0.3, "window": "hour",
            "attributes": [{"name": "page", "type": "string", "candidates": [f"/page/{i}" for i in range(count)]}]}


# At the default 30 days an hourly version keeps 721 windows (720 retained and the current one) and
# the rollup: 722 cells a value. 2,770 candidates make 1,999,940 cells; 2,771 make 2,000,662.
JUST_UNDER = 2_770


def test_the_cells_of_each_attribute_type_over_hourly_and_daily_windows():
    schema = parse_schema({"name": "mixed", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
        {"name": "on", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows"]},
        {"name": "minutes", "type": "numeric", "range": [0, 120]},
        {"name": "load", "type": "histogram", "edges": [0, 50, 100, 250, 1000]},
        {"name": "home", "type": "string", "candidates": ["a", "b"]}]})
    values = 2 + 3 + 1 + 4 + 2
    assert Limit(10**9, 30).cells(schema, {}) == values * (30 + 1 + 1)
    assert Limit(10**9, 30).cells(schema, {"home": 5}) == (values + 5) * 32  # stored candidates count too
    assert Limit(10**9, 2.5).cells(schema, {}) == values * (3 + 1 + 1)  # ceil(2.5) days, the current, the rollup
    hourly = parse_schema({**schema.to_dict(), "window": "hour"})
    assert Limit(10**9, 2.5).cells(hourly, {}) == values * (60 + 1 + 1)
    assert Limit(10**9, 1 / 48).cells(hourly, {}) == values * (1 + 1 + 1)  # half an hour: ceil(0.5)


def test_the_finding_s_schema_is_refused_at_publish_naming_both_numbers(client):
    answer = client.post("/api/v1/schemas", json=strings(10_000), headers=ADMIN)
    assert answer.status_code == 400
    error = answer.get_json()["error"]
    assert "7,220,000 cells" in error and "LDP_MAX_CELLS = 2,000,000" in error, error
    assert answer.get_json()["details"][0]["field"] == "attributes"
    assert client.get("/api/v1/schemas/finding/1").status_code == 404  # nothing published


def test_a_version_just_under_the_limit_is_accepted_and_one_more_candidate_is_not(client):
    over = client.post("/api/v1/schemas", json=strings(JUST_UNDER + 1), headers=ADMIN)
    assert over.status_code == 400 and "2,000,662 cells" in over.get_json()["error"]
    assert client.post("/api/v1/schemas", json=strings(JUST_UNDER), headers=ADMIN).status_code == 201


def test_the_limit_and_the_retention_are_the_settings_in_force(make_app):
    small = make_app(LDP_MAX_CELLS=2 * 722 - 1).test_client()
    answer = small.post("/api/v1/schemas", json=strings(2), headers=ADMIN)
    assert answer.status_code == 400 and "1,444 cells" in answer.get_json()["error"]
    shorter = make_app(LDP_MAX_CELLS=2 * 722 - 1, LDP_RETENTION_DAYS=29).test_client()
    assert shorter.post("/api/v1/schemas", json=strings(2), headers=ADMIN).status_code == 201  # 2 x 698 cells


def test_a_published_version_over_a_lowered_limit_is_kept_and_logged_at_start_up(make_app, new_db, caplog):
    db = new_db()
    first = make_app(LDP_DB=db).test_client()
    assert first.post("/api/v1/schemas", json=strings(100), headers=ADMIN).status_code == 201
    with caplog.at_level(logging.WARNING):
        second = make_app(LDP_DB=db, LDP_MAX_CELLS=1_000).test_client()
    assert "schema finding version 1: 72,200 cells" in caplog.text and "LDP_MAX_CELLS = 1,000" in caplog.text
    assert second.get("/api/v1/schemas/finding/1").status_code == 200
    assert second.post("/api/v1/schemas", json=strings(100), headers=ADMIN).status_code == 200  # identical re-post


def test_candidates_that_would_pass_the_limit_are_refused_and_nothing_of_them_added(client):
    assert client.post("/api/v1/schemas", json=strings(JUST_UNDER - 10), headers=ADMIN).status_code == 201
    url = "/api/v1/schemas/finding/1/candidates"
    eleven = [f"/added/{i}" for i in range(11)]
    answer = client.post(url, json={"attribute": "page", "candidates": eleven}, headers=ADMIN)
    assert answer.status_code == 400
    error = answer.get_json()["error"]
    assert "2,000,662 cells" in error and "LDP_MAX_CELLS = 2,000,000" in error, error
    assert answer.get_json()["details"][0]["field"] == "candidates"
    listed = client.get(url).get_json()["candidates"]
    assert {c["source"] for c in listed} == {"listed"}  # nothing of that request added
    # Those already a candidate are not new: ten new ones fit exactly.
    ten = {"attribute": "page", "candidates": ["/page/0", *eleven[:10]]}
    assert client.post(url, json=ten, headers=ADMIN).get_json() == {"added": 10}
    answer = client.post(url, json={"attribute": "page", "candidates": ["/added/x"]}, headers=ADMIN)
    assert answer.status_code == 400 and "2,000,662 cells" in answer.get_json()["error"]


SITES = {"name": "sites", "version": 1, "epsilon": 4.0, "window": "day",
         "attributes": [{"name": "home", "type": "string", "max_length": 8, "discover": True,
                         "alphabet": "abcdefghijklmnopqrstuvwxyz.", "candidates": ["listed"]}]}


def test_discovery_adds_the_most_supported_strings_that_fit_and_says_how_many_it_left_out(make_app, caplog):
    # Daily at 30 days: 32 cells a value; room for two values a window, the listed one and one more.
    app = make_app(LDP_MAX_CELLS=2 * 32 + 31)
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=SITES, headers=ADMIN).status_code == 201
    derived = parse_schema(client.get("/api/v1/schemas/sites/1").get_json())
    coins = HmacStream(b"test coins", b"cells")
    reports = [randomize(derived, {"home": "abc.org" if i % 5 < 3 else "xy.net"}, source=coins) for i in range(8000)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    answer = client.post("/api/v1/schemas/sites/1/discover", headers=ADMIN)
    assert answer.status_code == 200 and answer.get_json() == {"added": 1, "left_out": 1}
    assert [(c.value, c.source) for c in read(store_of(app), "candidates", "sites", 1)] == [("abc.org", "discovered")]
    assert "1 of the 2 new strings found left out" in caplog.text and "LDP_MAX_CELLS = 95" in caplog.text
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "ldp_discovery_left_out_total 1.0" in metrics
    assert discovery.discover_strings(app, seed=5) == 0  # the job too: no room, and no failure
    assert "ldp_discovery_left_out_total 2.0" in client.get("/metrics").get_data(as_text=True)

