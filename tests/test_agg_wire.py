"""The stored numeric form of a report's values (aggregator/store/wire.py): its layout, that every
mechanism's columns give back what its wire values say and count as their statistics do, and what
the migration packs from the values stored before."""

from __future__ import annotations

import json
import math
import random
import struct

import numpy as np
import pytest

from ldp_telemetry.aggregator.store import NOT_READ, layout
from ldp_telemetry.aggregator.store.wire import PACK_CHUNK, pack_stored_reports
from ldp_telemetry.shared import parse_schema
from ldp_telemetry.shared.reports import encode_report, validate_record

# Two string attributes (one discovers: its level is a field too) beside a boolean.
SCHEMA = parse_schema({"name": "sites", "version": 1, "epsilon": 3.0, "attributes": [
    {"name": "dark_mode", "type": "boolean"},
    {"name": "home", "type": "string", "candidates": ["a.org"]},
    {"name": "top", "type": "string", "max_length": 4, "discover": True, "alphabet": "ab"}]})
HOME = {"a": 5, "b": 7, "y": 1}
TOP = {"a": 9, "b": 0, "y": 0, "level": 1}

# Every mechanism, and OUE vectors of 70 bits (two words, six bits of the second used) and of
# exactly 64 (one word, no bit to spare): what the columns of each give back is checked below.
CATEGORIES_70 = [f"c{i}" for i in range(70)]
EVERY = parse_schema({"name": "every", "version": 1, "epsilon": 20.0, "attributes": [
    {"name": "flag", "type": "boolean"},
    {"name": "os", "type": "categorical", "mechanism": "grr", "categories": ["linux", "macos", "windows"]},
    {"name": "page", "type": "categorical", "mechanism": "oue", "categories": CATEGORIES_70},
    {"name": "tab", "type": "categorical", "mechanism": "oue", "categories": CATEGORIES_70[:64]},
    {"name": "load", "type": "histogram", "edges": [0, 100, 1000, 5000]},
    {"name": "bit", "type": "numeric", "mechanism": "duchi", "range": [0, 10]},
    {"name": "pm", "type": "numeric", "mechanism": "pm", "range": [0, 10]},
    {"name": "hm", "type": "numeric", "mechanism": "hm", "range": [-5, 5]},
    {"name": "laplace", "type": "numeric", "mechanism": "laplace", "range": [0, 1]},
    {"name": "home", "type": "string", "candidates": ["a.org", "b.org", "c.org"]},
    {"name": "top", "type": "string", "max_length": 3, "discover": True, "alphabet": "ab"}]})


class SeededBytes:
    """Coins from a seeded generator: reproducible reports."""

    def __init__(self, seed: int):
        self._random = random.Random(seed)

    def take(self, n: int) -> bytes:
        return self._random.randbytes(n)


def reports_of_every_mechanism(count: int, seed: int = 26) -> list[dict]:
    """``count`` reports of :data:`EVERY`, randomised as a device does from random true values."""
    rng, source = random.Random(seed), SeededBytes(seed)
    records = [{"flag": rng.random() < 0.3, "os": rng.choice(["linux", "macos", "windows"]),
                "page": rng.choice(CATEGORIES_70), "tab": rng.choice(CATEGORIES_70[:64]),
                "load": rng.uniform(0, 5000), "bit": rng.uniform(0, 10), "pm": rng.uniform(0, 10),
                "hm": rng.uniform(-5, 5), "laplace": rng.random(), "home": rng.choice(["a.org", "z.org"]),
                "top": rng.choice(["ab", "ba", "b"])} for _ in range(count)]
    return [encode_report(EVERY, validate_record(EVERY, r), "2026-11-28", source)["values"] for r in records]


# SCHEMA's record: dark_mode's flag and bit (a byte each), then home's flag and a, b, y (four bytes
# each), then top's flag and a, b, y, level; little-endian, packed.
RECORD = struct.Struct("<bb biii biiii")


def numbers(wire: bytes) -> list[int]:
    return list(RECORD.unpack(wire))


def test_the_layout_holds_a_flag_and_the_fields_of_each_attribute_in_order_each_as_narrow_as_it_can_be():
    packing = layout(SCHEMA)
    assert {name: (p.at, p.fields) for name, p in packing.places.items()} == {
        "dark_mode": (0, ("bit",)), "home": (2, ("a", "b", "y")), "top": (6, ("a", "b", "y", "level"))}
    assert packing.size == RECORD.size == 2 + 13 + 17
    assert numbers(packing.pack({"dark_mode": True, "home": HOME, "top": TOP})) == [1, 1, 1, 5, 7, 1, 1, 9, 0, 0, 1]
    assert numbers(packing.pack({"top": TOP})) == [0, 0, 0, 0, 0, 0, 1, 9, 0, 0, 1]  # the others not carried
    assert numbers(packing.damaged()) == [NOT_READ] * 11  # every flag says damaged (and every field)
    # Read back, a string's fields are 64-bit, so that its hash arithmetic never overflows.
    carried, intact, fields = packing.columns(packing.records([packing.pack({"home": HOME})]), "home")
    assert list(carried) == list(intact) == [True] and {f: c.dtype for f, c in fields.items()} == dict.fromkeys(
        "aby", np.dtype(np.int64))


def test_a_mean_is_stored_as_the_double_it_was_sent_as_and_an_oue_vector_as_words():
    packing = layout(EVERY)
    records = packing.records([packing.pack({"pm": 0.125, "page": [1] + [0] * 68 + [1]}), packing.damaged()])
    _, intact, fields = packing.columns(records, "pm")
    assert list(intact) == [True, False] and fields["value"][0] == 0.125 and math.isnan(fields["value"][1])
    _, _, words = packing.columns(records, "page")
    assert (int(words["w0"][0]), int(words["w1"][0])) == (1, 1 << 5)  # bits 0 and 69


def test_every_mechanisms_columns_give_back_its_wire_values_and_count_as_its_statistics_do():
    reports = reports_of_every_mechanism(300)
    packing = layout(EVERY)
    records = packing.records(packing.pack(values) for values in reports)
    for attribute in EVERY.attributes:
        mech = attribute.mech
        carried, intact, fields = packing.columns(records, attribute.name)
        assert carried.all() and intact.all() and mech.valid_columns(attribute, fields).all()
        sent = [values[attribute.name] for values in reports]
        # The three windows below are runs of 100 reports; each run's tally is the statistics'
        # sum over its reports (the per-value definition), exactly for integers, to rounding for means.
        groups = np.array([0, 100, 200, 300])
        tallied = mech.tally_columns(attribute, fields, groups)
        keys = mech.counter_keys(attribute)
        for i in range(3):
            expected = mech.tally(attribute, [(value, 1) for value in sent[groups[i]:groups[i + 1]]])
            got = {keys[j]: tallied[i][j].item() for j in np.flatnonzero(tallied[i])}
            assert got.keys() == {k for k, v in expected.items() if v}
            for key, amount in expected.items():
                if amount:
                    assert got[key] == pytest.approx(amount, rel=1e-12), (attribute.name, key)
        if attribute.mech.name != "olh":  # olh has no per-report array (breakdowns never use it)
            assert np.array_equal(mech.wire_of_columns(attribute, fields), mech.wire_array(attribute, sent))


def test_columns_that_no_check_would_take_are_not_valid():
    packing = layout(EVERY)
    good = reports_of_every_mechanism(1)[0]
    records = packing.records([packing.pack(good)]).copy()
    # A bit of 2, a fourth category, a duchi bit of -1, a = 0, bit 70 of a 70-bit vector, a mean far
    # past pm's bound.
    bad = {("flag", "bit"): 2, ("os", "index"): 3, ("bit", "bit"): -1, ("home", "a"): 0, ("page", "w1"): 1 << 6,
           ("pm", "value"): 1e6}
    for (name, field), number in bad.items():
        record = records.copy()
        record[f"{name}.{field}"][0] = number
        attribute = EVERY.attribute(name)
        assert packing.columns(record, name)[1].all()
        assert not attribute.mech.valid_columns(attribute, packing.columns(record, name)[2]).any(), name
    # A damaged report (or one of another size) is carried but never intact.
    carried, intact, _ = packing.columns(packing.records([packing.damaged(), b"short"]), "tab")
    assert carried.all() and not intact.any()


def test_the_migration_packs_each_stored_report_checking_each_attribute_and_skips_what_it_cannot_read(caplog):
    definition = json.dumps(SCHEMA.to_dict())
    stored = [("id-1", "sites", 1, json.dumps({"dark_mode": True, "home": HOME, "top": TOP})),
              ("id-2", "sites", 1, json.dumps({"home": {**HOME, "a": 0}, "top": TOP})),  # home's a is out of range
              ("id-3", "sites", 1, "not json"),
              ("id-4", "broken", 1, json.dumps({"home": HOME})),  # its definition does not parse
              ("id-5", "plain", 1, json.dumps({"dark_mode": True}))]
    pages, written = [], []

    def page(after: str) -> list[tuple[str, str, int, str]]:
        pages.append(after)
        return [row for row in stored if row[0] > after][:PACK_CHUNK]

    plain = parse_schema({"name": "plain", "version": 1, "epsilon": 1.0,
                          "attributes": [{"name": "dark_mode", "type": "boolean"}]})
    with caplog.at_level("WARNING"):
        pack_stored_reports([("sites", 1, definition), ("broken", 1, "{"), ("plain", 1, json.dumps(plain.to_dict()))],
                            page, written.extend)
    packing = layout(SCHEMA)
    by_id = {report_id: numbers(wire) for wire, report_id in written if report_id != "id-5"}
    assert by_id == {"id-1": numbers(packing.pack({"dark_mode": True, "home": HOME, "top": TOP})),
                     "id-2": [0, 0, NOT_READ, NOT_READ, NOT_READ, NOT_READ, 1, 9, 0, 0, 1],
                     "id-3": numbers(packing.damaged())}
    assert written[-1] == (layout(plain).pack({"dark_mode": True}), "id-5") == (b"\x01\x01", "id-5")
    assert pages == ["", "id-5"]  # one pass in id order over every stored report
    assert any("'broken' version 1" in r.getMessage() for r in caplog.records)
