"""The schema the client records under, and the guardrails that refuse a greedy or huge one.

Given in code, a schema is checked once, at construction. Given by name, it is fetched from the
server in the background and cached in the outbox file, so the client works when the server is
down at start-up; the cached copy is used until a fetch succeeds. The client trusts no server: a
schema asking for more ε per report than the app's ``max_epsilon``, or whose report could be
bigger than ``max_report_bytes``, is refused, whoever sent it; so is, for a client that sends
through a relay, one whose padded requests would be too big for the relay.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Mapping
from urllib.parse import quote

from ldp_telemetry.shared import Schema, ohttp, parse_schema, validate_record
from ldp_telemetry.shared.reports import max_report_bytes
from ldp_telemetry.shared.schema import NAME_RE

from . import retry
from .outbox import Outbox, OutboxError
from .transport import Transport, shown

LOG = logging.getLogger("ldp_telemetry.client")


def check_budget(schema: Schema, max_epsilon: float) -> None:
    """``ValueError`` if ``schema`` spends more ε per report than the app allows."""
    if schema.epsilon > max_epsilon:
        raise ValueError(
            f"schema {schema.name!r} version {schema.version} spends epsilon {schema.epsilon:g} per report, "
            f"more than this app's max_epsilon {max_epsilon:g}: refused, nothing will be recorded under it"
        )


def check_size(schema: Schema, most: int) -> None:
    """``ValueError`` if a report of ``schema`` could take more than ``most`` bytes: a server
    could otherwise make every record cost milliseconds and fill the outbox in a few reports."""
    size = max_report_bytes(schema)
    if size > most:
        raise ValueError(f"schema {schema.name!r} version {schema.version} makes reports of up to {size} bytes, "
                         f"more than this app's max_report_bytes {most}: refused, nothing will be recorded under it")


def parse(definition: Any) -> Schema:
    """``definition`` (a dict or a :class:`Schema`) as a :class:`Schema`; ``ValueError`` if it
    is none.

    The shared parser means to raise only ``ValueError``, but a schema is the server's text or
    the app's data, and a number it did not foresee (an ε so small that a division by it fails)
    can end in another exception. At this boundary any of them is what it means to the client,
    an invalid schema, so the app gets the ``ValueError`` it was promised and the sender thread
    refuses the schema instead of ending on it.
    """
    try:
        return parse_schema(definition)
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 -- see above: any failure here is an invalid schema
        raise ValueError(f"invalid schema ({type(exc).__name__}: {exc})") from exc


def schema_name(spec: str | Mapping[str, Any] | Schema) -> str:
    """The name of the schema ``spec`` names or holds; ``ValueError`` if it is no schema."""
    if isinstance(spec, str):
        if not NAME_RE.fullmatch(spec):
            raise ValueError(f"schema must be a schema name matching [a-z0-9][a-z0-9_-]{{0,63}}, got {spec!r:.80}")
        return spec
    return parse(spec).name


class SchemaSource:
    """Holds :attr:`current`, the schema in use (None until one is known and within budget)."""

    def __init__(self, spec: str | Mapping[str, Any] | Schema, *, max_epsilon: float, max_report_bytes: int,
                 relayed: bool = False):
        """Raises ``ValueError`` for a bad name, or a schema given in code that is invalid, greedy or
        huge (or, when ``relayed``, too big for a relay)."""
        self.max_epsilon = max_epsilon
        self.max_report_bytes = max_report_bytes
        self.relayed = relayed
        self.name = schema_name(spec)
        self.fetched = isinstance(spec, str)
        self.current: Schema | None = None
        self.previous: Schema | None = None  # the version in use before current, if any
        self.refusal: str | None = None  # why the last schema offered was refused
        self.last_failure: str | None = None  # the last fetch that failed: its URL and why, escaped
        self.known = threading.Event()  # set once a schema is in use or one was refused
        self._outbox: Outbox | None = None
        self._older_versions_used: set[int] = set()  # warned about once each
        if not self.fetched:
            schema = parse(spec)
            self._check(schema)  # given in code: the app hears at once
            self._use(schema)

    def _check(self, schema: Schema) -> None:
        check_budget(schema, self.max_epsilon)
        check_size(schema, self.max_report_bytes)
        if self.relayed and (refusal := ohttp.relay_refusal(schema)) is not None:
            # Its reports would wait for ever: better not to spend the budget on them.
            raise ValueError(f"{refusal}; this client sends only through its relay: refused, nothing will be "
                             "recorded under it")

    def fitting(self, values: Mapping[str, Any]) -> tuple[Schema, dict[str, Any]]:
        """The schema to record ``values`` under and their true values as the encoders take them.

        The current schema; or, when the record does not fit it but fits the version in use
        before (the server published attributes this app does not send yet), that one, still
        valid on the server, with one warning per version. ``ValueError`` (the current schema's
        complaint, naming the attribute, never the value) when neither fits.
        """
        current = self.current
        if current is None:
            raise ValueError(self.unavailable)
        try:
            return current, validate_record(current, values)
        except ValueError:
            previous = self.previous
            try:
                truth = validate_record(previous, values) if previous is not None else None
            except ValueError:
                truth = None
            if previous is None or truth is None:
                raise  # the current schema's complaint
            if previous.version not in self._older_versions_used:
                self._older_versions_used.add(previous.version)
                LOG.warning("records fit schema %r version %d, not the server's newer version: recorded under %d",
                            previous.name, previous.version, previous.version)
            return previous, truth

    def attach(self, outbox: Outbox) -> None:
        """Cache fetched schemas in ``outbox``, and start from the copy cached there, if any."""
        self._outbox = outbox
        try:
            cached = outbox.cached_schema(self.name) if self.fetched else None
        except OutboxError as exc:  # start as on a first run: the server's copy comes soon
            LOG.error("%s; fetching schema %r from the server instead", exc, self.name)
            cached = None
        if cached is not None:
            self._offer(cached, "cached copy")

    @property
    def unavailable(self) -> str:
        """Why nothing can be recorded yet (meaningful while :attr:`current` is None)."""
        if self.refusal:
            return self.refusal
        return f"schema {self.name!r} is not known yet (no cached copy, and the server has not answered)"

    def refresh(self, transport: Transport, endpoint: str, timeout: float) -> bool:
        """Fetch the latest version from the server. True when it answered, False to retry soon.

        Network errors, retryable statuses, 404 (the schema may be published soon) and a 200 that
        is no JSON object return False; any other answer returns True, a schema that cannot be used (invalid or greedy)
        after an error is logged: asking again soon would not help.
        """
        url = f"{endpoint}/api/v1/schemas/{quote(self.name)}"
        try:
            response = transport.get_json(url, timeout)
        except Exception as exc:  # any failure of the network is retried later
            # INFO per attempt (a server down for a while would flood the app's log); the sender
            # repeats the last failure at WARNING when it drops records for want of the schema.
            self.last_failure = f"GET {shown(url)} failed: {type(exc).__name__}: {shown(exc)}"
            LOG.info("could not fetch schema %r: %s", self.name, self.last_failure)
            return False
        if 300 <= response.status < 400:
            LOG.warning("fetching schema %r answered HTTP %d: a redirect to another origin is not followed",
                        self.name, response.status)
            return False
        if response.status != 200:
            sentence = response.body.get("error") if isinstance(response.body, dict) else None
            self.last_failure = (f"GET {shown(url)} answered HTTP {response.status}"
                                 + (f": {shown(sentence)}" if sentence is not None else ""))
            LOG.warning("fetching schema %r: %s", self.name, self.last_failure)
            return not (retry.is_retryable(response.status) or response.status == 404)
        if not isinstance(response.body, dict):
            # A 200 that is no JSON object (a captive portal's page, a cut-off answer) is no schema the
            # server refused to give: ask again soon rather than record nothing for schema_refresh.
            LOG.warning("fetching schema %r answered HTTP 200 without a JSON object", self.name)
            return False
        taken = self._offer(response.body, "from the server")
        if taken is not None and self._outbox is not None:
            try:
                self._outbox.cache_schema(taken.to_dict())
            except OutboxError as exc:  # the schema is in use; only the copy for the next start is missing
                LOG.error("%s", exc)
        return True

    def _offer(self, definition: Any, source: str) -> Schema | None:
        """Use ``definition`` if it is a valid schema of the right name within the budget, and
        return it as used; None when it is refused.

        A refused schema leaves a schema already in use in place: it was accepted, and its
        version stays valid on the server (published schemas are immutable).
        """
        try:
            schema = parse(definition)
            if schema.name != self.name:
                raise ValueError(f"it is schema {schema.name!r}, not {self.name!r}")
            self._check(schema)
        except Exception as exc:  # noqa: BLE001 -- whatever judging the server's schema raises refuses it
            # The complaint may quote the server's text: shown escaped, since the app may log it.
            reason = f"schema {self.name!r} ({source}) refused: {shown(exc, 500)}"
            LOG.error("%s", reason)
            if self.current is None:
                self.refusal = reason
                self.known.set()
            return None
        self._use(schema)
        return schema

    def _use(self, schema: Schema) -> None:
        if self.current is not None and self.current.version != schema.version:
            self.previous = self.current
        self.current = schema
        self.refusal = None
        self.known.set()

