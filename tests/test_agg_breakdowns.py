"""Breakdowns in the aggregator (DESIGN.md, "Breakdowns"): published beside the schema (never in
the served one), counted at ingest exactly once, estimated by the refresh and read through
``GET /api/v1/breakdowns``, each row equal to :mod:`ldp_telemetry.shared.breakdowns`' estimate over
the same reports' sums."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any

import pytest
from conftest import ADMIN

pytestmark = pytest.mark.backends

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=timezone.utc)
OS = ["linux", "macos", "windows", "other"]
APP: dict[str, Any] = {
    "name": "crashes", "version": 1, "epsilon": 6.0, "window": "day", "split": "equal",
    "attributes": [
        {"name": "crashed", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": OS},
        {"name": "minutes", "type": "numeric", "range": [0, 120]},
    ],
}
LISTED = [{"of": "crashed", "by": "os"}, {"of": "minutes", "by": "os"}, {"of": "os", "by": "crashed"}]


def with_breakdowns(schema: dict[str, Any], breakdowns: Any) -> dict[str, Any]:
    return {**copy.deepcopy(schema), "breakdowns": breakdowns}


# -- publishing ----------------------------------------------------------------------------------


def test_the_served_schema_and_the_answer_are_the_same_bytes_as_without_breakdowns(make_app):
    plain, listed = make_app().test_client(), make_app().test_client()
    without = plain.post("/api/v1/schemas", json=APP, headers=ADMIN)
    answer = listed.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN)
    assert (answer.status_code, without.status_code) == (201, 201)
    assert answer.data == without.data and "breakdowns" not in answer.get_json()
    assert listed.get("/api/v1/schemas/crashes/1").data == plain.get("/api/v1/schemas/crashes/1").data
    assert listed.get("/api/v1/schemas/crashes").data == plain.get("/api/v1/schemas/crashes").data


def test_the_breakdowns_are_listed_with_their_source_and_when_they_were_added(make_app):
    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN)
    answer = client.get("/api/v1/schemas/crashes/1/breakdowns")
    assert answer.status_code == 200
    assert answer.get_json() == {"schema": "crashes", "version": 1, "breakdowns": [
        {**b, "source": "listed", "added_at": "2026-11-21T12:00:00Z"} for b in LISTED]}
    assert client.get("/api/v1/schemas/crashes/2/breakdowns").status_code == 404


def test_a_repost_is_compared_with_what_was_published_breakdowns_included(make_app):
    client = make_app().test_client()
    assert client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN).status_code == 201
    assert client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN).status_code == 200
    for other in (APP, with_breakdowns(APP, LISTED[:2]), with_breakdowns(APP, []), with_breakdowns(APP, LISTED[::-1])):
        answer = client.post("/api/v1/schemas", json=other, headers=ADMIN)
        assert answer.status_code == 409, other
    assert [b["of"] for b in client.get("/api/v1/schemas/crashes/1/breakdowns").get_json()["breakdowns"]] == [
        "crashed", "minutes", "os"]
    # a schema published without breakdowns: its re-post with none (or an empty list) is the same
    plain = {**APP, "version": 2}
    assert client.post("/api/v1/schemas", json=plain, headers=ADMIN).status_code == 201
    assert client.post("/api/v1/schemas", json=with_breakdowns(plain, []), headers=ADMIN).status_code == 200


WIDE = {"name": "wide", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "a", "type": "categorical", "categories": [f"a{i}" for i in range(64)]},
    {"name": "b", "type": "categorical", "categories": [f"b{i}" for i in range(65)]},
    {"name": "url", "type": "string", "max_length": 16, "candidates": ["x.org"]}]}


@pytest.mark.parametrize("schema, breakdowns, field, words", [
    (APP, {"of": "crashed", "by": "os"}, "breakdowns", "must be a list"),
    (APP, [{"of": "crashed", "by": "nope"}], "breakdowns[0].by", "must name an attribute"),
    (APP, [{"of": "crashed"}], "breakdowns[0].by", "must name an attribute"),
    (APP, [{"of": "os", "by": "os"}], "breakdowns[0].by", "another attribute"),
    (APP, [{"of": "crashed", "by": "minutes"}], "breakdowns[0].by", "numeric"),
    (APP, [{"of": "crashed", "by": "os", "when": 1}], "breakdowns[0].when", "unknown field"),
    (APP, ["crashed by os"], "breakdowns[0]", "JSON object"),
    (WIDE, [{"of": "url", "by": "a"}], "breakdowns[0].of", "string"),
    (WIDE, [{"of": "a", "by": "b"}], "breakdowns[0]", "at most 4,096"),
    ({**APP, "split": "sample"}, [{"of": "crashed", "by": "os"}], "breakdowns", "split 'sample'"),
    ({**APP, "attributes": APP["attributes"] + [
        {"name": f"c{i}", "type": "boolean"} for i in range(17)]},
     [{"of": f"c{i}", "by": "os"} for i in range(17)], "breakdowns", "at most 16"),
])
def test_a_breakdown_breaking_a_rule_is_refused_with_a_400_naming_it(make_app, schema, breakdowns, field, words):
    client = make_app().test_client()
    answer = client.post("/api/v1/schemas", json=with_breakdowns(schema, breakdowns), headers=ADMIN)
    assert answer.status_code == 400, answer.get_json()
    body = answer.get_json()
    assert words in body["error"] and body["details"][0]["field"] == field, body
    assert client.get(f"/api/v1/schemas/{schema['name']}").status_code == 404  # nothing stored


def test_ldp_max_cells_counts_the_breakdown_cells(make_app):
    # 7 values a window (2 + 4 + 1) x 32 windows (31 days: 30 retained and the current one; the rollup) = 224;
    # the breakdown of crashed by os adds 2 x 4 = 8 a window: 15 x 32 = 480.
    client = make_app(LDP_MAX_CELLS=300).test_client()
    answer = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED[:1]), headers=ADMIN)
    assert answer.status_code == 400 and "480" in answer.get_json()["error"] and "300" in answer.get_json()["error"]
    assert client.post("/api/v1/schemas", json=APP, headers=ADMIN).status_code == 201


# -- counting at ingest ----------------------------------------------------------------------------

WINDOWS = ("2026-11-20", "2026-11-21")
# A correlated population: each OS's share, its crash rate and its mean minutes.
OS_SHARES = [0.45, 0.3, 0.2, 0.05]
CRASH_RATE = {"linux": 0.1, "macos": 0.3, "windows": 0.6, "other": 0.5}
MINUTES = {"linux": 80.0, "macos": 50.0, "windows": 20.0, "other": 100.0}


def population_reports(schema: dict[str, Any], n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` reports of devices from the correlated population, randomised on the "device"
    (:func:`randomize`), spread over :data:`WINDOWS`."""
    import random

    from ldp_telemetry.shared import randomize

    rng = random.Random(seed)
    reports = []
    for i in range(n):
        os_ = rng.choices(OS, OS_SHARES)[0]
        record = {"crashed": rng.random() < CRASH_RATE[os_], "os": os_,
                  "minutes": min(120.0, max(0.0, rng.gauss(MINUTES[os_], 15.0)))}
        reports.append(randomize(schema, record, window=WINDOWS[i % len(WINDOWS)]))
    return reports


def post(client: Any, reports: list[dict[str, Any]], size: int = 500) -> None:
    for start in range(0, len(reports), size):
        answer = client.post("/api/v1/reports", json={"reports": reports[start:start + size]})
        assert answer.status_code == 202, answer.get_json()


def expected_sums(derived: dict[str, Any], reports: list[dict[str, Any]],
                  listed: list[dict[str, str]] = LISTED) -> dict[tuple[str, int], Any]:
    """``(window, breakdown number) -> BreakdownSums`` counted straight from the reports (the
    rollup pooled over the windows), by the shared core."""
    from ldp_telemetry.shared import breakdowns, parse_schema
    from ldp_telemetry.shared.windows import ROLLUP

    schema = parse_schema(derived)
    out = {}
    for i, b in enumerate(listed):
        breakdown = breakdowns.Breakdown(b["of"], b["by"])
        windows = {w: breakdowns.count(schema, breakdown, [r["values"] for r in reports if r["window"] == w])
                   for w in sorted({r["window"] for r in reports})}
        out.update({(w, i): sums for w, sums in windows.items()})
        out[(ROLLUP, i)] = breakdowns.pooled(windows.values())
    return out


def stored_sums(app: Any) -> dict[tuple[str, int], dict[tuple[str, str], float]]:
    from conftest import read, settle, store_of

    from ldp_telemetry.shared.windows import ROLLUP

    settle(app)
    counters = read(store_of(app), "window_counters", "crashes", 1, [*WINDOWS, ROLLUP])
    return {(w, i): amounts for w, c in counters.items() for i, amounts in c.breakdowns.items()}


def assert_same_sums(stored: dict[tuple[str, int], Any], expected: dict[tuple[str, int], Any]) -> None:
    assert set(stored) == set(expected)
    for key, sums in expected.items():
        assert set(stored[key]) == set(sums.amounts), key
        for cell, amount in sums.amounts.items():  # integers exactly; numeric sums to rounding
            assert stored[key][cell] == (amount if isinstance(amount, int) else pytest.approx(amount, rel=1e-12)), \
                (key, cell)


def test_each_listed_breakdown_is_counted_once_per_stored_report_under_retries_and_duplicates(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN).get_json()
    reports = population_reports(derived, 1200)
    post(client, reports[:700])
    post(client, reports[:300])  # a retry: every one a duplicate
    repeated = reports[700:] + reports[700:750] + reports[650:700]  # ids repeated in a batch and stored already
    answer = client.post("/api/v1/reports", json={"reports": repeated})
    assert answer.status_code == 202, answer.get_json()
    assert_same_sums(stored_sums(app), expected_sums(derived, reports))


def test_a_schema_without_breakdowns_has_no_breakdown_sums(make_app):
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=APP, headers=ADMIN).get_json()
    post(client, population_reports(derived, 50))
    assert stored_sums(app) == {}


# -- estimation ------------------------------------------------------------------------------------


def expected_rows(derived: dict[str, Any], reports: list[dict[str, Any]], confidence: float = 0.95,
                  listed: list[dict[str, str]] = LISTED) -> dict[tuple[str, str, Any, str, Any], Any]:
    """``(window, of, value, by, by_value) -> Row`` by the shared core over the reports' sums."""
    from ldp_telemetry.shared import breakdowns, parse_schema
    from ldp_telemetry.shared.windows import ROLLUP

    schema = parse_schema(derived)
    out = {}
    for (window, i), sums in expected_sums(derived, reports, listed).items():
        b = breakdowns.Breakdown(listed[i]["of"], listed[i]["by"])
        for row in breakdowns.estimate(schema, b, sums, confidence, rollup=window == ROLLUP):
            out[(window, b.of, row.value, b.by, row.by_value)] = row
    return out


ROW_FIELDS = ("estimate", "estimate_clipped", "ci_low", "ci_high", "by_share", "n", "reason")


def assert_rows_equal(got: dict[Any, dict[str, Any]], expected: dict[Any, Any]) -> None:
    assert set(got) == set(expected)
    for key, row in expected.items():
        for field in ROW_FIELDS:
            mine, theirs = got[key][field], getattr(row, field)
            if isinstance(theirs, float):
                assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-9), (key, field)
            else:
                assert mine == theirs, (key, field)


def test_the_refresh_stores_each_breakdown_row_as_the_shared_core_estimates_it(counted):
    from conftest import read, store_of

    from ldp_telemetry.shared import parse_schema
    from ldp_telemetry.shared.windows import ROLLUP

    client, derived, reports = counted
    schema = parse_schema(derived)
    stored = read(store_of(client.application), "window_breakdown_estimates", "crashes", 1, [*WINDOWS, ROLLUP])
    got = {}
    for window, rows in stored.items():
        for row in rows.values():
            b = LISTED[row.breakdown]
            of, by = schema.attribute(b["of"]), schema.attribute(b["by"])
            from ldp_telemetry.aggregator.estimation.breakdowns import value_of
            got[(window, b["of"], value_of(of, row.value), b["by"], value_of(by, row.by_value))] = row._asdict()
    assert_rows_equal(got, expected_rows(derived, reports))
    # nothing changed since: a second refresh writes no row
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).get_json()["written"] == 0


# -- reading: GET /api/v1/breakdowns --------------------------------------------------------------


@pytest.fixture
def counted(make_app: Any) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
    """An app with the listed breakdowns, 1,500 reports of the correlated population posted and
    estimated: ``(client, derived schema, reports)``."""
    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN).get_json()
    reports = population_reports(derived, 1500)
    post(client, reports)
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    return client, derived, reports


def keyed(rows: list[dict[str, Any]]) -> dict[tuple[str, str, Any, str, Any], dict[str, Any]]:
    out = {(r["window"], r["of"], r["value"], r["by"], r["by_value"]): r for r in rows}
    assert len(out) == len(rows)
    return out


def test_every_row_of_get_breakdowns_is_the_shared_cores_estimate_over_the_same_reports(counted):
    client, derived, reports = counted
    answer = client.get("/api/v1/breakdowns?schema=crashes")
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["schema"], body["version"], body["confidence"], body["next"]) == ("crashes", 1, 0.95, None)
    assert all(list(r) == ["window", "of", "value", "by", "by_value", "estimate", "estimate_clipped", "ci_low",
                           "ci_high", "by_share", "n", "reason", "computed_at", "relayed", "crowd", "epsilon_shuffled",
                           "delta"] for r in body["breakdowns"])
    assert_rows_equal(keyed(body["breakdowns"]), expected_rows(derived, reports))
    # the order: windows in time, the rollup last; breakdowns as listed; by each value of by, each of of
    windows = [r["window"] for r in body["breakdowns"]]
    assert windows == sorted(windows) and windows[-1] == "all"
    first = [(r["of"], r["by_value"], r["value"]) for r in body["breakdowns"] if r["window"] == WINDOWS[0]]
    assert first[:5] == [("crashed", "linux", True), ("crashed", "macos", True), ("crashed", "windows", True),
                         ("crashed", "other", True), ("minutes", "linux", "mean")]
    assert [(b, v) for o, b, v in first if o == "os"][:2] == [(True, "linux"), (True, "macos")]


def test_of_and_by_narrow_the_rows_to_a_breakdown(counted):
    client, derived, reports = counted
    rows = client.get("/api/v1/breakdowns?schema=crashes&of=minutes&by=os").get_json()["breakdowns"]
    assert {(r["of"], r["by"], r["value"]) for r in rows} == {("minutes", "os", "mean")}
    assert len(rows) == 3 * 4  # two windows and the rollup, four OSes
    by_os = client.get("/api/v1/breakdowns?schema=crashes&by=os").get_json()["breakdowns"]
    assert {r["of"] for r in by_os} == {"crashed", "minutes"}
    within = client.get(f"/api/v1/breakdowns?schema=crashes&version=1&since={WINDOWS[1]}&until={WINDOWS[1]}"
                        "&of=os").get_json()["breakdowns"]
    assert {r["window"] for r in within} == {WINDOWS[1], "all"}
    assert {r["by_value"] for r in within} == {True, False}  # a boolean by: both its values


@pytest.mark.parametrize("query, status, field", [
    ("", 400, "schema"),
    ("schema=crashes&attribute=os", 400, "attribute"),
    ("schema=crashes&of=nope", 404, "of"),
    ("schema=crashes&of=minutes&by=crashed", 404, "of"),
    ("schema=crashes&since=2026-11-21&until=2026-11-20", 400, "since"),
    ("schema=crashes&limit=0", 400, "limit"),
    ("schema=crashes&format=xml", 400, "format"),
    ("schema=nope", 404, "schema"),
    ("schema=crashes&version=2", 404, "version"),
])
def test_a_bad_query_is_refused(counted, query, status, field):
    client, _, _ = counted
    answer = client.get(f"/api/v1/breakdowns?{query}")
    assert answer.status_code == status, answer.get_json()
    assert answer.get_json()["details"][0]["field"] == field


def test_pages_follow_one_another_and_csv_holds_the_same_rows(counted):
    import csv
    import io

    client, _, _ = counted
    whole = client.get("/api/v1/breakdowns?schema=crashes").get_json()["breakdowns"]
    paged, cursor = [], None
    while True:
        body = client.get("/api/v1/breakdowns?schema=crashes&limit=7" + (f"&next={cursor}" if cursor else "")).get_json()
        paged += body["breakdowns"]
        cursor = body["next"]
        if cursor is None:
            break
    assert paged == whole
    text = client.get("/api/v1/breakdowns?schema=crashes&format=csv")
    assert text.mimetype == "text/csv"
    table = list(csv.DictReader(io.StringIO(text.get_data(as_text=True))))
    assert len(table) == len(whole)
    for row, json_row in zip(table, whole):
        assert list(row) == list(json_row)
        for column, value in json_row.items():
            if value is None:
                assert row[column] == ""
            elif isinstance(value, bool):
                assert row[column] == ("true" if value else "false")
            elif isinstance(value, (int, float)):
                assert float(row[column]) == value
            else:
                assert row[column] == value


def test_formula_like_values_are_escaped_in_csv(make_app):
    import csv
    import io

    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    schema = {"name": "formulas", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
        {"name": "flag", "type": "boolean"},
        {"name": "cell", "type": "categorical", "categories": ["=cmd()", "+1", "-1", "@a", "plain"]}]}
    derived = client.post("/api/v1/schemas", json=with_breakdowns(schema, [{"of": "flag", "by": "cell"}]),
                          headers=ADMIN).get_json()
    from ldp_telemetry.shared import randomize

    post(client, [randomize(derived, {"flag": i % 2 == 0, "cell": schema["attributes"][1]["categories"][i % 5]},
                            window=WINDOWS[0]) for i in range(200)])
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    text = client.get("/api/v1/breakdowns?schema=formulas&format=csv").get_data(as_text=True)
    by_values = {row["by_value"] for row in csv.DictReader(io.StringIO(text))}
    assert by_values == {"'=cmd()", "'+1", "'-1", "'@a", "plain"}


@pytest.mark.sqlite_only
def test_the_cli_prints_the_numbers_of_the_api(tmp_path, make_app):
    from click.testing import CliRunner

    from ldp_telemetry.shared import display
    from ldp_telemetry.tools.cli import main

    db = str(tmp_path / "cli.db")
    client = make_app(LDP_DB=db, LDP_CLOCK=lambda: NOW).test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED), headers=ADMIN).get_json()
    post(client, population_reports(derived, 600))
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    rows = client.get("/api/v1/breakdowns?schema=crashes&of=crashed&by=os").get_json()["breakdowns"]
    printed = CliRunner().invoke(main, ["breakdowns", "crashes", "--of", "crashed", "--by", "os", "--db", db])
    assert printed.exit_code == 0, printed.output
    lines = printed.output.splitlines()
    assert lines[0] == "schema crashes v1, 95% intervals"
    body = [line.split() for line in lines[3:] if not line.startswith("*")]
    rollup = [r for r in rows if r["window"] == "all"]
    assert [cells[:5] for cells in body] == [["all", "crashed", "true", "os", r["by_value"]] for r in rollup]
    for cells, r in zip(body, rollup):
        assert cells[5].rstrip("*") == (display.percent(r["estimate_clipped"]) if r["estimate"] is not None else "—")
        assert cells[-1] == display.count(r["n"]) and cells[-2] == display.percent(r["by_share"])


# -- a breakdown added later, back-filled -----------------------------------------------------------


def test_a_breakdown_added_later_is_back_filled_exactly_once_beside_ingest_and_estimated(make_app):
    from conftest import read, settle, store_of

    from ldp_telemetry.aggregator.questions import backfill

    app = make_app(LDP_CLOCK=lambda: NOW)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED[:2]), headers=ADMIN).get_json()
    reports = population_reports(derived, 1200, seed=11)
    post(client, reports[:600])
    url = "/api/v1/schemas/crashes/1/breakdowns"
    served = client.get("/api/v1/schemas/crashes/1").data
    assert client.post(url, json=LISTED[2]).status_code == 401
    added = client.post(url, json=LISTED[2], headers=ADMIN)
    assert (added.status_code, added.get_json()) == (202, {"added": True})
    assert client.post(url, json=LISTED[2], headers=ADMIN).status_code == 200  # it was there
    listing = client.get(url).get_json()["breakdowns"]
    assert [(b["of"], b["source"]) for b in listing] == [("crashed", "listed"), ("minutes", "listed"), ("os", "added")]
    assert client.get("/api/v1/schemas/crashes/1").data == served  # adding one changes no byte of it
    post(client, reports[600:800])  # before any chunk: every id above the watermark ''
    store, counting = store_of(app), app.extensions["ldp"]["writer"].counting
    settle(app)
    (schema, version, batch, size), = read(store, "filling")
    while True:  # chunks of 150, with reports arriving between them (ids below and above the watermark)
        done = backfill.backfill_chunk(store, counting, schema, version, batch, 150)
        if done:
            break
        post(client, reports[800:1200][:50])
        settle(app)  # stored now (SQLite folds its inbox), between two chunks
        reports[800:1200] = reports[800:1200][50:] + reports[800:1200][:50]  # the next 50 next time
    post(client, reports)  # all duplicates now: nothing counts twice
    assert read(store, "filling") == []
    assert_same_sums(stored_sums(app), expected_sums(derived, reports))
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    rows = client.get("/api/v1/breakdowns?schema=crashes").get_json()["breakdowns"]
    assert_rows_equal(keyed(rows), expected_rows(derived, reports))


def test_a_breakdown_that_breaks_a_rule_or_the_cells_limit_is_refused_and_nothing_is_added(make_app):
    client = make_app(LDP_MAX_CELLS=32 * 15).test_client()  # room for one breakdown of 8 cells
    client.post("/api/v1/schemas", json=APP, headers=ADMIN)
    url = "/api/v1/schemas/crashes/1/breakdowns"
    refused = client.post(url, json={"of": "crashed", "by": "minutes"}, headers=ADMIN)
    assert refused.status_code == 400 and refused.get_json()["details"][0]["field"] == "by"
    assert client.post(url, json={"of": "os", "by": "crashed"}, headers=ADMIN).status_code == 202  # 4 x 2 cells
    over = client.post(url, json={"of": "crashed", "by": "os"}, headers=ADMIN)
    assert over.status_code == 400 and "LDP_MAX_CELLS" in over.get_json()["error"]
    assert [b["of"] for b in client.get(url).get_json()["breakdowns"]] == ["os"]
    assert client.post("/api/v1/schemas/crashes/9/breakdowns", json=LISTED[0], headers=ADMIN).status_code == 404
    sample = {**APP, "name": "sampled", "split": "sample"}
    client.post("/api/v1/schemas", json=sample, headers=ADMIN)
    refused = client.post("/api/v1/schemas/sampled/1/breakdowns", json=LISTED[0], headers=ADMIN)
    assert refused.status_code == 400 and "sample" in refused.get_json()["error"]


@pytest.mark.sqlite_only
def test_the_cli_adds_a_breakdown(tmp_path, make_app):
    from click.testing import CliRunner

    from ldp_telemetry.tools.cli import main

    db = str(tmp_path / "cli.db")
    client = make_app(LDP_DB=db).test_client()
    client.post("/api/v1/schemas", json=APP, headers=ADMIN)
    first = CliRunner().invoke(main, ["add-breakdown", "crashes", "--of", "crashed", "--by", "os", "--db", db])
    assert first.exit_code == 0 and first.output.endswith("added (back-filled by a job)\n"), first.output
    again = CliRunner().invoke(main, ["add-breakdown", "crashes", "--of", "crashed", "--by", "os", "--db", db])
    assert again.exit_code == 0 and again.output.endswith("already there\n")
    bad = CliRunner().invoke(main, ["add-breakdown", "crashes", "--of", "crashed", "--by", "minutes", "--db", db])
    assert bad.exit_code == 1 and "400" in bad.output
    assert [(b["of"], b["by"], b["source"]) for b in client.get("/api/v1/schemas/crashes/1/breakdowns").get_json()[
        "breakdowns"]] == [("crashed", "os", "added")]


MEMO = {"name": "memo", "version": 1, "epsilon": 2.0, "epsilon_permanent": 6.0, "window": "day",
        "attributes": [{"name": "flag", "type": "boolean"},
                       {"name": "load_ms", "type": "histogram", "edges": [0, 100, 1000, 5000]}]}
MEMO_LISTED = [{"of": "flag", "by": "load_ms"}, {"of": "load_ms", "by": "flag"}]


def test_a_memoised_schema_has_its_window_rows_at_the_effective_p_q_and_a_rollup_without_interval(make_app):
    import os
    import random

    from ldp_telemetry.shared import randomize
    from ldp_telemetry.shared.breakdowns import MEMOISED_ROLLUP

    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(MEMO, MEMO_LISTED), headers=ADMIN).get_json()
    rng = random.Random(3)
    reports = []
    for device in range(400):  # each device with its own secret and fixed values, in one or both windows
        secret = os.urandom(32)
        load = rng.choice([50, 500, 2000])
        record = {"flag": rng.random() < {50: 0.2, 500: 0.5, 2000: 0.8}[load], "load_ms": load}
        for window in WINDOWS[device % 2:]:
            reports.append(randomize(derived, record, window=window, device_secret=secret))
    post(client, reports)
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    rows = client.get("/api/v1/breakdowns?schema=memo").get_json()["breakdowns"]
    assert_rows_equal(keyed(rows), expected_rows(derived, reports, listed=MEMO_LISTED))
    rollup = [r for r in rows if r["window"] == "all"]
    assert rollup and all(r["reason"] == MEMOISED_ROLLUP and r["ci_low"] is None and r["ci_high"] is None
                          and r["estimate"] is not None for r in rollup)
    assert any(r["ci_low"] is not None for r in rows if r["window"] != "all")


def test_rows_say_why_they_are_null(make_app):
    from ldp_telemetry.shared import randomize
    from ldp_telemetry.shared.breakdowns import BY_SHARE_NOT_DISTINCT_FROM_0, TOO_FEW_REPORTS

    client = make_app(LDP_CLOCK=lambda: NOW).test_client()
    schema = {**APP, "epsilon": 1.5}  # 0.5 per attribute: a rare OS cannot be told from 0
    derived = client.post("/api/v1/schemas", json=with_breakdowns(schema, LISTED[:1]), headers=ADMIN).get_json()
    post(client, [randomize(derived, {"crashed": False, "os": "linux", "minutes": 5.0}, window=WINDOWS[0])]
         + [randomize(derived, {"crashed": i % 2 == 0, "os": "linux", "minutes": 5.0}, window=WINDOWS[1])
            for i in range(300)])
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    rows = client.get("/api/v1/breakdowns?schema=crashes").get_json()["breakdowns"]
    lonely = [r for r in rows if r["window"] == WINDOWS[0]]
    assert len(lonely) == 4 and all(r["reason"] == TOO_FEW_REPORTS and r["n"] == 1 and r["estimate"] is None
                                    for r in lonely)
    assert any(r["reason"] == BY_SHARE_NOT_DISTINCT_FROM_0 and r["estimate"] is None and r["ci_low"] is None
               and r["by_share"] is not None for r in rows if r["window"] == WINDOWS[1])


def test_the_dashboard_shows_each_breakdown_with_its_rows_and_a_planner_line(counted):
    import re

    client, derived, reports = counted
    page = client.get("/schemas/crashes").get_data(as_text=True)
    rows = client.get("/api/v1/breakdowns?schema=crashes").get_json()["breakdowns"]
    for b in LISTED:
        assert f'id="breakdown-{b["of"]}-by-{b["by"]}"' in page
    assert page.count('class="chart"') >= 3 + 3  # the attributes' charts, and the breakdowns' bars and points
    assert "Planner: with these 1,500 reports the widest interval is about" in page
    from ldp_telemetry.shared import display

    shown_rows = [r for r in rows if r["window"] == "all" and r["estimate"] is not None and r["of"] == "crashed"]
    for r in shown_rows:
        cell = re.search(rf'data-by-value="{r["by_value"]}" data-value="true">.*?</tr>', page, re.S)
        assert cell and display.percent(r["estimate_clipped"]) in cell.group(0)


def test_retention_erases_a_windows_breakdown_rows_the_rollup_keeps_them_and_an_added_one_covers_what_is_left(
        make_app):
    from datetime import timedelta

    from ldp_telemetry.aggregator import retention
    from ldp_telemetry.aggregator.questions import backfill
    from ldp_telemetry.shared.windows import ROLLUP

    clock = [NOW]
    app = make_app(LDP_CLOCK=lambda: clock[0], LDP_RETENTION_DAYS=3)
    client = app.test_client()
    derived = client.post("/api/v1/schemas", json=with_breakdowns(APP, LISTED[:1]), headers=ADMIN).get_json()
    old = [r for r in population_reports(derived, 400, seed=5) if r["window"] == WINDOWS[1]]
    post(client, old)
    clock[0] = NOW + timedelta(days=4)
    from ldp_telemetry.shared import randomize

    later = "2026-11-25"
    new = [randomize(derived, {"crashed": i % 3 == 0, "os": OS[i % 4], "minutes": 30.0}, window=later)
           for i in range(300)]
    post(client, new)
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    while retention.expire(app).windows == 0:
        pass
    assert client.post("/api/v1/schemas/crashes/1/breakdowns", json=LISTED[1], headers=ADMIN).status_code == 202
    backfill.backfill(app)
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    rows = client.get("/api/v1/breakdowns?schema=crashes").get_json()["breakdowns"]
    assert {r["window"] for r in rows} == {later, ROLLUP}
    assert {(r["window"], r["of"]) for r in rows} == {(later, "crashed"), (ROLLUP, "crashed"), (later, "minutes"), (ROLLUP, "minutes")}
    listed_rollup = expected_rows(derived, old + new, listed=LISTED[:1])  # the rollup keeps the erased window
    added_rollup = expected_rows(derived, new, listed=[LISTED[1]])  # only what was retained when it was added
    got = keyed(rows)
    assert_rows_equal({k: v for k, v in got.items() if k[1] == "crashed"},
                      {k: v for k, v in listed_rollup.items() if k[0] in (later, ROLLUP)})
    assert_rows_equal({k: v for k, v in got.items() if k[1] == "minutes"}, added_rollup)
