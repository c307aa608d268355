"""String attributes through the aggregator: reports made by the client, posted over real HTTP,
counted as supports and estimated per candidate, against an independent reference decode."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
from statistics import NormalDist

import numpy as np
import pytest
import requests

from client_support import Clock, hours_ago
from conftest import ADMIN, publish, sql
from ldp_telemetry.client import TelemetryClient
from ldp_telemetry.shared.mechanisms.randomness import HmacStream
from ldp_telemetry.shared.reports import randomize

pytestmark = pytest.mark.backends

CANDIDATES = ["example.org", "caf\u00e9.fr", "\U0001f600 smile", "=SUM(A1)", "+cmd", "-x", "@at", "never-seen"]
STRINGS: dict[str, object] = {
    "name": "homes", "version": 1, "epsilon": 3.0, "window": "hour",
    "attributes": [
        {"name": "home", "type": "string", "candidates": CANDIDATES, "epsilon": 2.0},
        {"name": "dark_mode", "type": "boolean", "epsilon": 1.0},
    ],
}
# What devices hold: some listed candidates, and strings nobody listed (which no estimate names).
POPULATION = (["example.org"] * 40 + ["cafe\u0301.fr"] * 20 + ["\U0001f600 smile"] * 10 + ["=SUM(A1)"] * 5
              + ["-x"] * 5 + [f"unlisted-{i}.net" for i in range(20)])
HOURLY = {"max_epsilon_per_day": 100.0}


def reference(stored: list[tuple[str, str]], epsilon: float) -> dict[tuple[str, str], tuple[float, float, float, int]]:
    """(window or "all", candidate) -> (estimate, ci_low, ci_high, n), decoded from the stored
    reports' (a, b, y) with nothing of the project's code: SHA-256 fingerprints, supports in
    Python integers, the share estimator and a Wilson interval written out here."""
    big_p = 2**31 - 1
    e = math.exp(epsilon)
    g = min(65536, math.floor(e + 0.5) + 1)
    p, q = e / (e + g - 1), 1 / g
    z = NormalDist().inv_cdf(0.975)

    def x(s: str) -> int:
        return int.from_bytes(hashlib.sha256(b"ldp-telemetry/string/v1\x00" + s.encode()).digest()[:8], "big") % big_p

    by_window: dict[str, list[dict]] = {}
    for window, values in stored:
        value = json.loads(values).get("home")
        if value is not None:
            by_window.setdefault(window, []).append(value)
            by_window.setdefault("all", []).append(value)
    out = {}
    for window, reports in by_window.items():
        n = len(reports)
        for candidate in CANDIDATES:
            hits = sum(((r["a"] * x(candidate) + r["b"]) % big_p) % g == r["y"] for r in reports)
            f = hits / n
            centre = (f + z * z / (2 * n)) / (1 + z * z / n)
            half = z / (1 + z * z / n) * math.sqrt(f * (1 - f) / n + z * z / (4 * n * n))
            low = 0.0 if hits == 0 else max(0.0, centre - half)
            high = 1.0 if hits == n else min(1.0, centre + half)

            def clip(v: float) -> float:
                return min(1.0, max(0.0, v))

            out[(window, candidate)] = ((f - q) / (p - q), clip((low - q) / (p - q)), clip((high - q) / (p - q)), n)
    return out


def test_client_reports_over_http_are_estimated_as_an_independent_decode_says(live_server, tmp_path):
    url = live_server.url
    requests.post(url + "/api/v1/schemas", json=STRINGS, headers=ADMIN, timeout=10).raise_for_status()
    derived = requests.get(url + "/api/v1/schemas/homes/1", timeout=10).json()
    assert derived["attributes"][0]["mechanism"] == "olh" and derived["attributes"][0]["g"] == 8
    # One device through TelemetryClient (ledger, outbox, sender), one report an hour for 12 hours...
    clock = Clock()
    with TelemetryClient(url, "homes", max_epsilon=3, data_dir=tmp_path / "device", clock=clock,
                         **HOURLY) as telemetry:
        assert telemetry.wait_for_schema(10)
        for hour in range(12):
            hours_ago(clock, hour)
            assert telemetry.record({"home": POPULATION[hour], "dark_mode": True}).queued
        assert telemetry.flush(20)
    # ... and many devices' reports made by randomize(), posted as batches.
    rng = np.random.default_rng(19)
    reports = [randomize(derived, {"home": POPULATION[i], "dark_mode": bool(i % 2)})
               for i in rng.integers(0, len(POPULATION), size=1_500)]
    for start in range(0, len(reports), 500):
        answer = requests.post(url + "/api/v1/reports", json={"reports": reports[start:start + 500]}, timeout=30)
        assert answer.status_code == 202, answer.text
    assert requests.post(url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=60).status_code == 200

    stored = sql(live_server.db, 'SELECT "window", "values" FROM reports')
    assert len(stored) == 1_512
    expected = reference(stored, 2.0)
    body = requests.get(url + "/api/v1/estimates?schema=homes&attribute=home&limit=100000", timeout=10).json()
    got = {(e["window"], e["value"]): e for e in body["estimates"]}
    assert set(got) == set(expected)
    for key, (estimate, low, high, n) in expected.items():
        row = got[key]
        assert row["n"] == n and row["epsilon"] == 2.0
        for name, value in (("estimate", estimate), ("ci_low", low), ("ci_high", high)):
            assert math.isclose(row[name], value, rel_tol=1e-9, abs_tol=1e-9), (key, name, row[name], value)
    # The CSV has the same rows; a candidate a spreadsheet would run as a formula starts with '.
    text = requests.get(url + "/api/v1/estimates?schema=homes&attribute=home&format=csv",
                        timeout=10).text
    values = {row["value"] for row in csv.DictReader(io.StringIO(text))}
    assert {"'=SUM(A1)", "'+cmd", "'-x", "'@at", "example.org", "caf\u00e9.fr"} <= values
    assert "=SUM(A1)" not in values


def test_a_bad_string_report_is_refused_naming_the_field_and_changes_nothing(live_server):
    url = live_server.url
    requests.post(url + "/api/v1/schemas", json=STRINGS, headers=ADMIN, timeout=10).raise_for_status()
    good = randomize(requests.get(url + "/api/v1/schemas/homes/1", timeout=10).json(), {"home": "a", "dark_mode": True})
    bad = json.loads(json.dumps(good))
    bad["id"] = "y" * 20
    bad["values"]["home"]["level"] = 0
    answer = requests.post(url + "/api/v1/reports", json={"reports": [good, bad]}, timeout=10)
    assert answer.status_code == 400
    assert answer.json()["details"][0] == {**answer.json()["details"][0], "index": 1, "field": "values.home"}
    assert sql(live_server.db, "SELECT COUNT(*) FROM reports") == [(0,)]


def test_the_dashboard_lists_strings_most_frequent_first_and_sets_apart_those_including_zero(make_app):
    app = make_app()
    client = app.test_client()
    derived = publish(client, STRINGS)
    rng = np.random.default_rng(3)
    population = ["example.org"] * 70 + ["caf\u00e9.fr"] * 30
    # Fixed coins: with the OS's, never-seen's 95% interval left out zero in about 1 run in 40.
    coins = HmacStream(b"test coins", b"dashboard")
    reports = [randomize(derived, {"home": population[i], "dark_mode": True}, source=coins)
               for i in rng.integers(0, len(population), size=3_000)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    page = client.get("/schemas/homes").get_data(as_text=True)
    section = page[page.index('id="attr-home"'):page.index('id="attr-dark_mode"')]
    table, apart = section.split('id="apart-home"')
    assert table.index('data-value="example.org"') < table.index('data-value="caf\u00e9.fr"')
    assert '<td class="source">listed</td>' in table
    assert 'data-value="never-seen"' in apart and 'data-value="never-seen"' not in table
    assert "&#34;=SUM(A1)" not in page and 'data-value="=SUM(A1)"' in page  # escaped as text, not markup


DISCOVERING: dict[str, object] = {
    "name": "sites", "version": 1, "epsilon": 4.0, "window": "day",
    "attributes": [{"name": "home", "type": "string", "max_length": 12, "discover": True,
                    "alphabet": "abcdefghijklmnopqrstuvwxyz.", "candidates": ["example.org"]}],
}


def test_only_level_0_reports_are_counted_and_the_planner_line_says_what_discovery_can_find(make_app):
    from ldp_telemetry.shared.planner import plan

    client = make_app().test_client()
    derived = publish(client, DISCOVERING)
    assert derived["attributes"][0]["levels"] == list(range(2, 13))  # E = 29: 29^2 <= 4160 < 29^3, then 1 a level
    reports = [randomize(derived, {"home": "example.org"}) for _ in range(2_000)]
    assert client.post("/api/v1/reports", json={"reports": reports[:1000]}).status_code == 202
    assert client.post("/api/v1/reports", json={"reports": reports[1000:]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    level_0 = sum(r["values"]["home"]["level"] == 0 for r in reports)
    rows = client.get("/api/v1/estimates?schema=sites&attribute=home").get_json()["estimates"]
    assert {r["n"] for r in rows} == {level_0}
    page = client.get("/schemas/sites").get_data(as_text=True)
    line = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page[page.index('id="plan-home"'):page.index('id="privacy-home"')]))
    # The page counts the schema's reports from the level-0 ones (half of them); about 90 a level.
    schema_reports = round(level_0 / 0.5)
    share = plan(derived)[0].discovery_threshold(schema_reports)
    assert f"with {level_0:,} level-0 reports a window" in line and f"about {schema_reports:,} reports" in line
    assert (f"Discovery reads the reports of every retained window (about {schema_reports:,} reports of the schema "
            f"here), each at one of its 11 levels or at level 0: it finds strings held by about {share * 100:.1f}%") in line
    assert "little can be found" in line
