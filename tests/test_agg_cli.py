"""The operator commands: schema publish, estimates, serve's setting checks."""

from __future__ import annotations

import json

import requests
from click.testing import CliRunner
from conftest import ADMIN, APP_USAGE

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
