"""The sender: one daemon thread, the only link between ``record()`` and the disk and the network.

As in posthog-python's consumer, the app's threads only put items on the sender's bounded queue,
without blocking (:meth:`Sender.put`, :meth:`Sender.hold`); the sender owns the queue, the
records waiting for their schema, the outbox and the transport. Each turn it

1. takes what was queued (letting a burst gather for ``linger`` seconds);
2. randomises pending records once the schema is known (dropping those that expired or do not fit);
3. stores new reports in the outbox, each with its ledger row, in one transaction;
4. fetches the schema when due;
5. posts the oldest reports as one batch, bounded in count, bytes and windows:

- 2xx with the aggregator's ``{"accepted", "duplicates"}`` body: the batch is acknowledged and
  removed (ids make a resend after a lost answer harmless); a 2xx without it is retried;
- network error, 5xx, 408, 429: retried after a full-jitter backoff, ``Retry-After`` as a floor;
- 413: the batch is halved (for the rest of the session) and sent again;
- 400 with ``details[].index``: the batch is all-or-nothing on the server, so only the reports
  it names are dropped and the rest is sent again; a 400 without usable details halves the
  batch, down to single reports, so a bad report is isolated and a lower server batch limit
  is learnt;
- any other 4xx: the batch is dropped with a warning.

With a relay (:mod:`.relay`) each report is posted alone, encapsulated, to the relay, which
:class:`.relay.RelayRoute` judges; the schema is fetched from the relay; nothing is ever posted
to the aggregator.

Waits (backoff, the next schema fetch, a pending record's expiry) are deadlines the queue's
``get`` waits for, so new records are stored while the sender backs off and ``stop()`` ends a
wait at once.

Nothing a server sends can end the thread: its answers are judged where they are read (a
``Retry-After`` that is no number is ignored, a schema that cannot be parsed is refused), and a
turn that fails anyway is logged, with the exception's text escaped since it may quote the
server, and followed by a backoff, as a failed delivery is. Were the thread to end all the same,
:attr:`Sender.failure` says why, and ``record()`` stops answering "queued".
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, NamedTuple

from ldp_telemetry.shared.reports import MAX_BATCH_WINDOWS

from . import retry
from .ledger import Ledger
from .outbox import Outbox, OutboxError
from .recorder import Recorder
from .relay import RelayRoute
from .schemas import SchemaSource
from .transport import Response, Transport, shown

LOG = logging.getLogger("ldp_telemetry.client")
MAX_WAIT = 60.0  # waits are taken in steps of at most this (threading's limit is far, but finite)
RELAYED_PER_TURN = 100  # reports posted one by one through a relay in one turn, before the queue is read again


class Pending(NamedTuple):
    """A true record waiting for its schema: in memory only, never on disk, never logged."""

    values: dict[str, Any]
    made: datetime  # when record() was called: the report counts in that window
    expires: float  # time.monotonic() after which it is dropped


_WAKE = object()  # put by stop(): take a turn now

class Sender(threading.Thread):
    """Delivers what ``record()`` queues. Stop it with :meth:`stop`; it never raises into the app."""

    def __init__(self, *, settings: SimpleNamespace, outbox: Outbox, ledger: Ledger, source: SchemaSource,
                 recorder: Recorder, transport: Transport, clock: Callable[[], datetime],
                 relay: RelayRoute | None = None):
        super().__init__(name="ldp-telemetry-sender", daemon=True)
        self._settings = settings
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=settings.max_outbox + settings.max_pending + 1)
        self._held = 0  # pending records in the queue or in _pending: at most max_pending
        self._held_lock = threading.Lock()
        # Guards `settled` (and is notified after every turn, for flush()): a producer clears it
        # as it puts, the sender sets it only when it sees the queue empty, both under this lock,
        # so it is never True while a record is on its way.
        self._progress = threading.Condition(threading.Lock())
        self.settled = outbox.count == 0  # nothing queued, pending, or in the outbox
        self._outbox = outbox
        self._ledger = ledger
        self._source = source
        self._recorder = recorder
        self._transport = transport
        self._reports_url = f"{settings.endpoint}/api/v1/reports"
        self._relay = relay
        self._schema_base = relay.relay if relay is not None else settings.endpoint  # the schema comes from the relay
        self._clock = clock
        self._rng = settings.rng or random.Random()
        self.batch_limit = settings.max_batch
        self._fresh: list[dict[str, Any]] = []  # reports taken from the queue, not yet in the outbox
        self._pending: list[Pending] = []
        self._now = time.monotonic()
        self._schema_due = self._now if source.fetched else float("inf")
        self._schema_attempt = 0
        self._deliver_due = self._now
        self._attempt = 0  # failed deliveries in a row
        self._paused = False  # the last delivery waits by plan (a relay's minute after a key fetch), not on a failure
        self._pause_why = ""
        self._stop_by = float("inf")
        self._stopping = threading.Event()
        self._why = ""  # the last delivery failure, for the log
        self.failure: str | None = None  # why the thread ended before it was stopped, if it did

    # -- the app's side: never blocks, never raises ------------------------------------------

    def put(self, report: dict[str, Any] | Pending) -> bool:
        """Queue a randomised report (or a pending true record); False when the queue is full (the
        sender is stuck)."""
        with self._progress:
            self.settled = False
            try:
                self._queue.put_nowait(report)
            except queue.Full:
                return False
        return True

    def hold(self, values: dict[str, Any], made: datetime) -> bool:
        """Queue a true record until the schema is known; False when ``max_pending`` are held."""
        with self._held_lock:
            if self._held >= self._settings.max_pending:
                return False
            self._held += 1
        if self.put(Pending(values, made, time.monotonic() + self._settings.pending_timeout)):
            return True
        with self._held_lock:
            self._held -= 1
        return False

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until everything queued before the call is delivered,
        dropped as invalid or expired; True when nothing is left."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while not self.settled:
                left = deadline - time.monotonic()
                if left <= 0 or not self.is_alive():
                    return False
                self._progress.wait(min(left, MAX_WAIT))
        return True

    def stop(self, timeout: float) -> None:
        """Finish within ``timeout`` seconds: deliver what can be, wait for the schema if records
        are pending for it, then store what is queued and end. A sender whose last delivery
        failed ends at once; what is left stays in the outbox for the next start."""
        self._stop_by = time.monotonic() + timeout
        self._stopping.set()
        try:
            self._queue.put_nowait(_WAKE)
        except queue.Full:
            pass  # the sender has a turn to take anyway

    # -- the thread ---------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._turn():
                pass
        except BaseException as exc:  # only a bug in the loop itself gets here: reports wait on disk
            self.failure = f"the telemetry sender stopped on an unexpected error: {described(exc)}"
            LOG.error("%s", self.failure)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._finish()

    def _turn(self) -> bool:
        """One turn; True when the sender is done."""
        self._take()
        try:
            self._resolve_pending()
            self._persist()
            self._now = time.monotonic()
            if self._now >= self._schema_due and (not self._stopping.is_set() or self._waiting_for_schema()):
                self._refresh_schema()
            if self._outbox.count and time.monotonic() >= self._deliver_due:
                self._deliver()
        except OutboxError as exc:  # e.g. the file locked by another process for long: wait, go on
            delay = self._backoff(0.0)
            LOG.error("%s; trying again in %.1f s", exc, delay)
        except Exception as exc:  # noqa: BLE001 -- a turn may fail; the sender must not end on it
            # Every failure a server can cause is handled where its answer is read; this is the
            # last line against a bug. Waiting as after a failed delivery keeps a repeating one
            # from spinning, and the next turn starts from the outbox, whose state is always whole.
            delay = self._backoff(0.0)
            LOG.error("a telemetry sender turn failed (%s); trying again in %.1f s", described(exc), delay)
        self._end_turn()
        return self._done()

    def _take(self) -> None:
        """Wait for the first item or the next deadline, then take everything queued."""
        try:
            self._accept(self._queue.get(timeout=self._wait()))
        except queue.Empty:
            return
        self._drain()
        if self._fresh and self._settings.linger and not self._stopping.is_set():
            # Let a burst of records gather: one outbox write and one post for all of them,
            # instead of a transaction and a request per record competing with the app.
            self._stopping.wait(self._settings.linger)
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self._accept(self._queue.get_nowait())
            except queue.Empty:
                return

    def _accept(self, item: Any) -> None:
        if item is _WAKE:
            return
        if isinstance(item, Pending):
            self._pending.append(item)
        else:
            self._fresh.append(item)

    def _wait(self) -> float | None:
        """Seconds until the next thing the sender must do by itself; None: nothing until woken."""
        due = min(self._schema_due if (not self._stopping.is_set() or self._waiting_for_schema()) else float("inf"),
                  self._deliver_due if self._outbox.count else float("inf"),
                  min((p.expires for p in self._pending), default=float("inf")),
                  self._stop_by)
        if due == float("inf"):
            return None
        return min(MAX_WAIT, max(0.0, due - time.monotonic()))

    def _waiting_for_schema(self) -> bool:
        return bool(self._pending) and self._source.current is None

    def _resolve_pending(self) -> None:
        """Randomise the pending records if the schema is known; drop the expired ones."""
        if not self._pending:
            return
        now, kept, expired, refused = time.monotonic(), [], 0, 0
        for record in self._pending:
            if now >= record.expires:
                expired += 1
            elif self._source.current is not None:
                self._randomise(record)
            elif self._source.refusal:
                refused += 1
            else:
                kept.append(record)
        with self._held_lock:
            self._held -= len(self._pending) - len(kept)
        self._pending = kept  # the others' true values are gone from here on
        if expired:
            LOG.warning("dropped %d pending record(s): no schema within pending_timeout (%g s); last attempt: %s",
                        expired, self._settings.pending_timeout, self._source.last_failure or "none yet")
        if refused:
            LOG.warning("dropped %d pending record(s): %s", refused, self._source.refusal)

    def _randomise(self, record: Pending) -> None:
        try:
            report, result = self._recorder.make(record.values, record.made)
        except ValueError as exc:  # names the attribute, never the value
            LOG.warning("dropped a pending record that does not fit schema %r: %s", self._source.name, exc)
            return
        except Exception as exc:  # noqa: BLE001 -- its text could quote a true value: only its type is logged
            LOG.warning("dropped a pending record that schema %r could not take: %s", self._source.name,
                        type(exc).__name__)
            return
        if report is None:
            LOG.info("a pending record was not reported: %s", result.reason)
        else:
            self._fresh.append(report)

    def _persist(self) -> None:
        """Store the new reports in the outbox, with their ledger rows."""
        if not self._fresh:
            return
        try:
            appended = self._outbox.append(self._fresh, self._ledger)
        except OutboxError:
            # e.g. a full disk: keep them in memory (the newest, within the outbox's bound) and retry
            del self._fresh[:-self._settings.max_outbox]
            raise
        self._fresh = []
        for reason, count in appended.refused.items():
            LOG.warning("dropped %d report(s): another client on %s spent first: %s", count, self._outbox.path, reason)
        if appended.evicted:
            LOG.warning("the outbox is full (%d reports or %d bytes at most): dropped the %d oldest",
                        self._outbox.max_reports, self._outbox.max_bytes, appended.evicted)

    def _refresh_schema(self) -> None:
        timeout = self._request_timeout()
        try:
            answered = self._source.refresh(self._transport, self._schema_base, timeout)
        except Exception as exc:  # noqa: BLE001 -- a fetch that fails in any way is asked again later
            LOG.error("fetching schema %r failed (%s)", self._source.name, described(exc))
            answered = False
        if answered:
            self._schema_attempt = 0
            self._schema_due = time.monotonic() + self._settings.schema_refresh
        else:
            delay = retry.backoff_delay(self._schema_attempt, base=self._settings.backoff_base,
                                        cap=self._settings.backoff_cap, rng=self._rng)
            self._schema_attempt += 1
            self._schema_due = time.monotonic() + delay
        self._resolve_pending()  # at once: the schema may have just arrived
        self._persist()

    def _deliver(self) -> None:
        if self._relay is not None:
            self._deliver_relayed(self._relay)
            return
        rows = self._outbox.peek(limit=self.batch_limit, max_bytes=self._settings.max_batch_bytes,
                                 max_windows=MAX_BATCH_WINDOWS)
        if not rows:
            return
        floor = self._post(rows)
        if floor is None:
            self._attempt = 0
            return
        delay = self._backoff(floor)
        LOG.warning("could not deliver %d report(s) (%s); retrying in %.1f s", len(rows), self._why, delay)

    def _deliver_relayed(self, relay: RelayRoute) -> None:
        """Post the oldest reports through the relay, each alone, until one cannot go now."""
        rows = self._outbox.peek(limit=RELAYED_PER_TURN, max_bytes=self._settings.max_batch_bytes,
                                 max_windows=MAX_BATCH_WINDOWS)
        self._paused = False
        for seq, report in rows:
            if time.monotonic() >= self._stop_by:
                return
            outcome = relay.send(report, self._request_timeout())
            if outcome.sent or outcome.dropped:
                self._outbox.remove([seq])
                if outcome.dropped:
                    LOG.warning("dropped a report: %s", outcome.why)
                self._attempt = 0
                continue
            if outcome.wait is None:  # nothing can be sent until the client starts again: said once
                if outcome.why != relay.blocked:  # that one the relay route said when the client started
                    LOG.error("nothing more is sent through the relay until the client starts again: %s", outcome.why)
                self._deliver_due = float("inf")
                self._paused = True
            elif outcome.failed:
                delay = self._backoff(outcome.wait)
                LOG.warning("could not deliver %d report(s) through the relay (%s); retrying in %.1f s",
                            self._outbox.count, outcome.why, delay)
            else:
                self._paused = True
                self._pause_why = outcome.why
                self._defer(outcome.wait)
                LOG.info("%s (%.0f s)", outcome.why, outcome.wait)
            return

    def _backoff(self, floor: float) -> float:
        """Wait before the next delivery: at least ``floor``, full jitter over the doubling bound."""
        delay = max(floor, retry.backoff_delay(self._attempt, base=self._settings.backoff_base,
                                               cap=self._settings.backoff_cap, rng=self._rng))
        self._attempt += 1
        self._defer(delay)
        return delay

    def _defer(self, delay: float) -> None:
        """The next delivery in ``delay`` seconds."""
        if self._settings.sleep is not None:  # an injected sleep is the wait (tests record it)
            self._settings.sleep(delay)
            self._deliver_due = time.monotonic()
        else:
            self._deliver_due = time.monotonic() + delay

    def _request_timeout(self) -> float:
        """The request's overall deadline: ``request_timeout``, and no later than a stop's."""
        limit: float = self._settings.request_timeout
        return max(0.001, min(limit, self._stop_by - time.monotonic()))

    def _post(self, rows: list[tuple[int, dict[str, Any]]]) -> float | None:
        """Post one batch. None when it is settled; else the least seconds to wait before a retry."""
        try:
            response = self._transport.post_json(self._reports_url, {"reports": [r for _, r in rows]},
                                                 self._request_timeout())
        except Exception as exc:  # any failure of the network is retried
            self._why = f"network error: {type(exc).__name__}"
            return 0.0
        status = response.status
        seqs = [seq for seq, _ in rows]
        if 200 <= status < 300 and _is_acknowledgement(response.body):
            self._outbox.remove(seqs)
            return None
        if retry.is_retryable(status) or status < 400:  # 1xx/3xx: not an answer about the reports
            # A 2xx without the aggregator's {"accepted", "duplicates"} body (a captive portal's
            # page, a proxy's empty 204, a cut-off answer) is no proof of delivery either: retried.
            self._why = f"HTTP {status}" + (" without an acknowledgement body" if 200 <= status < 300 else "")
            return retry.retry_after(response.headers, self._clock()) or 0.0
        if status == 400 and (bad := _rejected_indices(response, len(rows))):
            self._drop([seqs[i] for i in bad], status, "; ".join(bad.values()))
            return None
        if status in (400, 413) and len(rows) > 1:
            self.batch_limit = max(1, len(rows) // 2)
            LOG.info("HTTP %d for a batch of %d reports: sending at most %d at a time",
                     status, len(rows), self.batch_limit)
            return None
        self._drop(seqs, status, _error_text(response))
        return None

    def _drop(self, seqs: list[int], status: int, why: str) -> None:
        self._outbox.remove(seqs)
        LOG.warning("the server rejected %d report(s) with HTTP %d; dropped them: %s", len(seqs), status, why)

    def _end_turn(self) -> None:
        with self._progress:
            self.settled = (self._queue.empty() and not self._fresh and not self._pending
                            and self._outbox.count == 0)
            self._progress.notify_all()

    def _done(self) -> bool:
        if not self._stopping.is_set():
            return False
        if time.monotonic() >= self._stop_by or self.settled:
            return True
        # A failed or paused delivery ends a stop at once (its reports wait on disk), unless
        # records are pending for a schema that may still come within the stop's time.
        return (self._attempt > 0 or self._paused) and not self._waiting_for_schema() and self._queue.empty()

    def _finish(self) -> None:
        """Store what is queued (reports only: pending true records never reach the disk)."""
        try:
            self._drain()
            self._persist()
        except Exception as exc:
            LOG.error("could not store %d report(s) at exit: %s", len(self._fresh), exc)
        if self._pending:
            LOG.warning("dropped %d pending record(s): the client closed before the schema was known; "
                        "last attempt: %s", len(self._pending), self._source.last_failure or "none yet")
            self._pending = []
        if self._paused and self._pause_why and self._outbox.count:
            LOG.warning("%d report(s) stay in the outbox for the relay (%s): they go when the client next runs",
                        self._outbox.count, self._pause_why)
        self._end_turn()


def described(exc: BaseException) -> str:
    """An exception for a log line: its type, its text escaped (it may quote the server) and
    where it was raised, which a bug report needs and which holds no data."""
    where = ""
    if (tb := exc.__traceback__) is not None:
        while tb.tb_next is not None:
            tb = tb.tb_next
        where = f" at {'/'.join(Path(tb.tb_frame.f_code.co_filename).parts[-2:])}:{tb.tb_lineno}"
    return f"{type(exc).__name__}: {shown(exc)}{where}"


def _is_acknowledgement(body: Any) -> bool:
    """Whether ``body`` is the aggregator's answer to a stored batch: ``{"accepted": a, "duplicates": d}``."""
    return isinstance(body, dict) and all(type(body.get(k)) is int for k in ("accepted", "duplicates"))


def _rejected_indices(response: Response, size: int) -> dict[int, str]:
    """The batch positions a 400 names in ``details[].index``, with the server's reason for each
    (escaped: it is the server's text)."""
    details = response.body.get("details") if isinstance(response.body, dict) else None
    found: dict[int, str] = {}
    for detail in details if isinstance(details, list) else ():
        index = detail.get("index") if isinstance(detail, dict) else None
        if type(index) is int and 0 <= index < size:
            found[index] = f"[{index}] {shown(detail.get('field', ''), 80)}: {shown(detail.get('message', ''), 200)}"
    return found


def _error_text(response: Response) -> str:
    body = response.body
    return shown(body.get("error", "") if isinstance(body, dict) else "", 500)
