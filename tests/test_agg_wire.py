"""The stored numeric form of a report's values (aggregator/store/wire.py): its layout, and what the
migration that added it packs from the values stored before."""

from __future__ import annotations

import json

from ldp_telemetry.aggregator.store import NOT_READ, layout
from ldp_telemetry.aggregator.store.wire import PACK_CHUNK, pack_stored_reports
from ldp_telemetry.shared import parse_schema

# Two string attributes (one discovers: its level is a field too) beside a boolean, which has no
# columnar form.
SCHEMA = parse_schema({"name": "sites", "version": 1, "epsilon": 3.0, "attributes": [
    {"name": "dark_mode", "type": "boolean"},
    {"name": "home", "type": "string", "candidates": ["a.org"]},
    {"name": "top", "type": "string", "max_length": 4, "discover": True, "alphabet": "ab"}]})
HOME = {"a": 5, "b": 7, "y": 1}
TOP = {"a": 9, "b": 0, "y": 0, "level": 1}


def numbers(wire: bytes) -> list[int]:
    return [int.from_bytes(wire[i:i + 8], "little", signed=True) for i in range(0, len(wire), 8)]


def test_the_layout_holds_a_flag_and_the_fields_of_each_string_attribute_in_order():
    packing = layout(SCHEMA)
    assert packing.places == {"home": (0, ("a", "b", "y")), "top": (4, ("a", "b", "y", "level"))}
    assert numbers(packing.pack({"dark_mode": True, "home": HOME, "top": TOP})) == [1, 5, 7, 1, 1, 9, 0, 0, 1]
    assert numbers(packing.pack({"top": TOP})) == [0, 0, 0, 0, 1, 9, 0, 0, 1]  # home not carried
    assert numbers(packing.damaged()) == [1, NOT_READ, NOT_READ, NOT_READ, 1, NOT_READ, NOT_READ, NOT_READ, NOT_READ]
    assert layout(parse_schema({"name": "x", "version": 1, "epsilon": 1.0,
                                "attributes": [{"name": "b", "type": "boolean"}]})).pack({"b": True}) == b""


def test_the_migration_packs_each_stored_report_checking_each_attribute_and_skips_what_it_cannot_read(caplog):
    definition = json.dumps(SCHEMA.to_dict())
    stored = [("id-1", "sites", 1, json.dumps({"dark_mode": True, "home": HOME, "top": TOP})),
              ("id-2", "sites", 1, json.dumps({"home": {**HOME, "a": 0}, "top": TOP})),  # home's a is out of range
              ("id-3", "sites", 1, "not json"),
              ("id-4", "broken", 1, json.dumps({"home": HOME})),  # its definition does not parse
              ("id-5", "plain", 1, json.dumps({"dark_mode": True}))]  # no columnar form: nothing to pack
    pages, written = [], []

    def page(after: str) -> list[tuple[str, str, int, str]]:
        pages.append(after)
        return [row for row in stored if row[0] > after][:PACK_CHUNK]

    plain = json.dumps({"name": "plain", "version": 1, "epsilon": 1.0, "attributes": [{"name": "dark_mode", "type": "boolean"}]})
    with caplog.at_level("WARNING"):
        pack_stored_reports([("sites", 1, definition), ("broken", 1, "{"), ("plain", 1, plain)], page, written.extend)
    packing = layout(SCHEMA)
    by_id = {report_id: numbers(wire) for wire, report_id in written}
    assert by_id == {"id-1": numbers(packing.pack({"home": HOME, "top": TOP})),
                     "id-2": [1, NOT_READ, NOT_READ, NOT_READ, 1, 9, 0, 0, 1],
                     "id-3": numbers(packing.damaged())}
    assert pages == ["", "id-5"]  # one pass in id order over every stored report
    assert any("'broken' version 1" in r.getMessage() for r in caplog.records)
