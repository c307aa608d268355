"""The schema model: every validation rule of DESIGN.md and every derived parameter, by hand."""

from __future__ import annotations

import json
import math

import pytest
from test_shared_examples import MISSING, example, with_value

from ldp_telemetry.shared import mechanisms
from ldp_telemetry.shared.reports import randomize
from ldp_telemetry.shared.checks import parse_digits
from ldp_telemetry.shared.schema import MIN_EPSILON, Schema, SchemaError, is_version, parse_schema, version_from_text

E = math.e


def changed(path: tuple, value, base: str = "app-usage") -> dict:
    """An example schema with the field at ``path`` set to ``value`` (or deleted for MISSING)."""
    return with_value(example(base), path, value)


def boolean(name: str = "flag", **extra) -> dict:
    return {"name": name, "type": "boolean", **extra}


def categorical(categories, name: str = "cat", **extra) -> dict:
    return {"name": name, "type": "categorical", "categories": list(categories), **extra}


def schema_of(*attributes, epsilon=1.0, **top) -> dict:
    return {"name": "s", "version": 1, "epsilon": epsilon, "attributes": list(attributes), **top}


def assert_rejected(obj, field: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_schema(obj)
    assert field in str(info.value), f"{str(info.value)!r} does not name {field!r}"


# --- top-level fields --------------------------------------------------------------------


@pytest.mark.parametrize("obj", [None, [], "app-usage", 3, True])
def test_a_schema_must_be_an_object(obj):
    assert_rejected(obj, "schema must be a JSON object")


@pytest.mark.parametrize(
    "name", ["", "A", "App", "-a", "_a", "a b", "a.b", "a/b", "\u00e9t\u00e9", "a" * 65, "a\n", 5, None, MISSING]
)
def test_schema_name_must_match_the_pattern(name):
    assert_rejected(changed(("name",), name), "name must match")


@pytest.mark.parametrize("name", ["a", "0", "a-b_c", "9lives", "a" * 64, "a" + "-" * 63])
def test_schema_name_accepts_up_to_64_characters(name):
    assert parse_schema(changed(("name",), name)).name == name


@pytest.mark.parametrize("version", [0, -1, 2**31, 10**30, 1.0, "1", True, None, MISSING])
def test_version_must_be_an_integer_from_1(version):
    assert_rejected(changed(("version",), version), "version")


@pytest.mark.parametrize("version", [1, 2, 2**31 - 1])
def test_version_accepts_positive_integers(version):
    assert parse_schema(changed(("version",), version)).version == version


@pytest.mark.parametrize("epsilon", [0, 0.0, -1, -1e-300, 20.000001, 21, 10**400, math.nan, math.inf, -math.inf,
                                     "2", True, False, None, [2.0], MISSING])
def test_total_epsilon_must_be_in_0_to_20(epsilon):
    assert_rejected(changed(("epsilon",), epsilon), "epsilon must be a number in (0, 20]")


@pytest.mark.parametrize("epsilon", [2e-4, 0.5, 2, 20, 20.0])  # app-usage has two attributes: ε/2 each
def test_total_epsilon_accepts_the_interval(epsilon):
    assert parse_schema(changed(("epsilon",), epsilon)).epsilon == epsilon


@pytest.mark.parametrize("epsilon", [5e-324, 1e-300, 1e-17, 1e-9, 9.99e-5])
@pytest.mark.parametrize("attribute", [boolean(), categorical(["x", "y", "z"]),
                                       {"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "duchi"},
                                       {"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "laplace"},
                                       {"name": "h", "type": "histogram", "edges": [0, 1, 2]}])
def test_an_epsilon_below_the_least_an_attribute_may_have_is_refused_naming_the_field(epsilon, attribute):
    # At 5e-324 and 1e-300 duchi's C = (e^ε + 1)/(e^ε - 1) divided by zero: a ZeroDivisionError, not a SchemaError.
    expected = f"epsilon is too small: every attribute needs at least 0.0001.*{epsilon!r}"
    with pytest.raises(SchemaError, match=expected) as caught:
        parse_schema(schema_of(attribute, epsilon=epsilon))
    assert caught.value.field == "epsilon"
    with pytest.raises(SchemaError, match="too small") as caught:
        parse_schema(schema_of(attribute, boolean("b"), epsilon=2.0) | {"attributes": [
            {**attribute, "epsilon": epsilon}, boolean("b", epsilon=2.0 - epsilon)]})
    assert caught.value.field == "attributes[0].epsilon"


def test_an_attribute_whose_share_of_the_total_is_below_the_least_is_refused():
    # 64 attributes at ε = 0.0064 get 1e-4 each, just enough; at 0.0063 each gets less.
    attributes = [boolean(f"b{i}") for i in range(64)]
    assert parse_schema(schema_of(*attributes, epsilon=0.0064)).attributes[0].epsilon == pytest.approx(1e-4)
    with pytest.raises(SchemaError, match=r"attributes\[0\].epsilon is 9.84375e-05 \(its share of the total\), which is "
                                          r"too small: an attribute needs at least 0.0001") as caught:
        parse_schema(schema_of(*attributes, epsilon=0.0063))
    assert caught.value.field == "attributes[0].epsilon"
    # under split "sample" every attribute gets the whole total
    assert parse_schema(schema_of(*attributes, epsilon=0.0063, split="sample")).attributes[0].epsilon == 0.0063


@pytest.mark.parametrize("mechanism", ["duchi", "pm", "hm", "laplace"])
def test_at_the_least_epsilon_every_derived_number_is_finite_and_a_report_encodes_and_estimates(mechanism):
    schema = parse_schema(schema_of({"name": "x", "type": "numeric", "range": [0, 10], "mechanism": mechanism},
                                    epsilon=MIN_EPSILON))
    attribute = schema.attributes[0]
    assert all(math.isfinite(v) for v in (attribute.p, attribute.q, *attribute.derived_parameters.values()))
    assert attribute.p > attribute.q
    report = randomize(schema, {"x": 3.0}, window="2026-11-21")
    amounts = dict(attribute.mech.statistics(attribute, report["values"]["x"]))
    [(key, estimate)] = attribute.mech.estimates(attribute, 1, amounts, 0.95)
    assert key == "mean" and math.isfinite(estimate.estimate) and 0 <= estimate.ci_low <= estimate.ci_high <= 10


@pytest.mark.parametrize("window", ["week", "Day", "HOUR", "", None, 1, ["day"]])
def test_window_must_be_hour_or_day(window):
    assert_rejected(changed(("window",), window), "window")


@pytest.mark.parametrize("split", ["random", "Equal", "", None, 2, {"equal": 1}])
def test_split_must_be_equal_or_sample(split):
    assert_rejected(changed(("split",), split), "split")


@pytest.mark.parametrize("description", [5, None, ["x"], "x" * 10_001])
def test_description_must_be_a_bounded_string(description):
    assert_rejected(changed(("description",), description), "description")


def test_defaults_are_day_equal_empty_description_and_auto():
    schema = parse_schema(schema_of(boolean(), categorical(["a", "b"])))
    assert (schema.window, schema.split, schema.description) == ("day", "equal", "")
    assert schema.attributes[1].mechanism == "grr"  # auto: d - 2 = 0 < 3e^ε


@pytest.mark.parametrize("description", ["", "x" * 10_000, "<script>alert(1)</script> & \u00e9\u4e2d\U0001f600"])
def test_description_is_any_text(description):
    assert parse_schema(changed(("description",), description)).description == description


@pytest.mark.parametrize("field", ["owner", "Name", "attribute", ""])
def test_unknown_schema_fields_are_rejected(field):
    assert_rejected({**example(), field: 1}, f"unknown field(s): {field}")


# --- attributes --------------------------------------------------------------------------


@pytest.mark.parametrize("attributes", [[], None, {}, "dark_mode", MISSING])
def test_attributes_must_be_a_non_empty_list(attributes):
    assert_rejected(changed(("attributes",), attributes), "attributes must be a list of 1 to 64")


def test_at_most_64_attributes():
    assert len(parse_schema(schema_of(*(boolean(f"a{i}") for i in range(64)))).attributes) == 64
    assert_rejected(schema_of(*(boolean(f"a{i}") for i in range(65))), "attributes must be a list of 1 to 64")


@pytest.mark.parametrize("attribute", [5, "dark_mode", None, ["dark_mode"]])
def test_each_attribute_must_be_an_object(attribute):
    assert_rejected(schema_of(boolean(), attribute), "attributes[1] must be a JSON object")


def test_attribute_names_must_be_distinct():
    assert_rejected(schema_of(boolean("x"), categorical(["a", "b"], name="x")), "attribute names must be distinct, 'x'")


@pytest.mark.parametrize("name", ["", "Dark", "dark mode", "a" * 65, 1, None, MISSING])
def test_attribute_name_must_match_the_pattern(name):
    assert_rejected(changed(("attributes", 1, "name"), name), "attributes[1].name must match")


@pytest.mark.parametrize("kind", ["bool", "Boolean", "categories", "", None, 1, MISSING])
def test_attribute_type_must_be_boolean_or_categorical(kind):
    assert_rejected(changed(("attributes", 0, "type"), kind), "attributes[0].type")


@pytest.mark.parametrize("field", ["label", "Type", "values"])
def test_unknown_attribute_fields_are_rejected(field):
    assert_rejected(changed(("attributes", 1, field), "x"), f"attributes[1] has unknown field(s): {field}")


def test_a_boolean_takes_no_categories():
    assert_rejected(schema_of(boolean(categories=["a", "b"])), "attributes[0].categories is not allowed")


@pytest.mark.parametrize(
    "categories",
    [
        MISSING,
        None,
        "linux",
        {"linux": 1},
        ["only"],
        [],
        [f"c{i}" for i in range(1025)],
    ],
)
def test_categories_must_be_a_list_of_2_to_1024(categories):
    assert_rejected(changed(("attributes", 1, "categories"), categories), "attributes[1].categories must be a list")


@pytest.mark.parametrize("bad", ["", "x" * 65, 5, None, True, ["a"]])
def test_each_category_is_a_non_empty_string_of_at_most_64_characters(bad):
    assert_rejected(schema_of(categorical(["ok", bad, "fine"])), "attributes[0].categories[1] must be a non-empty")


def test_categories_must_be_distinct():
    assert_rejected(schema_of(categorical(["a", "b", "a"])), "attributes[0].categories must be distinct, 'a'")


@pytest.mark.parametrize(("categories", "message"), [
    (["\u00e9", "e\u0301"], "appears twice (compared after Unicode NFC normalisation)"),
    (["a\u202eb", "c"], "attributes[0].categories[0] must not contain control or format characters; it contains U+202E"),
    (["a\u200bb", "c"], "attributes[0].categories[0] must not contain control or format characters; it contains U+200B"),
    (["a\nb", "c"], "attributes[0].categories[0] must not contain control or format characters; it contains U+000A"),
    (["a\x85", "c"], "attributes[0].categories[0] must not contain control or format characters; it contains U+0085"),
])
def test_categories_that_would_not_show_as_what_they_are_are_refused(categories, message):
    assert_rejected(schema_of(categorical(categories)), message)


def test_a_description_with_a_control_character_is_refused():
    assert_rejected({**schema_of(boolean()), "description": "bell\x07"},
                    "description must not contain control or format characters")


@pytest.mark.parametrize(
    "categories",
    [
        ["a", "b"],
        [f"c{i}" for i in range(1024)],
        ["x" * 64, "y"],
        ["<b>bold</b>", "a & b", "\"quoted\"", "'", "\u4e2d\u6587", "\U0001f600", " ", "A", "a", "\u00e9"],
    ],
)
def test_categories_accept_any_text(categories):
    attribute = parse_schema(schema_of(categorical(categories))).attributes[0]
    assert attribute.categories == tuple(categories)
    assert attribute.values == tuple(categories)
    assert [attribute.index_of[c] for c in categories] == list(range(len(categories)))


@pytest.mark.parametrize("mechanism", ["grr", "oue", "laplace", "", None, 1])
def test_boolean_mechanism_is_auto_or_rr(mechanism):
    assert_rejected(changed(("attributes", 0, "mechanism"), mechanism), "attributes[0].mechanism must be one of")


@pytest.mark.parametrize("mechanism", ["rr", "OUE", "unary", "", None, 1])
def test_categorical_mechanism_is_auto_grr_or_oue(mechanism):
    assert_rejected(changed(("attributes", 1, "mechanism"), mechanism), "attributes[1].mechanism must be one of")


@pytest.mark.parametrize(("kind", "given", "resolved"),
                         [("boolean", "auto", "rr"), ("boolean", "rr", "rr"), ("categorical", "grr", "grr"),
                          ("categorical", "oue", "oue")])
def test_explicit_mechanisms_are_kept(kind, given, resolved):
    attribute = boolean(mechanism=given) if kind == "boolean" else categorical(["a", "b", "c"], mechanism=given)
    assert parse_schema(schema_of(attribute)).attributes[0].mechanism == resolved


# --- the budget split --------------------------------------------------------------------


def test_per_attribute_epsilon_all_or_none():
    assert_rejected(schema_of(boolean("a", epsilon=0.5), boolean("b"), epsilon=1.0), "attributes[].epsilon must be given")


@pytest.mark.parametrize("off_by", [1e-8, -1e-8, 0.5])
def test_per_attribute_epsilon_must_sum_to_the_total(off_by):
    assert_rejected(schema_of(boolean("a", epsilon=0.25), boolean("b", epsilon=0.75 + off_by)),
                    "attributes[].epsilon must sum to the total epsilon 1.0")


@pytest.mark.parametrize("off_by", [0.0, 5e-10, -5e-10])
def test_per_attribute_epsilon_sum_tolerance_is_1e_9(off_by):
    schema = parse_schema(schema_of(boolean("a", epsilon=0.25), boolean("b", epsilon=0.75 + off_by)))
    assert [a.epsilon for a in schema.attributes] == [0.25, 0.75 + off_by]


@pytest.mark.parametrize("epsilon", [0, -0.5, 21, math.nan, "0.5", True, [0.5]])
def test_each_per_attribute_epsilon_is_in_range(epsilon):
    assert_rejected(schema_of(boolean("a", epsilon=0.5), boolean("b", epsilon=epsilon)), "attributes[1].epsilon must be")


def test_sample_split_per_attribute_epsilon_is_the_total():
    ok = parse_schema(schema_of(boolean("a", epsilon=2.0), boolean("b", epsilon=2.0), epsilon=2.0, split="sample"))
    assert [a.epsilon for a in ok.attributes] == [2.0, 2.0]
    assert_rejected(schema_of(boolean("a", epsilon=1.0), boolean("b", epsilon=1.0), epsilon=2.0, split="sample"),
                    "attributes[0].epsilon must equal the total epsilon 2.0 under split 'sample'")


def test_equal_split_gives_each_attribute_epsilon_over_k():
    schema = parse_schema(schema_of(boolean("a"), boolean("b"), categorical(["x", "y", "z"]), epsilon=3.0))
    assert [a.epsilon for a in schema.attributes] == [1.0, 1.0, 1.0]
    assert schema.attributes[0].p == pytest.approx(E / (1 + E), rel=1e-15)


def test_sample_split_gives_each_attribute_the_full_epsilon():
    schema = parse_schema(schema_of(boolean("a"), boolean("b"), categorical(["x", "y", "z"]), epsilon=3.0,
                                    split="sample"))
    assert [a.epsilon for a in schema.attributes] == [3.0, 3.0, 3.0]
    assert schema.attributes[0].q == pytest.approx(1 / (1 + E**3), rel=1e-14)


def test_explicit_per_attribute_epsilon_is_used_for_the_parameters():
    schema = parse_schema(schema_of(boolean("a", epsilon=math.log(3)), boolean("b", epsilon=2 - math.log(3)),
                                    epsilon=2.0))
    assert schema.attributes[0].q == pytest.approx(0.25, rel=1e-15)
    assert schema.attributes[1].p / schema.attributes[1].q == pytest.approx(E**2 / 3, rel=1e-14)


# --- derived parameters, by hand --------------------------------------------------------


def test_the_coin_example_is_epsilon_ln_3_with_flip_probability_one_quarter():
    # truthful w.p. 1/2, else a fair coin: P(report the truth) = 1/2 + 1/4 = 3/4, flip 1/4.
    attribute = parse_schema(schema_of(boolean(), epsilon=math.log(3))).attributes[0]
    assert attribute.mechanism == "rr"
    assert attribute.q == pytest.approx(0.25, rel=1e-15)  # p_flip
    assert attribute.p == pytest.approx(0.75, rel=1e-15)
    assert attribute.values == (True,)


@pytest.mark.parametrize(
    ("epsilon", "d", "p", "q"),
    [
        (1.0, 4, E / (E + 3), 1 / (E + 3)),
        (2.0, 3, E**2 / (E**2 + 2), 1 / (E**2 + 2)),
        (math.log(3), 2, 3 / 4, 1 / 4),  # GRR with d = 2 is binary RR
        (math.log(7), 8, 7 / 14, 1 / 14),
    ],
)
def test_grr_parameters(epsilon, d, p, q):
    attribute = parse_schema(schema_of(categorical([f"c{i}" for i in range(d)], mechanism="grr"),
                                       epsilon=epsilon)).attributes[0]
    assert (attribute.p, attribute.q) == (pytest.approx(p, rel=1e-14), pytest.approx(q, rel=1e-14))
    assert attribute.p / attribute.q == pytest.approx(math.exp(epsilon), rel=1e-14)


@pytest.mark.parametrize(
    ("epsilon", "d", "q"),
    [(1.0, 4, 1 / (E + 1)), (math.log(3), 10, 1 / 4), (math.log(9), 100, 1 / 10)],
)
def test_oue_parameters(epsilon, d, q):
    attribute = parse_schema(schema_of(categorical([f"c{i}" for i in range(d)], mechanism="oue"),
                                       epsilon=epsilon)).attributes[0]
    assert attribute.p == 0.5
    assert attribute.q == pytest.approx(q, rel=1e-14)
    # two inputs differ in two bits: the worst-case ratio p(1-q) / (q(1-p)) is e^ε
    p, q = attribute.p, attribute.q
    assert p * (1 - q) / (q * (1 - p)) == pytest.approx(math.exp(epsilon), rel=1e-14)


@pytest.mark.parametrize(
    ("d", "epsilon", "expected"),
    [
        # d - 2 < 3e^ε picks GRR. d = 12: the boundary is ε = ln(10/3) = 1.2040
        (12, 1.20, "oue"),
        (12, 1.21, "grr"),
        # d = 6: the boundary is ε = ln(4/3) = 0.2877
        (6, 0.28, "oue"),
        (6, 0.29, "grr"),
        # d <= 5: d - 2 <= 3 < 3e^ε for every ε > 0
        (5, 1e-4, "grr"),
        (2, 1e-4, "grr"),
        # d = 1024: ε = ln(1022/3) = 5.831
        (1024, 5.83, "oue"),
        (1024, 5.84, "grr"),
    ],
)
def test_auto_picks_grr_exactly_when_d_minus_2_is_below_3_e_to_the_epsilon(d, epsilon, expected):
    attribute = parse_schema(schema_of(categorical([f"c{i}" for i in range(d)]), epsilon=epsilon)).attributes[0]
    assert attribute.mechanism == expected
    # ... which is the lower-variance one (Wang et al.'s approximate variance at small shares)
    variances = {m: mechanisms.variance(*mechanisms.get(m).parameters(epsilon=epsilon, d=d), n=1) for m in ("grr", "oue")}
    assert variances[expected] < variances[{"grr": "oue", "oue": "grr"}[expected]]


def test_auto_decides_on_the_attribute_epsilon_not_the_total():
    # total 2.4 over two attributes: each gets 1.2, below the d = 12 boundary of 1.204
    schema = parse_schema(schema_of(boolean(), categorical([f"c{i}" for i in range(12)]), epsilon=2.4))
    assert schema.attributes[1].epsilon == 1.2
    assert schema.attributes[1].mechanism == "oue"
    sampled = parse_schema(schema_of(boolean(), categorical([f"c{i}" for i in range(12)]), epsilon=2.4,
                                     split="sample"))
    assert sampled.attributes[1].mechanism == "grr"


# --- re-posting a derived schema --------------------------------------------------------


@pytest.mark.parametrize("name", ["app-usage", "every-mechanism", "sampled"])
def test_json_round_trip_gives_an_equal_schema(name):
    schema = parse_schema(example(name))
    text = json.dumps(schema.to_dict(), allow_nan=False)
    again = parse_schema(json.loads(text))
    assert again == schema
    assert again.to_dict() == schema.to_dict()
    assert isinstance(again, Schema)


def test_the_derived_form_fills_in_epsilon_mechanism_p_and_q():
    derived = parse_schema(example()).to_dict()
    dark_mode, os = derived["attributes"]
    assert dark_mode == {"name": "dark_mode", "type": "boolean", "epsilon": 1.0, "mechanism": "rr",
                         "p": pytest.approx(E / (1 + E)), "q": pytest.approx(1 / (1 + E))}
    assert os["mechanism"] == "grr" and os["epsilon"] == 1.0
    assert os["categories"] == ["linux", "macos", "windows", "other"]
    assert (os["p"], os["q"]) == (pytest.approx(E / (E + 3)), pytest.approx(1 / (E + 3)))


@pytest.mark.parametrize("field", ["p", "q"])
@pytest.mark.parametrize("error", [1e-6, -1e-6, 0.1])
def test_reposted_p_and_q_must_match_the_derived_ones(field, error):
    derived = parse_schema(example()).to_dict()
    derived["attributes"][1][field] += error
    assert_rejected(derived, f"attributes[1].{field} is derived from epsilon and mechanism")


@pytest.mark.parametrize("value", ["0.5", None, True, math.nan, math.inf, 10**400, -(10**400), [0.5]])
def test_reposted_p_must_be_a_number(value):
    assert_rejected(changed(("attributes", 0, "p"), value), "attributes[0].p is derived")


def test_reposted_p_within_1e_9_is_accepted():
    derived = parse_schema(example()).to_dict()
    derived["attributes"][0]["p"] += 5e-10
    assert parse_schema(derived) == parse_schema(example())


def test_a_parsed_schema_is_returned_as_it_is():
    schema = parse_schema(example())
    assert parse_schema(schema) is schema
    assert schema.attribute("os") is schema.attributes[1]
    assert schema.attribute_names == ("dark_mode", "os")
    with pytest.raises(KeyError):
        schema.attribute("nope")


@pytest.mark.parametrize(
    ("path", "value", "shown"),
    [
        (("epsilon",), 25, "25"),
        (("window",), "weekly", "'weekly'"),
        (("version",), -3, "-3"),
        (("attributes", 1, "type"), "enum", "'enum'"),
        (("attributes", 1, "mechanism"), "laplace", "'laplace'"),
        (("name",), "Bad Name", "'Bad Name'"),
    ],
)
def test_the_message_shows_the_bad_value(path, value, shown):
    with pytest.raises(ValueError, match=f"got {shown}"):
        parse_schema(changed(path, value))


@pytest.mark.parametrize("text, expected", [
    ("1", 1), ("0001", 1), ("2147483647", 2**31 - 1), ("2147483648", None), ("0", None), ("00000000001", None),
    ("", None), ("-1", None), ("+1", None), (" 1", None), ("1.0", None), ("²", None), ("\u0661", None), ("1e3", None),
])
def test_a_version_from_a_url_is_ascii_digits_at_most_10_of_them_and_a_valid_version(text, expected):
    assert version_from_text(text) == expected
    assert is_version(expected) if expected is not None else True


@pytest.mark.parametrize("value, expected", [(1, True), (2**31 - 1, True), (0, False), (2**31, False),
                                             (True, False), (1.0, False), ("1", False), (None, False)])
def test_a_version_in_json_is_an_integer_from_1_to_2_31_minus_1(value, expected):
    assert is_version(value) is expected


@pytest.mark.parametrize("text, most, expected", [("42", 2, 42), ("042", 2, None), ("9" * 5000, 10, None),
                                                  ("²", 5, None), ("٣", 5, None), ("", 5, None), ("4 2", 5, None),
                                                  (" 42", 5, None)])
def test_digits_are_ascii_and_bounded_in_length(text, most, expected):
    # 5,000 digits are refused before int() sees them (it raises past 4,300)
    assert parse_digits(text, most) == expected
