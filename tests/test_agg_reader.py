"""The one-pass reader of report batches (aggregator/ingest/reader.py) against the exact rules.

The reader may only ever accept what the exact rules (strict JSON, then validate_report and the
window policy) accept, and must then store exactly what they would; and it must accept the plain
batches clients send, or it would be a path never taken. Checked on every attribute type and
mechanism, on bodies pretty-printed, on a key given twice at every depth, and on bodies mutated at
random (hypothesis), with no database: the reader takes a schema lookup.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ldp_telemetry.aggregator.errors import ApiError
from ldp_telemetry.aggregator.http.body import strict_json_object
from ldp_telemetry.aggregator.ingest.batch import WindowPolicy, parse_batch, report_rows
from ldp_telemetry.aggregator.ingest.reader import VALUES_CACHED_BYTES, BatchReader
from ldp_telemetry.aggregator.store import layout
from ldp_telemetry.shared import parse_schema, randomize
from ldp_telemetry.shared.mechanisms.randomness import HmacStream

NOW = datetime(2026, 11, 21, 12, 30, tzinfo=timezone.utc)
EVERY = parse_schema({
    "name": "every", "version": 3, "epsilon": 6.0, "window": "hour",
    "attributes": [
        {"name": "flag", "type": "boolean"},
        # A colon inside a value: the count of colons that finds a key given twice must allow for it.
        {"name": "os", "type": "categorical", "categories": ["linux", "mac:os", "windows", "other"]},
        {"name": "page", "type": "categorical", "mechanism": "oue", "categories": [f"p{i}" for i in range(6)]},
        {"name": "minutes", "type": "numeric", "range": [0, 120]},
        {"name": "load", "type": "histogram", "edges": [0, 50, 100, 250]},
        {"name": "host", "type": "string", "max_length": 8, "candidates": ["a.org", "b.org"], "discover": True,
         "alphabet": "abcdefghijklmnopqrstuvwxyz.-"},
        {"name": "lang", "type": "string", "max_length": 8, "candidates": ["en", "fr"]},
    ]})
SAMPLED = parse_schema({"name": "sampled", "version": 1, "epsilon": 2.0, "split": "sample",
                        "attributes": [{"name": "flag", "type": "boolean"},
                                       {"name": "os", "type": "categorical", "categories": ["a", "b", "c"]}]})
MEMO = parse_schema({"name": "memo", "version": 1, "epsilon": 1.0, "epsilon_permanent": 4.0, "window": "day",
                     "attributes": [{"name": "os", "type": "categorical", "categories": ["a", "b", "c"]}]})
SCHEMAS = {(s.name, s.version): s for s in (EVERY, SAMPLED, MEMO)}
RECORDS = {
    "every": lambda i: {"flag": i % 2 == 0, "os": ["linux", "mac:os", "windows", "other"][i % 4], "page": f"p{i % 6}",
                        "minutes": i % 130, "load": i % 300, "host": ["a.org", "b.org", "zz.net"][i % 3],
                        "lang": ["en", "fr", "de"][i % 3]},
    "sampled": lambda i: {"flag": i % 3 == 0, "os": "abc"[i % 3]},
    "memo": lambda i: {"os": "abc"[i % 3]},
}
WINDOWS = {"hour": "2026-11-21T11", "day": "2026-11-20"}


def lookup(name: str, version: int):
    return SCHEMAS.get((name, version))


def policy() -> WindowPolicy:
    return WindowPolicy(NOW, 300.0, 30.0)


def reports(schema, count: int, seed: bytes = b"reader") -> list[dict[str, Any]]:
    """``count`` reports of ``schema``, randomised with fixed coins (the same every run)."""
    source = HmacStream(seed * 4, schema.name.encode())
    return [randomize(schema, RECORDS[schema.name](i), window=WINDOWS[schema.window], source=source,
                      device_secret=bytes(32) if schema.epsilon_permanent else None) for i in range(count)]


def by_the_rules(body: bytes) -> tuple[list, int]:
    reports_, window_ends = parse_batch(strict_json_object(body), SimpleNamespace(lookup=lookup), policy(), 1000)
    return report_rows(reports_, window_ends), len(reports_)


def read(body: bytes):
    return BatchReader(lookup).rows(body, policy(), 1000)


@pytest.mark.parametrize("schema", [EVERY, SAMPLED, MEMO], ids=lambda s: s.name)
@pytest.mark.parametrize("indent", [None, 2], ids=["compact", "pretty"])
def test_a_plain_batch_is_read_in_one_pass_as_the_rules_read_it(schema, indent):
    batch = reports(schema, 300)
    batch.append(dict(batch[0]))  # an id repeated in the batch: stored once, counted as a report
    body = json.dumps({"reports": batch}, indent=indent, ensure_ascii=False).encode()
    plain = read(body)
    assert plain is not None, "a plain batch must take the one-pass path"
    assert plain == by_the_rules(body)
    assert plain[1] == 301 and len(plain[0]) == 300


def test_the_stored_values_are_compact_json_and_the_packed_form():
    (row,), _ = read(json.dumps({"reports": reports(EVERY, 1)}, indent=1).encode())
    values = json.loads(row.values)
    assert row.values == json.dumps(values, separators=(",", ":"), ensure_ascii=False)
    assert row.wire == layout(EVERY).pack(values)


def _twice(body: str, key: str, value: str) -> str:
    """``body`` with ``"key": value`` given again right after the first ``"key":`` pair's opening."""
    at = body.index(f'"{key}":')
    return body[:at] + f'"{key}": {value}, ' + body[at:]


TWICE = [
    ("the top level", lambda b: '{"reports": [], ' + b[1:]),
    ("the id", lambda b: _twice(b, "id", '"another-id-of-24-chars!"'.replace("!", "x"))),
    ("the schema", lambda b: _twice(b, "schema", '"sampled"')),
    ("the version", lambda b: _twice(b, "version", "1")),
    ("the window", lambda b: _twice(b, "window", '"2026-11-21T10"')),
    ("the epsilon", lambda b: _twice(b, "epsilon", "6.0")),
    ("the values", lambda b: _twice(b, "values", "{}")),
    ("an attribute", lambda b: _twice(b, "os", '"linux"')),
    ("a string's field", lambda b: _twice(b, "y", "0")),
    # The colon a repeated key adds, hidden by writing another colon as an escape: no backslash is read here.
    ("an attribute, with an escaped colon", lambda b: _twice(b, "flag", "true").replace("mac:os", "mac\\u003aos")),
]


@pytest.mark.parametrize("where, repeat", TWICE, ids=[t[0] for t in TWICE])
def test_a_key_given_twice_anywhere_is_left_to_the_rules_which_refuse_it(where, repeat):
    batch = reports(EVERY, 4)
    for i, report in enumerate(batch):  # one colon inside a value, in the report whose key is repeated
        report["values"]["os"] = "mac:os" if i == 0 else "linux"
    body = repeat(json.dumps({"reports": batch}))
    assert read(body.encode()) is None
    with pytest.raises(ApiError) as refused:
        by_the_rules(body.encode())
    assert refused.value.status == 400 and "twice" in refused.value.details[0]["message"]


def test_values_nested_past_the_parsers_depth_are_left_to_the_rules_which_refuse_them():
    body = json.dumps({"reports": [{**reports(EVERY, 1)[0], "values": "@"}]}).replace('"@"', "[" * 5000 + "]" * 5000)
    assert read(body.encode()) is None
    with pytest.raises(ApiError) as refused:
        by_the_rules(body.encode())
    assert refused.value.status == 400


def test_long_values_texts_are_checked_each_time_not_kept():
    """Values padded with whitespace (a client may send up to LDP_MAX_BODY of it) are read as the
    rules read them, and never kept: the cache of checked texts holds short ones only."""
    batch = reports(SAMPLED, 20)
    body = json.dumps({"reports": batch}).replace('"values": {', '"values": {' + " " * (VALUES_CACHED_BYTES + 1))
    reader = BatchReader(lookup)
    assert reader.rows(body.encode(), policy(), 1000) == by_the_rules(body.encode())
    assert reader._versions[("sampled", 1)]._cached.cache_info().currsize == 0
    reader.rows(json.dumps({"reports": batch}).encode(), policy(), 1000)
    assert reader._versions[("sampled", 1)]._cached.cache_info().currsize > 0


def test_an_escape_is_left_to_the_rules_which_accept_it():
    batch = reports(EVERY, 8)
    body = json.dumps({"reports": batch}).replace("mac:os", "mac\\u003aos").encode()
    assert read(body) is None
    assert by_the_rules(body) == read(json.dumps({"reports": batch}).encode())


@pytest.mark.parametrize("bad_id", ["a" * 15, "a" * 65, "a" * 20 + ".", "a" * 8 + " " + "a" * 8, "é" * 16, ""])
def test_an_id_the_rules_refuse_anywhere_in_a_batch_is_left_to_them(bad_id):
    """The ids' form is checked in one match over the whole batch: a bad one, first, in the
    middle or last, is left to the rules (which refuse it); ids of 16 and 64 characters are read."""
    batch = reports(EVERY, 3)
    batch[0]["id"], batch[2]["id"] = "a" * 16, "B-_9" * 16
    assert read(json.dumps({"reports": batch}, ensure_ascii=False).encode()) is not None
    for i in range(3):
        edited = [dict(r, id=bad_id) if j == i else r for j, r in enumerate(batch)]
        body = json.dumps({"reports": edited}, ensure_ascii=False).encode()
        assert read(body) is None
        with pytest.raises(ApiError):
            by_the_rules(body)


# What a random edit inserts: JSON's punctuation, keys and values of every kind, and an escape.
PIECES = st.sampled_from(['"', ":", ",", "{", "}", "[", "]", " ", "\\", "0", "1", "-1", "1e999", "2.0", "true",
                          "null", '"id"', '"os":', '"values":', '"linux"', '"mac:os"', '"a"', '"y": 0',
                          '"level": 1', '"x"', "é", "\u202e"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.floats(0, 1), st.integers(0, 3), PIECES), min_size=1, max_size=3))
def test_what_the_reader_accepts_the_rules_accept_alike(edits):
    """Random edits of a valid batch (insert, delete or replace at random places): whatever the
    reader still accepts, the rules accept, and the rows are the same."""
    body = json.dumps({"reports": reports(EVERY, 3) + reports(SAMPLED, 2)}, ensure_ascii=False)
    for where, cut, piece in edits:
        at = int(where * len(body))
        body = body[:at] + piece + body[at + cut:]
    data = body.encode()
    plain = read(data)
    if plain is not None:
        assert plain == by_the_rules(data)
