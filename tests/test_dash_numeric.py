"""The dashboard's numeric, histogram and memoised views, the planner line and the too-wide notice
(rendered by the real app on a real SQLite file; the browser test draws them in Chromium)."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from html import unescape

import pytest
from conftest import ADMIN, APP_USAGE

from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.planner import plan

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
WINDOWS = ("2026-11-19", "2026-11-20", "2026-11-21")
NUMBERS = {"name": "numbers", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "session_minutes", "type": "numeric", "range": [0, 120]},
    {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]}]}
MEMO = {"name": "memo", "version": 1, "epsilon": 1.0, "epsilon_permanent": 5.0, "window": "day",
        "attributes": [{"name": "flag", "type": "boolean"}]}


@pytest.fixture
def client(make_app):
    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    for definition in (NUMBERS, MEMO):
        assert client.post("/api/v1/schemas", json=definition, headers=ADMIN).status_code == 201
    numbers, memo = parse_schema(NUMBERS), parse_schema(MEMO)
    reports = []
    for i, window in enumerate(WINDOWS):
        reports += [randomize(numbers, {"session_minutes": 20 + (j % 40), "load_ms": (j * 13) % 900}, window=window)
                    for j in range(400 * (i + 1))]
        reports += [randomize(memo, {"flag": j % 4 == 0}, window=window, device_secret=os.urandom(32))
                    for j in range(30)]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    return client


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_a_numeric_mean_shows_in_its_units_with_a_line_and_band(client):
    rows = client.get("/api/v1/estimates?schema=numbers&attribute=session_minutes").get_json()["estimates"]
    latest = next(r for r in rows if r["window"] == WINDOWS[-1])
    assert latest["value"] == "mean" and 0 <= latest["ci_low"] < latest["ci_high"] <= 120
    html = client.get("/schemas/numbers").get_data(as_text=True)
    section = html[html.index('id="attr-session_minutes"'):html.index('id="attr-load_ms"')]
    table = text(section[section.index("<table"):section.index("</table>")])
    assert f'{latest["estimate_clipped"]:.1f}' in table and "%" not in table  # minutes, not percent
    # Every mean of a 0-120 range to one decimal (a thousandth of it), so windows read alike: the
    # issue's "33.83" beside "34.7" was 4 significant digits, which drop a trailing zero.
    means = re.findall(r'<span class="(?:est|ci)">([^<]*)</span>', section)
    assert means and all(re.fullmatch(r"\d+\.\d( – \d+\.\d)?", unescape(m).rstrip("*")) for m in means), means
    assert section.count("polygon class=\"band\"") == 1 and "mean per window in its own units" in section
    assert "range 0 to 120" in text(section)


def test_a_histogram_shows_bars_per_bucket_in_bucket_order(client):
    html = client.get("/schemas/numbers").get_data(as_text=True)
    section = html[html.index('id="attr-load_ms"'):html.index('id="privacy"')]
    buckets = re.findall(r'<tr data-value="([^"]+)"', section)
    assert [unescape(b) for b in buckets] == ["[0, 50)", "[50, 100)", "[100, 250)", "[250, 1000]"]
    assert "share of each bucket per window" in section and section.count("<rect") >= 3 * 4


def test_the_planner_line_and_detection_threshold_are_the_planners(client):
    html = client.get("/schemas/numbers?half_width.session_minutes=2&half_width.load_ms=0.5").get_data(as_text=True)
    plans = {p.attribute.name: p for p in plan(parse_schema(NUMBERS))}
    minutes = text(html[html.index('id="plan-session_minutes"'):html.index('id="privacy-session_minutes"')])
    assert (f"with 1,200 reports a window (the latest window's n) the interval is at most about "
            f"±{plans['session_minutes'].half_width(1200):.2g} in its units (its widest, whatever the true mean)") in minutes
    assert f"±2 in its units needs {plans['session_minutes'].reports_for(2):,} reports" in minutes
    load = text(html[html.index('id="plan-load_ms"'):html.index('id="privacy-load_ms"')])
    assert f"tells from zero (the detection threshold) is {plans['load_ms'].detection_threshold(1200) * 100:.1f}%" in load
    assert f"needs {plans['load_ms'].reports_for(0.005):,} reports" in load
    bad = client.get("/schemas/numbers?half_width.load_ms=-3").get_data(as_text=True)
    assert "the half-width for load_ms must be a positive number" in bad


def test_a_memoised_schema_states_both_bounds_and_its_rollup(client):
    html = text(client.get("/schemas/memo").get_data(as_text=True))
    assert "Each report is ε = 1 private" in html
    assert "the server can learn at most ε ∞ = 5 about it" in html
    assert "never narrower than the widest a single window can have" in html
    assert "the total never exceeds ε ∞ = 5" in html


def test_an_interval_too_wide_to_be_useful_says_so(client):
    # 30 reports a window at ε = 1: the share's interval is far wider than ±25 points
    html = client.get("/schemas/memo").get_data(as_text=True)
    assert 'class="notice too-wide"' in html
    assert 'class="notice too-wide"' not in client.get("/schemas/numbers").get_data(as_text=True)


@pytest.mark.parametrize("query, sentence", [
    ("half_width.os=1e-308", "the half-width for os must be from 0.0001 to 100 percentage points, got 1e-308"),
    ("half_width.os=1e308", "the half-width for os must be from 0.0001 to 100 percentage points, got 1e+308"),
    ("half_width.os=1e-200&half_width.dark_mode=1e-150",
     "the half-width for dark_mode must be from 0.0001 to 100 percentage points, got 1e-150; "
     "the half-width for os must be from 0.0001 to 100 percentage points, got 1e-200"),
])
def test_an_extreme_half_width_gets_a_sentence_not_a_server_error(make_app, query, sentence):
    # Each was a 500: 1e-308 squared is 0 (ZeroDivisionError), 1e308 squared overflows.
    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    assert client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 201
    response = client.get(f"/schemas/app-usage?{query}")
    assert response.status_code == 200
    html = text(response.get_data(as_text=True))
    assert f"Planner: {sentence}." in html
    # every planner line still shows, at its default half-width (1 percentage point)
    os_plan = next(p for p in plan(parse_schema(APP_USAGE)) if p.attribute.name == "os")
    assert f"needs {os_plan.reports_for(0.01):,} reports of the schema per window" in html
