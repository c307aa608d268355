"""The dashboard in a real headless Chromium against a real server: the numbers shown are the API's.

Needs Debian's ``chromium`` (``/usr/bin/chromium``; ``.ci/run`` installs it) and Playwright for
Python; without them the test is skipped and says why. Screenshots go to ``tests/artifacts/``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import requests
from conftest import ADMIN, LiveServer

from ldp_telemetry.shared import parse_schema, randomize

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).parent / "artifacts"

SCHEMA = {
    "name": "app-usage",
    "version": 1,
    "epsilon": 3.0,
    "window": "day",
    "description": "Which features people use. <script>document.title='pwned'</script>",
    "attributes": [
        {"name": "dark_mode", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
        {"name": "plan", "type": "categorical", "categories": ["free", "pro", "team"], "mechanism": "oue"},
    ],
}
DAYS, PER_DAY = 5, 1000

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium package (apt-get install chromium; "
                    ".ci/run does) to run the browser test")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def fill(server) -> dict:
    """Publish the schema, post reports over DAYS windows, refresh; the API's estimates."""
    derived = requests.post(server.url + "/api/v1/schemas", json=SCHEMA, headers=ADMIN, timeout=10).json()
    schema = parse_schema(derived)
    rng = np.random.default_rng(5)
    today = datetime.now(timezone.utc)
    for back in range(DAYS - 1, -1, -1):
        window = (today - timedelta(days=back)).strftime("%Y-%m-%d")
        reports = [randomize(schema, {"dark_mode": bool(rng.random() < 0.3 + 0.04 * back),
                                      "os": str(rng.choice(["linux", "macos", "windows", "other"], p=[.3, .25, .4, .05])),
                                      "plan": str(rng.choice(["free", "pro", "team"], p=[.7, .2, .1]))},
                             window=window) for _ in range(PER_DAY)]
        response = requests.post(server.url + "/api/v1/reports", json={"reports": reports}, timeout=30)
        assert response.status_code == 202, response.text
    assert requests.post(server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    return requests.get(server.url + "/api/v1/estimates", params={"schema": "app-usage"}, timeout=10).json()


def test_dashboard_shows_the_api_estimates(chromium, live_server):
    api = fill(live_server)
    latest = max(e["window"] for e in api["estimates"] if e["window"] != "all")
    expected = {(e["attribute"], "true" if e["value"] is True else e["value"], e["window"]): e
                for e in api["estimates"] if e["window"] in ("all", latest)}

    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    requested, errors = [], []
    page.on("request", lambda r: requested.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(live_server.url + "/")
    page.click("text=app-usage")
    page.wait_for_url("**/schemas/app-usage")
    assert page.title() == "app-usage v1: ldp-telemetry"  # the description's script did not run
    assert "<script>document.title='pwned'</script>" in page.inner_text("p.desc")

    shown = {}
    for section in page.locator("section.attribute").all():
        attribute = section.get_attribute("data-attribute")
        for row in section.locator("tr[data-value]").all():
            value = row.get_attribute("data-value")
            for cell in row.locator("td[data-window]").all():
                n = cell.locator("xpath=following-sibling::td[1]").inner_text()
                shown[(attribute, value, cell.get_attribute("data-window"))] = (
                    cell.locator(".est").inner_text(), cell.locator(".ci").inner_text(), n)
    assert set(shown) == set(expected)
    for key, e in expected.items():
        estimate, interval, n = shown[key]
        assert estimate.rstrip("*") == f"{e['estimate_clipped'] * 100:.1f}%", key
        assert interval == f"{e['ci_low'] * 100:.1f}% – {e['ci_high'] * 100:.1f}%", key
        assert n == f"{e['n']:,}", key

    # Charts are inline SVG: one over the windows per attribute, and the privacy profiles.
    assert page.locator("svg.chart").count() == len(SCHEMA["attributes"]) + 1
    assert page.locator("svg.chart polyline.curve").count() == 3  # rr, grr and oue, each at ε 1
    assert page.locator("polygon.band").count() == 1
    assert page.locator("svg.chart rect").count() == DAYS * (4 + 3)
    assert all(url.startswith(live_server.url) for url in requested), requested  # nothing from elsewhere
    assert errors == []

    for summary in page.locator("details.privacy summary").all()[:1]:
        summary.click()
    ARTIFACTS.mkdir(exist_ok=True)
    desktop, phone = ARTIFACTS / "dashboard-desktop.png", ARTIFACTS / "dashboard-phone.png"
    for stale in (desktop, phone):
        stale.unlink(missing_ok=True)
    page.screenshot(path=str(desktop), full_page=True)

    page.set_viewport_size({"width": 375, "height": 800})
    page.reload()
    # Readable on a phone: nothing wider than the screen except inside the scrolling table boxes.
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=str(phone), full_page=True)
    print(f"screenshots: {desktop} {phone}")
    page.close()


def test_empty_schema_in_the_browser(chromium, live_server):
    requests.post(live_server.url + "/api/v1/schemas", json=SCHEMA, headers=ADMIN, timeout=10)
    page = chromium.new_page(viewport={"width": 800, "height": 700})
    page.goto(live_server.url + "/schemas/app-usage")
    assert "No estimates yet" in page.inner_text("#empty")
    assert page.locator("table.estimates").count() == 0
    page.close()


def test_page_refreshes_itself_and_keeps_open_panels(chromium, tmp_path):
    # LDP_ESTIMATE_INTERVAL=10 makes the page reload every 10 s (the shortest it allows).
    server = LiveServer(tmp_path / "refresh.db", workers=1, env={"LDP_ESTIMATE_INTERVAL": "10"})
    server.start()
    try:
        schema = parse_schema(requests.post(server.url + "/api/v1/schemas", json=SCHEMA, headers=ADMIN, timeout=10).json())
        record = {"dark_mode": True, "os": "linux", "plan": "pro"}

        def send(count: int) -> None:
            reports = [randomize(schema, record) for _ in range(count)]
            assert requests.post(server.url + "/api/v1/reports", json={"reports": reports}, timeout=30).status_code == 202
            assert requests.post(server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200

        send(50)
        page = chromium.new_page(viewport={"width": 1000, "height": 800})
        page.goto(server.url + "/schemas/app-usage")
        assert "50 reports" in page.inner_text("ul.facts")
        page.click("#privacy-os summary")
        send(70)  # arrives while the page is open
        with page.expect_navigation(timeout=30_000):  # the page's own reload, no action of ours
            pass
        page.wait_for_load_state()
        assert "120 reports" in page.inner_text("ul.facts")
        assert page.locator("#privacy-os").get_attribute("open") is not None  # the open panel stayed open
        assert page.locator("#privacy-dark_mode").get_attribute("open") is None
        page.close()
    finally:
        server.stop()


NUMBERS = {
    "name": "numbers", "version": 1, "epsilon": 4.0, "window": "day", "epsilon_permanent": None,
    "attributes": [
        {"name": "session_minutes", "type": "numeric", "range": [0, 120]},
        {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]},
    ],
}


def test_numeric_and_histogram_charts_in_the_browser(chromium, live_server):
    # A numeric mean over windows is a line and band in minutes; a histogram is bars per bucket;
    # each attribute has its planner line, and the typed half-width comes back planned.
    definition = {k: v for k, v in NUMBERS.items() if v is not None}
    derived = requests.post(live_server.url + "/api/v1/schemas", json=definition, headers=ADMIN, timeout=10).json()
    schema = parse_schema(derived)
    today = datetime.now(timezone.utc)
    for back in range(2, -1, -1):
        window = (today - timedelta(days=back)).strftime("%Y-%m-%d")
        reports = [randomize(schema, {"session_minutes": 10 + i % 50, "load_ms": (i * 7) % 1000}, window=window)
                   for i in range(500)]
        assert requests.post(live_server.url + "/api/v1/reports", json={"reports": reports}, timeout=30).status_code == 202
    assert requests.post(live_server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    api = requests.get(live_server.url + "/api/v1/estimates", params={"schema": "numbers", "attribute": "session_minutes",
                                                                      "until": today.strftime("%Y-%m-%d")}, timeout=10).json()
    latest = max((e for e in api["estimates"] if e["window"] != "all"), key=lambda e: e["window"])

    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(live_server.url + "/schemas/numbers")
    minutes = page.locator("#attr-session_minutes")
    cell = minutes.locator(f'td[data-window="{latest["window"]}"]')
    assert cell.locator(".est").inner_text().rstrip("*") == f'{latest["estimate_clipped"]:.1f}'  # a tenth of a minute: a thousandth of 0-120
    assert "%" not in cell.inner_text()
    assert minutes.locator("svg.chart polygon.band").count() == 1
    load = page.locator("#attr-load_ms")
    assert load.locator("tr[data-value]").count() == 4 and load.locator("svg.chart rect").count() == 3 * 4
    assert "Planner:" in page.locator("#plan-session_minutes").inner_text()
    page.fill('#plan-session_minutes input[name="half_width.session_minutes"]', "3")
    page.click("#plan-session_minutes button")
    page.wait_for_url("**half_width.session_minutes=3**")
    assert "±3 in its units needs" in page.locator("#plan-session_minutes").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-numeric.png"), full_page=True)
    assert errors == []
    page.close()


# Every attribute type at once, memoised where the design allows it (numeric means cannot be).
EVERY_TYPE = {"name": "every-type", "version": 1, "epsilon": 2.0, "window": "day", "attributes": [
    {"name": "dark_mode", "type": "boolean"},
    {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
    {"name": "session_minutes", "type": "numeric", "range": [0, 120]},
    {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]},
    {"name": "home", "type": "string", "candidates": [
        "example.org", "caf\u00e9.fr", "a-candidate-wider-than-a-phone-screen.example.org/some/long/path"]}]}
MEMOISED = {"name": "memoised", "version": 1, "epsilon": 1.0, "epsilon_permanent": 4.0, "window": "day",
            "attributes": [{"name": "dark_mode", "type": "boolean"},
                           {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]}]}


@pytest.mark.parametrize("definition", [EVERY_TYPE, MEMOISED], ids=lambda d: d["name"])
def test_a_page_at_one_report_reads_right_at_desktop_and_phone_width(chromium, live_server, definition):
    # Issue 22: at n = 1 the page said "with 1 reports", "±2.1e+02 pts", "smallest share 188.1%" and
    # "1× narrower". The screenshots are for a person to look at; the assertions hold what they showed.
    derived = requests.post(live_server.url + "/api/v1/schemas", json=definition, headers=ADMIN, timeout=10).json()
    record = {"dark_mode": True, "os": "macos", "session_minutes": 30, "load_ms": 80, "home": "example.org"}
    report = randomize(parse_schema(derived), {a["name"]: record[a["name"]] for a in definition["attributes"]},
                       device_secret=b"\x07" * 32 if "epsilon_permanent" in definition else None)
    assert requests.post(live_server.url + "/api/v1/reports", json={"reports": [report]}, timeout=10).status_code == 202
    assert requests.post(live_server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live_server.url}/schemas/{definition['name']}")
    for summary in page.locator("details.privacy summary").all():
        summary.click()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-n1-{definition['name']}-desktop.png"), full_page=True)
    words = page.inner_text("main") if page.locator("main").count() else page.inner_text("body")
    assert "1 report" in words and " 1 reports" not in words and "e+" not in words
    assert "1× narrower" not in words and "smallest share" not in words  # no threshold above 100%
    page.set_viewport_size({"width": 375, "height": 800})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=str(ARTIFACTS / f"dashboard-n1-{definition['name']}-phone.png"), full_page=True)
    assert errors == []
    page.close()


def test_a_discovering_string_page_says_what_its_numbers_count_at_desktop_and_phone_width(chromium, live_server):
    # Issue 31: the header said 99,731 reports of 200,000 sent; the planner said "28,306 reports a
    # window" beside a table whose n was 14,153; and at phone width the source column and two
    # columns of the privacy table, which the text below explains, disappeared.
    from ldp_telemetry.tools.populations import homepage_schema, homepages

    derived = requests.post(live_server.url + "/api/v1/schemas", json=homepage_schema(), headers=ADMIN,
                            timeout=10).json()
    schema = parse_schema(derived)
    devices = homepages(6000, 3, datetime.now(timezone.utc), np.random.default_rng(7))
    reports = [randomize(schema, d.record, window=d.window) for d in devices]
    for start in range(0, len(reports), 1000):
        response = requests.post(live_server.url + "/api/v1/reports", json={"reports": reports[start:start + 1000]},
                                 timeout=30)
        assert response.status_code == 202, response.text
    assert requests.post(live_server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    api = requests.get(live_server.url + "/api/v1/estimates", params={"schema": schema.name}, timeout=10).json()
    latest = max(e["window"] for e in api["estimates"] if e["window"] != "all")
    level_zero = {e["n"] for e in api["estimates"] if e["window"] == "all"}.pop()
    latest_n = {e["n"] for e in api["estimates"] if e["window"] == latest}.pop()
    assert 0.4 * len(reports) < level_zero < 0.6 * len(reports)  # the level-0 half

    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live_server.url}/schemas/{schema.name}")
    facts = page.inner_text("ul.facts")
    assert f"{level_zero:,} reports (level 0: the reports its estimates use; about as many again carry " \
           f"discovery's prefixes" in facts
    planner = page.inner_text("#plan-home")
    # the planner's n is the table's n, and the reports of the schema it stands for are said as such
    assert page.inner_text("#plan-home .plan-n") == f"{latest_n:,} level-0 reports"
    assert f"about {round(latest_n / 0.5):,} reports of the schema" in planner
    assert "at most about" in planner and "its widest" in planner
    assert "Discovery reads the reports of every retained window" in planner
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-strings-desktop.png"), full_page=True)

    page.set_viewport_size({"width": 375, "height": 800})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    sources = page.locator("#attr-home table.estimates td.source")
    assert sources.count() > 0 and all(cell.is_visible() for cell in sources.all())
    assert page.locator("#attr-home table.estimates th", has_text="source").first.is_visible()
    for heading in ("interval here", "trusted curator"):  # the text below the table explains both
        assert page.locator("table.privacy-table th", has_text=heading).is_visible(), heading
    # ... and on the screen, not scrolled out of it: every table fits its box at 375 px
    boxes = page.evaluate("[...document.querySelectorAll('.scroll')].map(e => e.scrollWidth - e.clientWidth)")
    assert boxes and max(boxes) <= 0, boxes
    page.screenshot(path=str(ARTIFACTS / "dashboard-strings-phone.png"), full_page=True)
    assert errors == []
    page.close()


def test_breakdowns_read_right_at_desktop_and_phone_width(chromium, live_server):
    # Issue 28: each breakdown as bars with whiskers within each value of `by`, `by`'s own shares,
    # and a planner line, readable at phone width.
    definition = {"name": "crashes-by-os", "version": 1, "epsilon": 4.0, "attributes": [
        {"name": "crashed", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows"]}],
        "breakdowns": [{"of": "crashed", "by": "os"}]}
    derived = requests.post(live_server.url + "/api/v1/schemas", json=definition, headers=ADMIN, timeout=10).json()
    schema = parse_schema(derived)
    rng = np.random.default_rng(28)
    rate = {"linux": 0.1, "macos": 0.05, "windows": 0.3}
    oses = rng.choice(list(rate), size=3000, p=[0.5, 0.3, 0.2])
    reports = [randomize(schema, {"crashed": bool(rng.random() < rate[os]), "os": str(os)}) for os in oses]
    for start in range(0, len(reports), 1000):
        assert requests.post(live_server.url + "/api/v1/reports", json={"reports": reports[start:start + 1000]},
                             timeout=30).status_code == 202
    assert requests.post(live_server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
    rows = requests.get(live_server.url + "/api/v1/breakdowns", params={"schema": schema.name}, timeout=10).json()
    shown = [r for r in rows["breakdowns"] if r["window"] == "all" and r["estimate"] is not None]
    assert shown  # 3,000 reports at ε = 2 per attribute: every os tells its share from 0

    page = chromium.new_page(viewport={"width": 1100, "height": 900})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{live_server.url}/schemas/{schema.name}")
    section = page.locator("#breakdown-crashed-by-os")
    assert section.count() == 1
    text = section.inner_text()
    assert "Planner:" in text and all(os in text for os in rate)
    assert section.locator("table.breakdowns tbody tr").count() == len(shown)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-breakdowns-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 375, "height": 800})
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.screenshot(path=str(ARTIFACTS / "dashboard-breakdowns-phone.png"), full_page=True)
    assert errors == []
    page.close()


def test_the_relay_part_of_the_privacy_panel_reads_right_at_desktop_and_phone_width(chromium, tmp_path):
    # Issue 30: where reports came through a relay, the panel puts the central ε beside the local
    # one, with the rows' numbers, and its table fits a phone.
    from relay_support import TOKEN, aggregator_for_relays

    from ldp_telemetry.shared import ohttp

    with aggregator_for_relays(tmp_path, SCHEMA) as server:
        schema = parse_schema(requests.get(f"{server.url}/api/v1/schemas/app-usage", timeout=10).json())
        config = ohttp.choose_key_config(requests.get(server.url + "/api/v1/ohttp-keys", timeout=10).content)
        record = {"dark_mode": True, "os": "linux", "plan": "pro"}
        batch = [ohttp.encapsulate_report(config, schema, randomize(schema, record)) for _ in range(500)]
        answer = requests.post(server.url + "/api/v1/relay/batches", data=ohttp.frame_batch(batch), timeout=60,
                               headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": ohttp.BATCH_MEDIA_TYPE})
        assert answer.json() == {"accepted": 500, "duplicates": 0, "refused": 0}
        assert requests.post(server.url + "/api/v1/estimates/refresh", headers=ADMIN, timeout=30).status_code == 200
        rollup = next(r for r in requests.get(server.url + "/api/v1/estimates", params={"schema": "app-usage"},
                                              timeout=10).json()["estimates"] if r["window"] == "all")

        page = chromium.new_page(viewport={"width": 1100, "height": 900})
        page.goto(f"{server.url}/schemas/app-usage")
        table = page.locator("table.relay-table")
        assert table.locator("tbody tr").count() == 2  # the latest window and the rollup
        cells = table.locator("tbody tr").nth(1).locator("td").all_inner_texts()
        assert cells[0] == "all" and cells[2] == "500" and float(cells[4]) == pytest.approx(
            rollup["epsilon_shuffled"], rel=5e-3)  # as displayed: three significant digits
        assert float(cells[4]) < float(cells[3]) == schema.epsilon  # the central ε beside the local one
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-relay-desktop.png"), full_page=True)
        page.set_viewport_size({"width": 375, "height": 800})
        page.reload()
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        assert page.evaluate("(e => e.scrollWidth - e.clientWidth)(document.querySelector('table.relay-table')"
                             ".closest('.scroll'))") <= 0
        page.close()
