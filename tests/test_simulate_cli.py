"""`ldp-telemetry simulate`: the table it prints, the flags it takes, and its errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ldp_telemetry.tools.cli import main
from ldp_telemetry.tools.populations import SIMULATION_SCHEMA, SIMULATION_SHARES
from ldp_telemetry.shared.schema import parse_schema
from ldp_telemetry.shared.simulation import simulate
from ldp_telemetry.tools.tables import CLIPPED_NOTE

ROW = re.compile(
    r"(?P<attribute>\S+)\s+(?P<value>\S+)\s+(?P<mechanism>rr|grr|oue)\s+(?P<epsilon>[0-9.e+-]+)\s+(?P<n>[\d,]+)\s+"
    r"(?P<truth>[0-9.]+%?)\s+(?P<estimate>[0-9.]+%?)(?P<clipped>\*?)\s+\[(?P<low>[0-9.]+%?), (?P<high>[0-9.]+%?)\] "
    r"(?P<covers>yes|NO)"
)
NUMBERS = ("truth", "estimate", "low", "high")


def number(text: str) -> float:
    """A printed figure as a number: a share in percent as its fraction, a mean as it is."""
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)
SUMMARY = re.compile(r"(\d+) of (\d+) intervals cover the truth; simulated in [0-9.]+ s \(([0-9,]+) devices/s\)")


def run(*args: str) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.output, result.exception


def table(output: str) -> list[dict]:
    lines = output.splitlines()
    assert lines[1].split() == ["attribute", "value", "mech", "eps", "n", "truth", "estimate", "interval", "covers"]
    assert set(lines[2]) == {"-"}
    body = [line for line in lines[3:-1] if line != CLIPPED_NOTE]
    rows = [ROW.fullmatch(line) for line in body]
    assert all(rows), [line for line, row in zip(body, rows) if not row]
    # the note that explains a "*" is there exactly when a row has one
    assert (CLIPPED_NOTE in lines) == any(row["clipped"] for row in rows)
    assert SUMMARY.fullmatch(lines[-1]), lines[-1]
    return [{k: number(v) if k in NUMBERS else v for k, v in row.groupdict().items()} for row in rows]


def expected_values() -> list[tuple[str, str, float]]:
    """(attribute, value, truth) of the built-in population, in the table's order."""
    out = []
    for attribute in SIMULATION_SCHEMA["attributes"]:
        share = SIMULATION_SHARES[attribute["name"]]
        if attribute["type"] == "boolean":
            out.append((attribute["name"], "true", share))
        else:
            out.extend((attribute["name"], c, s) for c, s in zip(attribute["categories"], share))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_table_shows_truth_estimate_interval_and_coverage(seed):
    devices = 20_000
    code, output, _ = run("--devices", str(devices), "--seed", str(seed))
    assert code == 0, output
    assert output.splitlines()[0] == ("schema simulation v1: epsilon 8 per report, split equal, "
                                      "20,000 devices, 95% intervals")
    rows = table(output)
    assert [(r["attribute"], r["value"], pytest.approx(r["truth"], abs=1e-12)) for r in rows] == expected_values()
    schema = parse_schema(SIMULATION_SCHEMA)
    # the CLI is a thin layer: the same numbers as the library with the same seed
    library = simulate(schema, SIMULATION_SHARES, devices, rng=np.random.default_rng(seed))
    for row, result in zip(rows, library):
        low, high, estimate = row["low"], row["high"], row["estimate"]
        assert row["mechanism"] == schema.attribute(row["attribute"]).mechanism
        assert float(row["epsilon"]) == 1.0 and int(row["n"].replace(",", "")) == devices
        # the estimate printed is the clipped one, in percent to 2 decimals (or finer), marked when
        # clipping changed it (as the dashboard)
        assert (estimate, low, high) == pytest.approx((result.estimate.estimate_clipped, result.estimate.ci_low,
                                                       result.estimate.ci_high), abs=0.5e-4 + 1e-12)
        assert bool(row["clipped"]) == (result.estimate.estimate != result.estimate.estimate_clipped)
        assert (row["covers"] == "yes") == result.covered
        # the Wilson interval holds f̂, so the clipped interval holds the printed estimate (to the
        # printed 4 decimals): never an estimate outside its own interval
        assert low - 1e-4 <= estimate <= high + 1e-4
    covered, total, _ = SUMMARY.fullmatch(output.splitlines()[-1]).groups()
    assert (int(covered), int(total)) == (sum(r["covers"] == "yes" for r in rows), len(rows))
    # Most intervals cover: with 15 intervals each covering w.p. about 0.95 (0.975 at the two
    # zero shares), 4 or more misses has probability < 0.6%; the seeds are fixed.
    assert int(covered) >= 12


def test_share_and_epsilon_flags():
    code, output, _ = run("--devices", "5000", "--share", "dark_mode=0.9", "--share", "os=0.1,0.2,0.3,0.4",
                          "--epsilon", "4")
    assert code == 0, output
    rows = {(r["attribute"], r["value"]): r for r in table(output)}
    assert rows["dark_mode", "true"]["truth"] == pytest.approx(0.9)
    assert [rows["os", c]["truth"] for c in ("linux", "macos", "windows", "other")] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert {float(r["epsilon"]) for r in rows.values()} == {0.5}  # 4 over 8 attributes
    assert "epsilon 4 per report" in output.splitlines()[0]


def test_a_schema_file_with_its_shares(tmp_path: Path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps({
        "name": "file-schema", "version": 2, "epsilon": 2.0, "split": "sample",
        "attributes": [{"name": "beta", "type": "boolean"},
                       {"name": "lang", "type": "categorical", "categories": ["en", "de", "fr"], "mechanism": "oue"}],
    }))
    code, output, _ = run("--schema", str(path), "--devices", "4000", "--share", "beta=0.25",
                          "--share", "lang=0.5,0.3,0.2", "--seed", "5")
    assert code == 0, output
    assert output.startswith("schema file-schema v2: epsilon 2 per report, split sample, 4,000 devices")
    rows = table(output)
    assert [(r["attribute"], r["value"], r["mechanism"]) for r in rows] == [
        ("beta", "true", "rr"), ("lang", "en", "oue"), ("lang", "de", "oue"), ("lang", "fr", "oue")]
    assert {float(r["epsilon"]) for r in rows} == {2.0}  # sample: the whole budget
    assert int(rows[0]["n"].replace(",", "")) + int(rows[1]["n"].replace(",", "")) == 4000  # each device carries one attribute


BAD_FLAGS = [
    (["--devices", "0"], "--devices"),
    (["--devices", "many"], "--devices"),
    (["--share", "nosuch=0.5"], "nosuch"),
    (["--share", "dark_mode=2"], "dark_mode"),
    (["--share", "dark_mode=nan"], "dark_mode"),
    (["--share", "dark_mode"], "NAME=SHARE"),
    (["--share", "dark_mode=yes"], "NAME=SHARE"),
    (["--share", "os=0.5"], "os"),
    (["--share", "os=0.5,0.5,0.5,0.5"], "os"),
    (["--epsilon", "0"], "epsilon"),
    (["--epsilon", "25"], "epsilon"),
    (["--epsilon", "nan"], "epsilon"),
    (["--confidence", "1.5"], "confidence"),
    (["--confidence", "0"], "confidence"),
    (["--schema", "/nonexistent/schema.json"], "--schema"),
    (["--seed", "x"], "--seed"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize(("args", "names"), BAD_FLAGS, ids=lambda x: " ".join(x) if isinstance(x, list) else x)
def test_bad_flags_give_a_clear_error_not_a_traceback(args, names):
    code, output, exception = run("--devices", "1000", *args)
    assert code in (1, 2)
    assert isinstance(exception, SystemExit)  # click's own exit, not an exception escaping
    assert "Error" in output and names in output and "Traceback" not in output


def test_a_schema_file_without_shares_names_what_is_missing(tmp_path: Path):
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SIMULATION_SCHEMA))
    code, output, exception = run("--schema", str(path), "--devices", "100")
    assert code == 1 and isinstance(exception, SystemExit)
    assert "no true shares given for: dark_mode" in output


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_schema_file_that_is_not_a_schema_object_is_a_clear_error(tmp_path: Path, text: str):
    path = tmp_path / "schema.json"
    path.write_text(text)
    code, output, exception = run("--schema", str(path), "--devices", "100", "--epsilon", "1")
    assert isinstance(exception, SystemExit) and code in (1, 2)
    assert "Error" in output


def console_script() -> Path:
    return Path(sys.executable).with_name("ldp-telemetry")


def test_the_installed_console_script_runs_simulate():
    done = subprocess.run([str(console_script()), "simulate", "--devices", "5000", "--seed", "3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(table(done.stdout)) == len(expected_values())
    bad = subprocess.run([str(console_script()), "simulate", "--share", "typo=0.5"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert "Error: " in bad.stderr and "typo" in bad.stderr and "Traceback" not in bad.stderr


def test_simulate_covers_numeric_and_histogram_attributes(tmp_path):
    schema = tmp_path / "numbers.json"
    schema.write_text(json.dumps({"name": "numbers", "version": 1, "epsilon": 8.0, "attributes": [
        {"name": f"m_{mechanism}", "type": "numeric", "range": [0, 120], "mechanism": mechanism}
        for mechanism in ("duchi", "pm", "hm", "laplace")] + [
        {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]}]}))
    shares = [f"--share=m_{m}=30" for m in ("duchi", "pm", "hm", "laplace")] + ["--share=load_ms=0.4,0.3,0.2,0.1"]
    result = CliRunner().invoke(main, ["simulate", "-n", "200000", "--schema", str(schema), "--seed", "3", *shares])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    means = [line.split() for line in lines if line.startswith("m_")]
    assert [row[1:3] for row in means] == [["mean", m] for m in ("duchi", "pm", "hm", "laplace")]
    for row in means:
        truth, estimate = float(row[5]), float(row[6])
        low, high = (float(x) for x in " ".join(row[7:9]).strip("[]").split(", "))
        # 200,000 devices at ε 1.6 each: every half-width is under 3 minutes, and the estimate inside it
        assert truth == 30 and low <= estimate <= high and high - low < 6
    assert [line.split()[1] + " " + line.split()[2] for line in lines if line.startswith("load_ms")] == [
        "[0, 50)", "[50, 100)", "[100, 250)", "[250, 1000]"]


def test_a_truth_outside_its_interval_never_prints_as_one_of_its_ends():
    # Issue 31: the demo printed "nafe78.com ... 0.0166 ... [0.0166, 0.0208] NO": the truth, 0.01656,
    # and the interval's lower end, 0.01658, rounded alike.
    from ldp_telemetry.tools.tables import TruthRow, truth_table
    from ldp_telemetry.shared.display import SHARE

    row = TruthRow("home", "nafe78.com", "olh", 4.0, SHARE, 0.01656, 0.0169, 0.0169, 0.01658, 0.0208, 100_116)
    line = truth_table([row])[2]
    truth, low = line.split()[5], line.split()[7].strip("[,")
    assert line.endswith(" NO") and truth != low, line
    assert (truth, low) == ("1.656%", "1.658%")
    covered = TruthRow("home", "a.com", "olh", 4.0, SHARE, 0.0146, 0.0155, 0.0155, 0.0135, 0.0176, 100_116)
    assert truth_table([covered])[2].split()[5:8] == ["1.46%", "1.55%", "[1.35%,"]  # a thousandth of a point
