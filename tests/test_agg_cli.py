"""The operator commands: schema publish, estimates, serve's setting checks."""

from __future__ import annotations

import json
import re
from html import unescape

import requests
from click.testing import CliRunner
from conftest import ADMIN, APP_USAGE

from ldp_telemetry.aggregator.questions import backfill
from ldp_telemetry.tools.cli import main
from ldp_telemetry.tools.tables import CLIPPED_NOTE
from ldp_telemetry.shared import randomize


def test_publish_into_a_database_file_then_read_estimates(tmp_path, make_app):
    schema_file = tmp_path / "app-usage.json"
    schema_file.write_text(json.dumps(APP_USAGE))
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    first = runner.invoke(main, ["schema", "publish", str(schema_file), "--db", db])
    assert first.exit_code == 0 and first.output.startswith("published: app-usage version 1")
    again = runner.invoke(main, ["schema", "publish", str(schema_file), "--db", db])
    assert again.exit_code == 0 and again.output.startswith("already published, identical")
    schema_file.write_text(json.dumps({**APP_USAGE, "epsilon": 1.0}))
    conflict = runner.invoke(main, ["schema", "publish", str(schema_file), "--db", db])
    assert conflict.exit_code == 1 and "409" in conflict.output

    client = make_app(LDP_DB=db).test_client()
    client.post("/api/v1/reports", json={"reports": [randomize(APP_USAGE, {"dark_mode": True, "os": "linux"})
                                                     for _ in range(30)]})
    client.post("/api/v1/estimates/refresh", headers=ADMIN)
    table = runner.invoke(main, ["estimates", "app-usage", "--db", db])
    assert table.exit_code == 0, table.output
    lines = [line for line in table.output.splitlines() if line != CLIPPED_NOTE]
    assert lines[0] == "schema app-usage v1, 95% intervals"
    assert [line.split()[:3] for line in lines[3:]] == [
        ["all", "dark_mode", "true"], ["all", "os", "linux"], ["all", "os", "macos"], ["all", "os", "windows"],
        ["all", "os", "other"]]
    assert all(line.split()[-2] == "30" for line in lines[3:])


def test_publish_over_http(tmp_path, live_server):
    schema_file = tmp_path / "s.json"
    schema_file.write_text(json.dumps(APP_USAGE))
    result = CliRunner().invoke(main, ["schema", "publish", str(schema_file), "--url", live_server.url,
                                       "--token", live_server.admin_token])
    assert result.exit_code == 0, result.output
    assert requests.get(live_server.url + "/api/v1/schemas/app-usage").json()["name"] == "app-usage"
    wrong = CliRunner().invoke(main, ["schema", "publish", str(schema_file), "--url", live_server.url,
                                      "--token", "wrong-token"])
    assert wrong.exit_code == 1 and "403" in wrong.output


def test_serve_refuses_a_bad_setting_before_starting(tmp_path):
    result = CliRunner().invoke(main, ["serve", "--max-batch", "0"])
    assert result.exit_code == 1
    assert "LDP_MAX_BATCH (from the command line) must be an integer of at least 1" in result.output
    result = CliRunner().invoke(main, ["serve", "--db", str(tmp_path / "no-such-folder" / "x.db")])
    assert result.exit_code == 1 and "LDP_DB" in result.output and "cannot be used" in result.output


def test_serve_has_a_flag_per_setting():
    from ldp_telemetry.aggregator.settings import SETTINGS

    help_text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert all(setting.flag in help_text for setting in SETTINGS)


MIXED = {"name": "mixed", "version": 1, "epsilon": 3.0, "window": "day", "description": "three kinds",
         "attributes": [{"name": "dark_mode", "type": "boolean"},
                        {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]},
                        {"name": "minutes", "type": "numeric", "range": [0, 120]}]}


def _published_with_reports(tmp_path, make_app, count: int = 40) -> str:
    """A database file holding MIXED and ``count`` reports, estimates refreshed by the CLI."""
    db = str(tmp_path / "mixed.db")
    schema_file = tmp_path / "mixed.json"
    schema_file.write_text(json.dumps(MIXED))
    runner = CliRunner()
    assert runner.invoke(main, ["schema", "publish", str(schema_file), "--db", db]).exit_code == 0
    client = make_app(LDP_DB=db).test_client()
    # Few reports, all "linux" and 0 minutes: some estimates fall outside their scale and are shown clipped.
    reports = [randomize(MIXED, {"dark_mode": i % 3 == 0, "os": "linux", "minutes": 0}) for i in range(count)]
    assert client.post("/api/v1/reports", json={"reports": reports}).status_code == 202
    refreshed = runner.invoke(main, ["refresh", "--db", db])
    assert refreshed.exit_code == 0, refreshed.output
    assert refreshed.output.startswith("refreshed: ") and "estimate rows written" in refreshed.output
    return db


def test_schema_list_and_show(tmp_path, make_app):
    db = _published_with_reports(tmp_path, make_app)
    listed = CliRunner().invoke(main, ["schema", "list", "--db", db])
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[2].split()[:6] == ["mixed", "1", "3", "day", "equal", "3"]
    shown = CliRunner().invoke(main, ["schema", "show", "mixed", "--db", db])
    assert shown.exit_code == 0, shown.output
    served = make_app(LDP_DB=db).test_client().get("/api/v1/schemas/mixed").get_json()
    assert json.loads(shown.output) == served  # the derived schema, as the server serves it
    missing = CliRunner().invoke(main, ["schema", "show", "nope", "--db", db])
    assert missing.exit_code == 1 and "404" in missing.output and "nope" in missing.output
    empty = CliRunner().invoke(main, ["schema", "list", "--db", str(tmp_path / "empty.db")])
    assert empty.exit_code == 0 and "no schema is published yet" in empty.output


def test_plan_by_published_name_uses_the_dashboards_half_widths(tmp_path, make_app):
    from ldp_telemetry.shared.planner import plan

    db = _published_with_reports(tmp_path, make_app)
    result = CliRunner().invoke(main, ["plan", "mixed", "--db", db, "--reports", "1000"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[1]: line.split() for line in result.output.splitlines()[3:] if line.startswith("equal ")}
    for p in plan(MIXED):
        row = rows[p.attribute.name]
        # 1 percentage point of a share, 1% of a mean's range (1.2 minutes of [0, 120]), as the dashboard
        share = p.attribute.name != "minutes"
        assert (row[5], row[6]) == (("1", "pts") if share else ("1.2", "units"))
        assert row[7] == f"{p.reports_for(0.01 if share else 1.2):,}"
    # as the dashboard takes it: a share's half-width in percentage points, a mean's in its units
    named = CliRunner().invoke(main, ["plan", "mixed", "--db", db, "--half-width", "minutes=5", "--half-width", "2"])
    rows = {line.split()[1]: line.split() for line in named.output.splitlines()[3:] if line.startswith("equal ")}
    assert [rows[a][5] for a in ("dark_mode", "os", "minutes")] == ["2", "2", "5"]
    assert rows["os"][7] == f"{next(p for p in plan(MIXED) if p.attribute.name == 'os').reports_for(0.02):,}"
    wrong = CliRunner().invoke(main, ["plan", "mixed", "--db", db, "--half-width", "nosuch=1"])
    assert wrong.exit_code == 1 and "nosuch" in wrong.output
    unknown = CliRunner().invoke(main, ["plan", "nope", "--db", db])
    assert unknown.exit_code == 1 and "404" in unknown.output


def test_the_cli_prints_the_numbers_the_dashboard_shows(tmp_path, make_app):
    from test_dash_pages import _cells

    db = _published_with_reports(tmp_path, make_app)
    printed, marked = {}, {}
    for window in ("each", "all"):
        result = CliRunner().invoke(main, ["estimates", "mixed", "--db", db, "--window", window])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()[3:]
        for line in lines:
            if line == CLIPPED_NOTE:
                continue
            w, attribute, value, estimate, low, dash, high, n, _ = line.split()
            key = (w, value if attribute != "minutes" else "mean")
            printed[key] = {"estimate": estimate.rstrip("*"), "interval": f"{low} {dash} {high}", "n": n}
            marked[key] = estimate.endswith("*")
        # a clipped estimate is marked and explained, as on the page
        assert (CLIPPED_NOTE in lines) == any(line.split()[3].endswith("*") for line in lines if line != CLIPPED_NOTE)
    html = make_app(LDP_DB=db).test_client().get("/schemas/mixed").get_data(as_text=True)
    shown = {}
    for row in re.finditer(r'<tr data-value="([^"]*)">(.*?)</tr>', html, re.S):
        for cell in _cells(row.group(2), unescape(row.group(1))):
            shown[(cell["window"], cell["value"])] = {k: cell[k] for k in ("estimate", "interval", "n")}
    assert len(shown) == len(printed) == 2 * (1 + 4 + 1)
    assert shown == printed
    starred = {(w, unescape(v)): bool(star) for v, body in re.findall(r'<tr data-value="([^"]*)">(.*?)</tr>', html, re.S)
               for w, star in re.findall(r'data-window="([^"]*)"[^>]*>\s*<span class="est">[^<*]*(\*?)</span>', body)}
    assert starred == marked


STRINGS = {"name": "homes", "version": 1, "epsilon": 4.0, "window": "day", "attributes": [
    {"name": "home", "type": "string", "candidates": ["rare.example", "common.example", "absent.example",
                                                      "middle.example"]}]}


def test_estimates_lists_a_strings_candidates_as_the_dashboard_does(tmp_path, make_app):
    # Issue 31: `estimates` listed a string's candidates in the schema's order and without their
    # source; the dashboard lists them most frequent first, with it, and sets those apart whose
    # interval includes zero. The CLI's rows and order are the page's.
    db = str(tmp_path / "homes.db")
    app = make_app(LDP_DB=db)
    client = app.test_client()
    assert client.post("/api/v1/schemas", json=STRINGS, headers=ADMIN).status_code == 201
    homes = ["common.example"] * 600 + ["middle.example"] * 300 + ["rare.example"] * 100 + ["other.example"] * 1000
    reports = [randomize(STRINGS, {"home": h}) for h in homes]
    for start in range(0, len(reports), 1000):
        assert client.post("/api/v1/reports", json={"reports": reports[start:start + 1000]}).status_code == 202
    added = client.post("/api/v1/schemas/homes/1/candidates", headers=ADMIN,
                        json={"attribute": "home", "candidates": ["other.example"]})
    assert added.status_code == 202
    backfill.backfill(app)  # the job the scheduler runs: counts the added candidate's supports
    assert client.post("/api/v1/estimates/refresh", headers=ADMIN).status_code == 200
    result = CliRunner().invoke(main, ["estimates", "homes", "--db", db])
    assert result.exit_code == 0, result.output
    printed = [line.split() for line in result.output.splitlines()[3:] if line.startswith("all ")]
    between = [line for line in result.output.splitlines() if "includes zero" in line]
    html = client.get("/schemas/homes").get_data(as_text=True)
    shown = [(unescape(v), source) for v, source in re.findall(
        r'<tr data-value="([^"]*)">\s*<td class="value">[^<]*</td><td class="source">([^<]*)</td>', html)]
    # (value, source) in the page's order: its table, then the candidates set apart below it
    assert [(row[2], row[-1]) for row in printed] == shown
    assert [row[-1] for row in printed].count("added") == 1
    api = client.get("/api/v1/estimates?schema=homes").get_json()["estimates"]
    rollup = {e["value"]: e for e in api if e["window"] == "all"}
    for row in printed:  # the API's numbers, written as the page writes them
        e = rollup[row[2]]
        assert row[3].rstrip("*") == f"{e['estimate_clipped'] * 100:.1f}%" and row[7] == f"{e['n']:,}"
    apart = [v for v, _ in shown if rollup[v]["ci_low"] <= 0]
    assert bool(between) == bool(apart) and [row[2] for row in printed][len(shown) - len(apart):] == apart


def test_refresh_counts_in_words(tmp_path, make_app):
    # Issue 31: "1 windows recomputed".
    db = str(tmp_path / "one.db")
    client = make_app(LDP_DB=db).test_client()
    assert client.post("/api/v1/schemas", json=APP_USAGE, headers=ADMIN).status_code == 201
    report = randomize(APP_USAGE, {"dark_mode": True, "os": "linux"})
    assert client.post("/api/v1/reports", json={"reports": [report]}).status_code == 202
    refreshed = CliRunner().invoke(main, ["refresh", "--db", db])
    assert refreshed.exit_code == 0, refreshed.output
    assert re.fullmatch(r"refreshed: \d+ estimate rows written, 1 window recomputed\n", refreshed.output), refreshed.output


def test_an_unreachable_server_is_named_with_the_cause_in_one_sentence():
    # Issue 31: a server that is down gave urllib3's chain of wrappers; a wrong base URL gave
    # "404: no such resource" without the URL tried.
    from ldp_telemetry.tools.process import free_port

    url = f"http://127.0.0.1:{free_port()}"
    down = CliRunner().invoke(main, ["schema", "list", "--url", url])
    assert down.exit_code == 1
    assert down.output == (f"Error: GET {url}/api/v1/schemas got no answer: connection refused (nothing listens on "
                           f"that port) (is ldp-telemetry serve running there? --url or LDP_URL names another)\n")


def test_a_wrong_base_url_is_named(live_server):
    wrong = CliRunner().invoke(main, ["schema", "list", "--url", live_server.url + "/telemetry"])
    assert wrong.exit_code == 1
    assert wrong.output.startswith(f"Error: GET {live_server.url}/telemetry/api/v1/schemas answered 404: ")
    missing = CliRunner().invoke(main, ["estimates", "nope", "--url", live_server.url])
    assert missing.output.startswith(f"Error: GET {live_server.url}/api/v1/estimates?schema=nope answered 404: ")


def test_an_error_on_a_database_file_names_the_file(tmp_path):
    db = str(tmp_path / "empty.db")
    missing = CliRunner().invoke(main, ["schema", "show", "nope", "--db", db])
    assert missing.exit_code == 1
    assert missing.output.startswith(f"Error: GET /api/v1/schemas/nope on the database file {db} answered 404: ")


def test_serve_says_what_granians_tcp_migrate_req_warning_means(tmp_path):
    # Issue 31: every `serve` start logged granian's warning, explained only in deploy/README.md.
    from ldp_telemetry.tools.cli import tcp_migrate_note

    sysctl = tmp_path / "tcp_migrate_req"
    sysctl.write_text("0\n")
    note = tcp_migrate_note(2, 1024 * 2**20, sysctl)
    assert note and "only when a worker is replaced" in note and "sysctl net.ipv4.tcp_migrate_req=1" in note
    assert tcp_migrate_note(1, 1024 * 2**20, sysctl) is None  # one worker: granian does not warn
    assert tcp_migrate_note(2, None, sysctl) is None  # no worker is ever replaced
    sysctl.write_text("1\n")
    assert tcp_migrate_note(2, 1024 * 2**20, sysctl) is None


def test_estimates_says_what_n_counts_for_a_discovering_attribute():
    # One definition of n on the page, in the API and here: a discovering attribute's level-0 reports.
    from ldp_telemetry.tools.populations import homepage_schema
    from ldp_telemetry.tools.tables import estimates_table
    from ldp_telemetry.shared import parse_schema

    row = {"window": "all", "attribute": "home", "value": "a.example", "estimate": 0.2, "estimate_clipped": 0.2,
           "ci_low": 0.15, "ci_high": 0.25, "n": 5_000, "epsilon": 4.0, "source": "discovered"}
    lines = estimates_table(parse_schema(homepage_schema()), [row])
    assert lines[2].split()[-3:] == ["5,000", "4", "discovered"]
    assert lines[-1].startswith("n of home: its level-0 reports, about half of those that carry it")
