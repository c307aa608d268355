"""`ldp-telemetry plan`: the planner's table for a schema file."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from ldp_telemetry.tools.cli import main
from ldp_telemetry.shared.planner import alternatives

SCHEMA = {"name": "app-usage", "version": 1, "epsilon": 2.0,
          "attributes": [{"name": "dark_mode", "type": "boolean"},
                         {"name": "os", "type": "categorical", "categories": ["linux", "macos", "windows", "other"]}]}


def test_plan_prints_every_split_with_the_planner_figures(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    result = CliRunner().invoke(main, ["plan", str(path), "--reports", "20000", "--half-width", "2"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()[3:]]
    # a share's half-widths in percentage points and its detection threshold in percent, as the dashboard
    expected = [(split, p.attribute.name, f"{p.half_width(20000) * 100:.2g}", "2", "pts", f"{p.reports_for(0.02):,}",
                 f"{p.detection_threshold(20000) * 100:.1f}%")
                for split, plans in alternatives(SCHEMA).items() for p in plans]
    assert [tuple(r[:2] + r[4:9]) for r in rows] == expected
    assert "with 20,000 reports of the schema a window (--reports)" in result.output.splitlines()[0]


def test_plan_says_what_it_assumes_and_prints_percent(tmp_path):
    # Issue 31: plan printed shares as fractions (0.0123) and assumed 10,000 reports without saying so.
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "with 10,000 reports of the schema a window (the default; --reports sets it)" in result.output
    for line in result.output.splitlines()[3:]:
        detects = line.split()[-1]
        assert re.fullmatch(r"\d+\.\d%", detects), line


def test_plan_says_which_split_a_memoised_schema_cannot_take(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({**SCHEMA, "epsilon_permanent": 3.0}))
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    assert "sample        not possible: under split 'sample'" in result.output


def test_plan_names_a_bad_schema(tmp_path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({**SCHEMA, "epsilon": -1}))
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 1 and "epsilon must be a number in (0, 20]" in result.output


def test_plan_refuses_a_half_width_below_a_millionth_of_the_scale(tmp_path):
    # 1e-200 squared is 0: the needed reports divided by zero (a traceback) before the planner refused it
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    result = CliRunner().invoke(main, ["plan", str(path), "--half-width", "1e-200"])
    assert result.exit_code == 1, result.output
    # the dashboard's sentence for the same typed half-width (percentage points)
    assert "the half-width for dark_mode must be from 0.0001 to 100 percentage points, got 1e-200" in result.output
