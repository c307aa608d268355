"""The OpenAPI 3 document of the HTTP API (served at ``/api/v1/openapi.json``).

Written from DESIGN.md, with every limit, pattern and mechanism taken from the constants and
the registry the validators use, so the document cannot drift from them;
``tests/test_agg_openapi.py`` checks that every route of the app is in it and runs schemathesis
against it.
"""

from __future__ import annotations

from typing import Any

from ...shared import mechanisms
from ...shared.breakdowns import (BY_SHARE_NOT_DISTINCT_FROM_0, MAX_BREAKDOWNS, MAX_CELLS as MAX_BREAKDOWN_CELLS,
                                  MEMOISED_ROLLUP, TOO_FEW_REPORTS)
from ...shared.attribute_types import DEFAULT_STRING_LENGTH, MAX_CANDIDATES
from ...shared.discovery import MAX_ALPHABET, MAX_LEVEL_CANDIDATES
from ...shared.reports import ID_RE
from ...shared.schema import (MAX_ATTRIBUTES, MAX_BUCKETS, MAX_CATEGORIES, MAX_CATEGORY_LENGTH,
                              MAX_DESCRIPTION_LENGTH, MAX_EPSILON, MAX_EPSILON_PERMANENT, MAX_MAGNITUDE, MAX_VERSION,
                              MIN_CATEGORIES, MIN_EPSILON, NAME_RE, SPLITS, TYPES, WINDOWS)
from ...shared.windows import NAME_PATTERN
from ..estimation.readout import DEFAULT_LIMIT, MAX_LIMIT
from ..metrics import RELAY_REASONS
from .gateway import MAX_REQUESTS

NAME = {"type": "string", "pattern": f"^{NAME_RE.pattern}$"}
VERSION = {"type": "integer", "minimum": 1, "maximum": MAX_VERSION}
WINDOW = {"type": "string", "pattern": f"^{NAME_PATTERN}$", "description": "YYYY-MM-DD or YYYY-MM-DDTHH (UTC)"}
MECHANISM_NAMES = list(mechanisms.REGISTRY)
# The parameters besides p and q that a derived attribute shows for its mechanism (given back, they must match).
DERIVED = {name: {"type": "number", "description": text} for name, text in mechanisms.parameter_descriptions().items()}
LAYERS = {"permanent": {"type": "object", "description": "a memoised attribute's permanent randomised response at its "
                        "share of epsilon_permanent", "properties": {k: {"type": "number"} for k in ("epsilon", "p", "q")}},
          "instantaneous": {"type": "object", "description": "a memoised attribute's instantaneous response, applied "
                            "to the permanent one in every report", "properties": {k: {"type": "number"} for k in ("p", "q")}}}
_NUMBER = {"type": "number", "minimum": -MAX_MAGNITUDE, "maximum": MAX_MAGNITUDE}
RANGE = {"type": "array", "items": _NUMBER, "minItems": 2, "maxItems": 2,
         "description": "a numeric attribute's [lo, hi], lo < hi; the device clips its value to it"}
EDGES = {"type": "array", "items": _NUMBER, "minItems": MIN_CATEGORIES + 1, "maxItems": MAX_BUCKETS + 1,
         "description": "a histogram's increasing bucket edges [e0, e1, ..., ek]: buckets [e0, e1), ..., [e(k-1), ek]"}
STRING_FIELDS = {
    "max_length": {"type": "integer", "minimum": 1, "maximum": mechanisms.olh.MAX_STRING_LENGTH,
                   "default": DEFAULT_STRING_LENGTH,
                   "description": "a string attribute's: the code points of a value a device keeps"},
    "candidates": {"type": "array", "maxItems": MAX_CANDIDATES, "items": {"type": "string"},
                   "description": "a string attribute's strings to estimate; each prepared as a device prepares a value "
                                  "(control and format characters to U+FFFD, NFC), at most max_length code points, "
                                  "distinct after that"},
    "discover": {"type": "boolean", "default": False,
                 "description": "a string attribute's discovery of the common strings nobody listed (PEM by levels; "
                                "needs an alphabet)"},
    "alphabet": {"type": "string", "minLength": 1, "maxLength": MAX_ALPHABET,
                 "description": "a string attribute's discovery alphabet (NFC, distinct code points; a discovered "
                                "string holds these, others as U+FFFD)"},
    "levels": {"type": "array", "minItems": 1, "maxItems": mechanisms.olh.MAX_STRING_LENGTH,
               "items": {"type": "integer", "minimum": 1, "maximum": mechanisms.olh.MAX_STRING_LENGTH},
               "description": "a discovering string attribute's increasing prefix lengths in code points, the last "
                             f"max_length; derived when not given (each level within {MAX_LEVEL_CANDIDATES:,} candidate "
                              "prefixes)"},
}


# The relay fields of every estimate and breakdown row (:mod:`..estimation.crowds`).
RELAY_FIELDS: dict[str, Any] = {
    "relayed": {"type": "number", "minimum": 0, "maximum": 1, "nullable": True,
                "description": "the share of the window's reports that came through a relay (over every window for "
                               "'all')"},
    "crowd": {"type": "integer", "minimum": 1, "nullable": True,
              "description": "the smallest number of the window's reports one relay batch stored for the first time "
                             "(the smallest over the windows for 'all'); null: none came through a relay"},
    "epsilon_shuffled": {"type": "number", "nullable": True,
                         "description": "the central epsilon of a relayed report against the aggregator: "
                                        "shuffle_epsilon(crowd, the schema's epsilon, delta), at most the schema's "
                                        "epsilon; null without a crowd"},
    "delta": {"type": "number", "nullable": True,
              "description": "the delta of that guarantee (LDP_SHUFFLE_DELTA); null without a crowd"},
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    meaning = {400: "invalid request", 401: "no bearer token", 403: "wrong token", 404: "not found",
               409: "conflicting schema", 413: "body over LDP_MAX_BODY", 415: "Content-Type is not JSON"}
    return {str(code): _json(_ref("Error"), meaning[code]) for code in codes}


ADMIN: list[dict[str, list[str]]] = [{"bearer": []}]

COMPONENTS: dict[str, Any] = {
    "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                   "description": "LDP_ADMIN_TOKEN for admin calls; LDP_READ_TOKEN for reads when set; "
                                                  "one of LDP_RELAY_TOKENS for a relay's batches"}},
    "schemas": {
        "Error": {"type": "object", "required": ["error", "details"], "properties": {
            "error": {"type": "string"},
            "details": {"type": "array", "items": {"type": "object", "required": ["field", "message"], "properties": {
                "index": {"type": "integer"}, "field": {"type": "string"}, "message": {"type": "string"}}}}}},
        "AttributeInput": {"type": "object", "required": ["name", "type"], "additionalProperties": False, "properties": {
            "name": NAME, "type": {"type": "string", "enum": list(TYPES)},
            "categories": {"type": "array", "minItems": MIN_CATEGORIES, "maxItems": MAX_CATEGORIES,
                           "items": {"type": "string", "minLength": 1, "maxLength": MAX_CATEGORY_LENGTH}},
            "range": RANGE, "edges": EDGES, **STRING_FIELDS,
            "mechanism": {"type": "string", "enum": [mechanisms.AUTO, *MECHANISM_NAMES]},
            "epsilon": {"type": "number"}, "p": {"type": "number"}, "q": {"type": "number"}, **DERIVED}},
        "SchemaInput": {"type": "object", "required": ["name", "version", "epsilon", "attributes"],
                        "additionalProperties": False, "properties": {
            "name": NAME, "version": VERSION,
            "epsilon": {"type": "number", "minimum": MIN_EPSILON, "maximum": MAX_EPSILON,
                        "description": f"total; each attribute's share must be at least {MIN_EPSILON:g}"},
            "epsilon_permanent": {"type": "number", "maximum": MAX_EPSILON_PERMANENT},
            "window": {"type": "string", "enum": list(WINDOWS)},
            "split": {"type": "string", "enum": list(SPLITS)},
            "description": {"type": "string", "maxLength": MAX_DESCRIPTION_LENGTH},
            "attributes": {"type": "array", "minItems": 1, "maxItems": MAX_ATTRIBUTES,
                           "items": _ref("AttributeInput")},
            "breakdowns": {"type": "array", "maxItems": MAX_BREAKDOWNS, "items": _ref("BreakdownInput"),
                           "description": "breakdowns to count from the start; kept beside the schema, never in the "
                                          "schema served to clients (see .../breakdowns); not under split 'sample'"}}},
        "BreakdownInput": {"type": "object", "required": ["of", "by"], "additionalProperties": False, "properties": {
            "of": {"type": "string", "description": "the attribute estimated within each value of by: any type but "
                                                    "string"},
            "by": {"type": "string", "description": "the attribute whose values divide the reports: boolean, "
                                                    "categorical or histogram"}},
            "description": f"one attribute within each value of another; at most {MAX_BREAKDOWN_CELLS:,} cells (the "
                           "values of of, a boolean 2 and a numeric 1, times those of by)"},
        "Breakdowns": {"type": "object", "required": ["schema", "version", "breakdowns"], "properties": {
            "schema": {"type": "string"}, "version": {"type": "integer"},
            "breakdowns": {"type": "array", "items": {"type": "object", "required": ["of", "by", "source", "added_at"],
                                                      "properties": {
                "of": {"type": "string"}, "by": {"type": "string"},
                "source": {"type": "string", "enum": ["listed", "added"]},
                "added_at": {"type": "string", "format": "date-time"}}}}}},
        "Attribute": {"type": "object", "required": ["name", "type", "epsilon", "mechanism", "p", "q"], "properties": {
            "name": {"type": "string"}, "type": {"type": "string", "enum": list(TYPES)},
            "categories": {"type": "array", "items": {"type": "string"},
                           "description": "a categorical attribute's, or a histogram's bucket names"},
            "range": RANGE, "edges": EDGES, **STRING_FIELDS,
            "epsilon": {"type": "number"}, "mechanism": {"type": "string", "enum": MECHANISM_NAMES},
            "p": {"type": "number"}, "q": {"type": "number"}, **DERIVED, **LAYERS}},
        "Schema": {"type": "object", "required": ["name", "version", "epsilon", "window", "split", "description",
                                                  "attributes"], "properties": {
            "name": {"type": "string"}, "version": {"type": "integer"}, "epsilon": {"type": "number"},
            "epsilon_permanent": {"type": "number"},
            "window": {"type": "string", "enum": list(WINDOWS)}, "split": {"type": "string", "enum": list(SPLITS)},
            "description": {"type": "string"}, "attributes": {"type": "array", "items": _ref("Attribute")}}},
        "Report": {"type": "object", "required": ["id", "schema", "version", "window", "epsilon", "values"],
                   "additionalProperties": False, "properties": {
            "id": {"type": "string", "pattern": f"^{ID_RE.pattern}$"}, "schema": NAME, "version": VERSION,
            "window": WINDOW, "epsilon": {"type": "number"},
            "values": {"type": "object", "description": "attribute -> its randomised value, as its mechanism reports it",
                       "additionalProperties": {"anyOf": [m.wire_schema for m in mechanisms.REGISTRY.values()]}}}},
        "Batch": {"type": "object", "required": ["reports"], "additionalProperties": False, "properties": {
            "reports": {"type": "array", "minItems": 1, "items": _ref("Report")}}},
        "Ingested": {"type": "object", "required": ["accepted", "duplicates"], "properties": {
            "accepted": {"type": "integer", "minimum": 0}, "duplicates": {"type": "integer", "minimum": 0}}},
        "Estimate": {"type": "object", "required": ["window", "attribute", "value", "estimate", "estimate_clipped",
                                                    "ci_low", "ci_high", "n", "epsilon", "computed_at",
                                                    *RELAY_FIELDS], "properties": {
            "window": {"type": "string", "description": "a window start, or 'all' for the rollup over every window "
                       "(for a memoised schema its interval is no narrower than a single window's: a device's reports "
                       "in several windows repeat one permanent response, so they are not independent)"},
            "attribute": {"type": "string"},
            "value": {"oneOf": [{"type": "string"}, {"type": "boolean", "enum": [True]}],
                      "description": "the category or bucket; a string attribute's candidate; true for a boolean's "
                                     "share; 'mean' for a numeric attribute"},
            "estimate": {"type": "number", "description": "a share, or a numeric attribute's mean in its own units"},
            "estimate_clipped": {"type": "number", "description": "clipped to [0, 1], or to a numeric attribute's range"},
            "ci_low": {"type": "number"}, "ci_high": {"type": "number"},
            "n": {"type": "integer", "minimum": 1}, "epsilon": {"type": "number"},
            "computed_at": {"type": "string", "format": "date-time"}, **RELAY_FIELDS}},
        "Candidates": {"type": "object", "required": ["schema", "version", "candidates"], "properties": {
            "schema": {"type": "string"}, "version": {"type": "integer"},
            "candidates": {"type": "array", "items": {"type": "object", "required": [
                "attribute", "value", "source", "fingerprint", "collides_with", "added_at"], "properties": {
                "attribute": {"type": "string"}, "value": {"type": "string", "description": "the candidate, prepared"},
                "source": {"type": "string", "enum": ["listed", "added", "discovered"]},
                "fingerprint": {"type": "integer", "minimum": 0, "description": "x(s), as DESIGN.md defines it"},
                "collides_with": {"type": "array", "items": {"type": "string"},
                                  "description": "the attribute's other candidates with the same fingerprint"},
                "added_at": {"type": "string", "format": "date-time"},
                "estimated": {"type": "boolean", "description": "false for a discovered string still holding U+FFFD "
                                                                "(characters outside the discovery alphabet): never "
                                                                "counted nor estimated"}}}}}},
        "CandidatesInput": {"type": "object", "additionalProperties": False, "required": ["attribute", "candidates"],
                            "properties": {
            "attribute": {"type": "string", "description": "a string attribute of the schema"},
            "candidates": {"type": "array", "maxItems": MAX_CANDIDATES, "items": {"type": "string"},
                           "description": "strings to estimate, each prepared as a value is (U+FFFD for control, "
                                          "format and surrogate characters, then NFC), at most max_length code "
                                          "points and distinct after that; one already a candidate is not new. At "
                                          f"most {MAX_CANDIDATES} candidates an attribute in all, and the "
                                          "schema version within LDP_MAX_CELLS cells"}}},
        "BreakdownRow": {"type": "object", "required": ["window", "of", "value", "by", "by_value", "estimate",
                                                        "estimate_clipped", "ci_low", "ci_high", "by_share", "n",
                                                        "reason", "computed_at", *RELAY_FIELDS], "properties": {
            "window": {"type": "string", "description": "a window start, or 'all' for the rollup over every window"},
            "of": {"type": "string"}, "by": {"type": "string"},
            "value": {"oneOf": [{"type": "string"}, {"type": "boolean", "enum": [True]}],
                      "description": "the value of of: a category or bucket, true for a boolean, 'mean' for a numeric"},
            "by_value": {"oneOf": [{"type": "string"}, {"type": "boolean"}],
                         "description": "the value of by: a category or bucket, true or false for a boolean"},
            "estimate": {"type": "number", "nullable": True,
                         "description": "the share of value among the devices whose by is by_value (for a numeric of, "
                                        "its mean there), unclipped; null where reason says"},
            "estimate_clipped": {"type": "number", "nullable": True},
            "ci_low": {"type": "number", "nullable": True, "description": "Fieller's interval, clipped"},
            "ci_high": {"type": "number", "nullable": True},
            "by_share": {"type": "number", "nullable": True,
                         "description": "the estimated share of by_value from the same reports, unclipped"},
            "n": {"type": "integer", "minimum": 1, "description": "the reports that carried both attributes"},
            "reason": {"type": "string", "nullable": True,
                       "enum": [BY_SHARE_NOT_DISTINCT_FROM_0, MEMOISED_ROLLUP, TOO_FEW_REPORTS, None],
                       "description": "why the fields it voids are null"},
            "computed_at": {"type": "string", "format": "date-time"}, **RELAY_FIELDS}},
        "BreakdownRows": {"type": "object", "required": ["schema", "version", "confidence", "breakdowns"],
                          "properties": {
            "schema": {"type": "string"}, "version": {"type": "integer"}, "confidence": {"type": "number"},
            "breakdowns": {"type": "array", "items": _ref("BreakdownRow")},
            "next": {"type": "string", "nullable": True, "description": "pass as next= to read the next page; null on the last"}}},
        "Estimates": {"type": "object", "required": ["schema", "version", "confidence", "estimates"], "properties": {
            "schema": {"type": "string"}, "version": {"type": "integer"}, "confidence": {"type": "number"},
            "estimates": {"type": "array", "items": _ref("Estimate")},
            "next": {"type": "string", "nullable": True, "description": "pass as next= to read the next page; null on the last"}}},
    },
}


def _paths() -> dict[str, Any]:
    name_param = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    version_param = {"name": "version", "in": "path", "required": True, "schema": {"type": "integer"}}
    query: list[dict[str, Any]] = [
        {"name": "schema", "in": "query", "required": True, "schema": {"type": "string"}},
        {"name": "version", "in": "query", "schema": {"type": "integer", "minimum": 1}},
        {"name": "attribute", "in": "query", "schema": {"type": "string"}},
        {"name": "since", "in": "query", "schema": WINDOW},
        {"name": "until", "in": "query", "schema": WINDOW},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                                                    "default": DEFAULT_LIMIT},
         "description": f"Most rows on this page. Without the read or admin token a page holds at most "
                        f"{DEFAULT_LIMIT} rows whatever the limit; follow next for the rest."},
        {"name": "next", "in": "query", "schema": {"type": "string"}},
        {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["json", "csv"]}},
    ]
    return {
        "/api/v1/schemas": {
            "post": {"summary": "Publish a schema (admin)", "security": ADMIN,
                     "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("SchemaInput")}}},
                     "responses": {"201": _json(_ref("Schema"), "published; the derived schema"),
                                   "200": _json(_ref("Schema"), "identical to the published one"),
                                   **_errors(400, 401, 403, 409, 413, 415)}},
            "get": {"summary": "The latest version of every schema",
                    "responses": {"200": _json({"type": "object", "required": ["schemas"], "properties": {
                        "schemas": {"type": "array", "items": _ref("Schema")}}}, "the schemas")}},
        },
        "/api/v1/schemas/{name}": {"get": {
            "summary": "The latest version of a schema", "parameters": [name_param],
            "responses": {"200": _json(_ref("Schema"), "the schema"), **_errors(404)}}},
        "/api/v1/schemas/{name}/{version}": {"get": {
            "summary": "One version of a schema", "parameters": [name_param, version_param],
            "responses": {"200": _json(_ref("Schema"), "the schema"), **_errors(404)}}},
        "/api/v1/schemas/{name}/{version}/candidates": {
            "get": {"summary": "The candidate strings of a schema's string attributes",
                    "parameters": [name_param, version_param,
                                   {"name": "attribute", "in": "query", "schema": {"type": "string"}}],
                    "responses": {"200": _json(_ref("Candidates"), "the candidates"), **_errors(400, 401, 403, 404)}},
            "post": {"summary": "Add strings to estimate (admin); their counters are back-filled from the retained "
                                "reports by a job, and they are estimated once it is done",
                     "security": ADMIN, "parameters": [name_param, version_param],
                     "requestBody": {"required": True,
                                     "content": {"application/json": {"schema": _ref("CandidatesInput")}}},
                     "responses": {"202": _json({"type": "object", "required": ["added"], "properties": {
                         "added": {"type": "integer", "description": "how many were new"}}}, "stored"),
                         **_errors(400, 401, 403, 404, 413, 415)}}},
        "/api/v1/schemas/{name}/{version}/breakdowns": {
            "get": {"summary": "The breakdowns of a schema version, listed at publish and added, with their source",
                    "parameters": [name_param, version_param],
                    "responses": {"200": _json(_ref("Breakdowns"), "the breakdowns"), **_errors(400, 401, 403, 404)}},
            "post": {"summary": "Add a breakdown to a published version (admin); its sums are back-filled from the "
                                "retained reports by a job, and it is estimated once that is done",
                     "security": ADMIN, "parameters": [name_param, version_param],
                     "requestBody": {"required": True,
                                     "content": {"application/json": {"schema": _ref("BreakdownInput")}}},
                     "responses": {"202": _json({"type": "object", "required": ["added"], "properties": {
                         "added": {"type": "boolean", "enum": [True]}}}, "added"),
                         "200": _json({"type": "object", "required": ["added"], "properties": {
                             "added": {"type": "boolean", "enum": [False]}}}, "it was there"),
                         **_errors(400, 401, 403, 404, 413, 415)}}},
        "/api/v1/schemas/{name}/{version}/discover": {"post": {
            "summary": "Discover the common strings of the schema version's discovering attributes now (admin; the "
                       "scheduler does it hourly): those found become discovered candidates, back-filled by a job",
            "security": ADMIN, "parameters": [name_param, version_param],
            "responses": {"200": _json({"type": "object", "required": ["added", "left_out"], "properties": {
                "added": {"type": "integer", "description": "how many strings found were new candidates"},
                "left_out": {"type": "integer", "description": "how many new strings found were not added for want "
                                                               "of room (the candidate limit, or LDP_MAX_CELLS)"}}},
                "done"),
                **_errors(400, 401, 403, 404)}}},
        "/api/v1/reports": {"post": {
            "summary": "Ingest a batch of randomised reports (all or nothing; duplicates stored once)",
            # text/plain (UTF-8) holds the same JSON: a web page posts it without a CORS preflight.
            "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("Batch")},
                                                          "text/plain": {"schema": _ref("Batch")}}},
            "responses": {"202": _json(_ref("Ingested"), "stored and counted"), **_errors(400, 413, 415)}}},
        "/api/v1/ohttp-keys": {"get": {
            "summary": "The Oblivious HTTP key configurations still accepted, newest first (RFC 9458 section 3.2: "
                       "each preceded by its length, 2 bytes big-endian); cacheable for an hour",
            "responses": {"200": {"description": "the key configurations", "content": {
                "application/ohttp-keys": {"schema": {"type": "string", "format": "binary"}}}}}}},
        "/api/v1/relay/batches": {"post": {
            "summary": "A relay's shuffled batch of encapsulated requests (each preceded by its length, 4 bytes "
                       f"big-endian; at most {MAX_REQUESTS:,} and LDP_MAX_RELAY_BODY bytes). A request that fails (unknown key, "
                       "bad tag, not the one Binary HTTP request, an invalid report) is refused alone",
            "security": [{"bearer": []}],
            "requestBody": {"required": True, "content": {
                "application/ohttp-batch": {"schema": {"type": "string", "format": "binary"}}}},
            "responses": {"200": _json({"type": "object", "required": ["accepted", "duplicates", "refused"],
                                        "properties": {
                "accepted": {"type": "integer", "minimum": 0, "description": "reports newly stored"},
                "duplicates": {"type": "integer", "minimum": 0, "description": "reports already stored (or repeated)"},
                "refused": {"type": "integer", "minimum": 0,
                            "description": "requests refused, each counted in ldp_relay_refused_total{reason} "
                                           f"({', '.join(RELAY_REASONS)})"}}}, "stored"),
                **_errors(400, 401, 403, 413, 415)}}},
        "/api/v1/estimates": {"get": {
            "summary": "Latest estimates per window and the 'all' rollup", "parameters": query,
            "responses": {"200": {"description": "the estimates", "content": {
                "application/json": {"schema": _ref("Estimates")},
                "text/csv": {"schema": {"type": "string"}}}}, **_errors(400, 401, 403, 404)}}},
        "/api/v1/breakdowns": {"get": {
            "summary": "Latest breakdown rows per window and the 'all' rollup (of and by narrow them to a breakdown)",
            "parameters": [p for p in query if p["name"] != "attribute"] + [
                {"name": "of", "in": "query", "schema": {"type": "string"}},
                {"name": "by", "in": "query", "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the rows", "content": {
                "application/json": {"schema": _ref("BreakdownRows")},
                "text/csv": {"schema": {"type": "string"}}}}, **_errors(400, 401, 403, 404)}}},
        "/api/v1/estimates/refresh": {"post": {
            "summary": "Recompute stale estimates now (admin)", "security": ADMIN,
            "responses": {"200": _json({"type": "object", "required": ["written", "windows"], "properties": {
                "written": {"type": "integer"}, "windows": {"type": "integer"}}}, "rows written"),
                **_errors(401, 403)}}},
        "/api/v1/openapi.json": {"get": {"summary": "This document",
                                          "responses": {"200": _json({"type": "object"}, "OpenAPI 3")}}},
        "/healthz": {"get": {"summary": "Liveness, and whether the database can be read and written", "responses": {
            "200": _json({"type": "object"}, "healthy"),
            "503": _json({"type": "object"}, "the database cannot be read, or cannot be written")}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
            "200": {"description": "text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
    }


def openapi_document() -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": "ldp-telemetry aggregator", "version": "1",
                 "description": "Ingests locally-differentially-private reports; serves debiased estimates."},
        "paths": _paths(),
        "components": COMPONENTS,
    }
