"""Property-based tests: any input to the parsers gives a valid object or a ValueError, nothing else."""

from __future__ import annotations

import copy
import json
import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_shared_examples import EXAMPLES, MISSING, example, json_values, with_value

from ldp_telemetry.shared.reports import Report, ReportError, randomize, validate_record, validate_report
from ldp_telemetry.shared.schema import MAX_CATEGORY_LENGTH, MIN_EPSILON, Schema, parse_schema

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SCHEMAS = {name: parse_schema(raw) for name, raw in EXAMPLES.items()}


def parse_or_value_error(obj: Any) -> Schema | None:
    try:
        schema = parse_schema(obj)
    except ValueError as exc:
        assert str(exc)  # a sentence, not an empty error
        return None
    # whatever parses is a schema whose derived form is JSON and parses back to itself
    again = parse_schema(json.loads(json.dumps(schema.to_dict(), allow_nan=False)))
    assert again == schema
    return schema


def validate_or_report_error(obj: Any, schemas) -> Report | None:
    try:
        report = validate_report(obj, schemas)
    except ReportError as exc:  # a ValueError that names the field, for the API's details
        assert isinstance(exc, ValueError) and exc.field and exc.message
        return None
    assert isinstance(report, Report)
    return report


def paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside nested dicts and lists."""
    found = []
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        found.append(prefix + (key,))
        found.extend(paths(value, prefix + (key,)))
    return found


@st.composite
def mutated(draw, base: Any) -> Any:
    """``base`` with one value replaced by any JSON, deleted, or a new key/element added."""
    path = draw(st.sampled_from(paths(base)))
    kind = draw(st.sampled_from(["replace", "delete", "add"]))
    if kind == "replace":
        return with_value(base, path, draw(json_values))
    if kind == "delete":
        return with_value(base, path, MISSING)
    parent = copy.deepcopy(base)
    target = parent
    for key in path[:-1]:
        target = target[key]
    if isinstance(target, dict):
        target[draw(st.text(max_size=12))] = draw(json_values)
    else:
        target.append(draw(json_values))
    return parent


# --- schemas -------------------------------------------------------------------------------


@SETTINGS
@given(json_values)
def test_parse_schema_of_any_json_is_a_schema_or_a_value_error(obj):
    parse_or_value_error(obj)


@SETTINGS
@given(st.sampled_from(sorted(EXAMPLES)).flatmap(lambda name: mutated(example(name))))
def test_parse_schema_of_a_mutated_schema_is_a_schema_or_a_value_error(obj):
    parse_or_value_error(obj)


@SETTINGS
@given(st.sampled_from(sorted(SCHEMAS)).flatmap(lambda name: mutated(SCHEMAS[name].to_dict())))
def test_parse_schema_of_a_mutated_derived_schema_is_a_schema_or_a_value_error(obj):
    parse_or_value_error(obj)


names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,63}", fullmatch=True)
# Text as a schema may hold it: valid Unicode without control or format characters (Cc, Cf, Cs).
shown_text = st.characters(blacklist_categories=("Cc", "Cf", "Cs"))
categories = st.lists(st.text(shown_text, min_size=1, max_size=MAX_CATEGORY_LENGTH), min_size=2, max_size=12,
                      unique_by=lambda c: unicodedata.normalize("NFC", c))
attributes = st.one_of(
    st.fixed_dictionaries({"name": names, "type": st.just("boolean")},
                          optional={"mechanism": st.sampled_from(["auto", "rr"])}),
    st.fixed_dictionaries({"name": names, "type": st.just("categorical"), "categories": categories},
                          optional={"mechanism": st.sampled_from(["auto", "grr", "oue"])}),
)
valid_schemas = st.fixed_dictionaries(
    {
        "name": names,
        "version": st.integers(1, 2**31 - 1),
        # at most 5 attributes, each at least MIN_EPSILON under split "equal"
        "epsilon": st.floats(min_value=5 * MIN_EPSILON, max_value=20),
        "attributes": st.lists(attributes, min_size=1, max_size=5, unique_by=lambda a: a["name"]),
    },
    optional={"window": st.sampled_from(["hour", "day"]), "split": st.sampled_from(["equal", "sample"]),
              "description": st.text(shown_text, max_size=200)},
)


@SETTINGS
@given(valid_schemas, st.data())
def test_any_valid_schema_round_trips_and_validates_what_it_randomizes(raw, data):
    schema = parse_or_value_error(raw)
    assert schema is not None
    assert [a.name for a in schema.attributes] == [a["name"] for a in raw["attributes"]]
    total = sum(a.epsilon for a in schema.attributes)
    assert abs(total - schema.epsilon) <= 1e-9 if schema.split == "equal" else total >= schema.epsilon
    record = {a.name: data.draw(st.booleans() if a.type == "boolean" else st.sampled_from(a.categories))
              for a in schema.attributes}
    report = randomize(schema, record)
    assert json.loads(json.dumps(report)) == report
    assert validate_report(json.loads(json.dumps(report)), schema).values == report["values"]


# --- reports and records ------------------------------------------------------------------


def lookup(name: str, version: int) -> Schema | None:
    schema = SCHEMAS.get(name)
    return schema if schema is not None and schema.version == version else None


@SETTINGS
@given(json_values)
def test_validate_report_of_any_json_is_a_report_or_a_report_error(obj):
    validate_or_report_error(obj, SCHEMAS["every-mechanism"])
    validate_or_report_error(obj, lookup)


REPORTS = {
    "app-usage": randomize(SCHEMAS["app-usage"], {"dark_mode": True, "os": "linux"}),
    "every-mechanism": randomize(SCHEMAS["every-mechanism"], {"flag": True, "os": "linux", "lang": "de"}),
    "sampled": randomize(SCHEMAS["sampled"], {"flag": True, "os": "linux", "lang": "de"}),
}


@SETTINGS
@given(st.sampled_from(sorted(REPORTS)).flatmap(lambda name: mutated(REPORTS[name])))
def test_validate_report_of_a_mutated_report_is_a_report_or_a_report_error(obj):
    validate_or_report_error(obj, lookup)
    for schema in SCHEMAS.values():
        validate_or_report_error(obj, schema)


@SETTINGS
@given(st.one_of(json_values, st.dictionaries(st.sampled_from(["flag", "os", "lang", "x"]), json_values)))
def test_validate_record_of_anything_is_the_truth_or_a_value_error(record):
    schema = SCHEMAS["every-mechanism"]
    try:
        truth = validate_record(schema, record)
    except ValueError:
        return
    assert set(truth) == set(schema.attribute_names)
    assert isinstance(truth["flag"], bool)
    assert schema.attribute("os").categories[truth["os"]] == record["os"]
