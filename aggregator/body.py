"""Reading a JSON request body strictly.

415 unless the Content-Type is JSON; 413 past ``LDP_MAX_BODY`` (Flask's ``MAX_CONTENT_LENGTH``
checks Content-Length and also stops a chunked body at the limit); 400 for anything that is not
one strict JSON object. Python's ``json`` accepts ``NaN``, ``Infinity`` and ``1e999`` (read as
infinity) by default: none of them is JSON, so all are refused here.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

from flask import request

from .errors import ApiError, detail


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> NoReturn:
    raise _NotJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(f"the number {text[:40]} is too large")
    return value


def json_object() -> dict[str, Any]:
    """The request's body as a JSON object, or an :class:`ApiError` (415, 413 or 400)."""
    if not request.is_json:
        raise ApiError(415, "Content-Type must be application/json",
                       [detail("Content-Type", f"got {request.content_type or 'none'}"[:100])])
    data = request.get_data(cache=False)  # 413 past MAX_CONTENT_LENGTH
    try:
        obj = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except _NotJson as exc:
        raise ApiError(400, "the body is not valid JSON", [detail("body", str(exc))]) from None
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits, deep nesting
        raise ApiError(400, "the body is not valid JSON", [detail("body", str(exc)[:200])]) from None
    if not isinstance(obj, dict):
        raise ApiError(400, "the body must be a JSON object", [detail("body", f"got {type(obj).__name__}")])
    return obj
