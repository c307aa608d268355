"""Reports: randomising a record on the device, and validating a report on the aggregator.

Both directions live in this one module so that the client and the server can never disagree on
what a valid report is. A report is the only thing that ever leaves a device::

    {"id": "b1c2...", "schema": "app-usage", "version": 1, "window": "2026-11-21",
     "epsilon": 2.0, "values": {"dark_mode": true, "os": "macos"}}

Error messages about a *record* never repeat the value the app passed: it may be a true answer.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import datetime
from collections.abc import Mapping  # typing.Mapping's isinstance() is ~10x slower
from typing import Any, Callable, Union

from . import windows
from .mechanisms import SYSTEM, RandomSource, WireError
from .mechanisms.randomness import HmacStream, randbelow
from .checks import TOLERANCE, is_number
from .schema import MAX_EPSILON, MAX_VERSION, Attribute, Schema, is_version, parse_schema

REPORT_FIELDS = ("id", "schema", "version", "window", "epsilon", "values")
DEVICE_SECRET_BYTES = 32
# Domain separation of the permanent responses' HMAC messages: a new derivation is a new tag.
PERMANENT_TAG = "ldp-telemetry/permanent-response/v1"
_REPORT_FIELD_SET = frozenset(REPORT_FIELDS)
ID_RE = re.compile(r"[A-Za-z0-9_-]{16,64}")
# Distinct windows one batch may name. A device sends one report per window, so its backlog is a
# few windows (a month of day windows, a day and more of hour windows): a batch naming more is
# refused, so one request cannot make the server re-estimate hundreds of windows.
MAX_BATCH_WINDOWS = 32

SchemaLookup = Callable[[str, int], Union[Schema, None]]


class RecordError(ValueError):
    """A record cannot be randomised as given. ``field`` names where: the attribute (the app's key),
    ``record`` when the record is no dict, ``window`` or ``device_secret`` for those arguments of
    :func:`randomize`; ``str()`` says what is wrong for people, never the value (it may be a true
    answer)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class ReportError(ValueError):
    """A report is invalid; ``field`` names where (``values.os``, ``window``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Report:
    """A validated report."""

    id: str
    schema: Schema
    window: str
    values: dict[str, Any]


def new_report_id(source: RandomSource = SYSTEM) -> str:
    """A fresh random id (32 url-safe characters: 24 bytes of ``source``, base64url) that makes
    retries idempotent."""
    return base64.urlsafe_b64encode(source.take(24)).decode("ascii")


def validate_record(schema: Schema, record: Any) -> dict[str, int | bool | float]:
    """Check a record of true values against ``schema``.

    Returns each attribute's true value as the encoders take it (its type's ``prepare``: a bool,
    a category index, a histogram's bucket index, or a numeric attribute's number clipped to its
    range, as a float).
    Raises :class:`RecordError` (a ``ValueError`` whose ``field`` names the attribute) for an
    unknown or missing attribute, a wrong type, an unknown category.
    """
    if not isinstance(record, Mapping):
        raise RecordError("record", f"a record must be a dict of attribute values, got {type(record).__name__}")
    if len(record) != len(schema.by_name) or any(k not in schema.by_name for k in record):
        unknown = sorted(str(k) for k in record if k not in schema.by_name)
        if unknown:
            raise RecordError(unknown[0][:80], f"unknown attribute(s) for schema {schema.name!r}: {', '.join(unknown)}")
        missing = [n for n in schema.by_name if n not in record]
        raise RecordError(missing[0], f"missing attribute(s) for schema {schema.name!r}: {', '.join(missing)}")
    truth: dict[str, int | bool | float] = {}
    for attribute in schema.attributes:
        try:
            truth[attribute.name] = attribute.kind.prepare(attribute, record[attribute.name])
        except ValueError as exc:
            raise RecordError(attribute.name, f"{attribute.name} {exc}") from None
    return truth


def randomize(schema: Schema | Mapping[str, Any], record: Mapping[str, Any], *,
              window: str | datetime | None = None, device_secret: bytes | None = None,
              source: RandomSource = SYSTEM) -> dict[str, Any]:
    """Randomise a record of true values into a report, on the device, with the OS CSPRNG.

    ``schema`` is a :class:`Schema` or the schema JSON as the server serves it. ``window`` is a
    window name or a time in it (default: now, UTC). Under ``split: "sample"`` one attribute,
    chosen uniformly, is randomised with the whole ε; otherwise every attribute is, with its own ε.
    No ledger here: limiting reports per window is :class:`TelemetryClient`'s job. ``source`` gives
    the coins: the OS CSPRNG, unless a test vector fixes the bytes. A memoised schema
    (``epsilon_permanent``) needs the device's 32-byte ``device_secret``, from which each value's
    permanent response is derived.
    """
    schema = parse_schema(schema)
    check_device_secret(schema, device_secret)
    truth = validate_record(schema, record)
    if window is None or isinstance(window, datetime):
        window_name = windows.current_window(schema.window, window)
    else:
        try:
            windows.window_start(window, schema.window)
        except ValueError as exc:
            raise RecordError("window", str(exc)) from None
        window_name = window
    return encode_report(schema, truth, window_name, source, device_secret)


def check_device_secret(schema: Schema, device_secret: bytes | None) -> None:
    """:class:`RecordError` unless ``device_secret`` fits ``schema``: 32 bytes for a memoised one."""
    if schema.epsilon_permanent is None:
        return
    if not isinstance(device_secret, bytes) or len(device_secret) != DEVICE_SECRET_BYTES:
        raise RecordError("device_secret", f"schema {schema.name!r} is memoised (epsilon_permanent): randomize() "
                                           f"needs the device's secret, device_secret=<{DEVICE_SECRET_BYTES} bytes>")


def permanent_source(device_secret: bytes, schema: Schema, attribute: Attribute, truth: Any) -> HmacStream:
    """The coins of ``attribute``'s permanent response to ``truth`` on this device.

    HMAC-SHA256 keyed by the device's secret over the schema's name, the attribute's derived
    definition and the true value (JSON, with a domain tag): the same value always gets the same
    response, a changed attribute or another value a new one, and nothing is stored.
    """
    return HmacStream(device_secret, permanent_message(schema, attribute, truth))


def permanent_message(schema: Schema, attribute: Attribute, truth: Any) -> bytes:
    """The HMAC message of :func:`permanent_source`: compact JSON (sorted keys, UTF-8) of the domain
    tag, the schema's name, the attribute's derived definition and the true value."""
    message = json.dumps([PERMANENT_TAG, schema.name, attribute.to_dict(), truth], separators=(",", ":"),
                         sort_keys=True)
    return message.encode("utf-8")


def encode_report(schema: Schema, truth: Mapping[str, int | bool | float], window: str,
                  source: RandomSource = SYSTEM, device_secret: bytes | None = None) -> dict[str, Any]:
    """The randomised report of ``truth`` (as :func:`validate_record` returns it) in ``window``.

    The inputs are trusted: :func:`randomize` checks them first. The bytes of ``source`` are
    used in this order: the id (24 bytes); under ``split: "sample"`` the index of the one
    attribute carried (uniform, with the whole ε); then each carried attribute's coins, in the
    schema's order.
    """
    report_id = new_report_id(source)
    attributes = schema.attributes
    if schema.split == "sample":
        attributes = (attributes[randbelow(len(attributes), source)],)
    return {
        "id": report_id,
        "schema": schema.name,
        "version": schema.version,
        "window": window,
        "epsilon": schema.epsilon,
        "values": {a.name: a.mech.encode(a, truth[a.name], source, _permanent_coins(device_secret, schema, a,
                                                                                    truth[a.name]))
                   for a in attributes},
    }


def _permanent_coins(device_secret: bytes | None, schema: Schema, attribute: Attribute,
                     truth: Any) -> HmacStream | None:
    """:func:`permanent_source` for a memoised attribute; None for another."""
    if attribute.memo is None:
        return None
    if device_secret is None:  # randomize() checks first; a direct caller of encode_report may not
        raise RecordError("device_secret", f"schema {schema.name!r} is memoised: its reports need the device's secret")
    return permanent_source(device_secret, schema, attribute, truth)


def max_report_bytes(schema: Schema) -> int:
    """The most characters the JSON text of one report of ``schema`` can take (default
    separators, the longest id): the fields, plus every attribute's widest wire value under
    ``split: "equal"``, or the widest one attribute under ``"sample"``."""
    skeleton = {"id": "x" * 64, "schema": schema.name, "version": schema.version, "window": "0000-00-00T00",
                "epsilon": schema.epsilon, "values": {}}
    # Each attribute adds its name, ": " and its wire value, and ", " between it and the next.
    widths = [len(json.dumps(a.name)) + 4 + a.mech.wire_bytes(a) for a in schema.attributes]
    return len(json.dumps(skeleton)) + (max(widths) if schema.split == "sample" else sum(widths))


def validate_report(obj: Any, schemas: Schema | SchemaLookup) -> Report:
    """Validate one report exactly as DESIGN.md specifies it; raise :class:`ReportError` if not.

    ``schemas`` is the schema the report must belong to, or a lookup ``(name, version) ->
    Schema | None``. Time bounds on the window (clock skew, retention) are the server's policy and
    are checked there; the window's form is checked here.
    """
    if not isinstance(obj, Mapping):
        raise ReportError("report", "must be a JSON object")
    if obj.keys() != _REPORT_FIELD_SET:  # one set comparison in the common, well-formed case
        unknown = sorted(str(k) for k in obj if k not in _REPORT_FIELD_SET)
        if unknown:
            # The field is the client's key: bounded, and never empty (an empty key is "").
            raise ReportError(unknown[0][:80] or '""', f"unknown field (a report has only {', '.join(REPORT_FIELDS)})")
        missing = next(field for field in REPORT_FIELDS if field not in obj)
        raise ReportError(missing, "is required")
    report_id = obj["id"]
    if not isinstance(report_id, str) or not ID_RE.fullmatch(report_id):
        raise ReportError("id", "must be 16 to 64 url-safe characters (A-Z, a-z, 0-9, _ and -)")
    name, version = obj["schema"], obj["version"]
    if not isinstance(name, str):
        raise ReportError("schema", "must be a schema name (a string)")
    if not is_version(version):
        raise ReportError("version", f"must be an integer from 1 to {MAX_VERSION}")
    schema = _resolve(schemas, name, version)
    try:
        windows.window_start(obj["window"], schema.window)
    except ValueError as exc:
        raise ReportError("window", str(exc)) from None
    epsilon = obj["epsilon"]
    # In range before subtracting: a JSON integer can be too large for a float.
    if not is_number(epsilon) or not 0 < epsilon <= MAX_EPSILON or abs(epsilon - schema.epsilon) > TOLERANCE:
        raise ReportError("epsilon", f"must equal the schema's total epsilon {schema.epsilon}")
    values = obj["values"]
    check_values(schema, values)
    return Report(report_id, schema, obj["window"], dict(values))


def check_values(schema: Schema, values: Any) -> None:
    """Raise :class:`ReportError` unless ``values`` (a report's ``values``, decoded) are valid for
    ``schema``: a JSON object of its attributes, each once (every one under ``split: "equal"``,
    exactly one under ``"sample"``), each a wire value its mechanism takes."""
    if not isinstance(values, Mapping):
        raise ReportError("values", "must be a JSON object of attribute values")
    for key in values:
        if key not in schema.by_name:
            raise ReportError(f"values.{key}"[:80], f"unknown attribute for schema {schema.name!r} version {schema.version}")
    if schema.split == "sample":
        if len(values) != 1:
            raise ReportError("values", "must carry exactly one attribute under split 'sample'")
    else:
        if len(values) != len(schema.by_name):
            absent = [n for n in schema.by_name if n not in values]
            raise ReportError(f"values.{absent[0]}", "is required (the schema's split is 'equal')")
    for key, reported in values.items():
        try:
            schema.by_name[key].mech.check(schema.by_name[key], reported)
        except WireError as exc:
            raise ReportError(f"values.{key}", str(exc)) from None


def _resolve(schemas: Schema | SchemaLookup, name: str, version: int) -> Schema:
    if isinstance(schemas, Schema):
        if (name, version) != (schemas.name, schemas.version):
            raise ReportError("schema", f"must be {schemas.name!r} version {schemas.version}")
        return schemas
    schema = schemas(name, version)
    if schema is None:
        raise ReportError("schema", f"no published schema {name[:70]!r} version {version}")
    return schema
