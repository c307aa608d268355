"""Sending through an Oblivious HTTP relay (``TelemetryClient(endpoint, ..., relay=URL)``).

DESIGN.md, "Relay and amplification", section "Client". Each report travels alone: two reports in
one request would tell the aggregator they come from one device. Its request is the padded Binary
HTTP request of :mod:`ldp_telemetry.shared.ohttp`, encapsulated to the aggregator's key and posted
to ``<relay>/relay``; the relay learns who sends and when, the aggregator what, neither both.

The key configuration is taken only when the relay (``<relay>/ohttp-keys``) and the aggregator
(``<endpoint>/api/v1/ohttp-keys``) serve the same bytes, so neither alone can hand this device a
key of its own; the fetch from the aggregator and a post to the relay are never within
:data:`KEY_FETCH_GAP` of each other (the aggregator learns that this address runs the app, and
nothing of its reports). The configuration is fetched again when it is a day old, or when the
relay says its key is no longer accepted (then the report is encapsulated anew and sent again,
never dropped).

:class:`RelayRoute` answers the sender, one report at a time, with an :class:`Outcome`; the
sender owns the outbox and the waits. Time here is the client's ``clock`` (UTC now), so a test
whose ``sleep`` moves its clock runs through the minute between a key fetch and a post at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import quote

from ldp_telemetry.shared import ohttp
from ldp_telemetry.shared.reports import ReportError, validate_report
from ldp_telemetry.shared.schema import Schema

from . import retry
from .outbox import KeptKeys, Outbox
from .schemas import SchemaSource, parse
from .transport import RelayTransport, shown

LOG = logging.getLogger("ldp_telemetry.client")

KEY_FETCH_GAP = 60.0  # seconds between a key fetch from the aggregator and any post to the relay
KEY_MAX_AGE = 86_400.0  # a key configuration is fetched again when it is this old
NEEDS_CRYPTOGRAPHY = ("sending through a relay needs the cryptography package (pip install "
                      "'ldp-telemetry[relay]'): reports are kept in the outbox and nothing is sent")


@dataclass(frozen=True)
class Outcome:
    """What became of one report: ``sent`` (the relay stored it: remove it), ``dropped`` (refused
    for good: remove it, with ``why`` in a warning), else kept for a later try after ``wait``
    seconds (``None``: not until the client starts again); ``failed`` says whether it counts as a
    failed delivery (backoff) or a planned pause (the minute after a key fetch)."""

    sent: bool = False
    dropped: bool = False
    wait: float | None = 0.0
    failed: bool = True
    why: str = ""


SENT = Outcome(sent=True, failed=False)


def cryptography_missing() -> bool:
    """Whether ``cryptography`` (the ``relay`` extra), which encapsulation needs, cannot be imported."""
    try:
        from cryptography.hazmat.primitives.asymmetric import x25519  # noqa: F401 -- only its presence
    except ImportError:
        return True
    return False


class RelayRoute:
    """Encapsulates reports for the aggregator at ``endpoint`` and posts them to ``relay``."""

    def __init__(self, *, relay: str, endpoint: str, transport: RelayTransport, source: SchemaSource,
                 clock: Callable[[], datetime], outbox: Outbox):
        self.relay = relay
        self._endpoint = endpoint
        self._transport = transport
        self._source = source
        self._clock = clock
        self._outbox = outbox  # where the agreed keys and the minute's times outlive this start
        self.config: ohttp.KeyConfig | None = None
        self._keys: bytes | None = None  # the configuration list both served, byte for byte
        self._fetched: datetime | None = None  # when the keys were taken
        self._stale = False  # the relay refused the key: fetch again before the next post
        self._last_post: datetime | None = None
        self._aggregator_fetch: datetime | None = None
        self._schemas: dict[tuple[str, int], Schema] = {}  # versions of reports made before this start
        self.blocked = NEEDS_CRYPTOGRAPHY if cryptography_missing() else None  # why nothing can ever be sent
        if self.blocked:
            LOG.warning("%s", self.blocked)
        self._take_kept()

    def _take_kept(self) -> None:
        """Start from the keys and times an earlier start kept (a damaged copy is no copy)."""
        kept = self._outbox.kept_relay_keys()
        if kept is None:
            return
        try:
            config = ohttp.choose_key_config(kept.keys)
        except ValueError:
            return
        self.config, self._keys = config, kept.keys
        self._fetched, self._aggregator_fetch = _moment(kept.fetched), _moment(kept.asked)
        self._last_post = None if kept.posted is None else _moment(kept.posted)

    def _keep(self) -> None:
        """Keep the agreed keys and the minute's times for the next start."""
        if self._keys is None or self._fetched is None or self._aggregator_fetch is None:
            return
        self._outbox.keep_relay_keys(KeptKeys(self._keys, self._fetched.timestamp(), self._aggregator_fetch.timestamp(),
                                              None if self._last_post is None else self._last_post.timestamp()))

    def send(self, report: dict[str, Any], timeout: float) -> Outcome:
        """Encapsulate ``report`` alone and post it to the relay, once the keys are ready."""
        if self.blocked:
            return Outcome(wait=None, why=self.blocked)
        schema = self._schema_of(report, timeout)
        if isinstance(schema, Outcome):
            return schema
        try:
            validate_report(report, schema)
        except ReportError as exc:  # the gateway's verdict never comes back: judged here
            return Outcome(dropped=True, why=f"invalid report ({shown(exc)}); no relay answer would say so")
        if (refusal := ohttp.relay_refusal(schema)) is not None:
            return Outcome(wait=None, why=refusal)
        ready = self._ready(timeout)
        if ready is not None:
            return ready
        assert self.config is not None
        request = ohttp.encapsulate_report(self.config, schema, report)
        try:
            response = self._transport.post_bytes(f"{self.relay}/relay", request, ohttp.REQUEST_MEDIA_TYPE, timeout)
        except Exception as exc:  # any failure of the network is retried
            return Outcome(why=f"network error posting to the relay: {type(exc).__name__}")
        finally:
            self._last_post = self._clock()
            self._keep()
        return self._judge(response)

    def _judge(self, response: Any) -> Outcome:
        status = response.status
        if status == 202:
            return SENT
        problem = response.body.get("type") if isinstance(response.body, dict) else None
        if status == 400 and problem == ohttp.KEY_PROBLEM_TYPE:
            # RFC 9458 §5.3: the key is no longer accepted (rotated). Fetch the keys again and send
            # the report anew: it was never read, so it must not be lost.
            self._stale = True
            LOG.info("the relay no longer accepts key %s: fetching the keys again",
                     self.config.key_id if self.config else None)
            return Outcome(failed=False, why="the relay refused the key")
        if retry.is_retryable(status) or status < 400:
            return Outcome(wait=retry.retry_after(response.headers, self._clock()) or 0.0,
                           why=f"the relay answered HTTP {status}")
        sentence = response.body.get("error", response.body.get("title")) if isinstance(response.body, dict) else None
        return Outcome(dropped=True, why=f"the relay answered HTTP {status}"
                                         + (f": {shown(sentence)}" if sentence is not None else ""))

    # -- the keys -----------------------------------------------------------------------------

    def _ready(self, timeout: float) -> Outcome | None:
        """None when a report may be posted now; else why not and how long to wait."""
        now = self._clock()
        if self._keys is None or self._stale or _seconds(now, self._fetched) >= KEY_MAX_AGE:
            since_post = _seconds(now, self._last_post)
            if since_post < KEY_FETCH_GAP:  # the aggregator must not see the fetch beside a report
                return Outcome(wait=KEY_FETCH_GAP - since_post, failed=False,
                               why="waiting a minute after the last report before fetching the keys")
            failure = self._fetch_keys(timeout)
            if failure is not None:
                return failure
        since_fetch = _seconds(self._clock(), self._aggregator_fetch)
        if since_fetch < KEY_FETCH_GAP:
            return Outcome(wait=KEY_FETCH_GAP - since_fetch, failed=False,
                           why="waiting a minute after fetching the keys before sending")
        return None

    def _fetch_keys(self, timeout: float) -> Outcome | None:
        """Take the key configuration both parties serve; None on success."""
        fetched = []
        for url in (f"{self.relay}/ohttp-keys", f"{self._endpoint}/api/v1/ohttp-keys"):
            try:
                response = self._transport.get_bytes(url, timeout)
            except Exception as exc:  # retried with backoff
                return Outcome(why=f"GET {shown(url)} failed: {type(exc).__name__}")
            finally:
                if url.startswith(self._endpoint):
                    self._aggregator_fetch = self._clock()
            if response.status != 200:
                return Outcome(wait=retry.retry_after(response.headers, self._clock()) or 0.0,
                               why=f"GET {shown(url)} answered HTTP {response.status}")
            fetched.append(response.content)
        relay_keys, aggregator_keys = fetched
        if relay_keys != aggregator_keys:
            # One of them may be serving this device a key of its own: send nothing.
            LOG.error("the relay %s and the aggregator serve different key configurations: nothing is sent "
                      "through the relay (reports are kept) until they agree", shown(self.relay))
            return Outcome(why="the relay's and the aggregator's keys differ")
        try:
            config = ohttp.choose_key_config(relay_keys)
        except ValueError as exc:
            LOG.error("the aggregator's key configurations cannot be used (%s): nothing is sent through the relay",
                      shown(exc))
            return Outcome(why="no usable key configuration")
        if config != self.config:
            LOG.info("encapsulating reports to the aggregator's key %d", config.key_id)
        self.config, self._keys, self._fetched, self._stale = config, relay_keys, self._clock(), False
        self._keep()
        return None

    # -- the schema of a report ----------------------------------------------------------------

    def _schema_of(self, report: dict[str, Any], timeout: float) -> Schema | Outcome:
        """The schema version ``report`` was made under: in use, or fetched from the relay once."""
        name, version = report.get("schema"), report.get("version")
        for schema in (self._source.current, self._source.previous):
            if schema is not None and (schema.name, schema.version) == (name, version):
                return schema
        if not isinstance(name, str) or type(version) is not int:
            return Outcome(dropped=True, why="a report without a schema name and version")
        if (name, version) in self._schemas:
            return self._schemas[(name, version)]
        url = f"{self.relay}/api/v1/schemas/{quote(name)}/{version}"
        try:
            response = self._transport.get_json(url, timeout)
            schema = parse(response.body) if response.status == 200 else None
        except Exception as exc:  # noqa: BLE001 -- a failed fetch, or a schema that cannot be parsed
            return Outcome(why=f"GET {shown(url)} failed: {type(exc).__name__}")
        if schema is None or (schema.name, schema.version) != (name, version):
            return Outcome(why=f"GET {shown(url)} answered HTTP {response.status} without the schema")
        self._schemas[(name, version)] = schema
        return schema


def _moment(seconds: float) -> datetime:
    """Unix seconds as the client's clock gives time (UTC)."""
    return datetime.fromtimestamp(seconds, timezone.utc)


def _seconds(now: datetime, since: datetime | None) -> float:
    """Seconds from ``since`` to ``now``, at least 0 (a clock set back); infinite when it never happened."""
    return float("inf") if since is None else max(0.0, (now - since).total_seconds())
