"""``TelemetryClient``: record true values in an app; only randomised reports ever leave it.

``record()`` is the hot path and touches neither the network nor the disk: it validates the
record, claims its window in the ledger's memory, randomises it at once with the OS CSPRNG and
hands the report to the sender's queue (:mod:`.sender`, the only link to the disk and the
network). Before the schema is known it hands over the true record instead, held in memory
until the schema arrives. See README.md, "Embedding the client".
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from ldp_telemetry.shared import Schema, windows

from . import ledger as ledger_module
from . import options as options_module
from .datadir import default_data_dir, device_secret, outbox_path
from .ledger import Ledger
from .outbox import MEMORY, Outbox, OutboxError
from .recorder import Recorder, RecordResult
from .relay import RelayRoute
from .schemas import SchemaSource
from .sender import MAX_WAIT, Sender
from .transport import RequestsTransport

LOG = logging.getLogger("ldp_telemetry.client")

CLOSED = "the client is closed"
_WAIT = options_module.seconds(infinite=True)  # flush() and wait_for_schema() take math.inf


class TelemetryClient:
    """Embeds local-differential-privacy telemetry in an app.

    ``schema`` is a schema name (fetched from ``endpoint`` in the background and cached on disk)
    or a schema given in code (a dict or a :class:`Schema`). ``max_epsilon`` (required) is the
    most ε per report the app allows; a greedier schema is refused. The other settings are in
    :data:`.options.OPTIONS` (and the README's table). Raises ``ValueError`` for a bad setting or
    a schema given in code that is invalid, greedy or huge; never because of the network.
    """

    def __init__(self, endpoint: str, schema: str | Mapping[str, Any] | Schema, **options: Any):
        self.settings = settings = options_module.settings(endpoint=endpoint, schema=schema, **options)
        self.endpoint: str = settings.endpoint
        self._source = SchemaSource(settings.schema, max_epsilon=settings.max_epsilon,
                                    max_report_bytes=settings.max_report_bytes, relayed=settings.relay is not None)
        folder = Path(settings.data_dir) if settings.data_dir is not None else default_data_dir()
        self._no_disk: str | None = None  # why nothing is recorded: the data folder is unusable
        clock = settings.clock
        since = windows.window_of((clock or _utc_now)() - ledger_module.KEPT, "day")
        self._outbox, secret, spent = self._open(folder, since)
        self._ledger = Ledger(per_day=settings.max_epsilon_per_day, rows=spent)
        self._source.attach(self._outbox)
        self._recorder = Recorder(self._source, self._ledger, secret, clock)
        self._lock = threading.Lock()  # orders record()'s hand-over against close()
        self._closed = False
        self._owns_transport = settings.transport is None
        self._transport = settings.transport or RequestsTransport()
        relay = None if settings.relay is None else RelayRoute(
            relay=settings.relay, endpoint=self.endpoint, transport=self._transport, source=self._source,
            clock=clock or _utc_now, outbox=self._outbox)
        self._sender = Sender(settings=settings, outbox=self._outbox, ledger=self._ledger, source=self._source,
                              recorder=self._recorder, transport=self._transport, clock=clock or _utc_now, relay=relay)
        self._sender.start()
        atexit.register(self.close)

    @property
    def _route(self) -> str:
        """Whom the outbox keeps reports (and the cached schema) for: the endpoint, or the endpoint
        through the relay. A report made for a relay is never sent around it, even by a later
        client of the same app configured without one, and the other way round."""
        relay = self.settings.relay
        return self.endpoint if relay is None else f"{self.endpoint} through the relay {relay}"

    @property
    def schema(self) -> Schema | None:
        """The schema records are made under; None while none is known (or it was refused)."""
        return self._source.current

    @property
    def outbox_path(self) -> Path:
        return self._outbox.path

    def record(self, values: Mapping[str, Any]) -> RecordResult:
        """Randomise ``values`` (the true values, one per attribute) and queue the report.

        Returns at once, without touching the network or the disk, and never raises for the
        network, the server, a full outbox or a closed client: the result says why nothing was
        queued. Raises ``ValueError`` naming the problem (never the value) for an unknown or
        missing attribute, a wrong type or an unknown category. A second record in a window, or
        one past the daily cap, is suppressed (the ledger). Before the schema is known the record
        is held in memory (``result.pending``) and randomised when it arrives.
        """
        if self._closed or self._no_disk:
            return RecordResult(False, self._no_disk or CLOSED)
        if self._sender.failure:
            return RecordResult(False, self._sender.failure)
        if self._source.current is None:
            return self._hold(values)
        report, result = self._recorder.make(values, self._recorder.now())
        if report is None:
            return result
        with self._lock:
            queued = not self._closed and self._sender.put(report)
        if not queued:
            self._ledger.release(report["schema"], report["window"])
            return RecordResult(False, CLOSED if self._closed else "the sender's queue is full", result.window)
        return result

    def _hold(self, values: Mapping[str, Any]) -> RecordResult:
        if self._source.refusal:
            return RecordResult(False, self._source.refusal)
        if not isinstance(values, Mapping):
            raise ValueError(f"a record must be a dict of attribute values, got {type(values).__name__}")
        with self._lock:
            held = not self._closed and self._sender.hold(dict(values), self._recorder.now() or _utc_now())
        if not held:
            return RecordResult(False, CLOSED if self._closed else
                                f"{self.settings.max_pending} records are already pending (max_pending)")
        return RecordResult(False, f"pending: schema {self._source.name!r} is not known yet; the record is held in "
                                   f"memory for up to {self.settings.pending_timeout:g} s", pending=True)

    def privacy_spent(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The ledger: ``{schema: {day: {"epsilon": ε spent that UTC day, "max_epsilon_per_day":
        the cap, "windows": {window: ε}}}}`` for every day this device reported in."""
        return self._ledger.spent()

    def privacy_statement(self) -> str:
        """What this device's reports under the current schema have cost, in plain words: ε per
        report and, over time, W·ε for W windows reported in, or, for a memoised schema, at most
        ε∞ about each value the device holds however many windows it reports in."""
        schema = self._source.current
        if schema is None:
            return "No schema is known yet: nothing has been randomised or sent."
        days = self.privacy_spent().get(schema.name, {})
        windows = sum(len(day["windows"]) for day in days.values())
        spent = sum(day["epsilon"] for day in days.values())
        per_report = f"Each report of {schema.name} spends epsilon {schema.epsilon:g}"
        if schema.epsilon_permanent is None:
            return (f"{per_report}. This device has reported in {windows} window(s): epsilon {spent:g} in all, "
                    f"and every further window adds {schema.epsilon:g}.")
        return (f"{per_report}. Its answers are memoised: however many windows this device reports in "
                f"({windows} so far), the server can learn at most epsilon {schema.epsilon_permanent:g} about "
                f"any one value it holds; each other value it comes to hold can cost up to "
                f"{schema.epsilon_permanent:g} more.")

    def wait_for_schema(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a schema to record under; True once there is one.

        Not needed before ``record()``: records made earlier wait for the schema in memory.
        Raises ``ValueError`` if the server's schema was refused (greedy, invalid or huge).
        """
        deadline = time.monotonic() + _WAIT("timeout", timeout)
        while not self._source.known.is_set() and (left := deadline - time.monotonic()) > 0:
            self._source.known.wait(min(left, MAX_WAIT))  # a huge timeout would overflow the lock's
        if self._source.current is not None:
            return True
        if self._source.refusal:
            raise ValueError(self._source.refusal)
        return False

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait up to ``timeout`` seconds for every record made so far to be delivered (or
        dropped: invalid, over a limit, or pending past ``pending_timeout``), waiting for the
        schema first if records are pending; True when none is left. Reports left are kept and
        retried."""
        return self._sender.flush(_WAIT("timeout", timeout))

    def close(self, timeout: float | None = None) -> None:
        """Stop the sender: within ``timeout`` seconds (default ``close_timeout``) it waits for
        the schema if records are pending and delivers what it can; what is left stays on disk
        and is sent on the next start (pending true records are dropped: they never reach the disk)."""
        if timeout is not None:
            timeout = _WAIT("timeout", timeout)
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        timeout = self.settings.close_timeout if timeout is None else min(timeout, MAX_WAIT * 60)
        self._sender.stop(timeout)
        # The sender's request deadline ends with the stop, so it finishes soon after it.
        self._sender.join(timeout + 1.0)
        if not self._sender.is_alive():
            try:
                self._outbox.close()
            except OutboxError as exc:  # close() never raises into the app; what was committed stays
                LOG.error("%s", exc)
            if self._owns_transport:
                self._transport.close()

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open(self, folder: Path, since: str) -> tuple[Outbox, bytes | None, list[tuple[str, str, float]]]:
        """The outbox file, the device's secret and the ledger's rows from the window ``since`` on.
        If they cannot be used (no writable folder, a corrupt or locked file), an empty outbox in
        memory, and nothing is recorded: the app keeps running, but without a ledger that outlives
        the process a restart could spend a window's budget twice."""
        limits = {"max_reports": self.settings.max_outbox, "max_bytes": self.settings.max_outbox_bytes}
        outbox = None
        try:
            outbox = Outbox(outbox_path(folder, self._source.name), self._route, **limits)
            return outbox, device_secret(folder), outbox.ledger_rows(since)
        except (OSError, OutboxError) as exc:
            if outbox is not None:
                try:
                    outbox.close()
                except OutboxError:
                    pass  # the folder is unusable anyway; nothing was written
            self._no_disk = f"the data folder {folder} cannot be used ({exc}), so no ledger can be kept: nothing is recorded"
            LOG.error("%s", self._no_disk)
            return Outbox(MEMORY, self._route, **limits), None, []


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)
