"""``TelemetryClient``: record true values in an app; only randomised reports ever leave it.

``record()`` is the hot path and touches neither the network nor the disk: it validates the
record, checks the ledger, randomises at once with the OS CSPRNG (:func:`shared.reports.encode_report`) and
queues the randomised report in memory. The sender thread commits it to the outbox file within
milliseconds (with its ledger entry, in one transaction) and delivers it. See README.md,
"Embedding the client".
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import random
import sqlite3
import threading
import time
from collections import deque
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from ldp_telemetry.shared import Schema, validate_record, windows
from ldp_telemetry.shared.reports import encode_report

from .datadir import default_data_dir, outbox_path
from .outbox import Outbox
from .schemas import SchemaSource
from .sender import Sender
from .transport import RequestsTransport, Transport

LOG = logging.getLogger("ldp_telemetry.client")

QUEUED = "queued"
MAX_COUNT = 2**31 - 1  # the most reports max_outbox and max_batch may name
MAX_WAIT = 60.0  # flush() and wait_for_schema() wait in steps of at most this (math.inf is a fine timeout)
# Far beyond any server's retention (reports that old are refused anyway); keeps the ledger small.
LEDGER_KEPT = timedelta(days=400)
CLOSED = "the client is closed"


class RecordResult:
    """What :meth:`TelemetryClient.record` did: ``queued`` or not, and why (``reason``).

    True in a boolean context when the report was queued. ``window`` is the window it counts in.
    """

    __slots__ = ("queued", "reason", "window")

    def __init__(self, queued: bool, reason: str, window: str | None = None):
        self.queued = queued
        self.reason = reason
        self.window = window

    def __bool__(self) -> bool:
        return self.queued

    def __repr__(self) -> str:
        return f"RecordResult(queued={self.queued!r}, reason={self.reason!r}, window={self.window!r})"


class TelemetryClient:
    """Embeds local-differential-privacy telemetry in an app.

    ``schema`` is a schema name (fetched from ``endpoint`` in the background and cached on disk)
    or a schema given in code (a dict or a :class:`Schema`). ``max_epsilon`` is the most ε per
    report the app allows; a greedier schema is refused. Raises ``ValueError`` for a bad setting
    or a schema given in code that is invalid or greedy; never because of the network.
    """

    def __init__(self, endpoint: str, schema: str | Mapping[str, Any] | Schema, *, max_epsilon: float,
                 data_dir: str | os.PathLike[str] | None = None, transport: Transport | None = None,
                 clock: Callable[[], datetime] | None = None, sleep: Callable[[float], None] | None = None,
                 rng: random.Random | None = None, max_outbox: int = 10_000, max_batch: int = 1000,
                 backoff_base: float = 1.0, backoff_cap: float = 300.0, request_timeout: float = 10.0,
                 schema_refresh: float = 3600.0, close_timeout: float = 5.0, linger: float = 0.05):
        _require_positive("max_epsilon", max_epsilon)
        for name, value in (("backoff_base", backoff_base), ("backoff_cap", backoff_cap),
                            ("request_timeout", request_timeout), ("schema_refresh", schema_refresh)):
            _require_positive(name, value)
        if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not 0 <= linger <= 60:
            raise ValueError(f"linger must be a number of seconds from 0 to 60, got {linger!r}")
        for name, value in (("max_outbox", max_outbox), ("max_batch", max_batch)):
            if type(value) is not int or not 1 <= value <= MAX_COUNT:  # SQLite and deque() take no more
                raise ValueError(f"{name} must be a positive integer of at most {MAX_COUNT}, got {value!r:.40}")
        if (isinstance(close_timeout, bool) or not isinstance(close_timeout, (int, float))
                or not 0 <= close_timeout < math.inf):
            raise ValueError(f"close_timeout must be a number of seconds of at least 0, got {close_timeout!r}")
        if data_dir is not None and not isinstance(data_dir, (str, os.PathLike)):
            raise ValueError(f"data_dir must be a folder path (str or os.PathLike), got a {type(data_dir).__name__}")
        if data_dir is not None and (not isinstance(os.fspath(data_dir), str) or not os.fspath(data_dir)
                                     or "\0" in os.fspath(data_dir)):
            raise ValueError("data_dir must be a non-empty str path without NUL characters")
        for name, hook in (("clock", clock), ("sleep", sleep)):
            if hook is not None and not callable(hook):
                raise ValueError(f"{name} must be callable, got a {type(hook).__name__}")
        if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"endpoint must be an http:// or https:// URL, got {endpoint!r:.80}")
        self.endpoint = endpoint.rstrip("/")
        self._source = SchemaSource(schema, max_epsilon=max_epsilon)
        self._no_disk: str | None = None  # why nothing is recorded: the outbox file is unusable
        self._outbox = self._open_outbox(Path(data_dir) if data_dir is not None else default_data_dir(), max_outbox)
        self._source.attach(self._outbox)
        self._clock = clock
        self._close_timeout = close_timeout
        self._ledger = self._outbox.ledger(since=windows.window_of((clock or _utc_now)() - LEDGER_KEPT, "day"))
        self._pending: deque[dict[str, Any]] = deque(maxlen=max_outbox)
        self._overflow = 0  # reports pushed out of a full in-memory queue since the last persist
        self._lock = threading.Lock()  # guards the ledger, the queue and _closed
        self._persist_lock = threading.Lock()
        self._persisting = False
        self._closed = False
        self._older_versions_used: set[int] = set()  # warned about once each
        self._owns_transport = transport is None
        self._transport = transport or RequestsTransport()
        self._sender = Sender(
            outbox=self._outbox, drain=self._persist, source=self._source, transport=self._transport,
            endpoint=self.endpoint, clock=clock or _utc_now, sleep=sleep, rng=rng or random.Random(),
            backoff_base=backoff_base, backoff_cap=backoff_cap, max_batch=max_batch,
            request_timeout=request_timeout, schema_refresh=schema_refresh, linger=linger,
        )
        self._sender.start()
        atexit.register(self.close)

    @property
    def schema(self) -> Schema | None:
        """The schema records are made under; None while none is known (or it was refused)."""
        return self._source.current

    @property
    def outbox_path(self) -> Path:
        return self._outbox.path

    def record(self, values: Mapping[str, Any]) -> RecordResult:
        """Randomise ``values`` (the true values, one per attribute) and queue the report.

        Returns at once, without touching the network or the disk. Raises ``ValueError`` naming
        the problem (never the value) for an unknown or missing attribute, a wrong type or an
        unknown category. A second record in the same window of a schema is suppressed (the
        ledger); so is every record while no schema is known, when the outbox file cannot be
        used, or after :meth:`close`.
        """
        schema = self._source.current
        if schema is None or self._no_disk:
            return RecordResult(False, self._no_disk or self._source.unavailable)
        try:
            truth = validate_record(schema, values)
        except ValueError:
            # The server may have published a version with other attributes since this app was
            # built: a record that fits the version in use before is recorded under that one
            # (published versions stay valid), rather than raising into the app.
            fitting = next((s for s in (self._source.current, self._source.previous)  # current may just have changed
                            if s is not None and _fits(s, values)), None)
            if fitting is None:
                raise
            schema, truth = fitting, validate_record(fitting, values)
        moment = self._clock() if self._clock is not None else None
        window = windows.current_window(schema.window, moment)
        key = (schema.name, window)
        if self._spent(key):  # the common case in an app that records often
            return _already_reported(window)
        report = encode_report(schema, truth, window)
        with self._lock:
            if self._closed:
                return RecordResult(False, CLOSED)
            if self._spent(key):  # another thread reported in this window meanwhile
                return _already_reported(window)
            self._ledger[key] = schema.epsilon
            if len(self._pending) == self._pending.maxlen:
                self._overflow += 1  # the deque drops the oldest; the sender logs it
            self._pending.append(report)
        if not self._sender.wake.is_set():
            self._sender.wake.set()
        if schema is not self._source.current and schema.version not in self._older_versions_used:
            self._older_versions_used.add(schema.version)
            LOG.warning("records fit schema %r version %d, not the server's newer version: recorded under %d",
                        schema.name, schema.version, schema.version)
        return RecordResult(True, QUEUED, window)

    def _spent(self, key: tuple[str, str]) -> bool:
        """Whether this process knows the device reported in this window or one overlapping it
        (:func:`windows.overlapping`); the outbox checks again, for every process, when it stores."""
        schema, window = key
        return key in self._ledger or any((schema, w) in self._ledger for w in windows.overlapping(window))

    def privacy_spent(self) -> dict[str, dict[str, float]]:
        """The ledger: ``{schema: {window: ε}}`` for every window this device reported in."""
        with self._lock:
            entries = sorted(self._ledger.items())
        spent: dict[str, dict[str, float]] = {}
        for (schema, window), epsilon in entries:
            spent.setdefault(schema, {})[window] = epsilon
        return spent

    def wait_for_schema(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a schema to record under; True once there is one.

        Raises ``ValueError`` if the server's schema was refused (greedy or invalid).
        """
        deadline = time.monotonic() + _wait_seconds(timeout)
        while not self._source.known.is_set() and (left := deadline - time.monotonic()) > 0:
            self._source.known.wait(min(left, MAX_WAIT))  # a huge timeout would overflow the lock's
        if self._source.current is not None:
            return True
        if self._source.refusal:
            raise ValueError(self._source.refusal)
        return False

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait up to ``timeout`` seconds for every queued report to be delivered (or dropped as
        invalid); True when none is left. Reports left are kept and retried."""
        deadline = time.monotonic() + _wait_seconds(timeout)
        self._sender.wake.set()
        with self._sender.progress:
            while not self._all_sent():
                left = deadline - time.monotonic()
                if left <= 0 or not self._sender.is_alive():
                    return False
                self._sender.progress.wait(min(left, MAX_WAIT))
        return True

    def close(self, timeout: float | None = None) -> None:
        """Stop the sender: it delivers what it can within ``timeout`` seconds (default
        ``close_timeout``); what is left stays on disk and is sent on the next start."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not 0 <= timeout < math.inf):
            raise ValueError(f"timeout must be a number of seconds of at least 0, got {timeout!r}")
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self.close)
        timeout = self._close_timeout if timeout is None else timeout
        self._sender.stop(timeout)
        self._sender.join(timeout)
        self._persist()  # the sender may still be waiting on the network
        if not self._sender.is_alive():
            self._outbox.close()
            if self._owns_transport:
                self._transport.close()  # type: ignore[attr-defined]

    def __enter__(self) -> TelemetryClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_outbox(self, folder: Path, max_reports: int) -> Outbox:
        """The outbox file. If it cannot be used (no writable folder, a corrupt file), an empty
        outbox in memory, and nothing is recorded: the app keeps running, but without a ledger
        that outlives the process a restart could spend a window's budget twice."""
        try:
            return Outbox(outbox_path(folder, self._source.name), self.endpoint, max_reports=max_reports)
        except (OSError, sqlite3.Error) as exc:
            self._no_disk = f"the outbox in {folder} cannot be used ({exc}), so no ledger can be kept: nothing is recorded"
            LOG.error("%s", self._no_disk)
            return Outbox(Path(":memory:"), self.endpoint, max_reports=max_reports)

    def _all_sent(self) -> bool:
        # Read in this order: a report leaves _pending before _persisting clears, and is
        # counted in the outbox before it does.
        return not self._pending and not self._persisting and self._outbox.count == 0

    def _persist(self) -> None:
        """Move the queued reports to the outbox file (called by the sender, and by close())."""
        with self._persist_lock:
            with self._lock:
                reports, overflow = list(self._pending), self._overflow
                self._pending.clear()
                self._overflow = 0
                self._persisting = bool(reports)
            try:
                if overflow:
                    LOG.warning("the in-memory queue was full: dropped the %d oldest report(s)", overflow)
                if reports:
                    self._store(reports)
            finally:
                self._persisting = False

    def _store(self, reports: list[dict[str, Any]]) -> None:
        try:
            appended = self._outbox.append(reports)
        except sqlite3.Error as exc:  # e.g. a full disk: keep them in memory and try again later
            LOG.error("could not write %d report(s) to the outbox: %s", len(reports), exc)
            with self._lock:
                kept = reports + list(self._pending)
                self._pending.clear()
                self._pending.extend(kept)  # a full queue keeps the newest
            return
        if appended.already_spent:
            LOG.warning("dropped %d report(s): another client on %s already reported in that window",
                        appended.already_spent, self._outbox.path)
        if appended.evicted:
            LOG.warning("the outbox is full (%d reports): dropped the %d oldest",
                        self._outbox.max_reports, appended.evicted)


def _fits(schema: Schema, values: Mapping[str, Any]) -> bool:
    try:
        validate_record(schema, values)
    except ValueError:
        return False
    return True


def _already_reported(window: str) -> RecordResult:
    return RecordResult(False, f"already reported in window {window} (one report per schema per window)", window)


def _wait_seconds(timeout: Any) -> float:
    """A timeout for flush() or wait_for_schema(): a number of seconds >= 0, math.inf for no limit."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:  # NaN too
        raise ValueError(f"timeout must be a number of seconds of at least 0 (math.inf: no limit), got {timeout!r}")
    return float(timeout)


def _require_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)
