"""The relay's settings: each declared once, read from ``LDP_RELAY_*`` variables or flags.

``ldp-telemetry relay`` makes one flag per setting (``LDP_RELAY_MIN_BATCH`` -> ``--min-batch``),
puts the values given on its command line into the environment, and the worker process that
serves and forwards reads them from there with the same parsers. A bad value, or values that
contradict each other, stop start-up with :class:`RelaySettingsError` naming the setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

from ..shared import ohttp
from ..shared.checks import parse_digits

PREFIX = "LDP_RELAY_"
HOUR = 3600  # a stored request keeps the hour it arrived in, nothing finer
_DIGITS = 30  # more digits than any setting's bound has: refused before int() reads them


class RelaySettingsError(ValueError):
    """A setting has a bad value, or two settings contradict each other."""


@dataclass(frozen=True)
class Setting:
    name: str  # after PREFIX: MIN_BATCH is LDP_RELAY_MIN_BATCH and --min-batch
    default: Any  # None: required
    help: str
    parse: Callable[[str], Any]  # text -> checked value; ValueError (the reason) if bad

    @property
    def variable(self) -> str:
        return PREFIX + self.name

    @property
    def flag(self) -> str:
        return "--" + self.name.lower().replace("_", "-")


def _integer(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        number = parse_digits(text.strip(), _DIGITS)
        if number is None or number < low or (high is not None and number > high):
            bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
            raise ValueError(f"must be a whole number {bounds}, got {text!r}")
        return number

    return parse


def _url(text: str) -> str:
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"must be the aggregator's base URL, like https://telemetry.example.org, got {text!r}")
    return text.strip().rstrip("/")


def _token(text: str) -> str:
    problem = ohttp.relay_token_problem(text)
    if problem:
        raise ValueError(f"must be one of the aggregator's LDP_RELAY_TOKENS: {problem}")
    return text


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


SETTINGS: tuple[Setting, ...] = (
    Setting("AGGREGATOR", None, "Base URL of the aggregator the batches go to (its POST /api/v1/relay/batches).", _url),
    Setting("TOKEN", None, "This relay's bearer token: one of the aggregator's LDP_RELAY_TOKENS (prefer the "
            "variable: flags show in the process list).", _token),
    Setting("HOST", "127.0.0.1", "Address to listen on.", _text),
    Setting("PORT", 8001, "Port to listen on.", _integer(0, 65535)),
    Setting("DB", "relay.db", "The relay's SQLite file (created if missing): the stored requests, the batch in "
            "flight and the cached keys and schemas.", _text),
    Setting("MIN_BATCH", 1000, "Stored requests that make a batch (the crowd each report hides in).", _integer(1)),
    Setting("MAX_BATCH", ohttp.MAX_BATCH_REQUESTS, f"Most requests in one batch (at most {ohttp.MAX_BATCH_REQUESTS:,}, the "
            "gateway's limit).", _integer(1, ohttp.MAX_BATCH_REQUESTS)),
    Setting("MAX_BATCH_BYTES", 128 << 20, "Most bytes of one batch's body (keep it within the aggregator's "
            "LDP_MAX_RELAY_BODY).", _integer(1)),
    Setting("MAX_WAIT", 86_400, "Seconds after the end of the oldest stored hour at which a batch is sent even "
            "below --min-batch.", _integer(1)),
    Setting("MAX_AGE", ohttp.RELAY_MAX_AGE, "Seconds after which a stored request is discarded (keep it a day below the "
            "aggregator's LDP_RELAY_KEY_GRACE).", _integer(1)),
    Setting("MAX_STORED", 10_000_000, "Most requests stored; past it POST /relay answers 503.", _integer(1)),
    Setting("MAX_STORED_BYTES", 16 << 30, "Most bytes of requests stored; past it POST /relay answers 503.",
            _integer(1)),
)


@dataclass(frozen=True)
class RelaySettings:
    aggregator: str
    token: str
    host: str
    port: int
    db: str
    min_batch: int
    max_batch: int
    max_batch_bytes: int
    max_wait: int
    max_age: int
    max_stored: int
    max_stored_bytes: int


def load(environ: Mapping[str, str], *, source: Mapping[str, str] | None = None) -> RelaySettings:
    """The checked settings from ``LDP_RELAY_*`` variables in ``environ``, ``source`` (flags given
    on the command line, by variable name) over them; :class:`RelaySettingsError` if any is bad.

    :data:`~..shared.ohttp.MAX_REQUEST_BYTES` bounds one request, so a batch must hold at least
    one of that size with its 4-byte length."""
    from ..shared.ohttp import MAX_REQUEST_BYTES

    values: dict[str, Any] = {}
    for setting in SETTINGS:
        given = (source or {}).get(setting.variable, environ.get(setting.variable))
        if given is None:
            if setting.default is None:
                raise RelaySettingsError(f"{setting.flag} (or {setting.variable}) is required: {setting.help}")
            values[setting.name.lower()] = setting.default
            continue
        try:
            values[setting.name.lower()] = setting.parse(given)
        except ValueError as exc:
            raise RelaySettingsError(f"{setting.flag} ({setting.variable}) {exc}") from None
    settings = RelaySettings(**values)
    if settings.min_batch > settings.max_batch:
        raise RelaySettingsError(f"--min-batch ({settings.min_batch}) must not exceed --max-batch "
                                 f"({settings.max_batch}): no batch could ever be full")
    if settings.max_batch_bytes < MAX_REQUEST_BYTES + 4:
        raise RelaySettingsError(f"--max-batch-bytes must be at least {MAX_REQUEST_BYTES + 4} (one request of "
                                 f"{MAX_REQUEST_BYTES} bytes and its length), got {settings.max_batch_bytes}")
    if settings.max_age <= settings.max_wait + HOUR:
        # Only a request's hour is kept: a small batch goes --max-wait after its hour ends, and a
        # request is discarded --max-age after its hour begins.
        raise RelaySettingsError(f"--max-age ({settings.max_age} s) must exceed --max-wait ({settings.max_wait} s) "
                                 f"plus an hour ({settings.max_wait + HOUR} s): requests would be discarded "
                                 "before they are sent")
    if settings.max_stored_bytes < MAX_REQUEST_BYTES:
        raise RelaySettingsError(f"--max-stored-bytes must be at least {MAX_REQUEST_BYTES} (one request), "
                                 f"got {settings.max_stored_bytes}")
    return settings
