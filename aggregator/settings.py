"""The aggregator's settings: each declared once, read from ``LDP_*`` variables or a config dict.

A setting has a name (its environment variable, also its Flask config key), a default, a help
line (the README's configuration table and ``ldp-telemetry serve --help`` show it) and a parser
that turns text into a checked value. A bad value stops start-up with :class:`SettingsError`
naming the setting, rather than failing on first use.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..shared import ohttp


class SettingsError(ValueError):
    """A setting has a bad value, or an unknown setting was given."""


@dataclass(frozen=True)
class Setting:
    name: str  # the environment variable and Flask config key, e.g. LDP_MAX_BATCH
    default: Any
    help: str
    parse: Callable[[Any], Any]  # text or a Python value -> checked value; ValueError if bad

    @property
    def flag(self) -> str:
        """The ``ldp-telemetry serve`` flag: ``LDP_MAX_BATCH`` -> ``--max-batch``."""
        return "--" + self.name.removeprefix("LDP_").lower().replace("_", "-")


def _integer(low: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"must be an integer, got {value!r}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"must be an integer, got {value!r}") from None
        if number < low:
            raise ValueError(f"must be an integer of at least {low}, got {number}")
        return number

    return parse


def _number(low: float, high: float = math.inf, *, open_low: bool = False, open_high: bool = False,
            ) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"must be a number, got {value!r}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"must be a number, got {value!r}") from None
        below = number <= low if open_low else number < low
        above = number >= high if open_high else number > high
        if not math.isfinite(number) or below or above:
            bounds = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
            raise ValueError(f"must be a finite number in {bounds}, got {value!r}")
        return number

    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string, got {value!r}")
    return value


def _optional_token(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) < 8 or not value.isprintable() or " " in value:
        raise ValueError("must be at least 8 printable characters without spaces")
    return value


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {value!r}")
        return text

    return parse


def _parts(value: Any, what: str) -> tuple[str, ...]:
    """The non-empty parts of a comma-separated text (or of a list of them); ``what`` the text must
    be, for the message."""
    if isinstance(value, (tuple, list)):
        value = ",".join(value)
    if not isinstance(value, str):
        raise ValueError(f"must be {what}, got {value!r}")
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _addresses(value: Any) -> tuple[str, ...]:
    """Comma-separated IP addresses, or ``*`` for every peer."""
    addresses = _parts(value, "comma-separated IP addresses or *")
    for address in addresses:
        if address != "*":
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise ValueError(f"must be comma-separated IP addresses or *, got {address!r}") from None
    return addresses


def _origins(value: Any) -> tuple[str, ...]:
    """``*``, or comma-separated web origins (``scheme://host[:port]``, no path); never ``null``,
    which sandboxed frames and local files share, so allowing it would allow any of them."""
    origins = _parts(value, "* or comma-separated origins")
    if origins == ("*",):
        return origins
    for origin in origins:
        if not re.fullmatch(r"https?://[^/\s*,]+", origin):
            raise ValueError(f"must be * or comma-separated origins like https://app.example.org (no path, never "
                             f"null), got {origin!r}")
    if not origins:
        raise ValueError("must be * or at least one origin")
    return origins


def _relay_tokens(value: Any) -> tuple[str, ...]:
    """Comma-separated bearer tokens, one per relay (:func:`...shared.ohttp.relay_token_problem`
    says what a token must be); empty: no relay may post."""
    if isinstance(value, str) and value.strip() and any(not part.strip() for part in value.split(",")):
        raise ValueError("must be comma-separated relay tokens, with no empty one between commas")
    tokens = _parts(value, "comma-separated tokens")
    for token in tokens:
        problem = ohttp.relay_token_problem(token)
        if problem:
            raise ValueError(f"must be comma-separated relay tokens: {problem}")
    if len(set(tokens)) != len(tokens):
        raise ValueError("must be comma-separated relay tokens, one per relay: a token is listed twice")
    return tokens


def _key_grace(value: Any) -> float:
    """Seconds a retired relay key is still accepted: more than a relay may hold a request
    (the relays' default --max-age, :data:`...shared.ohttp.RELAY_MAX_AGE`: the aggregator cannot see
    a relay's own setting) plus a day, so no request a relay still forwards meets a forgotten key."""
    seconds = _number(0, MAX_KEY_GRACE)(value)
    if seconds <= ohttp.RELAY_MAX_AGE + DAY:
        raise ValueError(f"must exceed the relays' --max-age ({ohttp.RELAY_MAX_AGE:g} s, 7 days) plus one day "
                         f"({ohttp.RELAY_MAX_AGE + DAY:g} s), got {value!r}")
    return seconds


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"must be true or false (1/0, yes/no, on/off), got {value!r}")


DAY = 86400.0
# A retired key's private half is kept at most this long: a year is far past any relay's --max-age.
MAX_KEY_GRACE = 365 * DAY
# Above this, the (epsilon, delta) guarantee of a shuffled crowd says little: delta is the chance it fails.
MAX_SHUFFLE_DELTA = 1e-4

SETTINGS: tuple[Setting, ...] = (
    Setting("LDP_DB", "ldp-telemetry.db", "Path of the SQLite database file (created if missing), or a postgresql:// URL "
            "shared by several aggregator nodes.", _text),
    Setting("LDP_ADMIN_TOKEN", None,
            "Bearer token for the admin calls (publish schemas, refresh estimates); unset disables them.",
            _optional_token),
    Setting("LDP_READ_TOKEN", None,
            "When set, reading estimates and the dashboard needs this bearer token (or the admin one).",
            _optional_token),
    Setting("LDP_ESTIMATE_INTERVAL", 60.0, "Seconds between scheduled estimate refreshes (a run takes at most about "
            "half of it, shared among the schemas with new reports).",
            _number(0, 86400 * 7, open_low=True)),
    Setting("LDP_MAX_BATCH", 1000, "Most reports accepted in one POST /api/v1/reports.", _integer(1)),
    # Below 4 KiB not even one report with a large OUE vector would fit.
    Setting("LDP_MAX_BODY", 1 << 20, "Largest request body in bytes (at least 4096); larger gets 413.", _integer(4096)),
    Setting("LDP_CONFIDENCE", 0.95, "Confidence level of the estimate intervals, in (0, 1).",
            _number(0, 1, open_low=True, open_high=True)),
    Setting("LDP_RETENTION_DAYS", 30.0,
            "Days a window's raw reports, counters and estimates are kept (each schema version's 'all' rollup keeps their sums); older windows are rejected at ingest. The cutoff is kept in the database, never moves back, and moves at most 6 hours per run (hourly, and at each worker start), so a clock that jumps ahead cannot erase every window at once.",
            _number(0, 36500, open_low=True)),
    Setting("LDP_MAX_CELLS", 2_000_000,
            "Most cells a schema version may have: the values it counts a window (a boolean 2, a categorical its "
            "categories, a histogram its buckets, a numeric 1, a string every candidate it holds, each breakdown its "
            "cells) times the windows LDP_RETENTION_DAYS keeps, the current one and the 'all' rollup. Publishing a "
            "version over it, or adding candidates or a breakdown that would pass it, is refused (400); discovery "
            "adds what fits. It bounds the counter rows, "
            "estimate rows and refresh work anonymous reports can make.", _integer(1)),
    Setting("LDP_CLOCK_SKEW", 300.0, "Seconds a report's window may start in the future (device clock skew).",
            _number(0, 86400)),
    Setting("LDP_SYNCHRONOUS", "full",
            "SQLite durability: full (an acknowledged report survives a power cut) or normal (it survives "
            "a crash of the server, and single-report posts are several times faster).",
            _choice("full", "normal")),
    Setting("LDP_PROXY_IPS", ("127.0.0.1", "::1"),
            "Reverse proxies whose X-Forwarded-Proto is believed (comma-separated addresses, * for any peer); "
            "no client address is taken from any header.", _addresses),
    Setting("LDP_CORS_ORIGINS", ("*",),
            "Web pages (origins) allowed to post reports and read schemas from a browser (CORS): * for any "
            "(reports are anonymous by design), or comma-separated origins; null is never allowed, and no admin "
            "or read-token route is ever open to another origin.", _origins),
    Setting("LDP_WORKER_MAX_RSS", 1024,
            "MiB of resident memory past which `serve` replaces a worker (gracefully: a new one starts, the old "
            "one finishes its requests), checked every 5 s, twice in a row; 0 never replaces one.", _integer(0)),
    Setting("LDP_RELAY_TOKENS", (),
            "Bearer tokens of the relays that may post batches to POST /api/v1/relay/batches, comma-separated, one "
            f"per relay, each at least {ohttp.MIN_RELAY_TOKEN} characters; unset: no relay may post.", _relay_tokens),
    Setting("LDP_RELAY_KEY_GRACE", 14 * DAY,
            "Seconds a retired Oblivious HTTP key is still accepted before its private half is deleted; must exceed "
            "the relays' --max-age (7 days) plus one day.", _key_grace),
    Setting("LDP_MAX_RELAY_BODY", 128 << 20,
            "Largest relay batch in bytes (POST /api/v1/relay/batches, the one route exempt from LDP_MAX_BODY; "
            "only for a request that carries a relay's token); larger gets 413. At least one request of "
            f"{ohttp.MAX_REQUEST_BYTES} bytes and its length.", _integer(ohttp.MAX_REQUEST_BYTES + 4)),
    Setting("LDP_SHUFFLE_DELTA", 1e-8,
            "The delta of the central (epsilon, delta) guarantee a relay's shuffled crowd gives each report "
            f"(epsilon_shuffled); in (0, {MAX_SHUFFLE_DELTA:g}), far below one over the reports a window gets.",
            _number(0, MAX_SHUFFLE_DELTA, open_low=True, open_high=True)),
    Setting("LDP_SCHEDULER", True,
            "Run the scheduled jobs (estimate refresh, retention, the back-fill of added candidates, the "
            "discovery of strings) in this process; tests turn it off.",
            _boolean),
)
BY_NAME = {s.name: s for s in SETTINGS}

# Config keys that are no setting but may be passed to create_app(): Flask's own, and
# LDP_CLOCK, a callable returning the aware UTC now (tests inject a fixed clock).
EXTRA_KEYS = {"LDP_CLOCK"}


def load(config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None, *,
         config_source: str = "config") -> dict[str, Any]:
    """Every setting's checked value: ``config`` over ``LDP_*`` variables over the defaults.

    ``config_source`` names where ``config`` came from in error messages ("command line").

    Raises :class:`SettingsError` for a bad value or an unknown ``LDP_*`` key in ``config``.
    """
    config = dict(config or {})
    environ = os.environ if environ is None else environ
    unknown = sorted(k for k in config if k.startswith("LDP_") and k not in BY_NAME and k not in EXTRA_KEYS)
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.name in config:
            raw, source = config[setting.name], config_source
        elif setting.name in environ:
            raw, source = environ[setting.name], "environment"
        else:
            values[setting.name] = setting.default
            continue
        try:
            values[setting.name] = setting.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{setting.name} (from the {source}) {exc}") from None
    if values["LDP_ADMIN_TOKEN"] is not None and values["LDP_ADMIN_TOKEN"] in values["LDP_RELAY_TOKENS"]:
        # A relay is run by another party: its token must not publish schemas.
        raise SettingsError("LDP_RELAY_TOKENS holds LDP_ADMIN_TOKEN: a relay's token must not be the admin's")
    return values
