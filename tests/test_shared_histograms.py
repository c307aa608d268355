"""Histogram attributes (DESIGN.md, "Numeric attributes"): a number counted in buckets, then a
categorical attribute (grr / oue / auto) in every respect."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.mechanisms import FixedBytes
from ldp_telemetry.shared.reports import permanent_source, validate_record, validate_report
from ldp_telemetry.shared.schema import SchemaError
from ldp_telemetry.shared.simulation import simulate

LOAD = {"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000]}


def schema(*attributes, **changes):
    return parse_schema({"name": "hist", "version": 1, "epsilon": 2.0, "attributes": list(attributes) or [LOAD],
                         **changes})


def test_edges_name_the_buckets_and_the_last_is_closed():
    a = schema().attribute("load_ms")
    assert a.categories == ("[0, 50)", "[50, 100)", "[100, 250)", "[250, 1000]")
    assert schema({"name": "f", "type": "histogram", "edges": [0.5, 1.0, 2.25, 1e-7 + 3]}).attribute("f").categories == (
        "[0.5, 1)", "[1, 2.25)", "[2.25, 3.0000001]")


@pytest.mark.parametrize(("value", "bucket"), [(-5, 0), (0, 0), (49.999, 0), (50, 1), (99, 1), (100, 2), (250, 3),
                                               (1000, 3), (1e9, 3), (0.0, 0)])
def test_the_device_clips_to_the_edges_and_picks_the_bucket(value, bucket):
    s = schema()
    assert validate_record(s, {"load_ms": value})["load_ms"] == bucket


@pytest.mark.parametrize("bad", [True, "50", None, float("nan"), [1]])
def test_a_histogram_record_value_must_be_a_number(bad):
    with pytest.raises(ValueError, match="load_ms must be a finite number"):
        validate_record(schema(), {"load_ms": bad})


@pytest.mark.parametrize(("edges", "field"), [
    ([0, 1], "attributes[0].edges"),  # one bucket
    ([0, 2, 1], "attributes[0].edges[2]"),
    ([0, 1, 1], "attributes[0].edges[2]"),
    ([0, "1", 2], "attributes[0].edges[1]"),
    ([0, 1, 1e16], "attributes[0].edges[2]"),
    (list(range(1026)), "attributes[0].edges"),  # 1025 buckets
    (None, "attributes[0].edges"),
])
def test_bad_edges_are_refused_naming_the_field(edges, field):
    with pytest.raises(SchemaError) as caught:
        schema({**LOAD, "edges": edges})
    assert caught.value.field == field


def test_the_derived_histogram_shows_its_buckets_and_parses_back():
    s = schema({**LOAD, "mechanism": "oue"})
    derived = s.to_dict()["attributes"][0]
    assert derived["edges"] == LOAD["edges"] and derived["categories"][-1] == "[250, 1000]"
    assert derived["mechanism"] == "oue"
    assert parse_schema(s.to_dict()) == s
    with pytest.raises(SchemaError) as caught:
        schema({**LOAD, "categories": ["a", "b", "c", "d"]})
    assert caught.value.field == "attributes[0].categories"


@pytest.mark.parametrize("mechanism", ["grr", "oue", "auto"])
def test_a_histogram_report_is_a_categorical_report(mechanism):
    # The same coins give the same report as a categorical attribute over the bucket names given
    # the value's bucket (clipped to the edges first), and it validates as one.
    s = schema({**LOAD, "mechanism": mechanism})
    buckets = s.attribute("load_ms").categories
    c = schema({"name": "load_ms", "type": "categorical", "categories": list(buckets), "mechanism": mechanism})
    assert s.attribute("load_ms").mechanism == c.attribute("load_ms").mechanism
    for value, bucket in ((-7, 0), (3, 0), (50, 1), (75, 1), (400, 3), (1000, 3), (5000, 3)):
        coins = os.urandom(4096)
        report = randomize(s, {"load_ms": value}, window="2026-11-21", source=FixedBytes(coins))
        same = randomize(c, {"load_ms": buckets[bucket]}, window="2026-11-21", source=FixedBytes(coins))
        assert report == same
        assert validate_report(report, s).values == validate_report(same, c).values == report["values"]


def test_a_memoised_histogram_keeps_one_permanent_response_per_bucket():
    s = schema({"name": "flag", "type": "boolean"}, LOAD, epsilon_permanent=6.0)
    a, secret = s.attribute("load_ms"), os.urandom(32)

    def prr(value):
        truth = validate_record(s, {"flag": True, "load_ms": value})["load_ms"]
        return a.mech.permanent_response(a, truth, permanent_source(secret, s, a, truth))

    # 60 and 99 share a bucket, so they share the permanent response whatever it is
    assert prr(60) == prr(99) == prr(60)
    validate_report(randomize(s, {"flag": True, "load_ms": 60}, device_secret=secret), s)


def test_simulated_bucket_shares_are_estimated():
    # 50,000 devices; each estimate within 5 of its interval's half-widths of the truth
    s = schema()
    shares = [0.1, 0.2, 0.3, 0.4]
    rows = simulate(s, {"load_ms": shares}, 50_000, rng=np.random.default_rng(5))
    assert [r.value for r in rows] == list(s.attribute("load_ms").categories)
    for r, share in zip(rows, shares):
        half = (r.estimate.ci_high - r.estimate.ci_low) / 2
        assert abs(r.estimate.estimate - share) < 5 * half
