"""What a JSON value or a piece of text must be: the checks that schemas, reports, the attribute
types and the server's query parameters share, each in one place.

- :data:`TOLERANCE`: how far two computations of one number may differ and still be the same
  (a sum of per-attribute ε, a report's ε, a ``p`` or a ``C`` another client derived).
- :func:`is_number`: a JSON number (not a bool, not NaN or ±∞).
- :func:`parse_digits`: a whole number written in ASCII digits (a URL path, a query parameter).
- :class:`SchemaError`, raised by every check of a schema with the field it is about.

Nothing here imports another module of the package: everything else may import it.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any, TypeGuard

# Two computations of one number agree when they differ by at most this: per-attribute ε summing
# to the total and a report's ε against its schema's (absolutely, as DESIGN.md says), a derived
# parameter (p, q, C, z, ...) given back against ours (relative to its size when that is above 1,
# see :func:`close`). Another language's exp, log and sum may differ from Python's in the last
# bits, never by this much.
TOLERANCE = 1e-9


class SchemaError(ValueError):
    """A schema is invalid. ``field`` says where (``attributes[2].categories``), ``str()`` says what."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def close(given: int | float, derived: float) -> bool:
    """A derived parameter ``given`` back agrees with ours, ``derived``: :math:`|g - d| \\le
    10^{-9} \\max(1, |d|)`, so a probability within 1e-9 and a large constant (``C`` is about
    2/ε) within its last digits' worth of another language's ``exp``. ``given`` must be a checked
    number (:func:`is_number`); a huge JSON integer is refused without a float overflow."""
    if abs(given) > 2 * abs(derived) + 1:  # a float subtraction could overflow; it is not close
        return False
    return abs(given - derived) <= TOLERANCE * max(1.0, abs(derived))


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer: an ``int`` that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number: an int (however large) or a finite float, not a bool."""
    if isinstance(value, bool):
        return False
    # An int is finite however large; math.isfinite() would overflow on a huge one.
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def parse_digits(text: str, most: int) -> int | None:
    """The whole number ``text`` writes in at most ``most`` ASCII digits, else None.

    ``str.isdigit()`` alone is not enough: it is true for ``"²"`` and for other scripts' digits
    (``"١"``), which ``int()`` refuses or reads as a number nobody typed; and ``int()`` refuses
    strings of over 4,300 digits (and is slow long before), so the length is bounded first.
    """
    if not (isinstance(text, str) and 1 <= len(text) <= most and text.isascii() and text.isdigit()):
        return None
    return int(text)


def require_text(text: str, field: str) -> None:
    """:class:`SchemaError` unless ``text`` shows as what it is: valid Unicode, without control or
    format characters."""
    # JSON can escape a lone UTF-16 surrogate ("\ud800"), but that is no text: no page, CSV or
    # UTF-8 file could show it. Client and server must refuse it alike.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError(field, f"{field} must be valid Unicode text; it contains a lone UTF-16 surrogate") from None
    # C0 and C1 controls (Cc) and format characters (Cf: U+202E RIGHT-TO-LEFT OVERRIDE, zero-width
    # spaces, ...) can make a name read as another one, or break a log line, a CSV or a terminal.
    for character in text:
        if unicodedata.category(character) in ("Cc", "Cf"):
            raise SchemaError(field, f"{field} must not contain control or format characters; it contains "
                                     f"U+{ord(character):04X} ({unicodedata.name(character, 'a control character')})")


def kind(value: Any) -> str:
    """What a JSON value is, in words: ``an object``, ``a list``, ``a number``, ``null``..."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number" if is_number(value) else type(value).__name__
    )


def type_name(value: Any) -> str:
    """``int``, or ``numpy.bool`` for a type from elsewhere (whose bare name may read like a builtin)."""
    kind_ = type(value)
    return kind_.__name__ if kind_.__module__ == "builtins" else f"{kind_.__module__}.{kind_.__qualname__}"


def show(value: Any, limit: int = 60) -> str:
    """A short, safe rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
