"""The dashboard through app.test_client(): escaping, empty states, numbers, range, read token."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from html import unescape

import pytest
from conftest import settle, ADMIN, ADMIN_TOKEN, APP_USAGE

from ldp_telemetry.shared import parse_schema, randomize

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
HOSTILE = "<script>alert('x')</script>"

HOSTILE_SCHEMA = {
    "name": "hostile",
    "version": 1,
    "epsilon": 2.0,
    "description": f"Description with {HOSTILE} & <b>markup</b>",
    "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "kind", "type": "categorical", "categories": [HOSTILE, "\"quoted\" & 'apos'", "plain"]},
    ],
}


@pytest.fixture
def clocked_app(make_app):
    return make_app(LDP_CLOCK=lambda: NOW)


def post_reports(client, schema, records, window):
    parsed = parse_schema(schema)
    reports = [randomize(parsed, record, window=window) for record in records]
    for start in range(0, len(reports), 1000):
        response = client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]})
        assert response.status_code == 202, response.get_json()


def refresh(client):
    response = client.post("/api/v1/estimates/refresh", headers=ADMIN)
    assert response.status_code == 200


def text_of(html: str) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded."""
    return unescape(re.sub(r"<[^>]+>", " ", html))


def test_user_text_is_escaped_everywhere(clocked_app, publish_schema):
    client = clocked_app.test_client()
    schema = publish_schema(client, HOSTILE_SCHEMA)
    records = [{"flag": i % 2 == 0, "kind": [HOSTILE, "plain"][i % 2]} for i in range(200)]
    post_reports(client, schema, records, "2026-11-21")
    refresh(client)
    for path in ("/", "/schemas/hostile"):
        html = client.get(path).get_data(as_text=True)
        assert HOSTILE not in html  # neither in HTML text nor inside the inline SVG
        assert html.count("<script") == 1  # the page's own reload script, nothing else
        assert "<b>markup</b>" not in html
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html  # shown as text
    page = client.get("/schemas/hostile").get_data(as_text=True)
    assert "&#34;quoted&#34; &amp; &#39;apos&#39;" in page
    # The category appears as text in the table, the chart legend and the SVG tooltips.
    assert text_of(page).count(HOSTILE) >= 3


def test_schema_without_reports_has_an_empty_state(client, publish_schema):
    publish_schema(client)
    response = client.get("/schemas/app-usage")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert 'id="empty"' in html
    assert "No device has sent a report for this schema yet" in html
    assert "<svg" in html  # the privacy profile curves are drawn without any data
    assert 'class="estimates"' not in html
    index = client.get("/").get_data(as_text=True)
    assert "last refresh <b>never</b>" in index


def test_reports_waiting_for_a_refresh_are_announced(clocked_app, publish_schema):
    client = clocked_app.test_client()
    schema = publish_schema(client)
    post_reports(client, schema, [{"dark_mode": True, "os": "linux"}] * 30, "2026-11-21")
    settle(clocked_app)  # counted (a moment after the answer, in SQLite)
    html = client.get("/schemas/app-usage").get_data(as_text=True)
    assert "30 reports have arrived; estimates appear after the next refresh" in html
    assert "new reports waiting for the next refresh" in client.get("/").get_data(as_text=True)
    refresh(client)
    html = client.get("/schemas/app-usage").get_data(as_text=True)
    assert 'id="empty"' not in html and 'class="notice"' not in html


@pytest.mark.parametrize("split", ["equal", "sample"])
def test_report_count_is_reports_not_attribute_values(clocked_app, publish_schema, split):
    client = clocked_app.test_client()
    schema = publish_schema(client, {**APP_USAGE, "split": split})
    post_reports(client, schema, [{"dark_mode": True, "os": "linux"}] * 40, "2026-11-20")
    post_reports(client, schema, [{"dark_mode": False, "os": "macos"}] * 25, "2026-11-21")
    refresh(client)
    for path in ("/", "/schemas/app-usage"):
        html = client.get(path).get_data(as_text=True)
        assert "<b>65</b> reports" in html
        assert "<b>2</b> day windows" in html


def test_no_schema_at_all(client):
    html = client.get("/").get_data(as_text=True)
    assert "No schema is published yet" in html


def test_unknown_schema_is_a_404_page(client, publish_schema):
    publish_schema(client)
    assert client.get("/schemas/nope").status_code == 404
    assert client.get("/schemas/app-usage?version=7").status_code == 404
    assert client.get("/schemas/app-usage?version=x").status_code == 404
    assert client.get("/schemas/app-usage?version=1").status_code == 200


def test_numbers_shown_are_the_api_estimates(clocked_app, publish_schema):
    client = clocked_app.test_client()
    schema = publish_schema(client)
    for back, share in ((2, 0.2), (1, 0.5), (0, 0.8)):
        window = (NOW - timedelta(days=back)).strftime("%Y-%m-%d")
        records = [{"dark_mode": i < share * 400, "os": "macos"} for i in range(400)]
        post_reports(client, schema, records, window)
    refresh(client)
    api = client.get("/api/v1/estimates?schema=app-usage").get_json()["estimates"]
    html = client.get("/schemas/app-usage").get_data(as_text=True)
    shown = {}
    for row in re.finditer(r'<tr data-value="([^"]*)">(.*?)</tr>', html, re.S):
        for cell in _cells(row.group(2), unescape(row.group(1))):
            shown[(cell["window"], cell["value"])] = cell
    expected = [e for e in api if e["window"] in ("all", "2026-11-21")]
    assert len(shown) == len(expected) == 10  # (1 boolean value + 4 categories) x (latest, all)
    for e in expected:
        value = "true" if e["value"] is True else e["value"]
        cell = shown[(e["window"], value)]
        assert cell["estimate"] == f"{e['estimate_clipped'] * 100:.1f}%"
        assert cell["interval"] == f"{e['ci_low'] * 100:.1f}% – {e['ci_high'] * 100:.1f}%"
        assert cell["n"] == f"{e['n']:,}"
    # one chart over the three windows per attribute, plus the privacy profiles
    assert html.count('class="chart"') == 3
    assert html.count("<polygon class=\"band\"") == 1


def _cells(row: str, value: str) -> list[dict[str, str]]:
    cells = re.findall(r'data-window="([^"]*)"[^>]*>\s*<span class="est">([^<*]*)\*?</span>\s*'
                       r'<span class="ci">([^<]*)</span></td>\s*<td class="num hide-narrow n">([^<]*)</td>', row)
    return [{"window": w, "value": value, "estimate": e, "interval": unescape(i), "n": n} for w, e, i, n in cells]


def test_window_range_limits_the_chart_and_links_the_csv(clocked_app, publish_schema):
    client = clocked_app.test_client()
    schema = publish_schema(client)
    for back in range(4):
        window = (NOW - timedelta(days=back)).strftime("%Y-%m-%d")
        post_reports(client, schema, [{"dark_mode": True, "os": "linux"}] * 50, window)
    refresh(client)
    html = client.get("/schemas/app-usage?since=2026-11-19&until=2026-11-20").get_data(as_text=True)
    assert "2026-11-19" in html and "2026-11-20" in html
    assert "2026-11-18" not in html and 'data-window="2026-11-21"' not in html
    assert 'data-window="2026-11-20"' in html  # the latest window of the range
    csv_link = unescape(re.search(r'<a href="([^"]*format=csv[^"]*)"', html).group(1))
    assert csv_link.startswith("/api/v1/estimates?")
    csv = client.get(csv_link)
    assert csv.status_code == 200 and csv.mimetype == "text/csv"
    windows = {line.split(",")[0] for line in csv.get_data(as_text=True).splitlines()[1:]}
    assert windows == {"2026-11-19", "2026-11-20", "all"}


def test_a_malformed_range_is_explained_not_an_error(client, publish_schema):
    publish_schema(client)
    response = client.get("/schemas/app-usage?since=yesterday")
    assert response.status_code == 200
    assert "is not a day window" in response.get_data(as_text=True)


def test_page_reloads_itself_and_uses_no_external_resource(client, publish_schema):
    publish_schema(client)
    for path in ("/", "/schemas/app-usage"):
        html = client.get(path).get_data(as_text=True)
        assert re.search(r'<meta http-equiv="refresh" content="\d+">', html)
        assert 'name="viewport"' in html
        assert not re.search(r'(src|href)="(https?:)?//', html)
    css = client.get("/static/dashboard.css")
    assert css.status_code == 200 and "@media (max-width" in css.get_data(as_text=True)


READ_TOKEN = "read-token-for-tests"


def test_read_token_by_query_sets_a_cookie_and_drops_the_token_from_the_url(make_app, publish_schema):
    client = make_app(LDP_READ_TOKEN=READ_TOKEN).test_client()
    publish_schema(client)
    assert client.get("/").status_code == 401
    assert client.get("/schemas/app-usage").status_code == 401
    assert client.get("/static/dashboard.css").status_code == 200  # the stylesheet is not secret
    assert client.get("/?token=wrong-token-here").status_code == 403
    response = client.get(f"/schemas/app-usage?since=2026-11-01&token={READ_TOKEN}")
    assert response.status_code == 302
    assert response.headers["Location"] == "/schemas/app-usage?since=2026-11-01"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert client.get("/schemas/app-usage").status_code == 200  # the cookie now opens it
    html = client.get("/schemas/app-usage").get_data(as_text=True)
    assert "Authorization: Bearer $LDP_READ_TOKEN" in html  # how to fetch the CSV


@pytest.mark.parametrize("token, status", [(READ_TOKEN, 200), (ADMIN_TOKEN, 200), ("not-the-token", 403)])
def test_read_token_as_bearer_header(make_app, publish_schema, token, status):
    client = make_app(LDP_READ_TOKEN=READ_TOKEN).test_client()
    publish_schema(client)
    assert client.get("/", headers={"Authorization": f"Bearer {token}"}).status_code == status


@pytest.mark.parametrize(("split", "carried", "expected"), [
    ("equal", {"home": 50, "flag": 100}, (100, False)),  # the boolean's count is every report's
    ("equal", {"home": 50}, (50, True)),  # only level 0 is counted: the page says so beside it
    ("sample", {"home": 30, "flag": 40}, (70, True)),  # home's prefix reports are not in the sum
])
def test_the_report_count_says_when_it_leaves_discoverys_reports_out(split, carried, expected):
    from ldp_telemetry.aggregator.dashboard.views import counts
    from ldp_telemetry.aggregator.store import Activity
    from ldp_telemetry.shared import parse_schema

    schema = parse_schema({"name": "homes", "version": 1, "epsilon": 4.0, "split": split, "attributes": [
        {"name": "home", "type": "string", "discover": True, "alphabet": "abc.", "max_length": 8},
        {"name": "flag", "type": "boolean"}]})
    seen = counts(schema, Activity(carried, 1, None, False))
    assert (seen.reports, seen.level_zero_only) == expected
