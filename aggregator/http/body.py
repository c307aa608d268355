"""Reading a JSON request body strictly.

415 unless the Content-Type is JSON (or, where a browser posts without a preflight, UTF-8
``text/plain`` holding the same JSON: DESIGN.md "Browsers"); 413 past the app's
``MAX_CONTENT_LENGTH`` (``create_app`` sets it from ``LDP_MAX_BODY``: the limit's one home), by
Content-Length or, for a body of unknown length (chunked, under a WSGI server that sets
``wsgi.input_terminated``), by reading one byte past it; 400 for anything that is not one strict
JSON object. Python's ``json`` accepts ``NaN``, ``Infinity`` and ``1e999`` (read as
infinity) by default: none of them is JSON, so all are refused here; so is an object with a key
given twice (which Python would read as its last value).
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from typing import Any, NoReturn

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from ..catalog import Catalog
from ..errors import ApiError, detail
from ..ingest.batch import WindowPolicy, parse_batch, report_rows
from ..ingest.reader import BatchReader
from ..store import ReportRow


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> NoReturn:
    raise _NotJson(f"{name} is not a JSON number")


def _integer(text: str) -> int:
    """A JSON integer, in a sentence of ours when it is too long for ``int()`` (Python's own names
    its settings)."""
    most = sys.get_int_max_str_digits()
    if len(text.lstrip("-")) > most:
        raise _NotJson(f"the number {text[:40]}... has more than {most} digits")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:40]} is too large")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are distinct; Python's json would keep the last of a repeated key,
    so a report read here and by another parser could mean two things."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        repeated = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise _NotJson(f"the key {repeated[:40]!r} appears twice in one object")
    return obj


def read_body() -> bytes:
    """The raw body, at most ``request.max_content_length`` bytes, else 413 (a route with a limit of
    its own sets that first: the relay's batches)."""
    if request.content_length is not None:
        data = request.get_data(cache=False)  # Werkzeug refuses a Content-Length over the limit
        if len(data) != request.content_length:  # a WSGI server may end the stream at EOF without a word
            raise ApiError(400, "the request body is shorter than its Content-Length (the client went away?)",
                           [detail("body", f"{len(data)} of {request.content_length} bytes")])
        return data
    if "wsgi.input_terminated" not in request.environ:
        return b""  # a server that cannot end a body without a length: read none (Werkzeug's fallback)
    # A chunked body. Werkzeug would stop silently at exactly the limit, so a body one byte too
    # long would come out truncated rather than refused: read one byte more and look.
    limit = request.max_content_length
    try:
        chunked: bytes = request.environ["wsgi.input"].read(-1 if limit is None else limit + 1)
    except Exception as exc:  # noqa: BLE001 - the server's chunk parser: a bad size, a missing CRLF, the client gone
        raise ApiError(400, "the chunked request body is malformed or incomplete",
                       [detail("body", type(exc).__name__)]) from None
    if limit is not None and len(chunked) > limit:
        raise RequestEntityTooLarge()
    return chunked


def _plain_utf8() -> bool:
    """A ``text/plain`` body in UTF-8 (the charset may be left out: UTF-8 is what JSON is)."""
    if request.mimetype != "text/plain":
        return False
    return request.mimetype_params.get("charset", "utf-8").lower() in ("utf-8", "utf8")


def json_object() -> dict[str, Any]:
    """The request's body as a JSON object, or an :class:`ApiError` (415, 413 or 400)."""
    return strict_json_object(json_body())


def json_body(*, text_plain: bool = False) -> bytes:
    """The request's body as bytes, not parsed yet, if its Content-Type says JSON; else an
    :class:`ApiError` (415), or 413 (:func:`read_body`).

    ``text_plain``: also take a UTF-8 ``text/plain`` body, which a page can send without a CORS
    preflight (what a closing page's ``fetch(..., {keepalive: true})`` needs)."""
    if not (request.is_json or (text_plain and _plain_utf8())):
        raise ApiError(415, "Content-Type must be application/json" + (" or text/plain;charset=UTF-8" if text_plain else ""),
                       [detail("Content-Type", f"got {request.content_type or 'none'}"[:100])])
    return read_body()


def report_batch(data: bytes, reader: BatchReader, catalog: Catalog, policy: WindowPolicy, max_batch: int,
                 ) -> tuple[list[ReportRow], int]:
    """A ``{"reports": [...]}`` body's reports as stored (each id once) and how many it held: read in
    one pass when plainly valid (:class:`..ingest.reader.BatchReader`), else by the exact rules, which
    accept it or raise an :class:`ApiError` (400) naming every fault. A direct post's body, or the
    content of a request a relay forwarded."""
    plain = reader.rows(data, policy, max_batch)
    if plain is not None:
        return plain
    reports, window_ends = parse_batch(strict_json_object(data), catalog, policy, max_batch)
    return report_rows(reports, window_ends), len(reports)


def strict_json_object(data: bytes) -> dict[str, Any]:
    """``data`` as one strict JSON object (see the module), or an :class:`ApiError` (400): a direct
    post's body, or the content of a request a relay forwarded."""
    try:
        # JSON between systems is UTF-8 (RFC 8259 8.1), decoded strictly: json.loads(bytes) would
        # also take UTF-16 or UTF-32, and UTF-8-encoded lone surrogates. A leading BOM is ignored.
        obj = json.loads(data.decode("utf-8-sig"), parse_constant=_reject_constant, parse_float=_finite_float,
                         parse_int=_integer, object_pairs_hook=_unique_keys)
    except _NotJson as exc:
        raise ApiError(400, "the body is not valid JSON", [detail("body", str(exc))]) from None
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError, UnicodeDecodeError (not UTF-8), deep nesting
        raise ApiError(400, "the body is not valid JSON", [detail("body", str(exc)[:200])]) from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object", [detail("body", f"got {type(obj).__name__}")])
    return obj
