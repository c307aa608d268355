"""The HTTP API, blueprint ``/api/v1`` (DESIGN.md, "HTTP API")."""

from __future__ import annotations

import csv
import io
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from ..shared.schema import Schema, SchemaError
from ..shared.windows import ROLLUP, window_start
from . import context, estimation
from .auth import require_admin, require_reader
from .catalog import version_number
from .body import json_object
from .errors import ApiError, detail
from .ingest import parse_batch, store_batch, window_policy
from .openapi import openapi_document

bp = Blueprint("api", __name__, url_prefix="/api/v1")

ESTIMATE_COLUMNS = ("window", "attribute", "value", "estimate", "estimate_clipped", "ci_low", "ci_high", "n",
                    "epsilon", "computed_at")
ESTIMATE_PARAMETERS = ("schema", "version", "attribute", "since", "until", "format")


# -- schemas -----------------------------------------------------------------------------------

@bp.post("/schemas")
def publish_schema() -> tuple[Response, int]:
    require_admin()
    raw = json_object()
    try:
        status, derived = context.catalog().publish(raw, context.iso(context.now()))
    except SchemaError as exc:
        raise ApiError(400, f"invalid schema: {exc}", [detail(exc.field, str(exc))]) from None
    if status == "conflict":
        raise ApiError(409, f"schema {derived['name']} version {derived['version']} is already published with "
                            "other content; publish the change as a new version",
                       [detail("version", "already published with other content")])
    return jsonify(derived), 201 if status == "created" else 200


@bp.get("/schemas")
def list_schemas() -> Response:
    return jsonify({"schemas": context.store().latest_schemas()})


@bp.get("/schemas/<name>")
@bp.get("/schemas/<name>/<version>")
def get_schema(name: str, version: str | None = None) -> Response:
    return jsonify(_published(name, version).to_dict())


def _published(name: str, version: str | None) -> Schema:
    """The schema, or a 404 that says what is missing."""
    number = version_number(version) if version is not None else None
    schema = context.catalog().schema(name, number) if number != 0 else None
    if schema is None:
        what = f"schema {name[:64]!r}" + (f" version {version[:12]}" if version is not None else "")
        raise ApiError(404, f"no published {what}", [detail("schema" if version is None else "version", "not found")])
    return schema


# -- reports -----------------------------------------------------------------------------------

@bp.post("/reports")
def post_reports() -> tuple[Response, int]:
    metrics = context.metrics()
    try:
        reports, window_ends = parse_batch(json_object(), context.catalog(), window_policy(current_app),
                                           current_app.config["LDP_MAX_BATCH"])
    except ApiError as exc:
        metrics.rejected_batches.inc()
        metrics.rejected.inc(len({d["index"] for d in exc.details if "index" in d}))
        raise
    outcome = store_batch(context.store(), reports, window_ends)
    metrics.accepted.inc(outcome.accepted)
    metrics.duplicates.inc(outcome.duplicates)
    metrics.batch_size.observe(len(reports))
    return jsonify({"accepted": outcome.accepted, "duplicates": outcome.duplicates}), 202


# -- estimates ---------------------------------------------------------------------------------

@bp.post("/estimates/refresh")
def refresh_estimates() -> Response:
    require_admin()
    result = estimation.refresh(current_app)
    return jsonify({"written": result.written, "windows": result.windows})


@bp.get("/estimates")
def get_estimates() -> Response:
    require_reader()
    query = _estimates_query()
    schema = _published(query["schema"], query.get("version"))
    attribute = query.get("attribute")
    if attribute is not None and attribute not in schema.attribute_names:
        raise ApiError(404, f"schema {schema.name} version {schema.version} has no attribute {attribute[:64]!r}",
                       [detail("attribute", "not found")])
    for bound in ("since", "until"):
        if bound in query:
            try:
                window_start(query[bound], schema.window)
            except ValueError as exc:
                raise ApiError(400, f"{bound} must be a {schema.window} window", [detail(bound, str(exc))]) from None
    if "since" in query and "until" in query and query["since"] > query["until"]:  # window names sort in time
        raise ApiError(400, f"since ({query['since']}) is after until ({query['until']}): no window is in that range",
                       [detail("since", "after until")])
    rows = context.store().estimates(schema.name, schema.version, attribute, query.get("since"), query.get("until"))
    estimates = [_estimate(schema, row) for row in _in_schema_order(schema, rows)]
    if query.get("format", "json") == "csv":
        return _csv(estimates)
    # The level the intervals shown were computed at: after a change of LDP_CONFIDENCE the
    # stored ones keep the old level until the next refresh.
    confidence = context.store().estimates_confidence() if rows else None
    return jsonify({"schema": schema.name, "version": schema.version,
                    "confidence": confidence or current_app.config["LDP_CONFIDENCE"], "estimates": estimates})


def _estimates_query() -> dict[str, str]:
    unknown = sorted(k for k in request.args if k not in ESTIMATE_PARAMETERS)
    if unknown:
        raise ApiError(400, f"unknown query parameter {unknown[0][:40]!r}; known: {', '.join(ESTIMATE_PARAMETERS)}",
                       [detail(unknown[0][:40], "unknown query parameter")])
    query = {}
    for name in request.args:
        values = request.args.getlist(name)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {name} is given more than once", [detail(name, "repeated")])
        query[name] = values[0]
    if "schema" not in query:
        raise ApiError(400, "the schema query parameter is required: /api/v1/estimates?schema=NAME",
                       [detail("schema", "is required")])
    if "version" in query and not (query["version"].isascii() and query["version"].isdigit()):
        raise ApiError(400, "version must be a positive integer", [detail("version", "must be a positive integer")])
    if query.get("format", "json") not in ("json", "csv"):
        raise ApiError(400, "format must be json or csv", [detail("format", "must be json or csv")])
    return query


def _in_schema_order(schema: Schema, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Windows in time order with the rollup last; attributes and values in the schema's order."""
    position = {(a.name, key): (i, j) for i, a in enumerate(schema.attributes) for j, key in enumerate(a.keys)}
    return sorted(rows, key=lambda r: (r["window"] == ROLLUP, r["window"],
                                       position[(r["attribute"], r["value"])]))


def _estimate(schema: Schema, row: dict[str, Any]) -> dict[str, Any]:
    value = schema.attribute(row["attribute"]).value_of(row["value"])
    return {column: value if column == "value" else row[column] for column in ESTIMATE_COLUMNS}


def _csv(estimates: list[dict[str, Any]]) -> Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ESTIMATE_COLUMNS)
    for e in estimates:
        writer.writerow(["true" if e[c] is True else e[c] for c in ESTIMATE_COLUMNS])
    return Response(out.getvalue(), mimetype="text/csv")


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document())
