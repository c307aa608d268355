"""The discovery job end to end: reports made by the client, posted over HTTP to a real server on
each store, the job run, the strings found listed as discovered candidates and estimated from the
level-0 reports alone (against a decode written out here)."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
import requests

from conftest import settle, read, write, ADMIN, sql, store_of
from ldp_telemetry.aggregator.questions import discovery
from ldp_telemetry.aggregator.questions import backfill
from ldp_telemetry.aggregator.estimation import refresh
from ldp_telemetry.shared.mechanisms.randomness import HmacStream
from ldp_telemetry.shared.reports import randomize
from ldp_telemetry.shared.schema import parse_schema

pytestmark = pytest.mark.backends

ALPHABET = "abcdefghijklmnopqrstuvwxyz."
SITES = {
    "name": "sites", "version": 1, "epsilon": 4.0, "window": "day",
    "attributes": [{"name": "home", "type": "string", "max_length": 8, "discover": True, "alphabet": ALPHABET,
                    "candidates": ["listed"]}],
}
# Three common strings (one with a character outside the alphabet), and 40 rare ones at 1% each.
COMMON = {"abc.org": 0.30, "xy.net": 0.20, "q!.fr": 0.10}
RARE = [f"r{chr(97 + i // 26)}{chr(97 + i % 26)}.de" for i in range(40)]
DEVICES = 24_000


def x(s: str) -> int:
    return int.from_bytes(hashlib.sha256(b"ldp-telemetry/string/v1\x00" + s.encode()).digest()[:8], "big") % (2**31 - 1)


def test_discovered_strings_are_listed_as_discovered_and_estimated_from_level_0_reports(live_server, make_app):
    url = live_server.url
    requests.post(url + "/api/v1/schemas", json=SITES, headers=ADMIN, timeout=10).raise_for_status()
    derived = requests.get(url + "/api/v1/schemas/sites/1", timeout=10).json()
    levels = derived["attributes"][0]["levels"]
    assert levels == [2, 3, 4, 5, 6, 7, 8]  # 29 symbols: 29^2 <= 4160 < 29^3, then one a level
    strings = [*COMMON, *RARE]
    shares = [*COMMON.values(), *[0.4 / len(RARE)] * len(RARE)]
    rng = np.random.default_rng(1919)
    coins = HmacStream(b"test coins", b"discovery")  # the client's coins, fixed: the test is repeatable
    reports = [randomize(derived, {"home": strings[i]}, source=coins)
               for i in rng.choice(len(strings), size=DEVICES, p=shares)]
    for start in range(0, DEVICES, 1000):
        answer = requests.post(url + "/api/v1/reports", json={"reports": reports[start:start + 1000]}, timeout=60)
        assert answer.status_code == 202, answer.text
    assert requests.post(url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=60).status_code == 200

    app = make_app(LDP_DB=live_server.db)  # the jobs, as the leading process runs them
    assert discovery.discover_strings(app, seed=7) == 3
    assert discovery.discover_strings(app, seed=8) == 0  # found again: already candidates
    while read(store_of(app), "filling"):
        backfill.backfill(app)
    refresh.refresh(app)

    listed = requests.get(url + "/api/v1/schemas/sites/1/candidates", timeout=10).json()["candidates"]
    by_value = {c["value"]: c for c in listed}
    assert {v: (c["source"], c["estimated"]) for v, c in by_value.items()} == {
        "listed": ("listed", True), "abc.org": ("discovered", True), "xy.net": ("discovered", True),
        "q\ufffd.fr": ("discovered", False)}
    # Estimated from the level-0 reports alone: n counts those, supports decoded here.
    level_0 = [json.loads(v)["home"] for (v,) in sql(live_server.db, 'SELECT "values" FROM reports')
               if json.loads(v)["home"]["level"] == 0]
    assert len(level_0) == sum(r["values"]["home"]["level"] == 0 for r in reports)
    a = derived["attributes"][0]
    g, p, q = a["g"], a["p"], a["q"]
    rows = requests.get(url + "/api/v1/estimates?schema=sites&attribute=home", timeout=10).json()["estimates"]
    got = {r["value"]: r for r in rows if r["window"] == "all"}
    assert "q\ufffd.fr" not in got  # listed, never estimated: no level-0 report can support it
    for value in ("abc.org", "xy.net"):
        hits = sum(((r["a"] * x(value) + r["b"]) % (2**31 - 1)) % g == r["y"] for r in level_0)
        assert got[value]["n"] == len(level_0)
        assert math.isclose(got[value]["estimate"], (hits / len(level_0) - q) / (p - q), rel_tol=1e-9, abs_tol=1e-12)
        # Within 4 standard errors of the true share: the randomisation's, sqrt(pi(1 - pi)/n)/(p - q)
        # with pi = q + (p - q)·share, and the population draw's, sqrt(share(1 - share)/devices).
        share = COMMON[value]
        pi = q + (p - q) * share
        se = math.sqrt(pi * (1 - pi) / len(level_0) / (p - q) ** 2 + share * (1 - share) / DEVICES)
        assert abs(got[value]["estimate"] - share) <= 4 * se


def test_the_sample_of_prefix_reports_is_bounded_and_uniform():
    """10,000 rows added a page of 700 at a time into a sample of 1,000: it holds 1,000 of them,
    each once, and their mean index is the uniform's (4,999.5) within 4 sd: the sd of the mean of
    1,000 drawn without replacement from 10,000 is sqrt((10,000^2 - 1)/12/1,000 * 9,000/9,999) = 86.6."""
    sample = discovery.UniformSample(1000, np.random.default_rng(11))
    rows = np.arange(10_000, dtype=np.int64)[:, None] * np.ones(4, dtype=np.int64)
    for start in range(0, 10_000, 700):
        sample.add(rows[start:start + 700])
    a, b, y, level = sample.columns()
    assert a.shape == (1000,) and len(set(a.tolist())) == 1000 and (a == level).all()
    assert abs(a.mean() - 4999.5) <= 4 * 86.6


def test_a_full_attribute_takes_no_discovered_string_and_the_job_goes_on(make_app, caplog):
    full = json.loads(json.dumps(SITES))
    full["attributes"][0]["candidates"] = [f"c{i}" for i in range(10_000)]
    full["attributes"].append({**SITES["attributes"][0], "name": "away", "candidates": []})
    app = make_app()
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=full, headers=ADMIN).status_code == 201
    derived = parse_schema(client.get("/api/v1/schemas/sites/1").get_json())  # parsed once: 10,000 candidates
    coins = HmacStream(b"test coins", b"full")
    reports = [randomize(derived, {"home": "abc.org", "away": "xy.net"}, source=coins) for _ in range(6000)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    settle(app)
    assert discovery.discover_strings(app, seed=1) == 1  # "away" takes its string; "home" has no room
    assert "at most 10000 candidates" in caplog.text
    assert [(c.attribute, c.value, c.source) for c in read(store_of(app), "candidates", "sites", 1)] == \
        [("away", "xy.net", "discovered")]


def test_an_admin_runs_discovery_now_over_http(make_app):
    app = make_app()
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=SITES, headers=ADMIN).status_code == 201
    flags = {"name": "flags", "version": 1, "epsilon": 1.0, "attributes": [{"name": "on", "type": "boolean"}]}
    assert client.post("/api/v1/schemas", json=flags, headers=ADMIN).status_code == 201
    derived = parse_schema(client.get("/api/v1/schemas/sites/1").get_json())
    coins = HmacStream(b"test coins", b"now")
    reports = [randomize(derived, {"home": "abc.org" if i % 2 else "xy.net"}, source=coins) for i in range(8000)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    path = "/api/v1/schemas/sites/1/discover"
    assert client.post(path).status_code == 401
    assert client.post(path, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert client.post("/api/v1/schemas/sites/2/discover", headers=ADMIN).status_code == 404
    refused = client.post("/api/v1/schemas/flags/1/discover", headers=ADMIN)
    assert refused.status_code == 400 and refused.get_json()["details"][0]["field"] == "attributes"
    assert read(store_of(app), "candidates", "sites", 1) == []  # nothing ran for the refused calls
    answer = client.post(path, headers=ADMIN)
    assert answer.status_code == 200 and answer.get_json() == {"added": 2, "left_out": 0}
    assert sorted((c.value, c.source) for c in read(store_of(app), "candidates", "sites", 1)) == [
        ("abc.org", "discovered"), ("xy.net", "discovered")]
    assert client.post(path, headers=ADMIN).get_json() == {"added": 0, "left_out": 0}  # found again: not new


def test_discovery_reads_a_bounded_sample_from_a_random_id_on_and_wraps_round(make_app, monkeypatch):
    """Every stored report once when the budget allows; else exactly the budget, each at most once
    (pages of 300, so that the read crosses pages and the wrap falls inside one)."""
    monkeypatch.setattr(discovery, "PAGE", 300)
    app = make_app()
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=SITES, headers=ADMIN).status_code == 201
    derived = parse_schema(client.get("/api/v1/schemas/sites/1").get_json())
    coins = HmacStream(b"test coins", b"pages")
    reports = [randomize(derived, {"home": "abc.org"}, source=coins) for _ in range(2500)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    store = store_of(app)
    settle(app)
    by_id = {r["id"]: (r["values"]["home"]["a"], r["values"]["home"]["b"]) for r in reports}
    ids = sorted(by_id)
    attribute = derived.attribute("home")
    for start in ("", ids[700], ids[700] + "~", "zzzz"):
        for budget, expected in ((5000, 2500), (2500, 2500), (1234, 1234)):
            pages = list(discovery._stored_columns(store, derived, attribute, start, budget))
            read = [(int(a), int(b)) for page in pages for a, b in zip(page.fields["a"], page.fields["b"])]
            assert len(read) == len(set(read)) == expected, (start, budget)
            if expected < len(ids):  # the ids from the start on, wrapping round
                first = [i for i in ids if i > start] + [i for i in ids if i <= start]
                assert read == [by_id[i] for i in first[:expected]]


def test_near_the_limit_discovery_adds_the_most_supported_strings_that_fit(make_app, caplog):
    nearly = json.loads(json.dumps(SITES))
    nearly["attributes"][0]["candidates"] = [f"c{i}" for i in range(9_999)]
    app = make_app()
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=nearly, headers=ADMIN).status_code == 201
    derived = parse_schema(client.get("/api/v1/schemas/sites/1").get_json())
    coins = HmacStream(b"test coins", b"nearly")
    reports = [randomize(derived, {"home": "abc.org" if i % 5 < 3 else "xy.net"}, source=coins) for i in range(8000)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    assert discovery.discover_strings(app, seed=3) == 1  # room for one: the more common string
    assert [(c.value, c.source) for c in read(store_of(app), "candidates", "sites", 1)] == [("abc.org", "discovered")]
    assert "at most 10000 candidates" in caplog.text
