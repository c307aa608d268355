"""The shared test vectors (tests/vectors/*.json): the code must give, for every case, exactly what
the file says (estimates within the file's stated tolerance).

The files are what a client or aggregator in another language loads too; each case here runs
through the same runner (tests/vectors/generate.py) that wrote its answer, so a change in the code
or a byte changed in a file fails the case it touches. Regenerating the files is a deliberate act:
``tests/vectors/generate.py``, then review the diff.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FOLDER = Path(__file__).parent / "vectors"
_spec = importlib.util.spec_from_file_location("vectors_generate", FOLDER / "generate.py")
assert _spec is not None and _spec.loader is not None
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def load(name: str) -> Any:
    return json.loads((FOLDER / name).read_text(encoding="utf-8"))


RANDOMNESS = load("randomness.json")
REPORTS = load("reports.json")
REPORT_VALIDATION = load("report_validation.json")
WINDOWS = load("windows.json")
ESTIMATES = load("estimates.json")


def cases(items: list[dict[str, Any]]) -> Any:
    """``items`` as pytest parameters, each named by its ``name``."""
    return pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in items])


def same(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), to compare with a loaded file."""
    return json.loads(json.dumps(value))


# --- randomness.json ----------------------------------------------------------------------------


@cases(RANDOMNESS["bernoulli"])
def test_bernoulli_draw(case):
    assert generate.run_bernoulli(case) == (case["result"], len(case["bytes"]) // 2)


@cases(RANDOMNESS["randbelow"])
def test_uniform_integer_draw(case):
    assert generate.run_randbelow(case) == (case["result"], len(case["bytes"]) // 2)


@cases(RANDOMNESS["hmac_stream"])
def test_hmac_stream(case):
    assert generate.run_hmac_stream(case) == case["bytes"]


RANDOMNESS_SCHEMAS = generate.schemas_by_name(RANDOMNESS["schemas"])


@cases(RANDOMNESS["reports"])
def test_fixed_bytes_make_exactly_this_report(case):
    report, used = generate.run_report(RANDOMNESS_SCHEMAS[case["schema"]], case)
    assert same(report) == case["report"]
    assert used == len(case["random_bytes"]) // 2, "every given byte is used, and no more"


@cases([c for c in RANDOMNESS["reports"] if "permanent" in c])
def test_the_device_secret_makes_exactly_this_permanent_response(case):
    assert same(generate.run_permanent(RANDOMNESS_SCHEMAS[case["schema"]], case)) == case["permanent"]


@cases(RANDOMNESS["invalid_records"])
def test_an_invalid_record_names_its_field(case):
    assert generate.run_invalid_record(RANDOMNESS_SCHEMAS[case["schema"]], case) == case["field"]


@cases(RANDOMNESS["string_values"])
def test_a_string_value_is_prepared_and_fingerprinted_exactly(case):
    assert generate.run_string_value(case) == {"prepared": case["prepared"], "fingerprint": case["fingerprint"]}


@cases(RANDOMNESS["string_prefixes"])
def test_a_discovery_prefix_and_its_fingerprint_are_exactly_these(case):
    assert generate.run_string_prefix(case) == {"prefix": case["prefix"], "fingerprint": case["fingerprint"]}


@cases(RANDOMNESS["string_draws"])
def test_a_string_reports_seed_is_drawn_exactly(case):
    assert generate.run_string_draws(case) == (case["result"], len(case["bytes"]) // 2)


@cases(RANDOMNESS["supports"])
def test_a_string_report_supports_exactly_these_candidates(case):
    assert generate.run_supports(RANDOMNESS_SCHEMAS[case["schema"]], case) == case["supported"]


# --- schemas.json, invalid_schemas.json ---------------------------------------------------------


@cases(load("schemas.json"))
def test_schema_derives_exactly(case):
    assert same(generate.run_schema(case)) == case["derived"]
    assert same(generate.run_schema({"schema": case["derived"]})) == case["derived"], "a derived schema parses to itself"


@cases(load("invalid_schemas.json"))
def test_an_invalid_schema_names_its_field(case):
    assert generate.run_invalid_schema(case) == case["field"]


# --- breakdown_schemas.json -----------------------------------------------------------------------

BREAKDOWN_SCHEMAS = load("breakdown_schemas.json")


@cases(BREAKDOWN_SCHEMAS["valid"])
def test_a_schema_published_with_breakdowns_serves_without_them(case):
    assert same(generate.run_published(case)) == {"derived": case["derived"], "breakdowns": case["breakdowns"]}


@cases(BREAKDOWN_SCHEMAS["invalid"])
def test_a_refused_breakdown_names_its_field(case):
    assert generate.run_invalid_published(case) == case["field"]


# --- reports.json, report_validation.json -------------------------------------------------------


@cases(REPORTS["cases"])
def test_a_valid_report_adds_exactly_these_counters(case):
    assert same(generate.run_report_counters(generate.schemas_by_name(REPORTS["schemas"]), case)) == case["counters"]


@cases(REPORT_VALIDATION["cases"])
def test_an_invalid_report_names_its_field(case):
    assert generate.run_invalid_report(generate.schemas_by_name(REPORT_VALIDATION["schemas"]), case) == case["field"]


# --- windows.json --------------------------------------------------------------------------------


def test_the_rollup_name():
    assert generate.windows.ROLLUP == WINDOWS["rollup"]


@pytest.mark.parametrize("case", WINDOWS["window_of"], ids=lambda c: f"{c['instant']}-{c['kind']}")
def test_window_of_an_instant(case):
    assert generate.run_window_of(case) == case["window"]


@pytest.mark.parametrize("case", WINDOWS["bounds"], ids=lambda c: c["window"])
def test_window_bounds(case):
    assert generate.run_window_bounds(case) == {"start": case["start"], "end": case["end"]}


@pytest.mark.parametrize("case", WINDOWS["invalid"], ids=lambda c: f"{c['window']!r}-{c['kind']}")
def test_not_a_window(case):
    assert generate.run_invalid_window(case) is True


@pytest.mark.parametrize("case", WINDOWS["overlapping"], ids=lambda c: c["window"])
def test_overlapping_windows(case):
    assert generate.run_overlapping(case) == case["windows"]


# --- estimates.json ------------------------------------------------------------------------------

NUMBERS = ("estimate", "estimate_clipped", "ci_low", "ci_high")


@cases(ESTIMATES["cases"])
def test_estimates_from_counters_within_the_stated_tolerance(case):
    tolerance = ESTIMATES["tolerance"]
    rows = same(generate.run_estimates(generate.schemas_by_name(ESTIMATES["schemas"])[case["schema"]], case))
    assert [row["value"] for row in rows] == [row["value"] for row in case["estimates"]]
    for row, expected in zip(rows, case["estimates"]):
        for number in NUMBERS:
            assert math.isclose(row[number], expected[number], rel_tol=tolerance["relative"],
                                abs_tol=tolerance["absolute"]), (row["value"], number, row[number], expected[number])


@cases(ESTIMATES["breakdowns"])
def test_breakdown_rows_from_sums_within_the_stated_tolerance(case):
    tolerance = ESTIMATES["tolerance"]
    rows = same(generate.run_breakdown(generate.schemas_by_name(ESTIMATES["schemas"])[case["schema"]], case))
    assert [{k: r[k] for k in ("value", "by_value", "n", "reason")} for r in rows] == \
        [{k: r[k] for k in ("value", "by_value", "n", "reason")} for r in case["rows"]]
    for row, expected in zip(rows, case["rows"]):
        for number in (*NUMBERS, "by_share"):
            assert (row[number] is None) == (expected[number] is None), (row["by_value"], number)
            if row[number] is not None:
                assert math.isclose(row[number], expected[number], rel_tol=tolerance["relative"],
                                    abs_tol=tolerance["absolute"]), (row["by_value"], number, row[number], expected[number])


# --- the folder ----------------------------------------------------------------------------------


def test_every_file_is_what_the_generator_makes():
    """A case deleted from a file, or added by hand, would go unchecked above: each file must hold
    what the generator makes now, numbers of estimates.json within its tolerance (``generate.py
    --check`` compares the text exactly)."""
    for name, build in generate.FILES.items():
        tolerance = ESTIMATES["tolerance"] if name == "estimates.json" else None
        assert _alike(same(build()), load(name), tolerance), f"{name} differs from what generate.py makes"


def run_generate(*args: str) -> subprocess.CompletedProcess[str]:
    """``generate.py`` as a person or CI runs it."""
    return subprocess.run([sys.executable, str(FOLDER / "generate.py"), *args], capture_output=True, text=True,
                          timeout=120)


def test_generate_check_passes():
    done = run_generate("--check")
    assert done.returncode == 0, done.stderr
    assert "vectors match the code" in done.stdout


def test_generate_check_fails_on_a_changed_file(tmp_path):
    """Files written afresh into another folder pass ``--check`` there; one digit of windows.json
    changed makes it exit 1 naming that file alone (the real files are untouched)."""
    assert run_generate("--folder", str(tmp_path)).returncode == 0
    assert run_generate("--check", "--folder", str(tmp_path)).returncode == 0
    text = (tmp_path / "windows.json").read_text(encoding="utf-8")
    (tmp_path / "windows.json").write_text(text.replace("2026-11-21", "2026-11-22", 1), encoding="utf-8")
    done = run_generate("--check", "--folder", str(tmp_path))
    assert done.returncode == 1
    assert "windows.json" in done.stderr and "randomness.json" not in done.stderr


def _alike(made: Any, stored: Any, tolerance: dict[str, float] | None) -> bool:
    if isinstance(made, dict) and isinstance(stored, dict):
        return made.keys() == stored.keys() and all(_alike(made[k], stored[k], tolerance) for k in made)
    if isinstance(made, list) and isinstance(stored, list):
        return len(made) == len(stored) and all(_alike(a, b, tolerance) for a, b in zip(made, stored))
    if tolerance is not None and type(made) is float and type(stored) is float:
        return math.isclose(made, stored, rel_tol=tolerance["relative"], abs_tol=tolerance["absolute"])
    return type(made) is type(stored) and made == stored


def test_the_readme_describes_every_file():
    readme = (FOLDER / "README.md").read_text(encoding="utf-8")
    for name in generate.FILES:
        assert f"`{name}`" in readme, name
