"""Regenerate the test vectors in this folder from the code; ``--check`` compares instead.

    .venv/bin/python tests/vectors/generate.py          # rewrite the JSON files
    .venv/bin/python tests/vectors/generate.py --check  # exit 1 if a file differs from the code

The vectors pin behaviour that another language's client or aggregator must reproduce (README.md
here says what each file holds). A change of behaviour is a deliberate regeneration, reviewed in
the diff of these files; ``tests/test_vectors.py`` checks the code against every case.

This module has two halves. The *runners* (``run_*``) take a case's inputs as the JSON file holds
them and return what the code makes of them, as JSON; the generator writes their answers into
the files and the tests compare their answers with the files. The *cases* below them are the
inputs, chosen to reach every mechanism, branch and boundary worth pinning.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ldp_telemetry.aggregator.estimation.refresh import estimate_rows
from ldp_telemetry.aggregator.store import WindowCounters
from ldp_telemetry.shared import breakdowns, ohttp, windows
from ldp_telemetry.shared.attribute_types import prepare_text
from ldp_telemetry.shared.mechanisms import olh
from ldp_telemetry.shared.mechanisms.randomness import FixedBytes, HmacStream, bernoulli, randbelow
from ldp_telemetry.shared.reports import (RecordError, ReportError, permanent_message, randomize, validate_record,
                                          validate_report)
from ldp_telemetry.shared.schema import Schema, SchemaError, parse_schema

FOLDER = Path(__file__).resolve().parent
# Estimates are compared with math.isclose(actual, expected, rel_tol=RELATIVE, abs_tol=ABSOLUTE):
# another language's normal quantile, exp and sqrt may differ from Python's in the last bits.
TOLERANCE = {"relative": 1e-9, "absolute": 1e-12}
JSON = Any


# --- runners: a case's inputs -> what the code makes of them --------------------------------


def schemas_by_name(schemas: list[dict[str, Any]]) -> dict[str, Schema]:
    """The ``schemas`` list of a file, parsed, by name (names are unique within a file)."""
    return {s["name"]: parse_schema(s) for s in schemas}


def run_bernoulli(case: Mapping[str, Any]) -> tuple[JSON, int]:
    source = FixedBytes(bytes.fromhex(case["bytes"]))
    return bernoulli(case["p"], source), source.used


def run_randbelow(case: Mapping[str, Any]) -> tuple[JSON, int]:
    source = FixedBytes(bytes.fromhex(case["bytes"]))
    return randbelow(case["n"], source), source.used


def run_hmac_stream(case: Mapping[str, Any]) -> JSON:
    stream = HmacStream(bytes.fromhex(case["key"]), case["message"].encode("utf-8"))
    return stream.take(case["length"]).hex()


def run_report(schema: Schema, case: Mapping[str, Any]) -> tuple[JSON, int]:
    """The report ``randomize`` makes of the case's record, and how many of its bytes it used."""
    source = FixedBytes(bytes.fromhex(case["random_bytes"]))
    secret = None if case["device_secret"] is None else bytes.fromhex(case["device_secret"])
    report = randomize(schema, case["record"], window=case["window"], device_secret=secret, source=source)
    return report, source.used


def run_string_value(case: Mapping[str, Any]) -> JSON:
    """A string record value as a device prepares it (at ``max_length``) and the fingerprint x of that."""
    prepared = prepare_text(case["value"], case["max_length"])
    return {"prepared": prepared, "fingerprint": olh.fingerprint(prepared)}


def run_string_prefix(case: Mapping[str, Any]) -> JSON:
    """A discovery prefix of a prepared value (``length`` code points over ``alphabet``, U+FFFD for
    the others, U+0000 padding) and its fingerprint, taken of it exactly as it is."""
    text = olh.prefix(case["prepared"], case["length"], case["alphabet"])
    return {"prefix": text, "fingerprint": olh.fingerprint(text)}


def run_string_draws(case: Mapping[str, Any]) -> tuple[JSON, int]:
    """A string report's hash seed from the case's bytes: a = 1 + randbelow(P - 1), then b = randbelow(P)."""
    source = FixedBytes(bytes.fromhex(case["bytes"]))
    a = 1 + randbelow(olh.P - 1, source)
    return {"a": a, "b": randbelow(olh.P, source)}, source.used


def run_supports(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """The candidates of the case's string attribute that its wire value supports, in the
    schema's order: what counting adds one to (the aggregator's own path, numpy)."""
    attribute = schema.attribute(case["attribute"])
    counted = attribute.mech.tally(attribute, [(case["value"], 1)])
    return [c for c in attribute.candidates if counted.get(c)]


def run_permanent(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """Each memoised attribute's HMAC message and permanent response to the case's record."""
    secret = bytes.fromhex(case["device_secret"])
    truth = validate_record(schema, case["record"])
    out = {}
    for attribute in schema.attributes:
        message = permanent_message(schema, attribute, truth[attribute.name])
        response = attribute.mech.permanent_response(attribute, truth[attribute.name], HmacStream(secret, message))
        out[attribute.name] = {"message": message.decode("utf-8"), "response": response}
    return out


def run_invalid_record(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """The field the :class:`RecordError` names (``None`` if randomising succeeds)."""
    secret = None if case["device_secret"] is None else bytes.fromhex(case["device_secret"])
    try:
        randomize(schema, case["record"], window=case["window"], device_secret=secret, source=FixedBytes(b""))
    except RecordError as exc:
        return exc.field
    return None


def run_schema(case: Mapping[str, Any]) -> JSON:
    return parse_schema(case["schema"]).to_dict()


def run_invalid_schema(case: Mapping[str, Any]) -> JSON:
    """The field the :class:`SchemaError` names (``None`` if the schema is valid)."""
    try:
        parse_schema(case["schema"])
    except SchemaError as exc:
        return exc.field
    return None


def run_published(case: Mapping[str, Any]) -> JSON:
    """A schema published with ``breakdowns``: the derived schema as served (never with them) and
    the breakdowns, each ``{of, by}``, in order, each once."""
    schema, found = breakdowns.parse_published(case["schema"])
    return {"derived": schema.to_dict(), "breakdowns": [b.to_dict() for b in found]}


def run_invalid_published(case: Mapping[str, Any]) -> JSON:
    """The field the :class:`SchemaError` of a publish with ``breakdowns`` names (``None`` if valid)."""
    try:
        breakdowns.parse_published(case["schema"])
    except SchemaError as exc:
        return exc.field
    return None


def run_report_counters(schemas: Mapping[str, Schema], case: Mapping[str, Any]) -> JSON:
    """What a valid report adds to the counters: per attribute ``n`` (1, or 0 for a report only
    discovery reads: a string prefix's, level 1 or more) and the amounts."""
    report = validate_report(case["report"], _lookup(schemas))
    out = {}
    for name, value in report.values.items():
        attribute = report.schema.attribute(name)
        counted = attribute.mech.counted(attribute, value)
        out[name] = {"n": int(counted), "amounts": dict(attribute.mech.statistics(attribute, value)) if counted else {}}
    return out


def run_invalid_report(schemas: Mapping[str, Schema], case: Mapping[str, Any]) -> JSON:
    """The field the :class:`ReportError` names (``None`` if the report is valid)."""
    try:
        validate_report(case["report"], _lookup(schemas))
    except ReportError as exc:
        return exc.field
    return None


def _lookup(schemas: Mapping[str, Schema]) -> Callable[[str, int], Schema | None]:
    published = {(s.name, s.version): s for s in schemas.values()}
    return lambda name, version: published.get((name, version))


def run_window_of(case: Mapping[str, Any]) -> JSON:
    return windows.window_of(datetime.fromisoformat(case["instant"]), case["kind"])


def run_window_bounds(case: Mapping[str, Any]) -> JSON:
    def iso(moment: datetime) -> str:
        return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    return {"start": iso(windows.window_start(case["window"], case["kind"])),
            "end": iso(windows.window_end(case["window"], case["kind"]))}


def run_invalid_window(case: Mapping[str, Any]) -> JSON:
    """Whether ``window_start`` refuses the name (a ``ValueError``)."""
    try:
        windows.window_start(case["window"], case["kind"])
    except ValueError:
        return True
    return False


def run_overlapping(case: Mapping[str, Any]) -> JSON:
    return list(windows.overlapping(case["window"]))


def run_estimates(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """One row per value of the attribute, as the API shows it: ``value`` and the four numbers.

    The aggregator's own path (:func:`.estimation.estimate_rows` over one window's counters), so the
    ``all`` rollup of a memoised attribute gets its widened interval exactly as the refresh does."""
    attribute = schema.attribute(case["attribute"])
    smallest = {attribute.name: case["smallest_window_n"]} if case.get("smallest_window_n") is not None else {}
    counters = WindowCounters({attribute.name: case["n"]}, {attribute.name: dict(case["amounts"])}, smallest)
    return [{"value": attribute.value_of(row.value), "estimate": row.estimate,
             "estimate_clipped": row.estimate_clipped, "ci_low": row.ci_low, "ci_high": row.ci_high}
            for row in estimate_rows(schema, case["window"], counters, case["confidence"], "")]


def run_breakdown(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """The rows of a breakdown from its sums over one window (or pooled: the ``all`` rollup), each
    with the fields of ``GET /api/v1/breakdowns`` that the math makes."""
    given = case["sums"]
    amounts: dict[tuple[str, str], int | float] = {(breakdowns.TOTAL, breakdowns.TOTAL): given["n"]}
    amounts.update({(breakdowns.TOTAL, key): amount for key, amount in given["by"].items()})
    amounts.update({(key, breakdowns.TOTAL): amount for key, amount in given["of"].items()})
    amounts.update({(a, b): amount for a, row in given["cells"].items() for b, amount in row.items()})
    rows = breakdowns.estimate(schema, breakdowns.Breakdown(case["of"], case["by"]), breakdowns.BreakdownSums(amounts),
                               case["confidence"], rollup=case["window"] == windows.ROLLUP)
    return [{"value": r.value, "by_value": r.by_value, "estimate": r.estimate, "estimate_clipped": r.estimate_clipped,
             "ci_low": r.ci_low, "ci_high": r.ci_high, "by_share": r.by_share, "n": r.n, "reason": r.reason}
            for r in rows]


def run_relay_request(schema: Schema, case: Mapping[str, Any]) -> JSON:
    """A relayed report's bytes: the content, padded message and encapsulated request that
    ``case``'s report makes under ``schema``, to the key configuration ``case["key_config"]``, with
    the case's fixed ephemeral key (its public half too: a client checks its X25519 on it)."""
    config = ohttp.choose_key_config(bytes.fromhex(case["key_configs"]))
    ephemeral = bytes.fromhex(case["ephemeral_private_key"])
    content = ohttp.report_content(case["report"])
    size = ohttp.padded_size(schema)
    message = ohttp.bhttp_request(content, size)
    return {"key_id": config.key_id, "ephemeral_public_key": ohttp.public_key_of(ephemeral).hex(),
            "content": content.hex(), "padded_size": size, "message": message.hex(),
            "request": ohttp.encapsulate(config, message, ephemeral_private=ephemeral).hex()}


def run_relay_size(schema: Schema) -> JSON:
    """A schema's padded message size, and whether its requests are too big for a relay."""
    return {"padded_size": ohttp.padded_size(schema), "refused": ohttp.relay_refusal(schema) is not None}


# --- the cases ---------------------------------------------------------------------------------


def stream(label: str, n: int) -> bytes:
    """``n`` arbitrary but fixed bytes for a case (SHAKE-256 of its label): the vectors' coins."""
    return hashlib.shake_256(label.encode("utf-8")).digest(n)


def coin(value: int) -> bytes:
    """The 8 bytes a Bernoulli draw reads as the 53-bit number ``value``."""
    return (value << 11).to_bytes(8, "little")


TOP = (1 << 53) - 1  # the largest 53-bit draw: a coin that fails for every p < 1
SECRET = stream("device secret", 32)
OS = ["linux", "macos", "windows", "other"]
LANGUAGES = ["en", "de", "fr", "es", "it", "pt", "nl", "pl"]
HOMES = ["example.org", "caf\u00e9.fr", "\u65e5\u672c\u8a9e.jp", "\U0001f600 smile", "a\ufffdb", "", "x" * 16]
ERRORS = [f"E{i:04d}" for i in range(40)] + ["\u00c5ngstr\u00f6m"]
P_LESS_1 = olh.P - 1
SITE_ALPHABET = "abcdefghijklmnopqrstuvwxyz."

SCHEMAS: list[dict[str, Any]] = [
    {"name": "features", "version": 1, "epsilon": 2.0, "description": "DESIGN.md's example",
     "attributes": [{"name": "dark_mode", "type": "boolean"},
                    {"name": "os", "type": "categorical", "categories": OS, "mechanism": "auto"}]},
    {"name": "three", "version": 2, "epsilon": 3.0, "window": "hour",
     "attributes": [{"name": "flag", "type": "boolean"},
                    {"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"},
                    {"name": "lang", "type": "categorical", "categories": LANGUAGES, "mechanism": "oue"}]},
    {"name": "one-of-three", "version": 1, "epsilon": 1.5, "split": "sample",
     "attributes": [{"name": "flag", "type": "boolean"},
                    {"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"},
                    {"name": "lang", "type": "categorical", "categories": LANGUAGES, "mechanism": "oue"}]},
    {"name": "pick", "version": 1, "epsilon": 1.0,
     "attributes": [{"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"}]},
    {"name": "means", "version": 1, "epsilon": 8.0,
     "attributes": [{"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "duchi"},
                    {"name": "pages", "type": "numeric", "range": [1, 50], "mechanism": "pm"},
                    {"name": "latency", "type": "numeric", "range": [-5, 5.5], "mechanism": "hm"},
                    {"name": "crashes", "type": "numeric", "range": [0, 10], "mechanism": "laplace"}]},
    {"name": "buckets", "version": 1, "epsilon": 2.0,
     "attributes": [{"name": "load_ms", "type": "histogram", "edges": [0, 50, 100, 250, 1000], "mechanism": "grr"},
                    {"name": "ratio", "type": "histogram", "edges": [0, 0.5, 1.5, 2.5], "mechanism": "oue"}]},
    {"name": "memoised", "version": 1, "epsilon": 2.0, "epsilon_permanent": 6.0,
     "attributes": [{"name": "flag", "type": "boolean"},
                    {"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"},
                    {"name": "lang", "type": "categorical", "categories": LANGUAGES, "mechanism": "oue"},
                    {"name": "load_ms", "type": "histogram", "edges": [0, 100, 1000], "mechanism": "auto"}]},
    {"name": "memoised-sample", "version": 1, "epsilon": 1.0, "epsilon_permanent": 6.0, "split": "sample",
     "window": "hour",
     "attributes": [{"name": "flag", "type": "boolean"},
                    {"name": "os", "type": "categorical", "categories": OS, "mechanism": "grr"},
                    {"name": "lang", "type": "categorical", "categories": LANGUAGES, "mechanism": "oue"}]},
    {"name": "strings", "version": 1, "epsilon": 4.0,  # each attribute 2.0: g = 8
     "attributes": [{"name": "home", "type": "string", "max_length": 16, "candidates": HOMES},
                    {"name": "flag", "type": "boolean"}]},
    # Edges as written: 100.0 is a float, so the HMAC message writes it 100.0 (the bucket names 100).
    {"name": "memoised-float-edges", "version": 1, "epsilon": 2.0, "epsilon_permanent": 6.0,
     "attributes": [{"name": "load_ms", "type": "histogram", "edges": [0, 100.0, 250.5, 1000.0], "mechanism": "grr"}]},
    # Every edge a float, negative and zero too, under oue (one HMAC coin per bucket): a client that
    # read 0.0 or -50.0 as an integer would write another message, and another permanent response.
    {"name": "memoised-float-edges-oue", "version": 1, "epsilon": 2.0, "epsilon_permanent": 6.0,
     "attributes": [{"name": "load_ms", "type": "histogram", "edges": [-50.0, 0.0, 100.0, 1e3], "mechanism": "oue"}]},
    {"name": "strings-wide", "version": 1, "epsilon": 12.0,  # g = 65536: randbelow(g - 1) reads 2 bytes
     "attributes": [{"name": "error", "type": "string", "candidates": ERRORS}]},
    # 27 code points + U+FFFD + padding: derived levels [2, 3, 4, 5, 6] (L = 5: randbelow(5) reads one byte).
    {"name": "strings-discover", "version": 1, "epsilon": 4.0,  # each attribute 2.0: g = 8
     "attributes": [{"name": "home", "type": "string", "max_length": 6, "discover": True, "alphabet": SITE_ALPHABET,
                     "candidates": ["ab.de", "caf\u00e9", "x"]},
                    {"name": "flag", "type": "boolean"}]},
]


def derived_schemas() -> list[dict[str, Any]]:
    """:data:`SCHEMAS` as the server serves them (a client randomises with exactly these)."""
    return [parse_schema(s).to_dict() for s in SCHEMAS]


# (name, schema, record, window, device secret or None, bytes): the bytes are cut to those used.
REPORTS: list[tuple[str, str, dict[str, Any], str, bytes | None, bytes]] = [
    ("features", "features", {"dark_mode": True, "os": "macos"}, "2026-11-21", None, stream("features", 256)),
    *((f"three-{i}", "three", {"flag": i % 2 == 0, "os": OS[i], "lang": LANGUAGES[2 * i]}, "2026-11-21T13", None,
       stream(f"three-{i}", 256)) for i in range(4)),
    *((f"one-of-three-{i}", "one-of-three", {"flag": False, "os": "windows", "lang": "pl"}, "2026-11-21", None,
       stream(f"one-of-three-{i}", 256)) for i in range(4)),
    # Crafted coins: keep (the smallest draw), and refuse with the uniform's rejection step: the
    # byte 0x03 is 3, not below d - 1 = 3, so a second byte (0x01) is read; other 1 skips the true 0.
    ("grr-keeps", "pick", {"os": "linux"}, "2026-11-21", None, stream("id", 24) + coin(0)),
    ("grr-flips-after-a-rejection", "pick", {"os": "linux"}, "2026-11-21", None,
     stream("id", 24) + coin(TOP) + bytes([0x03, 0x01])),
    ("grr-flips-to-the-last", "pick", {"os": "linux"}, "2026-11-21", None, stream("id", 24) + coin(TOP) + bytes([0x02])),
    ("grr-flips-below-the-true-one", "pick", {"os": "other"}, "2026-11-21", None,
     stream("id", 24) + coin(TOP) + bytes([0x02])),
    *((f"means-{i}", "means", record, "2026-11-21", None, stream(f"means-{i}", 512)) for i, record in enumerate([
        {"minutes": 30, "pages": 1, "latency": 0.25, "crashes": 0},
        {"minutes": 500.5, "pages": 50, "latency": -7, "crashes": 3},  # clipped to the ranges
        {"minutes": -1, "pages": 17.5, "latency": 5.5, "crashes": 10},
    ])),
    *((f"buckets-{i}", "buckets", record, "2026-11-21", None, stream(f"buckets-{i}", 256)) for i, record in enumerate([
        {"load_ms": 0, "ratio": 0.5},  # an edge opens its bucket
        {"load_ms": 1000, "ratio": 2.5},  # the last edge is in the last bucket
        {"load_ms": -3, "ratio": 1e6},  # clipped to the edges
    ])),
    *((f"memoised-{i}", "memoised", {"flag": True, "os": "windows", "lang": "de", "load_ms": 250}, "2026-11-21", SECRET,
       stream(f"memoised-{i}", 256)) for i in range(3)),
    ("memoised-other-values", "memoised", {"flag": False, "os": "linux", "lang": "pl", "load_ms": 5}, "2026-11-22",
     SECRET, stream("memoised-other-values", 256)),
    ("memoised-another-device", "memoised", {"flag": True, "os": "windows", "lang": "de", "load_ms": 250}, "2026-11-21",
     stream("another device secret", 32), stream("memoised-another-device", 256)),
    ("memoised-float-edges", "memoised-float-edges", {"load_ms": 120}, "2026-11-21", SECRET,
     stream("memoised-float-edges", 256)),
    ("memoised-float-edges-oue", "memoised-float-edges-oue", {"load_ms": 0.0}, "2026-11-21", SECRET,
     stream("memoised-float-edges-oue", 256)),
    *((f"memoised-sample-{i}", "memoised-sample", {"flag": True, "os": "macos", "lang": "it"}, "2026-11-21T00",
       SECRET, stream(f"memoised-sample-{i}", 256)) for i in range(3)),
    # Strings. Crafted: a = 1 + 4660, b = 22136, then the coin keeps h (0) or fails (TOP) and j
    # is one byte (g - 1 = 7: three bits); then the boolean's coin.
    ("string-keeps", "strings", {"home": "example.org", "flag": True}, "2026-11-21", None,
     stream("id", 24) + (4660).to_bytes(4, "little") + (22136).to_bytes(4, "little") + coin(0) + coin(0)),
    *((f"string-flips-j-{j}", "strings", {"home": "example.org", "flag": True}, "2026-11-21", None,
       stream("id", 24) + (4660).to_bytes(4, "little") + (22136).to_bytes(4, "little") + coin(TOP) + bytes([j])
       + coin(0)) for j in (0, 6)),
    # a's and b's draws reject (a: 2^31 - 1 and P - 1 are not below P - 1; b: P is not below P), then
    # take their largest values: a = 1 + (P - 2) = P - 1, b = P - 1.
    ("string-seeds-reject-then-take-their-largest", "strings", {"home": "caf\u00e9.fr", "flag": False}, "2026-11-21",
     None, stream("id", 24) + bytes.fromhex("ffffffff") + P_LESS_1.to_bytes(4, "little")
     + (P_LESS_1 - 1).to_bytes(4, "little") + (olh.P).to_bytes(4, "little") + P_LESS_1.to_bytes(4, "little")
     + coin(0) + coin(0)),
    *((f"string-{i}", "strings", {"home": home, "flag": i % 2 == 0}, "2026-11-21", None, stream(f"string-{i}", 256))
      for i, home in enumerate([
          "example.org", "cafe\u0301.fr", "\u65e5\u672c\u8a9e.jp", "\U0001f600 smile", "a\u0007b",
          "a\ud800b", "", "an unlisted string that is longer than sixteen", "x" * 40, "\u212bngstr\u00f6m",
      ])),
    *((f"string-wide-{i}", "strings-wide", {"error": error}, "2026-11-21", None, stream(f"string-wide-{i}", 256))
      for i, error in enumerate(["E0001", "E0039", "\u00c5ngstr\u00f6m", "unlisted"])),
    ("string-wide-flips-with-two-bytes", "strings-wide", {"error": "E0007"}, "2026-11-21", None,
     stream("id", 24) + (4660).to_bytes(4, "little") + (22136).to_bytes(4, "little") + coin(TOP)
     + bytes([0xfe, 0xff])),
]

# Discovery. Crafted: the level's coin (0: level 0; TOP: a prefix), then the level's draw below
# L = 5 (one byte, three bits: 0x07 and 0x05 are rejected), then a, b, the coin at p; then the boolean.
_SEED = (4660).to_bytes(4, "little") + (22136).to_bytes(4, "little")
REPORTS += [
    ("string-discover-level-0", "strings-discover", {"home": "ab.de", "flag": True}, "2026-11-21", None,
     stream("id", 24) + coin(0) + _SEED + coin(0) + coin(0)),
    ("string-discover-level-1-prefix-of-2", "strings-discover", {"home": "ab.de", "flag": True}, "2026-11-21", None,
     stream("id", 24) + coin(TOP) + bytes([0x00]) + _SEED + coin(0) + coin(0)),
    ("string-discover-level-5-padded", "strings-discover", {"home": "ab", "flag": True}, "2026-11-21", None,
     stream("id", 24) + coin(TOP) + bytes([0x04]) + _SEED + coin(0) + coin(0)),
    ("string-discover-level-rejects-then-takes-3", "strings-discover", {"home": "ab.de", "flag": False}, "2026-11-21",
     None, stream("id", 24) + coin(TOP) + bytes([0x07, 0x05, 0x02]) + _SEED + coin(TOP) + bytes([0x03]) + coin(0)),
    # Out of the alphabet: upper case, an accent (after NFC), "!" and a control character (U+FFFD
    # by preparation, and not in the alphabet either) all become U+FFFD in the prefix.
    ("string-discover-out-of-alphabet", "strings-discover", {"home": "Cafe\u0301!\u0007x", "flag": True},
     "2026-11-21", None, stream("id", 24) + coin(TOP) + bytes([0x04]) + _SEED + coin(0) + coin(0)),
    *((f"string-discover-{i}", "strings-discover", {"home": home, "flag": i % 2 == 0}, "2026-11-21", None,
       stream(f"string-discover-{i}", 256))
      for i, home in enumerate(["ab.de", "caf\u00e9", "x", "", "an unlisted string", "\U0001f600.fr", "a.b",
                                "x.y.z"])),
]

# (name, schema, record, window, device secret or None, field named)
INVALID_RECORDS: list[tuple[str, str, Any, str, bytes | None]] = [
    ("not-a-dict", "three", [["flag", True]], "2026-11-21T13", None),
    ("unknown-attribute", "three", {"flag": True, "os": "linux", "lang": "en", "extra": 1}, "2026-11-21T13", None),
    ("missing-attribute", "three", {"flag": True, "os": "linux"}, "2026-11-21T13", None),
    ("boolean-as-int", "three", {"flag": 1, "os": "linux", "lang": "en"}, "2026-11-21T13", None),
    ("boolean-as-null", "three", {"flag": None, "os": "linux", "lang": "en"}, "2026-11-21T13", None),
    ("category-as-number", "three", {"flag": True, "os": 3, "lang": "en"}, "2026-11-21T13", None),
    ("unknown-category", "three", {"flag": True, "os": "Linux", "lang": "en"}, "2026-11-21T13", None),
    ("unknown-oue-category", "three", {"flag": True, "os": "linux", "lang": "sv"}, "2026-11-21T13", None),
    ("number-as-boolean", "means", {"minutes": True, "pages": 1, "latency": 0, "crashes": 0}, "2026-11-21", None),
    ("number-as-string", "means", {"minutes": 1, "pages": "1", "latency": 0, "crashes": 0}, "2026-11-21", None),
    ("number-out-of-bounds", "means", {"minutes": 1, "pages": 1, "latency": -1e301, "crashes": 0}, "2026-11-21", None),
    ("bucket-as-string", "buckets", {"load_ms": "fast", "ratio": 1}, "2026-11-21", None),
    ("window-of-the-other-kind", "three", {"flag": True, "os": "linux", "lang": "en"}, "2026-11-21", None),
    ("window-no-real-day", "features", {"dark_mode": True, "os": "linux"}, "2026-02-29", None),
    ("memoised-without-secret", "memoised", {"flag": True, "os": "linux", "lang": "en", "load_ms": 1}, "2026-11-21",
     None),
    ("memoised-short-secret", "memoised", {"flag": True, "os": "linux", "lang": "en", "load_ms": 1}, "2026-11-21",
     SECRET[:16]),
    ("string-as-number", "strings", {"home": 3, "flag": True}, "2026-11-21", None),
    ("string-as-null", "strings", {"home": None, "flag": True}, "2026-11-21", None),
    ("string-as-list", "strings", {"home": ["example.org"], "flag": True}, "2026-11-21", None),
]

# (name, value, max_length): a string record value, its preparation and its fingerprint.
STRING_VALUES: list[tuple[str, str, int]] = [
    ("ascii", "example.org", 64),
    ("empty", "", 64),
    ("latin-precomposed", "caf\u00e9", 64),
    ("nfc-composes-a-combining-accent", "cafe\u0301", 64),
    ("nfc-composes-hangul-jamo", "\u1100\u1161", 64),
    ("nfc-maps-the-angstrom-sign", "\u212b", 64),
    ("cjk", "\u65e5\u672c\u8a9e", 64),
    ("astral-plane", "\U0001f600\U0001d11e", 64),
    ("lone-high-surrogate", "a\ud800b", 64),
    ("lone-low-surrogate", "\udc00", 64),
    ("nul-and-bell", "\u0000x\u0007", 64),
    ("delete-and-c1-control", "\u007f\u0085", 64),
    ("format-characters", "\ufeffsafe\u202etxt\u200d", 64),
    ("zero-width-joiner-in-an-emoji", "\U0001f469\u200d\U0001f4bb", 64),
    ("cut-to-max-length", "abcdefghij", 4),
    ("cut-counts-code-points-not-utf16-units", "\U0001f600" * 6, 4),
    ("cut-after-nfc", "e\u0301" * 4, 4),
    ("cut-keeps-a-replacement", "\u0001" * 5, 3),
    ("256-code-points", "\u00e9" * 300, 256),
]

# (name, prepared value, length, alphabet): a discovery prefix and its fingerprint.
STRING_PREFIXES: list[tuple[str, str, int, str]] = [
    ("kept", "ab.de", 3, SITE_ALPHABET),
    ("padded", "ab", 5, SITE_ALPHABET),
    ("empty-is-all-padding", "", 2, SITE_ALPHABET),
    ("whole-value", "ab.de", 5, SITE_ALPHABET),
    ("out-of-alphabet-to-replacement", "Caf\u00e9!x", 6, SITE_ALPHABET),
    ("replacement-in-the-value-stays", "a\ufffdb", 3, SITE_ALPHABET),
    ("astral-is-one-code-point", "\U0001f600ab", 2, SITE_ALPHABET),
    ("astral-in-the-alphabet", "\U0001f600ab", 4, "\U0001f600a"),
    ("non-ascii-alphabet", "\u65e5\u672c.jp", 4, "\u65e5\u672c"),
]

# (name, bytes): the draws of a string report's a and b.
STRING_DRAWS: list[tuple[str, bytes]] = [
    ("smallest", bytes(8)),
    ("largest-after-rejections", bytes.fromhex("ffffffff") + P_LESS_1.to_bytes(4, "little")
     + (P_LESS_1 - 1).to_bytes(4, "little") + (olh.P).to_bytes(4, "little") + P_LESS_1.to_bytes(4, "little")),
    ("the-top-bit-is-masked", bytes.fromhex("0100008002000080")),
    *((f"stream-{i}", stream(f"string-draws-{i}", 16)) for i in range(3)),
]

PRIMITIVE_BERNOULLI: list[tuple[str, float, bytes]] = [
    ("half-just-below", 0.5, coin((1 << 52) - 1)),
    ("half-at-the-threshold", 0.5, coin(1 << 52)),
    ("zero-never", 0.0, coin(0)),
    ("one-always", 1.0, coin(TOP)),
    ("only-the-top-53-bits-count", 0.5, (((1 << 52) - 1) << 11 | 0x7FF).to_bytes(8, "little")),
    *((f"rr-at-epsilon-1-{i}", math.e / (1 + math.e), stream(f"bernoulli-{i}", 8)) for i in range(4)),
]

PRIMITIVE_RANDBELOW: list[tuple[str, int, bytes]] = [
    ("one-reads-nothing", 1, b""),
    ("three-accepts", 3, bytes([0x02])),
    ("three-masks-to-two-bits", 3, bytes([0xFE])),
    ("three-rejects-then-accepts", 3, bytes([0x03, 0xFF, 0x01])),
    ("eight-reads-one-byte", 8, bytes([0x0F])),
    ("256-reads-one-byte", 256, bytes([0xAB])),
    ("257-reads-two-bytes-little-endian", 257, bytes([0x00, 0x01])),
    ("257-rejects", 257, bytes([0x01, 0x01, 0x05, 0x00])),
    *((f"1023-{i}", 1023, stream(f"randbelow-1023-{i}", 16)) for i in range(3)),
]

PRIMITIVE_HMAC: list[tuple[str, bytes, str, int]] = [
    ("one-block", SECRET, "a message", 32),
    ("blocks-concatenate", SECRET, "a message", 80),
    ("unicode-message", stream("key", 32), "naïve café 名前", 7),
]


def supports_cases(parsed: Mapping[str, Schema], reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The supports of the string reports among ``reports`` (and of a few crafted wire values)."""
    out = []
    for case in reports:
        for name, value in case["report"]["values"].items():
            attribute = parsed[case["schema"]].attribute(name)
            if attribute.mech is olh.OLH and attribute.mech.counted(attribute, value):
                out.append({"name": case["name"], "schema": case["schema"], "attribute": name, "value": value})
    out += [{"name": "string-y-beyond-every-hash", "schema": "strings", "attribute": "home",
             "value": {"a": 1, "b": 0, "y": 7}},
            {"name": "string-wide-largest-seed", "schema": "strings-wide", "attribute": "error",
             "value": {"a": P_LESS_1, "b": P_LESS_1, "y": 65535}}]
    return [{**c, "supported": run_supports(parsed[c["schema"]], c)} for c in out]


def randomness() -> JSON:
    schemas = derived_schemas()
    parsed = schemas_by_name(schemas)
    reports = []
    for name, schema, record, window, secret, data in REPORTS:
        case: dict[str, Any] = {"name": name, "schema": schema, "record": record, "window": window,
                                "device_secret": None if secret is None else secret.hex(), "random_bytes": data.hex()}
        report, used = run_report(parsed[schema], case)
        case["random_bytes"] = data[:used].hex()
        case["report"] = report
        if secret is not None:
            case["permanent"] = run_permanent(parsed[schema], case)
        reports.append(case)
    invalid = []
    for name, schema, record, window, secret in INVALID_RECORDS:
        case = {"name": name, "schema": schema, "record": record, "window": window,
                "device_secret": None if secret is None else secret.hex()}
        invalid.append({**case, "field": _refused(run_invalid_record(parsed[schema], case), name)})
    return {
        "schemas": schemas,
        "bernoulli": [_primitive(run_bernoulli, {"name": n, "p": p, "bytes": b.hex()}) for n, p, b in PRIMITIVE_BERNOULLI],
        "randbelow": [_primitive(run_randbelow, {"name": n, "n": k, "bytes": b.hex()}) for n, k, b in PRIMITIVE_RANDBELOW],
        "hmac_stream": [_answer({"name": n, "key": k.hex(), "message": m, "length": length}, "bytes", run_hmac_stream)
                        for n, k, m, length in PRIMITIVE_HMAC],
        "reports": reports,
        "invalid_records": invalid,
        "string_values": [{**case, **run_string_value(case)} for case in
                          ({"name": n, "value": v, "max_length": m} for n, v, m in STRING_VALUES)],
        "string_prefixes": [{**case, **run_string_prefix(case)} for case in
                            ({"name": n, "prepared": v, "length": k, "alphabet": al} for n, v, k, al in STRING_PREFIXES)],
        "string_draws": [_primitive(run_string_draws, {"name": n, "bytes": b.hex()}) for n, b in STRING_DRAWS],
        "supports": supports_cases(parsed, reports),
    }


def _answer(case: dict[str, Any], key: str, run: Callable[[Mapping[str, Any]], JSON]) -> dict[str, Any]:
    """``case`` with what ``run`` makes of it under ``key``."""
    return {**case, key: run(case)}


def _primitive(run: Callable[[Mapping[str, Any]], tuple[JSON, int]], case: dict[str, Any]) -> JSON:
    """``case`` with its result, its bytes cut to those the draw read."""
    result, used = run(case)
    return {**case, "bytes": case["bytes"][: 2 * used], "result": result}


def _refused(field: str | None, name: str) -> str:
    if field is None:
        raise AssertionError(f"case {name} is meant to be refused, but the code accepts it")
    return field


def _features(**changes: Any) -> dict[str, Any]:
    return {**SCHEMAS[0], **changes}


def _attribute(**fields: Any) -> dict[str, Any]:
    return _features(attributes=[fields])


def _string(**fields: Any) -> dict[str, Any]:
    return _attribute(**{"name": "s", "type": "string", **fields})


def _numeric(**fields: Any) -> dict[str, Any]:
    return _attribute(**{"name": "x", "type": "numeric", "range": [0, 1], **fields})


# Breakdowns' limits: 1,024 categories times 4 (4,096 cells) or 8 (8,192); 20 pairs of five booleans.
_WIDE = [{"name": "wide", "type": "categorical", "categories": [f"c{i}" for i in range(1024)]},
         {"name": "four", "type": "categorical", "categories": OS},
         {"name": "eight", "type": "categorical", "categories": LANGUAGES}]
_FIVE = [{"name": f"b{i}", "type": "boolean"} for i in range(5)]
_PAIRS = [{"of": f"b{i}", "by": f"b{j}"} for i in range(5) for j in range(5) if i != j]

VALID_SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    *((s["name"], s) for s in SCHEMAS),
    ("defaults-filled-in", {"name": "bare", "version": 1, "epsilon": 1,
                            "attributes": [{"name": "b", "type": "boolean"}]}),
    ("auto-picks-oue-when-d-is-large", _features(epsilon=0.5, attributes=[
        {"name": "c", "type": "categorical", "categories": [f"c{i}" for i in range(16)]}])),
    ("auto-picks-grr-when-d-is-small", _attribute(name="c", type="categorical", categories=["a", "b", "c"])),
    ("auto-picks-duchi-at-small-epsilon", _features(epsilon=0.5, attributes=[{"name": "x", "type": "numeric",
                                                                              "range": [0, 1]}])),
    ("auto-picks-hm-at-large-epsilon", _numeric()),
    ("per-attribute-epsilon", _features(epsilon=3.0, attributes=[
        {"name": "a", "type": "boolean", "epsilon": 0.5},
        {"name": "b", "type": "categorical", "categories": OS, "epsilon": 2.5}])),
    ("per-attribute-epsilon-under-sample", _features(split="sample", attributes=[
        {"name": "a", "type": "boolean", "epsilon": 2.0}, {"name": "b", "type": "boolean", "epsilon": 2}])),
    ("unicode-text", _features(description="Réglages · 設定", attributes=[
        {"name": "lang", "type": "categorical", "categories": ["français", "日本語", "e\u0301t\u00e9"]}])),
    ("float-bucket-names", _attribute(name="h", type="histogram", edges=[-1.5, 0, 1e-07, 2.0, 1e15])),
    ("memoised-per-attribute-epsilon", _features(epsilon=2.0, epsilon_permanent=5.0, attributes=[
        {"name": "a", "type": "boolean", "epsilon": 0.5}, {"name": "b", "type": "boolean", "epsilon": 1.5}])),
    ("a-derived-schema-parses-to-itself", parse_schema(SCHEMAS[6]).to_dict()),
    ("histogram-categories-given-back", _attribute(name="h", type="histogram", edges=[0, 1, 2],
                                                   categories=["[0, 1)", "[1, 2]"])),
    ("a-derived-numeric-schema-parses-to-itself", parse_schema(SCHEMAS[4]).to_dict()),
    ("string-defaults-filled-in", _attribute(name="s", type="string")),
    ("string-candidates-prepared", _attribute(name="s", type="string", max_length=8, candidates=[
        "cafe\u0301", "a\u0000b", "\u212b", "\U0001f600", ""])),
    ("string-alphabet-kept", _attribute(name="s", type="string", alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-/",
                                        discover=False)),
    ("string-g-capped-at-65536", _features(epsilon=11.2, attributes=[{"name": "s", "type": "string"}])),
    ("string-g-at-a-small-epsilon", _features(epsilon=1e-4, attributes=[{"name": "s", "type": "string"}])),
    ("a-derived-string-schema-parses-to-itself", parse_schema(SCHEMAS[8]).to_dict()),
    # e^ε is 2.5 here (Python's exp): g is 4, and the other neighbour, 3, is taken when given.
    ("string-g-either-neighbour-at-a-half-integer", _string(g=3) | {"epsilon": math.log(2.5)}),
    ("string-discover-levels-derived", _string(max_length=24, discover=True,
                                               alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-")),
    # E = 4: the first level 6 (4^6 = 4096 <= 4160), then steps of 3 (32 * 4^3 = 2048).
    ("string-discover-levels-derived-small-alphabet", _string(max_length=16, discover=True, alphabet="01")),
    ("string-discover-one-level", _string(max_length=2, discover=True, alphabet="abc")),
    ("string-discover-levels-given", _string(max_length=8, discover=True, alphabet="ab", levels=[1, 3, 4, 7, 8])),
    ("a-derived-discovering-schema-parses-to-itself",
     parse_schema(next(s for s in SCHEMAS if s["name"] == "strings-discover")).to_dict()),
    ("the-least-epsilon-an-attribute-may-have", _features(epsilon=2e-4, attributes=[
        {"name": "x", "type": "numeric", "range": [0, 1], "mechanism": "duchi"},
        {"name": "y", "type": "numeric", "range": [0, 1], "mechanism": "laplace"}])),
]

_BAD_P = parse_schema(SCHEMAS[0]).to_dict()
_BAD_P["attributes"][1]["p"] = 0.5
_BAD_C = parse_schema(SCHEMAS[4]).to_dict()
_BAD_C["attributes"][2]["C"] *= 1 + 1e-6
_OTHER_PARAMETER = parse_schema(SCHEMAS[4]).to_dict()
_OTHER_PARAMETER["attributes"][1]["scale"] = 1.0
_BAD_G = parse_schema(SCHEMAS[8]).to_dict()
_BAD_G["attributes"][0]["g"] = 9
_BAD_PERMANENT = parse_schema(SCHEMAS[6]).to_dict()
_BAD_PERMANENT["attributes"][0]["permanent"] = {"epsilon": 1.0, "p": 0.7, "q": 0.3}

INVALID_SCHEMAS: list[tuple[str, Any]] = [
    ("not-an-object", ["features"]),
    ("unknown-field", _features(owner="me")),
    ("name-upper-case", _features(name="Features")),
    ("name-too-long", _features(name="a" * 65)),
    ("version-zero", _features(version=0)),
    ("version-a-boolean", _features(version=True)),
    ("version-too-large", _features(version=2**31)),
    ("epsilon-zero", _features(epsilon=0)),
    ("epsilon-above-20", _features(epsilon=20.5)),
    ("epsilon-a-string", _features(epsilon="2")),
    ("window-week", _features(window="week")),
    ("split-unknown", _features(split="random")),
    ("description-not-text", _features(description=7)),
    ("description-right-to-left-override", _features(description="safe\u202etxt.exe")),
    ("attributes-empty", _features(attributes=[])),
    ("attributes-too-many", _features(attributes=[{"name": f"a{i}", "type": "boolean"} for i in range(65)])),
    ("attribute-not-an-object", _features(attributes=[{"name": "a", "type": "boolean"}, "b"])),
    ("attribute-unknown-field", _attribute(name="a", type="boolean", colour="red")),
    ("attribute-name-bad", _attribute(name="A b", type="boolean")),
    ("attribute-names-repeat", _features(attributes=[{"name": "a", "type": "boolean"}, {"name": "a", "type": "boolean"}])),
    ("attribute-type-unknown", _attribute(name="a", type="text")),
    ("categories-on-a-boolean", _attribute(name="a", type="boolean", categories=["x", "y"])),
    ("categories-one", _attribute(name="c", type="categorical", categories=["only"])),
    ("categories-too-many", _attribute(name="c", type="categorical", categories=[f"c{i}" for i in range(1025)])),
    ("category-empty", _attribute(name="c", type="categorical", categories=["a", ""])),
    ("category-too-long", _attribute(name="c", type="categorical", categories=["a", "b" * 65])),
    ("category-not-a-string", _attribute(name="c", type="categorical", categories=["a", 2])),
    ("category-control-character", _attribute(name="c", type="categorical", categories=["a", "b\u0007"])),
    ("categories-repeat", _attribute(name="c", type="categorical", categories=["a", "b", "a"])),
    ("categories-repeat-after-nfc", _attribute(name="c", type="categorical", categories=["\u00e9t\u00e9", "e\u0301t\u00e9"])),
    ("mechanism-unknown", _attribute(name="c", type="categorical", categories=OS, mechanism="rappor")),
    ("mechanism-for-another-type", _attribute(name="b", type="boolean", mechanism="oue")),
    ("mechanism-mean-on-a-categorical", _attribute(name="c", type="categorical", categories=OS, mechanism="pm")),
    ("epsilon-given-for-some", _features(attributes=[{"name": "a", "type": "boolean", "epsilon": 1.0},
                                                     {"name": "b", "type": "boolean"}])),
    ("epsilon-sum-off", _features(attributes=[{"name": "a", "type": "boolean", "epsilon": 1.0},
                                              {"name": "b", "type": "boolean", "epsilon": 1.5}])),
    ("epsilon-under-sample-not-total", _features(split="sample", attributes=[
        {"name": "a", "type": "boolean", "epsilon": 2.0}, {"name": "b", "type": "boolean", "epsilon": 1.0}])),
    ("epsilon-too-small-for-floating-point", _features(epsilon=1e-17, attributes=[{"name": "a", "type": "boolean"}])),
    ("epsilon-below-1e-4-on-a-numeric", _numeric(mechanism="duchi") | {"epsilon": 1e-300}),
    ("epsilon-share-below-1e-4", _features(epsilon=1.5e-4, attributes=[{"name": "a", "type": "boolean"},
                                                                       {"name": "b", "type": "boolean"}])),
    ("p-given-back-wrong", _BAD_P),
    ("derived-parameter-given-back-wrong", _BAD_C),
    ("derived-parameter-of-another-mechanism", _OTHER_PARAMETER),
    ("range-one-number", _numeric(range=[0])),
    ("range-decreasing", _numeric(range=[1, 0])),
    ("range-not-finite", _attribute(name="x", type="numeric", range=[0, 1e16])),
    ("range-on-a-categorical", _attribute(name="c", type="categorical", categories=OS, range=[0, 1])),
    ("edges-two", _attribute(name="h", type="histogram", edges=[0, 1])),
    ("edges-not-increasing", _attribute(name="h", type="histogram", edges=[0, 1, 1])),
    ("edges-a-boolean", _attribute(name="h", type="histogram", edges=[0, True, 2])),
    ("edges-closer-than-1e-9", _attribute(name="h", type="histogram", edges=[0, 1e-10, 1])),
    ("range-narrower-than-1e-9-of-its-ends", _numeric(range=[1e6, 1e6 + 1e-4])),
    ("histogram-categories-wrong", _attribute(name="h", type="histogram", edges=[0, 1, 2], categories=["a", "b"])),
    ("epsilon-permanent-not-above-epsilon", _features(epsilon_permanent=2.0)),
    ("epsilon-permanent-above-50", _features(epsilon_permanent=51)),
    ("epsilon-permanent-under-sample-too-small", _features(split="sample", epsilon_permanent=3.0)),
    ("numeric-cannot-be-memoised", _features(epsilon_permanent=4.0, attributes=[
        {"name": "b", "type": "boolean"}, {"name": "x", "type": "numeric", "range": [0, 1]}])),
    ("permanent-given-back-wrong", _BAD_PERMANENT),
    ("string-max-length-zero", _string(max_length=0)),
    ("string-max-length-above-256", _string(max_length=257)),
    ("string-max-length-a-float", _string(max_length=64.0)),
    ("string-candidates-not-a-list", _string(candidates="example.org")),
    ("string-candidates-over-10000", _string(candidates=[f"s{i}" for i in range(10_001)])),
    ("string-candidate-not-a-string", _string(candidates=["a", 1])),
    ("string-candidate-longer-than-max-length", _string(max_length=4, candidates=["abcd", "abcde"])),
    ("string-candidates-repeat-after-nfc", _string(candidates=["caf\u00e9", "cafe\u0301"])),
    ("string-candidates-repeat-after-replacement", _string(candidates=["a\u0000", "a\u0007"])),
    ("string-discover-without-alphabet", _string(discover=True)),
    ("string-discover-alphabet-format-character", _string(discover=True, alphabet="ab\u200d")),
    ("string-discover-alphabet-empty", _string(discover=True, alphabet="")),
    ("string-levels-not-a-list", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels="2,24")),
    ("string-levels-empty", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[])),
    ("string-levels-zero", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[0, 24])),
    ("string-levels-a-float", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[2.0, 24])),
    ("string-levels-not-increasing", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[2, 2, 24])),
    ("string-levels-beyond-max-length", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[2, 30])),
    ("string-levels-not-ending-at-max-length", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[2, 3, 4])),
    ("string-levels-first-enumerates-too-many", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[3, *range(4, 25)])),
    ("string-levels-step-too-long", _string(max_length=24, discover=True, alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", levels=[2, 4, *range(5, 25)])),
    ("string-discover-not-a-boolean", _string(discover=1)),
    ("string-levels-without-discovery", _string(levels=[8, 64])),
    ("string-alphabet-repeats", _string(alphabet="abca")),
    ("string-alphabet-replacement-character", _string(alphabet="ab\ufffd")),
    ("string-alphabet-nul", _string(alphabet="ab\u0000")),
    ("string-alphabet-not-nfc", _string(alphabet="e\u0301")),
    ("string-alphabet-too-long", _string(alphabet="".join(chr(0x100 + i) for i in range(129)))),
    ("string-mechanism-grr", _string(mechanism="grr")),
    ("string-categories", _string(categories=["a", "b"])),
    ("olh-on-a-categorical", _attribute(name="c", type="categorical", categories=OS, mechanism="olh")),
    ("string-g-given-back-wrong", _BAD_G),
    ("string-g-neighbour-not-at-a-half-integer", _string(g=5) | {"epsilon": 1.0}),
    ("string-cannot-be-memoised", _features(epsilon_permanent=4.0, attributes=[
        {"name": "b", "type": "boolean"}, {"name": "s", "type": "string"}])),
]


def schemas() -> JSON:
    return [{"name": name, "schema": schema, "derived": run_schema({"schema": schema})} for name, schema in VALID_SCHEMAS]


def invalid_schemas() -> JSON:
    return [{"name": name, "schema": schema, "field": _refused(run_invalid_schema({"schema": schema}), name)}
            for name, schema in INVALID_SCHEMAS]


# Schemas published with breakdowns (DESIGN.md, "Breakdowns"): a file of their own, since the
# schema a client parses never carries them (clients refuse unknown fields).
PUBLISHED_WITH_BREAKDOWNS: list[tuple[str, dict[str, Any]]] = [
    ("breakdowns-listed", _features(breakdowns=[{"of": "dark_mode", "by": "os"}, {"of": "os", "by": "dark_mode"}])),
    ("breakdowns-empty", _features(breakdowns=[])),
    ("breakdowns-the-same-twice-is-once", _features(breakdowns=[{"of": "dark_mode", "by": "os"},
                                                                {"by": "os", "of": "dark_mode"}])),
    ("breakdowns-of-every-type-but-string", {**SCHEMAS[5], "name": "broken-down", "epsilon": 5.0, "attributes": [
        *SCHEMAS[5]["attributes"], {"name": "flag", "type": "boolean"},
        {"name": "os", "type": "categorical", "categories": OS, "mechanism": "oue"},
        {"name": "minutes", "type": "numeric", "range": [0, 120]}], "breakdowns": [
        {"of": "minutes", "by": "load_ms"}, {"of": "flag", "by": "ratio"}, {"of": "os", "by": "flag"},
        {"of": "load_ms", "by": "os"}]}),
    ("breakdowns-memoised", {**SCHEMAS[6], "breakdowns": [{"of": "flag", "by": "os"}, {"of": "lang", "by": "load_ms"}]}),
    ("breakdowns-4096-cells", _features(epsilon=2.0, attributes=_WIDE, breakdowns=[{"of": "wide", "by": "four"}])),
    ("breakdowns-16", _features(epsilon=5.0, attributes=_FIVE, breakdowns=_PAIRS[:16])),
]

REFUSED_BREAKDOWNS: list[tuple[str, Any]] = [
    ("breakdowns-not-a-list", _features(breakdowns={"of": "dark_mode", "by": "os"})),
    ("breakdowns-over-16", _features(epsilon=5.0, attributes=_FIVE, breakdowns=_PAIRS[:17])),
    ("breakdown-not-an-object", _features(breakdowns=[{"of": "dark_mode", "by": "os"}, "os"])),
    ("breakdown-unknown-field", _features(breakdowns=[{"of": "dark_mode", "by": "os", "where": "os"}])),
    ("breakdown-of-missing", _features(breakdowns=[{"by": "os"}])),
    ("breakdown-of-not-an-attribute", _features(breakdowns=[{"of": "crashed", "by": "os"}])),
    ("breakdown-by-not-an-attribute", _features(breakdowns=[{"of": "dark_mode", "by": ["os"]}])),
    ("breakdown-of-and-by-the-same", _features(breakdowns=[{"of": "os", "by": "os"}])),
    ("breakdown-by-numeric", {**SCHEMAS[4], "attributes": [*SCHEMAS[4]["attributes"], {"name": "flag", "type": "boolean"}],
                              "breakdowns": [{"of": "flag", "by": "minutes"}]}),
    ("breakdown-by-string", {**SCHEMAS[8], "breakdowns": [{"of": "flag", "by": "home"}]}),
    ("breakdown-of-string", {**SCHEMAS[8], "breakdowns": [{"of": "home", "by": "flag"}]}),
    ("breakdown-over-4096-cells", _features(epsilon=2.0, attributes=_WIDE, breakdowns=[{"of": "wide", "by": "four"},
                                                                                       {"of": "wide", "by": "eight"}])),
    ("breakdowns-under-split-sample", {**SCHEMAS[2], "breakdowns": [{"of": "flag", "by": "os"}]}),
    ("breakdowns-after-a-schema-error", _features(window="week", breakdowns=[{"of": "x", "by": "y"}])),
]


def breakdown_schemas() -> JSON:
    return {"valid": [{"name": name, "schema": schema, **run_published({"schema": schema})}
                      for name, schema in PUBLISHED_WITH_BREAKDOWNS],
            "invalid": [{"name": name, "schema": schema, "field": _refused(run_invalid_published({"schema": schema}), name)}
                        for name, schema in REFUSED_BREAKDOWNS]}


ID = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"  # 32 url-safe characters


def _report(schema: str, version: int, window: str, epsilon: Any, values: Any, **changes: Any) -> dict[str, Any]:
    return {"id": ID, "schema": schema, "version": version, "window": window, "epsilon": epsilon, "values": values,
            **changes}


FEATURES = _report("features", 1, "2026-11-21", 2.0, {"dark_mode": True, "os": "macos"})
THREE = _report("three", 2, "2026-11-21T13", 3.0, {"flag": False, "os": "other", "lang": [0, 1, 1, 0, 0, 0, 0, 1]})
STRINGS = _report("strings", 1, "2026-11-21", 4.0, {"home": {"a": 123456789, "b": 987654321, "y": 5}, "flag": True})
WIDE = _report("strings-wide", 1, "2026-11-21", 12.0, {"error": {"a": 1, "b": 0, "y": 65535}})
DISCOVER = _report("strings-discover", 1, "2026-11-21", 4.0, {"home": {"a": 5, "b": 7, "y": 3, "level": 0},
                                                              "flag": True})
MEANS = _report("means", 1, "2026-11-21", 8.0, {"minutes": 1, "pages": -1.25, "latency": 0.5, "crashes": 0.0009765625})

VALID_REPORTS: list[tuple[str, dict[str, Any]]] = [
    ("boolean-and-grr", FEATURES),
    ("boolean-false-adds-nothing", {**FEATURES, "values": {"dark_mode": False, "os": "linux"}}),
    ("oue-bits", THREE),
    ("oue-no-bits", {**THREE, "values": {**THREE["values"], "lang": [0] * 8}}),
    ("oue-all-bits", {**THREE, "values": {**THREE["values"], "lang": [1] * 8}}),
    ("sample-carries-one", _report("one-of-three", 1, "2026-11-21", 1.5, {"lang": [1, 0, 0, 0, 0, 0, 0, 1]})),
    ("means", MEANS),
    ("means-zero-adds-nothing", {**MEANS, "values": {"minutes": 0, "pages": 0, "latency": 0.0, "crashes": -3}}),
    ("histogram-buckets", _report("buckets", 1, "2026-11-21", 2.0, {"load_ms": "[250, 1000]", "ratio": [0, 1, 1]})),
    ("memoised", _report("memoised", 1, "2026-11-21", 2.0,
                         {"flag": True, "os": "windows", "lang": [0] * 7 + [1], "load_ms": "[0, 100)"})),
    ("epsilon-an-integer", {**FEATURES, "epsilon": 2}),
    ("epsilon-within-1e-9", {**FEATURES, "epsilon": 2.0000000005}),
    ("id-16-characters", {**FEATURES, "id": "abcdefghij_-0123"}),
    ("id-64-characters", {**FEATURES, "id": "Z" * 64}),
    ("fields-in-any-order", dict(reversed(list(FEATURES.items())))),
    ("string-supports", STRINGS),
    ("string-keys-in-any-order", {**STRINGS, "values": {"home": {"y": 0, "b": 0, "a": 2}, "flag": False}}),
    ("string-largest-seed", {**STRINGS, "values": {"home": {"a": P_LESS_1, "b": P_LESS_1, "y": 7}, "flag": True}}),
    ("string-wide-largest-y", WIDE),
    ("string-discover-level-0-counted", DISCOVER),
    ("string-discover-level-3-not-counted", {**DISCOVER, "values": {"home": {"a": 5, "b": 7, "y": 3, "level": 3},
                                                                    "flag": True}}),
    ("string-discover-last-level-not-counted", {**DISCOVER, "values": {"home": {"a": P_LESS_1, "b": 0, "y": 7,
                                                                                "level": 5}, "flag": False}}),
]

INVALID_REPORTS: list[tuple[str, Any]] = [
    ("not-an-object", [FEATURES]),
    ("unknown-field", {**FEATURES, "ip": "10.0.0.1"}),
    ("empty-field-name", {**FEATURES, "": 1}),
    ("missing-id", {k: v for k, v in FEATURES.items() if k != "id"}),
    ("missing-values", {k: v for k, v in FEATURES.items() if k != "values"}),
    ("id-too-short", {**FEATURES, "id": "abc"}),
    ("id-too-long", {**FEATURES, "id": "a" * 65}),
    ("id-not-url-safe", {**FEATURES, "id": "abcdefghijklmnop+/"}),
    ("id-a-number", {**FEATURES, "id": 12345678901234567890}),
    ("schema-a-number", {**FEATURES, "schema": 1}),
    ("schema-unknown", {**FEATURES, "schema": "nope"}),
    ("version-unknown", {**FEATURES, "version": 2}),
    ("version-a-string", {**FEATURES, "version": "1"}),
    ("version-a-boolean", {**FEATURES, "version": True}),
    ("version-too-large", {**FEATURES, "version": 2**31}),
    ("window-hour-for-a-day-schema", {**FEATURES, "window": "2026-11-21T13"}),
    ("window-day-for-an-hour-schema", {**THREE, "window": "2026-11-21"}),
    ("window-no-real-day", {**FEATURES, "window": "2026-02-30"}),
    ("window-non-ascii-digit", {**FEATURES, "window": "2026-11-2\u0661"}),
    ("window-a-number", {**FEATURES, "window": 20261121}),
    ("epsilon-other", {**FEATURES, "epsilon": 2.5}),
    ("epsilon-off-by-more-than-1e-9", {**FEATURES, "epsilon": 2.000000002}),
    ("epsilon-a-string", {**FEATURES, "epsilon": "2.0"}),
    ("epsilon-a-boolean", {**FEATURES, "epsilon": True}),
    ("values-a-list", {**FEATURES, "values": [True, "macos"]}),
    ("values-unknown-attribute", {**FEATURES, "values": {"dark_mode": True, "os": "macos", "font": "big"}}),
    ("values-missing-attribute", {**FEATURES, "values": {"dark_mode": True}}),
    ("sample-carries-two", _report("one-of-three", 1, "2026-11-21", 1.5, {"flag": True, "os": "linux"})),
    ("sample-carries-none", _report("one-of-three", 1, "2026-11-21", 1.5, {})),
    ("boolean-as-1", {**FEATURES, "values": {"dark_mode": 1, "os": "macos"}}),
    ("boolean-as-string", {**FEATURES, "values": {"dark_mode": "true", "os": "macos"}}),
    ("grr-unknown-category", {**FEATURES, "values": {"dark_mode": True, "os": "MacOS"}}),
    ("grr-an-index", {**FEATURES, "values": {"dark_mode": True, "os": 1}}),
    ("oue-short", {**THREE, "values": {**THREE["values"], "lang": [0, 1]}}),
    ("oue-booleans", {**THREE, "values": {**THREE["values"], "lang": [False, True] * 4}}),
    ("oue-a-two", {**THREE, "values": {**THREE["values"], "lang": [0, 2, 0, 0, 0, 0, 0, 0]}}),
    ("oue-floats", {**THREE, "values": {**THREE["values"], "lang": [0.0, 1.0] * 4}}),
    ("duchi-two", {**MEANS, "values": {**MEANS["values"], "minutes": 2}}),
    ("duchi-a-boolean", {**MEANS, "values": {**MEANS["values"], "minutes": True}}),
    ("pm-out-of-bounds", {**MEANS, "values": {**MEANS["values"], "pages": 1e6}}),
    ("hm-a-string", {**MEANS, "values": {**MEANS["values"], "latency": "0.5"}}),
    ("histogram-a-number", _report("buckets", 1, "2026-11-21", 2.0, {"load_ms": 60, "ratio": [0, 1, 1]})),
    *((f"string-{name}", {**STRINGS, "values": {**STRINGS["values"], "home": home}}) for name, home in [
        ("a-zero", {"a": 0, "b": 0, "y": 0}),
        ("a-p", {"a": olh.P, "b": 0, "y": 0}),
        ("b-negative", {"a": 1, "b": -1, "y": 0}),
        ("b-p", {"a": 1, "b": olh.P, "y": 0}),
        ("y-g", {"a": 1, "b": 0, "y": 8}),
        ("y-negative", {"a": 1, "b": 0, "y": -1}),
        ("a-boolean", {"a": True, "b": 0, "y": 0}),
        ("b-a-float", {"a": 1, "b": 0.0, "y": 0}),
        ("y-a-string", {"a": 1, "b": 0, "y": "0"}),
        ("y-missing", {"a": 1, "b": 0}),
        ("extra-key", {"a": 1, "b": 0, "y": 0, "x": 0}),
        ("level-without-discovery", {"a": 1, "b": 0, "y": 0, "level": 0}),
        ("a-list", [1, 0, 0]),
        ("the-string-itself", "example.org"),
        ("null", None),
    ]),
    *((f"string-discover-{name}", {**DISCOVER, "values": {**DISCOVER["values"], "home": home}}) for name, home in [
        ("level-missing", {"a": 1, "b": 0, "y": 0}),
        ("level-above-the-last", {"a": 1, "b": 0, "y": 0, "level": 6}),
        ("level-negative", {"a": 1, "b": 0, "y": 0, "level": -1}),
        ("level-a-string", {"a": 1, "b": 0, "y": 0, "level": "0"}),
        ("level-a-boolean", {"a": 1, "b": 0, "y": 0, "level": False}),
        ("level-a-float", {"a": 1, "b": 0, "y": 0, "level": 1.0}),
        ("y-g", {"a": 1, "b": 0, "y": 8, "level": 1}),
    ]),
    ("string-wide-y-65536", {**WIDE, "values": {"error": {"a": 1, "b": 0, "y": 65536}}}),
]


def reports() -> JSON:
    schemas = derived_schemas()
    parsed = schemas_by_name(schemas)
    return {"schemas": schemas, "cases": [{"name": name, "report": report,
                                           "counters": run_report_counters(parsed, {"report": report})}
                                          for name, report in VALID_REPORTS]}


def report_validation() -> JSON:
    schemas = derived_schemas()
    parsed = schemas_by_name(schemas)
    return {"schemas": schemas, "cases": [{"name": name, "report": report,
                                           "field": _refused(run_invalid_report(parsed, {"report": report}), name)}
                                          for name, report in INVALID_REPORTS]}


WINDOW_OF: list[tuple[str, str]] = [
    ("2026-11-21T00:00:00+00:00", "day"), ("2026-11-21T23:59:59.999999+00:00", "day"),
    ("2026-11-22T01:30:00+02:00", "day"), ("2026-11-22T01:30:00+02:00", "hour"),
    ("2026-11-21T20:15:00-05:00", "day"), ("2026-11-21T20:15:00-05:00", "hour"),
    ("2026-11-21T13:00:00+00:00", "hour"), ("2026-11-21T13:59:59+00:00", "hour"),
    ("2028-02-29T12:00:00+00:00", "day"), ("2026-12-31T23:30:00-01:00", "hour"),
    ("1970-01-01T00:00:00+00:00", "hour"), ("2026-03-29T01:30:00+05:45", "hour"),
]
WINDOW_BOUNDS: list[tuple[str, str]] = [
    ("2026-11-21", "day"), ("2026-12-31", "day"), ("2028-02-29", "day"),
    ("2026-11-21T00", "hour"), ("2026-11-21T13", "hour"), ("2026-12-31T23", "hour"), ("2028-02-28T23", "hour"),
]
INVALID_WINDOWS: list[tuple[Any, str]] = [
    ("2026-02-29", "day"), ("2026-11-31", "day"), ("2026-13-01", "day"), ("2026-1-01", "day"), ("26-11-21", "day"),
    ("2026-11-21T13", "day"), (" 2026-11-21", "day"), ("2026-11-21", "hour"), ("2026-11-21T24", "hour"),
    ("2026-11-21T1", "hour"), ("2026-11-21 13", "hour"), ("2026-11-2\u0661", "day"), ("", "day"), (20261121, "day"),
    ("all", "day"),
]
OVERLAPPING = ["2026-11-21", "2026-11-21T00", "2026-11-21T23", "2028-02-29"]


def windows_vectors() -> JSON:
    return {
        "rollup": windows.ROLLUP,
        "window_of": [_answer({"instant": instant, "kind": kind}, "window", run_window_of) for instant, kind in WINDOW_OF],
        "bounds": [{**case, **run_window_bounds(case)} for case in ({"window": w, "kind": k} for w, k in WINDOW_BOUNDS)],
        "invalid": [_invalid_window({"window": window, "kind": kind}) for window, kind in INVALID_WINDOWS],
        "overlapping": [_answer({"window": window}, "windows", run_overlapping) for window in OVERLAPPING],
    }


def _invalid_window(case: dict[str, Any]) -> dict[str, Any]:
    if not run_invalid_window(case):
        raise AssertionError(f"window {case['window']!r} is meant to be refused, but the code accepts it")
    return case


# (name, schema, attribute, n, amounts, confidence, extra fields)
ESTIMATES: list[tuple[str, str, str, int, dict[str, int | float], float, dict[str, Any]]] = [
    ("rr", "features", "dark_mode", 1000, {"true": 600}, 0.95, {}),
    ("rr-no-hits", "features", "dark_mode", 1000, {}, 0.95, {}),
    ("rr-all-hits", "features", "dark_mode", 1000, {"true": 1000}, 0.95, {}),
    ("rr-one-report", "features", "dark_mode", 1, {"true": 1}, 0.95, {}),
    ("rr-rollup-not-memoised", "features", "dark_mode", 1000, {"true": 600}, 0.95, {"window": windows.ROLLUP}),
    ("rr-90-percent", "features", "dark_mode", 250, {"true": 101}, 0.9, {}),
    ("rr-99-percent", "features", "dark_mode", 250, {"true": 101}, 0.99, {}),
    ("grr-sparse", "features", "os", 5000, {"linux": 2400, "windows": 1800, "other": 800}, 0.95, {}),
    ("oue", "three", "lang", 2000, {"en": 700, "de": 400, "fr": 380, "es": 350, "it": 340, "pt": 330, "nl": 600,
                                    "pl": 420}, 0.95, {}),
    ("grr-large-n", "three", "os", 10_000_000, {"linux": 4_000_000, "macos": 2_000_000, "windows": 3_000_000,
                                                "other": 1_000_000}, 0.95, {}),
    ("histogram", "buckets", "load_ms", 300, {"[0, 50)": 90, "[50, 100)": 80, "[250, 1000]": 70}, 0.95, {}),
    ("duchi", "means", "minutes", 1000, {"sum": 530}, 0.95, {}),
    ("duchi-no-ones", "means", "minutes", 40, {}, 0.95, {}),
    ("pm-theory-wider", "means", "pages", 1000, {"sum": 120.5, "sumsq": 500.25}, 0.95, {}),
    ("pm-sample-wider", "means", "pages", 1000, {"sum": -80.0, "sumsq": 3000.0}, 0.95, {}),
    ("pm-one-report", "means", "pages", 1, {"sum": 2.5, "sumsq": 6.25}, 0.95, {}),
    ("hm", "means", "latency", 500, {"sum": 100.0, "sumsq": 1200.0}, 0.95, {}),
    ("hm-mean-outside-the-range", "means", "latency", 10, {"sum": 20.0, "sumsq": 45.0}, 0.95, {}),
    ("laplace", "means", "crashes", 800, {"sum": -200.0, "sumsq": 2400.0}, 0.95, {}),
    ("memoised-window", "memoised", "os", 400, {"linux": 150, "macos": 90, "windows": 100, "other": 60}, 0.95, {}),
    ("memoised-rollup", "memoised", "os", 4000, {"linux": 1500, "macos": 900, "windows": 1000, "other": 600}, 0.95,
     {"window": windows.ROLLUP, "smallest_window_n": 100}),
    ("memoised-rollup-no-window-retained", "memoised", "flag", 4000, {"true": 2500}, 0.95,
     {"window": windows.ROLLUP, "smallest_window_n": None}),
    ("olh-supports", "strings", "home", 1000, {"example.org": 400, "caf\u00e9.fr": 180, "": 120, "x" * 16: 126},
     0.95, {}),
    ("olh-wide", "strings-wide", "error", 500, {"E0001": 60, "E0039": 1}, 0.95, {}),
    ("olh-discovering-from-level-0", "strings-discover", "home", 400, {"ab.de": 150, "x": 40}, 0.95, {}),
]


WINDOW_MOMENT = datetime(2026, 11, 21, 13, 30, tzinfo=timezone.utc)  # a window estimates.json cases are in

# A schema for breakdowns of every mean mechanism by a share (estimates.json's only).
USAGE = {"name": "usage", "version": 1, "epsilon": 6.0,
         "attributes": [{"name": "crashed", "type": "boolean"},
                        {"name": "plan", "type": "categorical", "categories": ["free", "pro", "team"], "mechanism": "grr"},
                        {"name": "minutes", "type": "numeric", "range": [0, 120], "mechanism": "duchi"},
                        {"name": "pages", "type": "numeric", "range": [1, 50], "mechanism": "pm"},
                        {"name": "latency", "type": "numeric", "range": [-5, 5.5], "mechanism": "hm"},
                        {"name": "load", "type": "numeric", "range": [0, 10], "mechanism": "laplace"}]}


def _sums(n: int, of: dict[str, int | float], by: dict[str, int], cells: dict[str, dict[str, int | float]]
          ) -> dict[str, Any]:
    return {"n": n, "of": of, "by": by, "cells": cells}


_LANG_BY_LOAD = {lang: {"[0, 100)": low, "[100, 1000]": high} for lang, low, high in zip(
    LANGUAGES, (668, 604, 636, 614, 640, 635, 581, 630), (570, 563, 577, 535, 556, 563, 550, 535))}
# (name, schema, of, by, sums, confidence, extra fields); counts as a simulated window gave them.
BREAKDOWNS: list[tuple[str, str, str, str, dict[str, Any], float, dict[str, Any]]] = [
    ("rr-by-grr", "usage", "crashed", "plan", _sums(10_000, {"true": 3125}, {"free": 4004, "pro": 3053, "team": 2943},
                                                    {"true": {"free": 1225, "pro": 959, "team": 941}}), 0.95, {}),
    ("grr-by-rr", "usage", "plan", "crashed", _sums(8000, {"free": 3337, "pro": 2584, "team": 2079}, {"true": 2571},
                                                    {"free": {"true": 1039}, "pro": {"true": 828},
                                                     "team": {"true": 704}}), 0.95, {}),
    ("grr-by-rr-90-percent", "usage", "plan", "crashed", _sums(8000, {"free": 3337, "pro": 2584, "team": 2079},
                                                               {"true": 2571}, {"free": {"true": 1039}, "pro": {"true": 828},
                                                                                "team": {"true": 704}}), 0.9, {}),
    ("rr-by-grr-rollup-not-memoised", "usage", "crashed", "plan",
     _sums(30_000, {"true": 9400}, {"free": 12_000, "pro": 9100, "team": 8900},
           {"true": {"free": 3700, "pro": 2900, "team": 2800}}), 0.95, {"window": windows.ROLLUP}),
    ("duchi-by-grr", "usage", "minutes", "plan", _sums(5000, {"sum": 2061}, {"free": 1918, "pro": 1720, "team": 1362},
                                                       {"sum": {"free": 683, "pro": 750, "team": 628}}), 0.95, {}),
    ("pm-by-rr", "usage", "pages", "crashed", _sums(3000, {"sum": -608.08, "sumsq": 13150.65}, {"true": 1083},
                                                    {"sum": {"true": -360.68}, "sumsq": {"true": 4968.84}}), 0.95, {}),
    ("hm-by-grr", "usage", "latency", "plan",
     _sums(4000, {"sum": 219.19, "sumsq": 18202.25}, {"free": 1552, "pro": 1330, "team": 1118},
           {"sum": {"free": 200.05, "pro": 3.9, "team": 15.23},
            "sumsq": {"free": 6885.87, "pro": 5930.67, "team": 5385.71}}), 0.95, {}),
    ("laplace-by-rr", "usage", "load", "crashed", _sums(2000, {"sum": -484.53, "sumsq": 17140.03}, {"true": 816},
                                                        {"sum": {"true": -54.63}, "sumsq": {"true": 6321.7}}), 0.95, {}),
    # Almost every bit 1: the means lie above the range; estimate_clipped and the intervals keep to it.
    ("duchi-mean-outside-the-range", "usage", "minutes", "plan",
     _sums(400, {"sum": 396}, {"free": 100, "pro": 100, "team": 200}, {"sum": {"free": 98, "pro": 99, "team": 199}}),
     0.95, {}),
    # 'pro' is reported as often as devices none of which hold it would report it (n q = 211.9):
    # w-bar is about 0, A < 0.
    ("by-share-not-distinct-from-0", "usage", "crashed", "plan",
     _sums(1000, {"true": 300}, {"free": 550, "pro": 212, "team": 238}, {"true": {"free": 200, "pro": 60, "team": 40}}),
     0.95, {}),
    ("too-few-reports", "usage", "crashed", "plan", _sums(1, {"true": 1}, {"pro": 1}, {"true": {"pro": 1}}), 0.95, {}),
    ("no-reports", "usage", "minutes", "crashed", _sums(0, {}, {}, {}), 0.95, {"window": windows.ROLLUP}),
    ("memoised-window", "memoised", "flag", "os",
     _sums(6000, {"true": 2895}, {"linux": 1600, "macos": 1530, "windows": 1511, "other": 1359},
           {"true": {"linux": 775, "macos": 721, "windows": 767, "other": 632}}), 0.95, {}),
    ("memoised-rollup", "memoised", "flag", "os",
     _sums(18_000, {"true": 8700}, {"linux": 4800, "macos": 4600, "windows": 4500, "other": 4100},
           {"true": {"linux": 2300, "macos": 2200, "windows": 2300, "other": 1900}}), 0.95, {"window": windows.ROLLUP}),
    ("memoised-oue-by-histogram", "memoised", "lang", "load_ms",
     _sums(3000, {"en": 1238, "de": 1167, "fr": 1213, "es": 1149, "it": 1196, "pt": 1198, "nl": 1131, "pl": 1165},
           {"[0, 100)": 1600, "[100, 1000]": 1400}, _LANG_BY_LOAD), 0.95, {}),
]


def estimates_vectors() -> JSON:
    schemas = derived_schemas()
    parsed = schemas_by_name(schemas)
    cases = []
    for name, schema, attribute, n, amounts, confidence, fields in ESTIMATES:
        extra = dict(fields)
        window = extra.pop("window", windows.window_of(WINDOW_MOMENT, parsed[schema].window))
        case = {"name": name, "schema": schema, "attribute": attribute, "window": window, "n": n,
                "amounts": amounts, "confidence": confidence, **extra}
        cases.append({**case, "estimates": run_estimates(parsed[schema], case)})
    schemas.append(parse_schema(USAGE).to_dict())
    parsed = schemas_by_name(schemas)
    rows = []
    for name, schema, of, by, sums, confidence, fields in BREAKDOWNS:
        window = fields.get("window", windows.window_of(WINDOW_MOMENT, parsed[schema].window))
        case = {"name": name, "schema": schema, "of": of, "by": by, "window": window, "confidence": confidence,
                "sums": sums}
        rows.append({**case, "rows": run_breakdown(parsed[schema], case)})
    return {"tolerance": TOLERANCE, "schemas": schemas, "cases": cases, "breakdowns": rows}


# The aggregator's keys in relay.json: the usable one second, after one of a KEM a client does not
# know (its public key of another length, skipped by its length prefix).
RELAY_KEY_ID = 7
RELAY_PRIVATE_KEY = stream("relay receiver key", 32)
RELAY_OTHER_KEM = bytes([3]) + (0x0010).to_bytes(2, "big") + stream("relay P-256 key", 65) + bytes.fromhex("000400010001")
# Reports of reports.json, one of each kind of schema, each carried alone through the relay.
RELAY_REPORTS = ["boolean-and-grr", "oue-bits", "sample-carries-one", "means", "memoised", "id-64-characters",
                 "string-supports", "string-discover-level-0-counted"]
# A schema of its own whose reports take more than one PAD_UNIT (OUE: 3 characters a bit), and one
# of its reports; and the shape of one whose padded requests pass 64 KiB (too big to list here).
RELAY_WIDE = {"name": "wide", "version": 1, "epsilon": 2.0,
              "attributes": [{"name": "page", "type": "categorical", "mechanism": "oue",
                              "categories": [f"p{j}" for j in range(400)]}]}
RELAY_WIDE_REPORT = _report("wide", 1, "2026-11-21", 2.0, {"page": [int(j % 7 == 0) for j in range(400)]})
RELAY_TOO_BIG = {"attributes": 21, "mechanism": "oue", "categories": 1024, "epsilon": 2.0}


def _too_big_schema() -> Schema:
    """The schema RELAY_TOO_BIG describes: attributes a0, a1, ... of categories "0", "1", ..."""
    shape = RELAY_TOO_BIG
    return parse_schema({"name": "too-big", "version": 1, "epsilon": shape["epsilon"], "attributes": [
        {"name": f"a{i}", "type": "categorical", "mechanism": shape["mechanism"],
         "categories": [str(j) for j in range(shape["categories"])]} for i in range(shape["attributes"])]})


def relay_vectors() -> JSON:
    schemas = [*derived_schemas(), parse_schema(RELAY_WIDE).to_dict()]
    parsed = schemas_by_name(schemas)
    config = ohttp.KeyConfig(RELAY_KEY_ID, ohttp.public_key_of(RELAY_PRIVATE_KEY))
    key_configs = (len(RELAY_OTHER_KEM).to_bytes(2, "big") + RELAY_OTHER_KEM + ohttp.encode_key_configs([config]))
    reports = {**dict(VALID_REPORTS), "wide": RELAY_WIDE_REPORT}
    cases = []
    for name in [*RELAY_REPORTS, "wide"]:
        validate_report(reports[name], _lookup(parsed))
        case = {"name": name, "schema": reports[name]["schema"], "report": reports[name],
                "key_configs": key_configs.hex(), "receiver_private_key": RELAY_PRIVATE_KEY.hex(),
                "ephemeral_private_key": stream(f"relay ephemeral {name}", 32).hex()}
        cases.append({**case, **run_relay_request(parsed[case["schema"]], case)})
    sizes = [{"name": name, "schema": name, **run_relay_size(schema)} for name, schema in parsed.items()]
    return {"schemas": schemas, "cases": cases, "sizes": sizes,
            "too_big": {**RELAY_TOO_BIG, **run_relay_size(_too_big_schema())}}


FILES: dict[str, Callable[[], JSON]] = {
    "randomness.json": randomness,
    "schemas.json": schemas,
    "invalid_schemas.json": invalid_schemas,
    "breakdown_schemas.json": breakdown_schemas,
    "reports.json": reports,
    "report_validation.json": report_validation,
    "windows.json": windows_vectors,
    "estimates.json": estimates_vectors,
    "relay.json": relay_vectors,
}


# --- writing ------------------------------------------------------------------------------------

WIDTH = 118


def render(value: JSON, indent: int = 0, key: str = "") -> str:
    """JSON, one item a line, except that an object or array that fits on the rest of a line
    stays on one (ASCII only, no NaN or infinity: any JSON parser reads it)."""
    flat = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(", ", ": "))
    if len(flat) + len(key) + indent <= WIDTH or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = " " * (indent + 1)
    if isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + _fill([render(v) for v in value], inner) + "\n" + " " * indent + "]"
    if isinstance(value, dict):
        keys = {k: f"{json.dumps(k, ensure_ascii=True)}: " for k in value}
        items = [f"{inner}{keys[k]}{render(v, indent + 1, keys[k])}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(inner + render(v, indent + 1) for v in value) + "\n" + " " * indent + "]"


def _fill(items: list[str], inner: str) -> str:
    """Scalars, as many a line as fit."""
    lines: list[list[str]] = [[]]
    for item in items:
        if lines[-1] and len(inner) + len(", ".join([*lines[-1], item])) + 1 > WIDTH:
            lines.append([])
        lines[-1].append(item)
    return ",\n".join(inner + ", ".join(line) for line in lines)


def texts() -> dict[str, str]:
    """Each vector file's text, as the code makes it now."""
    return {name: render(build()) + "\n" for name, build in FILES.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs from what the code makes")
    parser.add_argument("--folder", type=Path, default=FOLDER, help="where the files are (default: this folder)")
    args = parser.parse_args(argv)
    differ = []
    for name, text in texts().items():
        path = args.folder / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                differ.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if differ:
        print(f"differ from what the code makes: {', '.join(differ)} (regenerate with tests/vectors/generate.py "
              "if the change of behaviour is meant)", file=sys.stderr)
        return 1
    print("vectors match the code" if args.check else f"wrote {len(FILES)} files to {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
