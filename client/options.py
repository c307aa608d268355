"""The client's settings, declared once: name, default, check, help.

:class:`TelemetryClient` validates its keyword arguments against :data:`OPTIONS` (a bad value is a
``ValueError`` naming the setting, an unknown name a ``TypeError``), and the README's settings
table is :func:`markdown_table` (a test keeps the two the same; ``python -m
ldp_telemetry.client.options`` prints it).
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

from ldp_telemetry.shared import Schema
from ldp_telemetry.shared.reports import MAX_BATCH_WINDOWS

from .transport import same_origin

MAX_COUNT = 2**31 - 1  # SQLite's LIMIT and queue sizes take no more
# The longest of the long timings (a pending record's wait, a retry's wait, a schema's age): a day.
# Past it a device would as good as stop, and a huge number overflows the arithmetic of deadlines.
A_DAY = 86_400.0
MAX_BYTES = 2**40
REQUIRED = object()  # the default of a setting the app must give
_DEFAULT_SERVER_BODY = 1 << 20  # the aggregator's LDP_MAX_BODY default


@dataclass(frozen=True)
class Check:
    """A validation: ``test(value)`` is the value to use, or raises ``ValueError(what)``."""

    what: str  # "a number of seconds > 0": the README's words and the error's
    test: Callable[[Any], Any]

    def __call__(self, name: str, value: Any) -> Any:
        try:
            return self.test(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{name} must be {self.what}, got {value!r:.80}") from None


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError
    return float(value)


def seconds(*, positive: bool = False, most: float = math.inf, infinite: bool = False) -> Check:
    """A number of seconds: >= 0 (or > 0), at most ``most``; ``math.inf`` only if ``infinite``."""
    def test(value: Any) -> float:
        number = _number(value)
        if (number <= 0 if positive else number < 0) or number > most or (number == math.inf and not infinite):
            raise ValueError
        return number
    bound = f" and at most {most:g}" if most < math.inf else ""
    return Check(f"a number of seconds {'> 0' if positive else '>= 0'}{bound}"
                 + (" (math.inf: no limit)" if infinite else ""), test)


def count(least: int = 1, most: int = MAX_COUNT, unit: str = "integer") -> Check:
    def test(value: Any) -> int:
        if type(value) is not int or not least <= value <= most:
            raise ValueError
        return value
    return Check(f"an {unit} from {least} to {most}", test)


def _positive_epsilon(value: Any) -> float:
    number = _number(value)
    if not 0 < number < math.inf:
        raise ValueError
    return number


def _optional(check: Check) -> Check:
    return Check(f"None or {check.what}", lambda v: None if v is None else check.test(v))


def _endpoint(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError
    return value.rstrip("/")


def _schema(value: Any) -> Any:
    if not isinstance(value, (str, dict, Schema)):
        raise TypeError
    return value


def _data_dir(value: Any) -> Any:
    if value is None:
        return None
    path = os.fspath(value)  # TypeError for anything but str, bytes and os.PathLike
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValueError
    return value


def _callable(value: Any) -> Any:
    if value is not None and not callable(value):
        raise TypeError
    return value


def _transport(value: Any) -> Any:
    if value is not None and not all(callable(getattr(value, m, None)) for m in ("post_json", "get_json")):
        raise TypeError
    return value


def _rng(value: Any) -> Any:
    if value is not None and not isinstance(value, random.Random):
        raise TypeError
    return value


EPSILON = Check("a positive finite number", _positive_epsilon)
BYTES = count(1, MAX_BYTES, "integer number of bytes")


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    check: Check
    help: str
    shown: str = ""  # the default in words, where its repr would not say it

    def default_text(self) -> str:
        if self.default is REQUIRED:
            return "(required)"
        if self.shown:
            return self.shown
        return f"{self.default:_}" if type(self.default) is int else repr(self.default)


OPTIONS: tuple[Option, ...] = (
    Option("endpoint", REQUIRED, Check("an http:// or https:// URL", _endpoint),
           "the aggregator's base URL (first argument)"),
    Option("schema", REQUIRED, Check("a schema name, or a schema dict or Schema", _schema),
           "a schema name (fetched in the background, then cached) or a schema given in code (second argument)"),
    Option("relay", None, Check("None or an http:// or https:// URL of another origin than endpoint",
                                lambda v: None if v is None else _endpoint(v)),
           "an Oblivious HTTP relay run by someone else than the aggregator's operator: each report goes alone, "
           "encrypted to the aggregator, through it and never around it; needs `pip install 'ldp-telemetry[relay]'` "
           "(see README, \"Relay\")", "None: reports go to `endpoint`"),
    Option("max_epsilon", REQUIRED, EPSILON,
           "the most ε per report this app accepts: a greedier schema is refused"),
    Option("max_epsilon_per_day", None, _optional(EPSILON),
           "the most ε spent per schema per UTC day, over all windows and processes on `data_dir`",
           "`max_epsilon`"),
    Option("data_dir", None, Check("a non-empty folder path (str or os.PathLike) without NUL", _data_dir),
           "the outbox files (`outbox-<schema>.sqlite3`: reports, ledger, cached schema) and the device's "
           "secret (`device-secret`)",
           "per-user data folder: `$XDG_DATA_HOME` or `~/.local/share`, `~/Library/Application Support`, "
           "`%LOCALAPPDATA%`; plus `ldp-telemetry/`"),
    Option("max_pending", 100, count(0, 100_000),
           "true records held in memory (never on disk) while the schema is not known yet"),
    Option("pending_timeout", 600.0, seconds(most=A_DAY),
           "how long a pending record waits for its schema before it is dropped"),
    Option("max_outbox", 10_000, count(), "reports kept waiting at most (the oldest dropped first, with a warning)"),
    Option("max_outbox_bytes", 16 << 20, BYTES, "bytes of reports kept waiting at most (the oldest dropped first)",
           "16 MiB"),
    Option("max_batch", 1000, count(), "reports per request at most (the server's `LDP_MAX_BATCH`)"),
    Option("max_batch_bytes", _DEFAULT_SERVER_BODY // 2, count(4096, MAX_BYTES, "integer number of bytes"),
           "bytes of reports per request at most (the server's `LDP_MAX_BODY` is 1 MiB by default); a request "
           f"also names at most {MAX_BATCH_WINDOWS} windows, as the server requires", "512 KiB"),
    Option("max_report_bytes", 32 << 10, BYTES,
           "a schema whose report could be bigger is refused, as a greedy one is (at most `max_batch_bytes`)",
           "32 KiB"),
    Option("backoff_base", 1.0, seconds(positive=True, most=A_DAY), "retries wait `uniform(0, min(backoff_cap, "
           "backoff_base·2^attempt))` seconds, never less than the server's `Retry-After`"),
    Option("backoff_cap", 300.0, seconds(positive=True, most=A_DAY), "the longest retry wait"),
    Option("request_timeout", 10.0, seconds(positive=True, most=3600.0),
           "the overall deadline of one HTTP request (connecting, sending, redirects and reading the answer)"),
    Option("schema_refresh", 3600.0, seconds(positive=True, most=A_DAY), "how often a named schema is fetched again"),
    Option("close_timeout", 5.0, seconds(most=3600.0),
           "how long `close()` (and interpreter exit) may spend waiting for the schema and delivering"),
    Option("linger", 0.05, seconds(most=60.0),
           "how long the sender lets a burst of records gather before one outbox write and one post"),
    Option("transport", None, Check("None or an object with post_json() and get_json()", _transport),
           "carries the requests: `post_json(url, body, timeout)` and `get_json(url, timeout)` returning "
           "`Response(status, headers, body)` (tests post into the real app without sockets)",
           "`RequestsTransport()`"),
    Option("clock", None, Check("None or a callable", _callable), "returns the aware UTC now (tests move it)",
           "UTC now"),
    Option("sleep", None, Check("None or a callable", _callable),
           "waits out a retry (tests record the waits instead)", "an interruptible wait"),
    Option("rng", None, Check("None or a random.Random", _rng),
           "the retry jitter only (never the randomisation: that is the OS CSPRNG)", "`random.Random()`"),
)
BY_NAME = {option.name: option for option in OPTIONS}


def settings(**given: Any) -> SimpleNamespace:
    """Every option, validated: the given value or the default. ``TypeError`` for an unknown
    name or a missing required one, ``ValueError`` for a bad value."""
    unknown = sorted(set(given) - set(BY_NAME))
    if unknown:
        raise TypeError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(BY_NAME)}")
    values = {}
    for option in OPTIONS:
        if option.name not in given:
            if option.default is REQUIRED:
                raise TypeError(f"missing required setting {option.name!r}")
            values[option.name] = option.default
        else:
            values[option.name] = option.check(option.name, given[option.name])
    chosen = SimpleNamespace(**values)
    if chosen.max_epsilon_per_day is None:
        chosen.max_epsilon_per_day = chosen.max_epsilon
    if chosen.relay is not None and same_origin(chosen.relay, chosen.endpoint):
        raise ValueError(f"relay must be another origin than endpoint, got {chosen.relay!r:.80}: a relay run by the "
                         "aggregator hides nothing from it")
    if chosen.relay is not None and chosen.transport is not None and not all(
            callable(getattr(chosen.transport, m, None)) for m in ("post_bytes", "get_bytes")):
        raise ValueError("transport must also have post_bytes() and get_bytes() to carry a relay's requests "
                         "(RelayTransport)")
    if chosen.max_report_bytes > chosen.max_batch_bytes:
        raise ValueError(f"max_report_bytes ({chosen.max_report_bytes}) must be at most max_batch_bytes "
                         f"({chosen.max_batch_bytes}): a report must fit in a request")
    return chosen


def markdown_table() -> str:
    """The README's settings table, from :data:`OPTIONS`."""
    rows = ["| setting | default | accepted | meaning |", "|---|---|---|---|"]
    for option in OPTIONS:
        rows.append(f"| `{option.name}` | {option.default_text()} | {option.check.what} | {option.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
