"""Log lines a request cannot write: what a client sends is escaped before it reaches any log.

A path, a header or a schema name can hold a line feed, a carriage return or a NUL (``%0a``,
``%0d``, ``%00`` arrive decoded): written as they are, ``/api/v1/x%0a"POST /api/v1/schemas" 201``
would add a line of the client's choosing to the access log, and a NUL would cut the file for
some readers. :class:`EscapingFormatter` writes every control character (C0, DEL, C1, the Unicode
line and paragraph separators) and every lone surrogate (an undecodable byte) as ``\\xHH`` or
``\\uHHHH``: in a record's arguments, where a request's data goes (there also ``\\`` and ``"``, so a
quoted field of the access log cannot be closed early), and in the whole message, for a message
built beforehand. A record therefore stays one line; a traceback keeps its lines, each
indented so that none can pass for a record of its own.

:data:`LOGGING` is the ``logging.config.dictConfig`` that ``serve`` gives granian (its master and
every worker): granian's own log, its access log and everything else (the app's log propagates
to the root logger), each through :class:`EscapingFormatter`.
"""

from __future__ import annotations

import logging
import re
from typing import Any

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_IN_ARGUMENTS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\\\\\"]")


def _code(match: re.Match[str]) -> str:
    char = ord(match.group())
    return f"\\x{char:02x}" if char <= 0xFF else f"\\u{char:04x}"


def escape(text: str) -> str:
    """``text`` with control characters, lone surrogates, ``\\`` and ``"`` written as escapes."""
    return _IN_ARGUMENTS.sub(_code, text)


def _escape_argument(value: Any) -> Any:
    return escape(value) if isinstance(value, str) else value


class EscapingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose every record is one line (a traceback's lines indented)."""

    def format(self, record: logging.LogRecord) -> str:
        if isinstance(record.args, dict):  # granian's access log: one dict of atoms
            record.args = {key: _escape_argument(value) for key, value in record.args.items()}
        elif isinstance(record.args, tuple):
            record.args = tuple(_escape_argument(value) for value in record.args)
        record.msg, record.args = _CONTROLS.sub(_code, record.getMessage()), ()
        return super().format(record)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(stack_info)


def _indented(text: str) -> str:
    """A traceback below its record: each line escaped and indented."""
    return "\n".join("  " + _CONTROLS.sub(_code, line) for line in text.split("\n"))


_FORMATTER = "ldp_telemetry.aggregator.http.logs.EscapingFormatter"
LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "generic": {"()": _FORMATTER, "fmt": "[%(levelname)s] %(message)s"},
        "access": {"()": _FORMATTER, "fmt": "%(message)s"},
    },
    "handlers": {
        "console": {"formatter": "generic", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
        "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
    },
    "loggers": {
        "_granian": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "granian.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
}


def init_app(app: Any) -> None:
    """Escape the Flask app's own log too, where no server configured logging (Flask's default handler)."""
    from flask.logging import default_handler

    if not isinstance(default_handler.formatter, EscapingFormatter):
        default_handler.setFormatter(EscapingFormatter("[%(asctime)s] %(levelname)s in %(module)s: %(message)s"))
