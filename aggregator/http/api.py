"""The HTTP API, blueprint ``/api/v1`` (DESIGN.md, "HTTP API")."""

from __future__ import annotations

import csv
import io
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, request, url_for
from werkzeug.exceptions import RequestEntityTooLarge

from ...shared import ohttp
from ...shared.checks import parse_digits
from ...shared.schema import VERSION_DIGITS, Schema, SchemaError
from .. import context
from ..questions import breakdowns, candidates, discovery
from .. import jobs
from ..estimation import breakdowns as breakdown_rows, crowds, readout, refresh
from ..auth import identified_reader, require_admin, require_reader, require_relay
from ..catalog import TooManyCells, version_number
from ..cells import Limit
from .body import json_body, json_object, read_body, report_batch
from . import gateway
from .headers import cacheable
from .. import ohttp_keys
from ..errors import ApiError, detail, refuse_unknown
from ..ingest.batch import store_batch, window_policy
from .openapi import openapi_document
from ..store import EstimateRow, ReportRow

bp = Blueprint("api", __name__, url_prefix="/api/v1")

# A stored estimate's columns the API shows, then each row's relay fields (:mod:`..estimation.crowds`).
STORED_ESTIMATE_COLUMNS = ("window", "attribute", "value", "estimate", "estimate_clipped", "ci_low", "ci_high", "n",
                           "epsilon", "computed_at")
ESTIMATE_COLUMNS = STORED_ESTIMATE_COLUMNS + crowds.FIELDS
# What makes a spreadsheet read a cell as a formula (OWASP, "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@")
# Rows of one page for a caller without the read or admin token, whatever its ``limit``: about 2 MB
# of JSON. The answer waits whole in the worker until the client reads it (granian's RSGI has no
# backpressure), so this is what one connection that never reads can make a worker hold; at
# 100,000 rows (20 MB) thirty such connections took a worker from 160 to 900 MB. A shorter page
# keeps the contract: at most ``limit`` rows, and a ``next`` cursor when there are more.
ANONYMOUS_ROWS = readout.DEFAULT_LIMIT
ESTIMATE_PARAMETERS = ("schema", "version", "attribute", "since", "until", "limit", "next", "format")
BREAKDOWN_COLUMNS = ("window", "of", "value", "by", "by_value", "estimate", "estimate_clipped", "ci_low", "ci_high",
                     "by_share", "n", "reason", "computed_at") + crowds.FIELDS
BREAKDOWN_PARAMETERS = ("schema", "version", "of", "by", "since", "until", "limit", "next", "format")


# -- schemas -----------------------------------------------------------------------------------

@bp.post("/schemas")
def publish_schema() -> tuple[Response, int]:
    require_admin()
    raw = json_object()
    try:
        status, derived = context.catalog().publish(raw, context.iso(context.now()), Limit.of(current_app.config))
    except SchemaError as exc:
        raise ApiError(400, f"invalid schema: {exc}", [detail(exc.field, str(exc))]) from None
    except TooManyCells as exc:
        raise ApiError(400, str(exc), [detail("attributes", "more cells than LDP_MAX_CELLS")]) from None
    if status == "conflict":
        raise ApiError(409, f"schema {derived['name']} version {derived['version']} is already published with "
                            "other content; publish the change as a new version",
                       [detail("version", "already published with other content")])
    return jsonify(derived), 201 if status == "created" else 200


@bp.get("/schemas")
def list_schemas() -> Response:
    return jsonify({"schemas": context.store().run_tx("latest_schemas", lambda tx: tx.latest_schemas(), write=False)})


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


@bp.get("/schemas/<name>/<version>/candidates")
def get_candidates(name: str, version: str) -> Response:
    """The candidate strings of a schema's string attributes (DESIGN.md, "Candidates"): each with
    its source, its fingerprint, the candidates it collides with, and when it was added. At most
    the schema's own limits (10,000 candidates an attribute), whoever asks."""
    require_reader()
    refuse_unknown(request.args, ("attribute",), "query parameter")
    schema = _published(name, version)
    attribute = request.args.get("attribute")
    if attribute is not None and attribute not in schema.attribute_names:
        raise ApiError(404, f"schema {schema.name} version {schema.version} has no attribute {attribute[:64]!r}",
                       [detail("attribute", "not found")])
    stored, published_at = context.store().run_tx("candidates", lambda tx: (
        tx.candidates(schema.name, schema.version), tx.published_at(schema.name, schema.version)), write=False)
    rows = candidates.listing(schema, stored, published_at, attribute)
    return jsonify({"schema": schema.name, "version": schema.version, "candidates": rows})


@bp.get("/schemas/<name>/<version>/breakdowns")
def get_breakdowns(name: str, version: str) -> Response:
    """The schema version's breakdowns (DESIGN.md, "Breakdowns"), listed and added, each with its
    source and when it was added: the served schema never carries them."""
    require_reader()
    refuse_unknown(request.args, (), "query parameter")
    schema = _published(name, version)
    stored = context.store().run_tx("breakdowns", lambda tx: tx.breakdowns(schema.name, schema.version), write=False)
    return jsonify({"schema": schema.name, "version": schema.version, "breakdowns": breakdowns.listing(stored)})


@bp.post("/schemas/<name>/<version>/breakdowns")
def add_breakdown(name: str, version: str) -> tuple[Response, int]:
    """Add a breakdown to a published version (DESIGN.md, "Breakdowns"): its sums are back-filled
    from the retained reports by a job, which is asked to run at once. 202 when new, 200 if it was
    there."""
    require_admin()
    schema = _published(name, version)
    body = json_object()
    try:
        new = breakdowns.add_breakdown(context.catalog(), schema.name, schema.version, body,
                                       limit=Limit.of(current_app.config), added_at=context.iso(context.now()))
    except breakdowns.BreakdownError as exc:
        raise ApiError(exc.status, str(exc), [detail(exc.field, str(exc))]) from None
    if new:
        jobs.soon(current_app, "backfill")
    return jsonify({"added": new}), 202 if new else 200


@bp.post("/schemas/<name>/<version>/candidates")
def add_candidates(name: str, version: str) -> tuple[Response, int]:
    """Add strings to estimate (DESIGN.md, "Candidates"): their counters are back-filled from the
    retained reports by a job, which is asked to run at once. 202 with how many were new."""
    require_admin()
    schema = _published(name, version)
    body = json_object()
    refuse_unknown(body, ("attribute", "candidates"), "field")
    for field, kind in (("attribute", str), ("candidates", list)):
        if not isinstance(body.get(field), kind):
            what = "a string" if kind is str else "a list of strings"
            raise ApiError(400, f"{field} must be {what}", [detail(field, f"must be {what}")])
    try:
        new = candidates.add_candidates(context.catalog(), schema.name, schema.version, body["attribute"],
                                        body["candidates"], source="added", limit=Limit.of(current_app.config),
                                        added_at=context.iso(context.now()))
    except candidates.CandidateError as exc:
        raise ApiError(exc.status, str(exc), [detail(exc.field, str(exc))]) from None
    if new:
        jobs.soon(current_app, "backfill")
    return jsonify({"added": new}), 202


@bp.post("/schemas/<name>/<version>/discover")
def discover_now(name: str, version: str) -> Response:
    """Run discovery over the schema version's retained reports now rather than at the hourly job
    (bounded as the job is); the strings found become ``discovered`` candidates, back-filled by
    the job, which is asked to run at once. 200 with how many were new, and how many strings found
    were left out for want of room (the candidate limit or ``LDP_MAX_CELLS``)."""
    require_admin()
    schema = _published(name, version)
    if not any(a.discover for a in schema.attributes):
        raise ApiError(400, f"schema {schema.name} version {schema.version} has no attribute that discovers strings",
                       [detail("attributes", 'no string attribute has "discover": true')])
    found = discovery.discover_in(current_app, schema)
    if found.added:
        jobs.soon(current_app, "backfill")
    return jsonify({"added": found.added, "left_out": found.left_out})


# -- reports -----------------------------------------------------------------------------------

# Where :class:`.ingest_path.IngestPath` leaves the error that stopped it storing a batch (the
# store's refusal, a fault; a WSGI environ key): the route answers it without reading or writing
# the batch again.
REFUSED = "ldp.ingest_refused"


@bp.post("/reports")
def post_reports() -> tuple[Response, int]:
    refused = request.environ.get(REFUSED)
    if refused is not None:
        raise refused
    metrics = context.metrics()
    try:
        rows, reports = report_batch(json_body(text_plain=True), context.reader(), context.catalog(),
                                     window_policy(current_app), current_app.config["LDP_MAX_BATCH"])
    except ApiError as exc:
        metrics.rejected_batches.inc()
        metrics.rejected.inc(len({d["index"] for d in exc.details if "index" in d}))
        raise
    return jsonify(accept_batch(current_app, rows, reports)), 202


def accept_batch(app: Flask, rows: list[ReportRow], reports: int) -> dict[str, int]:
    """Store the ``rows`` of a batch of ``reports`` valid reports and count them in ``/metrics``:
    the 202's object. The route's step, and :mod:`.ingest_path`'s."""
    outcome = store_batch(context.writer(app), rows, reports)
    metrics = context.metrics(app)
    metrics.accepted.inc(outcome.accepted)
    metrics.duplicates.inc(outcome.duplicates)
    metrics.batch_size.observe(reports)
    return {"accepted": outcome.accepted, "duplicates": outcome.duplicates}


# -- the relay ---------------------------------------------------------------------------------

# Seconds a client or a relay may keep the key configurations (DESIGN.md, "Keys").
KEYS_MAX_AGE = 3600


@bp.get("/ohttp-keys")
def get_ohttp_keys() -> Response:
    """The Oblivious HTTP keys still accepted, newest first (RFC 9458 section 3.2)."""
    configs = ohttp_keys.key_configs(ohttp_keys.accepted_keys(current_app))
    return cacheable(Response(configs, mimetype=ohttp.KEYS_MEDIA_TYPE), KEYS_MAX_AGE)


@bp.post("/relay/batches")
def post_relay_batch() -> tuple[Response, int]:
    """A relay's shuffled batch (:mod:`.gateway`): 200 with the reports newly stored, those already
    stored and the requests refused."""
    require_relay()
    if request.mimetype != ohttp.BATCH_MEDIA_TYPE:
        raise ApiError(415, f"Content-Type must be {ohttp.BATCH_MEDIA_TYPE}",
                       [detail("Content-Type", f"got {request.content_type or 'none'}"[:100])])
    limit = request.max_content_length = current_app.config["LDP_MAX_RELAY_BODY"]  # the one route past LDP_MAX_BODY
    try:
        body = read_body()
    except RequestEntityTooLarge:  # the setting the relay's operator must ask about is this one
        raise ApiError(413, f"the batch is larger than LDP_MAX_RELAY_BODY ({limit:,} bytes) allows") from None
    try:
        requests = ohttp.split_batch(body, max_requests=ohttp.MAX_BATCH_REQUESTS)
    except ValueError as exc:
        raise ApiError(400, f"the batch is not application/ohttp-batch of at most {ohttp.MAX_BATCH_REQUESTS:,} "
                            f"requests: {exc}", [detail("body", str(exc)[:200])]) from None
    received = gateway.receive(current_app, requests)
    metrics = context.metrics()
    metrics.accepted.inc(received.accepted)
    metrics.duplicates.inc(received.duplicates)
    for reason, count in received.refused.items():
        metrics.relay_refused.labels(reason).inc(count)
    return jsonify({"accepted": received.accepted, "duplicates": received.duplicates,
                    "refused": sum(received.refused.values())}), 200


# -- estimates ---------------------------------------------------------------------------------

@bp.post("/estimates/refresh")
def refresh_estimates() -> Response:
    require_admin()
    result = refresh.refresh(current_app)
    return jsonify({"written": result.written, "windows": result.windows})


@bp.get("/estimates")
def get_estimates() -> Response | tuple[Response, int, dict[str, str]]:
    require_reader()
    query = _rows_query(ESTIMATE_PARAMETERS, "estimates")
    schema = _published(query["schema"], query.get("version"))
    attribute = _attribute_asked(schema, query, "attribute")
    try:
        page = readout.read(current_app, schema, attribute=attribute, **_page_asked(schema, query))
    except readout.ReadError as exc:
        raise ApiError(400, exc.message, [detail(exc.field, exc.message)]) from None
    # Stored candidates' sources (a string attribute's, at most 10,000 each), read only when the page
    # shows one: their rows rank after every listed value; listed ones are answered by their type.
    sourced = any(a.kind.candidates_apart for a in schema.attributes)
    stored = sourced and any(row.rank >= refresh.ADDED_RANK for row in page.rows)
    added = candidates.sources(context.store().run_tx(
        "candidates", lambda tx: tx.candidates(schema.name, schema.version), write=False)) if stored else {}
    relay = _relay_fields(schema, page)
    estimates = [_estimate(schema, row, added, relay[row.window]) for row in page.rows]
    headers = {}
    if page.next is not None:
        following: dict[str, Any] = {**query, "next": page.next}
        headers["Link"] = f'<{url_for("api.get_estimates", **following)}>; rel="next"'
    if query.get("format", "json") == "csv":
        return _csv(estimates, ESTIMATE_COLUMNS + ("source",) * sourced, headers)
    return jsonify({"schema": schema.name, "version": schema.version, "confidence": page.confidence,
                    "estimates": estimates, "next": page.next}), 200, headers


@bp.get("/breakdowns")
def get_breakdown_rows() -> Response | tuple[Response, int, dict[str, str]]:
    """The rows of a schema version's breakdowns (DESIGN.md, "Breakdowns"; of ``of``, by ``by``
    when asked), per window and the ``all`` rollup, paged as estimates are; CSV the same columns."""
    require_reader()
    query = _rows_query(BREAKDOWN_PARAMETERS, "breakdowns")
    schema = _published(query["schema"], query.get("version"))
    of, by = _attribute_asked(schema, query, "of"), _attribute_asked(schema, query, "by")
    stored = context.store().run_tx("breakdowns", lambda tx: tx.breakdowns(schema.name, schema.version), write=False)
    chosen = breakdowns.chosen(stored, of, by)
    if (of is not None or by is not None) and not chosen:
        asked = " ".join(f"{k}={v}" for k, v in (("of", of), ("by", by)) if v is not None)
        raise ApiError(404, f"schema {schema.name} version {schema.version} has no breakdown {asked}",
                       [detail("of" if of is not None else "by", "no such breakdown")])
    try:
        page = readout.read_breakdowns(current_app, schema, breakdowns=None if of is None and by is None else chosen,
                                       **_page_asked(schema, query))
    except readout.ReadError as exc:
        raise ApiError(400, exc.message, [detail(exc.field, exc.message)]) from None
    by_number = {b.id: b for b in stored}
    relay = _relay_fields(schema, page)
    rows = [{**breakdown_rows.shown(schema, by_number[r.breakdown], r), **relay[r.window]} for r in page.rows]
    headers = {}
    if page.next is not None:
        following: dict[str, Any] = {**query, "next": page.next}
        headers["Link"] = f'<{url_for("api.get_breakdown_rows", **following)}>; rel="next"'
    if query.get("format", "json") == "csv":
        return _csv(rows, BREAKDOWN_COLUMNS, headers)
    return jsonify({"schema": schema.name, "version": schema.version, "confidence": page.confidence,
                    "breakdowns": rows, "next": page.next}), 200, headers


def _relay_fields(schema: Schema, page: readout.Readout[Any]) -> dict[str, dict[str, Any]]:
    """The relay fields of each window the page's rows are of (:func:`..estimation.crowds.relay_fields`)."""
    delta = current_app.config["LDP_SHUFFLE_DELTA"]
    return {w: crowds.relay_fields(page.crowds.get(w), schema.epsilon, delta) for w in {r.window for r in page.rows}}


def _attribute_asked(schema: Schema, query: dict[str, str], parameter: str) -> str | None:
    """The attribute the query ``parameter`` names, if given; a 404 if the schema has none such."""
    attribute = query.get(parameter)
    if attribute is not None and attribute not in schema.attribute_names:
        raise ApiError(404, f"schema {schema.name} version {schema.version} has no attribute {attribute[:64]!r}",
                       [detail(parameter, "not found")])
    return attribute


def _page_asked(schema: Schema, query: dict[str, str]) -> dict[str, Any]:
    """The range and page a query asks for (``since``, ``until``, ``limit``, ``after``), as the
    readout takes them; a caller without a token gets at most :data:`ANONYMOUS_ROWS` a page."""
    bounds: dict[str, Any] = {b: readout.window_bound(schema, b, query[b]) for b in ("since", "until") if b in query}
    limit = readout.limit_of(query.get("limit"))
    if not identified_reader():
        limit = min(limit, ANONYMOUS_ROWS)
    return {**bounds, "limit": limit, "after": readout.cursor_of(schema, query.get("next"))}


def _rows_query(parameters: tuple[str, ...], path: str) -> dict[str, str]:
    """The query of a read of rows (``/api/v1/<path>``), each of ``parameters`` at most once."""
    refuse_unknown(request.args, parameters, "query parameter")
    query = {}
    for name in request.args:
        values = request.args.getlist(name)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {name} is given more than once", [detail(name, "repeated")])
        query[name] = values[0]
    if "schema" not in query:
        raise ApiError(400, f"the schema query parameter is required: /api/v1/{path}?schema=NAME",
                       [detail("schema", "is required")])
    if "version" in query and parse_digits(query["version"], VERSION_DIGITS) is None:
        raise ApiError(400, "version must be a whole number (at most 10 digits)",
                       [detail("version", "must be a whole number")])
    if query.get("format", "json") not in ("json", "csv"):
        raise ApiError(400, "format must be json or csv", [detail("format", "must be json or csv")])
    return query


def _estimate(schema: Schema, row: EstimateRow, added: dict[tuple[str, str], str],
              relay: dict[str, Any]) -> dict[str, Any]:
    """A row as the API shows it, with its window's ``relay`` fields; a string attribute's candidate
    with its ``source`` (``added``: the stored candidates' sources)."""
    attribute = schema.attribute(row.attribute)
    value = attribute.value_of(row.value)
    out = {column: value if column == "value" else getattr(row, column) for column in STORED_ESTIMATE_COLUMNS}
    out.update(relay)
    source = added.get((row.attribute, row.value)) or attribute.kind.source(attribute, row.value)
    if source is not None:
        out["source"] = source
    return out


def _csv(rows: list[dict[str, Any]], columns: tuple[str, ...], headers: dict[str, str]) -> Response:
    """The rows as CSV, ``columns`` of each (empty where a row has none, or null)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c, "")) for c in columns])
    return Response(out.getvalue(), mimetype="text/csv", headers=headers)


def _cell(value: Any) -> Any:
    """A CSV cell: text a spreadsheet would run as a formula gets a leading ``'`` (numbers stay numbers)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


@bp.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document())
