"""Reports: what randomize() makes, what validate_report() accepts and rejects, record checks."""

from __future__ import annotations

import ast
import inspect
import math
import re
from datetime import datetime, timezone

import pytest
from test_shared_examples import MISSING, example, with_value

from ldp_telemetry.shared import mechanisms
from ldp_telemetry.shared import reports as reports_module
from ldp_telemetry.shared.reports import (
    REPORT_FIELDS,
    Report,
    ReportError,
    new_report_id,
    randomize,
    validate_record,
    validate_report,
)
from ldp_telemetry.shared.schema import parse_schema
from ldp_telemetry.shared.windows import current_window

URL_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
RECORDS = {
    "app-usage": {"dark_mode": True, "os": "macos"},
    "every-mechanism": {"flag": False, "os": "windows", "lang": "fr"},
    "sampled": {"flag": True, "os": "linux", "lang": "pl"},
}


def schema(name: str = "every-mechanism"):
    return parse_schema(example(name))


def report(name: str = "every-mechanism", **window) -> dict:
    return randomize(schema(name), RECORDS[name], **window)


def assert_valid_wire_value(attribute, value) -> None:
    if attribute.mechanism == "rr":
        assert type(value) is bool
    elif attribute.mechanism == "grr":
        assert value in attribute.categories
    else:
        assert type(value) is list and len(value) == len(attribute.categories)
        assert all(type(bit) is int and bit in (0, 1) for bit in value)


# --- randomize ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["app-usage", "every-mechanism"])
def test_randomize_makes_a_report_in_the_wire_format(name):
    s = schema(name)
    r = report(name)
    assert tuple(r) == REPORT_FIELDS
    assert URL_SAFE_ID.fullmatch(r["id"])
    assert (r["schema"], r["version"], r["epsilon"]) == (s.name, s.version, s.epsilon)
    assert r["window"] == current_window(s.window) or r["window"] < current_window(s.window)  # may tick over
    assert list(r["values"]) == list(s.attribute_names)  # split "equal": every attribute
    for attribute in s.attributes:
        assert_valid_wire_value(attribute, r["values"][attribute.name])


def test_window_format_follows_the_schema():
    moment = datetime(2026, 11, 21, 13, 5, tzinfo=timezone.utc)
    assert report("app-usage", window=moment)["window"] == "2026-11-21"
    assert report("every-mechanism", window=moment)["window"] == "2026-11-21T13"
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", report("app-usage")["window"])
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}", report("every-mechanism")["window"])
    assert report("every-mechanism", window="2025-01-02T03")["window"] == "2025-01-02T03"


@pytest.mark.parametrize("window", ["2026-11-21", "2026-11-21T25", "yesterday", 20261121])
def test_randomize_rejects_a_window_of_the_wrong_form(window):
    with pytest.raises(ValueError, match="window"):
        report("every-mechanism", window=window)


def test_ids_are_fresh_url_safe_tokens():
    ids = {new_report_id() for _ in range(1000)} | {report()["id"] for _ in range(100)}
    assert len(ids) == 1100
    assert all(URL_SAFE_ID.fullmatch(i) for i in ids)


def test_randomize_takes_the_derived_schema_json_too():
    derived = schema().to_dict()
    r = randomize(derived, RECORDS["every-mechanism"])
    assert validate_report(r, schema()).id == r["id"]


def test_sample_split_carries_exactly_one_attribute_chosen_uniformly():
    s = schema("sampled")
    draws = 3000
    counts = {name: 0 for name in s.attribute_names}
    for _ in range(draws):
        r = randomize(s, RECORDS["sampled"])
        (name, value), = r["values"].items()
        assert_valid_wire_value(s.attribute(name), value)
        counts[name] += 1
    # Each count is Binomial(3000, 1/3): sd = sqrt(3000 * 1/3 * 2/3) = 25.8. Six sd (155) either
    # side fails a correct encoder with probability < 3 * 2e-9 (the device draws are not seeded).
    sd = math.sqrt(draws * (1 / 3) * (2 / 3))
    assert all(abs(c - draws / 3) < 6 * sd for c in counts.values()), counts


@pytest.mark.parametrize("name", ["app-usage", "every-mechanism", "sampled"])
def test_validate_report_accepts_what_randomize_makes(name):
    s = schema(name)
    for _ in range(50):
        r = report(name)
        valid = validate_report(r, s)
        assert isinstance(valid, Report)
        assert (valid.id, valid.schema, valid.window, valid.values) == (r["id"], s, r["window"], r["values"])


def test_validate_report_takes_a_lookup():
    published = {(s.name, s.version): s for s in map(parse_schema, (example("app-usage"), example("sampled")))}
    r = report("app-usage")
    assert validate_report(r, lambda name, version: published.get((name, version))).schema.name == "app-usage"
    with pytest.raises(ReportError) as info:
        validate_report(report("every-mechanism"), lambda name, version: published.get((name, version)))
    assert info.value.field == "schema"


# --- hits --------------------------------------------------------------------------------


def test_hits_name_the_values_a_report_counts_for():
    s = schema()
    base = report()
    cases = [
        ({"flag": True, "os": "macos", "lang": [0, 1, 1, 0, 0, 0, 0, 1]}, [("flag", 0), ("os", 1), ("lang", 1),
                                                                         ("lang", 2), ("lang", 7)]),
        ({"flag": False, "os": "other", "lang": [0] * 8}, [("os", 3)]),
    ]
    for values, expected in cases:
        validated = validate_report({**base, "values": values}, s)
        hits = [(name, s.attribute(name).keys.index(key)) for name, reported in validated.values.items()
                for key, amount in s.attribute(name).mech.statistics(s.attribute(name), reported)]
        assert hits == expected


# --- rejections --------------------------------------------------------------------------


def mutated(path: tuple, value, name: str = "every-mechanism") -> dict:
    """A valid report with the field at ``path`` set to ``value`` (deleted when value is MISSING)."""
    return with_value(report(name), path, value)



REJECTED = [
    # (path, value, field the error names)
    (("ip",), "127.0.0.1", "ip"),
    (("user_agent",), "x", "user_agent"),
    (("timestamp",), 0, "timestamp"),
    (("",), 0, '""'),  # an empty key still gets a field to name
    (("k" * 500,), 0, "k" * 80),  # a client's key is echoed only so far
    *((( f,), MISSING, f) for f in REPORT_FIELDS),
    (("id",), "a" * 15, "id"),
    (("id",), "a" * 65, "id"),
    (("id",), "a" * 20 + "!", "id"),
    (("id",), "a" * 20 + "=", "id"),
    (("id",), "\u00e9" * 20, "id"),
    (("id",), 12345678901234567890, "id"),
    (("id",), None, "id"),
    (("schema",), "app-usage", "schema"),
    (("schema",), 1, "schema"),
    (("schema",), None, "schema"),
    (("version",), 2, "schema"),
    (("version",), True, "version"),
    (("version",), "3", "version"),
    (("version",), 3.0, "version"),
    (("version",), 0, "version"),
    (("version",), 10**30, "version"),
    (("version",), None, "version"),
    (("window",), "2026-11-21", "window"),  # a day under an hourly schema
    (("window",), "2026-11-21T13:00", "window"),
    (("window",), "2026-13-01T00", "window"),
    (("window",), "2026-11-21T1\u0663", "window"),
    (("window",), 2026112113, "window"),
    (("window",), None, "window"),
    (("epsilon",), 1.0, "epsilon"),
    (("epsilon",), 3.0 + 1e-6, "epsilon"),
    (("epsilon",), "3.0", "epsilon"),
    (("epsilon",), True, "epsilon"),
    (("epsilon",), math.nan, "epsilon"),
    (("epsilon",), math.inf, "epsilon"),
    (("epsilon",), 10**400, "epsilon"),
    (("epsilon",), None, "epsilon"),
    (("values",), [], "values"),
    (("values",), None, "values"),
    (("values",), "flag", "values"),
    (("values", "extra"), True, "values.extra"),
    (("values", "os"), MISSING, "values.os"),
    (("values", "flag"), 1, "values.flag"),
    (("values", "flag"), 0, "values.flag"),
    (("values", "flag"), "true", "values.flag"),
    (("values", "flag"), None, "values.flag"),
    (("values", "flag"), [True], "values.flag"),
    (("values", "os"), "bsd", "values.os"),
    (("values", "os"), "Linux", "values.os"),
    (("values", "os"), 0, "values.os"),
    (("values", "os"), None, "values.os"),
    (("values", "os"), ["linux"], "values.os"),
    (("values", "lang"), [True, False, False, False, False, False, False, False], "values.lang"),
    (("values", "lang"), [0] * 7, "values.lang"),
    (("values", "lang"), [0] * 9, "values.lang"),
    (("values", "lang"), [0, 0, 2, 0, 0, 0, 0, 0], "values.lang"),
    (("values", "lang"), [0, 0, -1, 0, 0, 0, 0, 0], "values.lang"),
    (("values", "lang"), [0, 0, 1.0, 0, 0, 0, 0, 0], "values.lang"),
    (("values", "lang"), [0, 0, "1", 0, 0, 0, 0, 0], "values.lang"),
    (("values", "lang"), [0, 0, [1], 0, 0, 0, 0, 0], "values.lang"),
    (("values", "lang"), "01000000", "values.lang"),
    (("values", "lang"), {"fr": 1}, "values.lang"),
    (("values", "lang"), "fr", "values.lang"),
]


@pytest.mark.parametrize(("path", "value", "field"), REJECTED, ids=lambda x: repr(x)[:40])
def test_validate_report_rejects(path, value, field):
    bad = mutated(path, value)
    with pytest.raises(ReportError) as info:
        validate_report(bad, schema())
    assert info.value.field == field
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{field}: ")


@pytest.mark.parametrize("obj", [None, [], "report", 3, True])
def test_a_report_must_be_an_object(obj):
    with pytest.raises(ReportError) as info:
        validate_report(obj, schema())
    assert info.value.field == "report"


@pytest.mark.parametrize("count", [0, 2, 3])
def test_a_sampled_report_carries_exactly_one_attribute(count):
    values = {"flag": True, "os": "linux", "lang": [0] * 8}
    bad = {**report("sampled"), "values": dict(list(values.items())[:count])}
    with pytest.raises(ReportError) as info:
        validate_report(bad, schema("sampled"))
    assert info.value.field == "values"


@pytest.mark.parametrize("epsilon", [3, 3.0, 3.0 + 5e-10])
def test_epsilon_equal_to_the_schema_is_accepted_as_int_or_float(epsilon):
    assert validate_report(mutated(("epsilon",), epsilon), schema()).schema.epsilon == 3.0


@pytest.mark.parametrize("report_id", ["a" * 16, "Z" * 64, "abc-DEF_0123456789"])
def test_ids_of_16_to_64_url_safe_characters_are_accepted(report_id):
    assert validate_report(mutated(("id",), report_id), schema()).id == report_id


# --- records (true values: never repeated in an error) -----------------------------------

SECRET = "s3cr3t-v4lue-xyz"


@pytest.mark.parametrize(
    ("record", "says"),
    [
        ({"flag": True, "os": "linux", "lang": "en", "extra": SECRET}, "unknown attribute(s) for schema 'every-mechanism': extra"),
        ({"flag": True, "os": SECRET + "-linux"}, "missing attribute(s) for schema 'every-mechanism': lang"),
        ({"flag": SECRET, "os": "linux", "lang": "en"}, "flag must be True or False"),
        ({"flag": 1, "os": "linux", "lang": "en"}, "flag must be True or False"),
        ({"flag": None, "os": "linux", "lang": "en"}, "flag must be True or False"),
        ({"flag": True, "os": 31337, "lang": "en"}, "os must be a category name"),
        ({"flag": True, "os": True, "lang": "en"}, "os must be a category name"),
        ({"flag": True, "os": SECRET.encode(), "lang": "en"}, "os must be a category name"),
        ({"flag": True, "os": "linux", "lang": SECRET}, "lang must be one of the schema's categories"),
        ({"flag": True, "os": "Linux", "lang": "en"}, "os must be one of the schema's categories"),
    ],
)
def test_record_errors_name_the_attribute_but_not_the_value(record, says):
    for call in (lambda: validate_record(schema(), record), lambda: randomize(schema(), record)):
        with pytest.raises(ValueError) as info:
            call()
        message = str(info.value)
        assert says in message
        assert SECRET not in message and "31337" not in message and "Linux" not in message


@pytest.mark.parametrize("record", [None, [("flag", True)], "flag=true", 1])
def test_a_record_must_be_a_dict(record):
    with pytest.raises(ValueError, match="a record must be a dict"):
        validate_record(schema(), record)


def test_validate_record_gives_the_encoders_their_inputs():
    assert validate_record(schema(), {"flag": False, "os": "other", "lang": "pl"}) == {"flag": False, "os": 3, "lang": 7}
    assert validate_record(schema(), {"lang": "en", "os": "linux", "flag": True}) == {"flag": True, "os": 0, "lang": 0}


@pytest.mark.parametrize("module", [mechanisms, reports_module])
def test_device_code_never_imports_random_or_numpy(module):
    # A predictable coin undoes randomised response: the device path draws from the OS CSPRNG.
    tree = ast.parse(inspect.getsource(module))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not imported & {"random", "numpy"}
