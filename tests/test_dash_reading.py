"""The dashboard reads right (issue 22, points 2 and 7): the privacy panel's interval is the
table's, categories keep the schema's order, chart labels sit under their bars, a single window
is captioned as a dot, a mean's privacy text is in its units, and one report reads as one."""

from __future__ import annotations

import os
import re
from datetime import datetime, timedelta, timezone
from html import unescape

import pytest
from conftest import ADMIN

from ldp_telemetry.aggregator.dashboard import charts
from ldp_telemetry.shared.display import SHARE
from ldp_telemetry.shared import parse_schema, randomize

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
SETTINGS = {"name": "settings", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "dark_mode", "type": "boolean"},
    {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]}]}
MEMOISED = {**SETTINGS, "name": "memoised", "epsilon": 1.0, "epsilon_permanent": 4.0}
USAGE = {"name": "usage", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "session_minutes", "type": "numeric", "range": [0, 120]}]}
# "other" is the largest category: sorted by estimate it would come first, in schema order it is last
ONE_REPORTS = re.compile(r"(?<![\d,.])1 reports")
OS_SHARES = {"linux": 0.1, "macos": 0.2, "windows": 0.25, "other": 0.45}


def windows(days: int) -> list[str]:
    return [(NOW - timedelta(days=back)).strftime("%Y-%m-%d") for back in reversed(range(days))]


def post(client, definition, records_by_window, secret: bool = False):
    schema = parse_schema(definition)
    reports = [randomize(schema, record, window=window, device_secret=os.urandom(32) if secret else None)
               for window, records in records_by_window.items() for record in records]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202


def settings_records(count: int) -> list[dict]:
    cut = [round(sum(list(OS_SHARES.values())[:i + 1]) * count) for i in range(len(OS_SHARES))]
    return [{"dark_mode": i % 5 < 2, "os": next(c for c, top in zip(OS_SHARES, cut) if i < top)} for i in range(count)]


@pytest.fixture
def client(make_app):
    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    for definition in (SETTINGS, MEMOISED, USAGE):
        assert client.post("/api/v1/schemas", json=definition, headers=ADMIN).status_code == 201
    post(client, SETTINGS, {w: settings_records(2000) for w in windows(7)})
    post(client, MEMOISED, {w: settings_records(300) for w in windows(7)}, secret=True)
    post(client, USAGE, {windows(1)[0]: [{"session_minutes": 1}]})  # one report, one window
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    return client


def section(html: str, attribute: str) -> str:
    return re.search(rf'<section class="card attribute" id="attr-{attribute}".*?</section>', html, re.S)[0]


def text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


@pytest.mark.parametrize("name", ["settings", "memoised"])
def test_the_privacy_panel_states_the_interval_its_table_shows(client, name):
    # The memoised rollup's interval is held to its widest window's, about 3 times the formula's at
    # n reports (the issue's ±2.7 against ±7.5): the panel must say the table's, never the formula's.
    html = client.get(f"/schemas/{name}").get_data(as_text=True)
    rows = client.get(f"/api/v1/estimates?schema={name}").get_json()["estimates"]
    for attribute in ("dark_mode", "os"):
        rollup = [r for r in rows if r["window"] == "all" and r["attribute"] == attribute]
        widest = max((r["ci_high"] - r["ci_low"]) / 2 for r in rollup)
        part = section(html, attribute)
        local = re.search(r'<b class="local">±([^<]*)</b>', part)[1]
        assert unescape(local) == SHARE.width(widest)
        # and in the schema's privacy table, the same figure
        table_row = re.search(rf'<tr><td class="value">{attribute}</td>.*?</tr>', html, re.S)[0]
        assert f"±{SHARE.width(widest)}" in unescape(table_row)
        assert f"{rollup[0]['n']:,} reports" in text(part)


def test_categories_keep_the_schema_order_in_table_and_legend(client):
    part = section(client.get("/schemas/settings").get_data(as_text=True), "os")
    assert re.findall(r'<tr data-value="([^"]*)">', part) == list(OS_SHARES)
    legend = re.search(r'<ul class="legend">(.*?)</ul>', part, re.S)[1]
    assert re.findall(r'</span>([^<]+)</li>', legend) == list(OS_SHARES)


def test_bar_chart_window_labels_sit_under_their_groups():
    days = windows(7)
    chart = charts.bar_chart(days, list(OS_SHARES), [[charts.Interval(0.2, 0.1, 0.3)] * 4 for _ in days])
    group = (charts.WIDTH - charts.RIGHT - charts.LEFT) / len(days)
    for tick in chart.x_ticks:
        i = days.index(tick.label)
        bars = chart.bars[4 * i:4 * i + 4]
        middle = (bars[0].x + bars[-1].x + bars[-1].width) / 2
        assert tick.edge == ""  # centred on a narrow screen too
        assert abs(tick.at - middle) < 0.1 * group  # under the group, not beside it


@pytest.mark.parametrize(("low", "high"), [(0, 120), (-2.44, 122), (0, 10_000), (0.2, 0.8)])
def test_a_unit_axis_has_a_few_labels_whatever_its_range(low, high):
    # A mean's interval at n = 1 spans its whole range: 0 to 120 minutes was labelled every 5.
    _, ticks = charts.unit_scale([low, high])
    assert 3 <= len(ticks) <= 6
    assert float(ticks[0].label) <= low and float(ticks[-1].label) >= high


def test_one_report_reads_as_one_and_a_mean_in_its_units(client):
    html = client.get("/schemas/usage").get_data(as_text=True)
    words = text(section(html, "session_minutes"))
    assert not ONE_REPORTS.search(text(html)) and "1 report" in words
    assert "e+" not in words  # no ±2.1e+02
    assert "Dot: mean, in the attribute's units; whisker" in words and "Line:" not in words
    # the hybrid mechanism's two outputs, in minutes (C = 1.037 at ε 4: 60 ± 62.2), not ±1.04
    assert "stand for 122 and -2.24 in the attribute's units" in words
    assert "randomised response" not in text(re.search(r'<section class="card" id="privacy">.*?</section>',
                                                       html, re.S)[0]).split("Privacy profile")[0]


def test_a_share_at_one_report_says_no_share_can_be_told_and_compares_honestly(make_app):
    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    # ε 0.5 per attribute: at one report the detection threshold is far above 100% (the 188.1%)
    assert client.post("/api/v1/schemas", json=MEMOISED, headers=ADMIN).status_code == 201
    post(client, MEMOISED, {windows(1)[0]: settings_records(1)}, secret=True)
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    words = text(client.get("/schemas/memoised").get_data(as_text=True))
    assert not ONE_REPORTS.search(words) and "e+" not in words
    assert "no share can be told from zero" in words and "smallest share" not in words  # not "188.1%"
    assert "1× narrower" not in words and "cannot be compared yet" in words
