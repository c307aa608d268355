"""The background sender: one daemon thread that moves reports from memory to disk to the server.

Each turn it persists the reports :meth:`TelemetryClient.record` queued in memory, refreshes the
schema when due, and posts the oldest reports in the outbox as one batch:

- 2xx with the aggregator's ``{"accepted", "duplicates"}`` body: the batch is acknowledged and
  removed (ids make a resend after a lost answer harmless); a 2xx without it is retried;
- network error, 5xx, 408, 429: retried after a full-jitter backoff, ``Retry-After`` as a floor;
- 413: the batch is halved (for the rest of the session) and sent again;
- 400 with ``details[].index``: the batch is all-or-nothing on the server, so only the reports
  it names are dropped and the rest is sent again; a 400 without usable details halves the
  batch, down to single reports, so a bad report is isolated and a lower server batch limit
  is learnt;
- any other 4xx: the batch is dropped with a warning.
"""

from __future__ import annotations

import logging
import random
import sqlite3
import threading
import time
from datetime import datetime
from typing import Any, Callable

from . import retry
from .outbox import Outbox
from .schemas import SchemaSource
from .transport import Response, Transport

LOG = logging.getLogger("ldp_telemetry.client")


class Sender(threading.Thread):
    """Delivers the outbox. Stop it with :meth:`stop`; it never raises into the app."""

    def __init__(self, *, outbox: Outbox, drain: Callable[[], None], source: SchemaSource,
                 transport: Transport, endpoint: str, clock: Callable[[], datetime],
                 sleep: Callable[[float], None] | None, rng: random.Random, backoff_base: float,
                 backoff_cap: float, max_batch: int, request_timeout: float, schema_refresh: float,
                 linger: float):
        super().__init__(name="ldp-telemetry-sender", daemon=True)
        self.wake = threading.Event()  # set by record(), flush() and stop()
        self.progress = threading.Condition()  # notified after every turn, for flush()
        self.batch_limit = max_batch
        self._outbox = outbox
        self._drain = drain
        self._source = source
        self._transport = transport
        self._reports_url = f"{endpoint}/api/v1/reports"
        self._endpoint = endpoint
        self._clock = clock
        self._sleep = sleep or self._pause
        self._rng = rng
        self._base, self._cap = backoff_base, backoff_cap
        self._timeout = request_timeout
        self._schema_refresh = schema_refresh
        self._linger = linger
        self._schema_due = time.monotonic() if source.fetched else float("inf")
        self._schema_attempt = 0
        self._stopping = threading.Event()
        self._stop_by = float("inf")
        self._why = ""  # the last delivery failure, for the log

    def stop(self, timeout: float) -> None:
        """Ask the thread to finish: it makes what delivery it can within ``timeout``, then ends.

        A sender in backoff ends at once; what is left stays in the outbox for the next start.
        """
        self._stop_by = time.monotonic() + timeout
        self._stopping.set()
        self.wake.set()

    def run(self) -> None:
        failures = 0
        try:
            while True:
                try:
                    self._loop()
                    return
                except sqlite3.Error as exc:  # e.g. the file locked by another process for long: wait, go on
                    delay = retry.backoff_delay(failures, base=self._base, cap=self._cap, rng=self._rng)
                    LOG.error("the outbox could not be read (%s); trying again in %.1f s", exc, delay)
                    failures += 1
                    self._sleep(delay)
                    if self._stopping.is_set():
                        return
        except Exception:  # a bug here must never reach the app; reports wait on disk
            LOG.exception("the telemetry sender stopped on an unexpected error")
        finally:
            self._notify()

    def _loop(self) -> None:
        attempt = 0
        while True:
            self.wake.clear()
            self._drain()
            if self._stopping.is_set() and (attempt or time.monotonic() >= self._stop_by):
                return
            if time.monotonic() >= self._schema_due and not self._stopping.is_set():
                self._refresh_schema()
            rows = self._outbox.peek(self.batch_limit)
            self._notify()
            if not rows:
                if self._stopping.is_set():
                    # A record made after this turn's drain (then close()) must still go out.
                    self._drain()
                    if not self._outbox.peek(1):
                        return
                    continue
                woken = self.wake.wait(max(0.0, self._schema_due - time.monotonic()) if self._source.fetched else None)
                if woken and not self._stopping.is_set():
                    # Let a burst of records gather: one outbox write and one post for all of them,
                    # instead of a transaction and a request per record competing with the app.
                    self._stopping.wait(self._linger)
                continue
            floor = self._deliver(rows)
            self._notify()
            if floor is None:
                attempt = 0
                continue
            if self._stopping.is_set():
                return
            delay = max(floor, retry.backoff_delay(attempt, base=self._base, cap=self._cap, rng=self._rng))
            LOG.warning("could not deliver %d report(s) (%s); retrying in %.1f s", len(rows), self._why, delay)
            attempt += 1
            self._sleep(delay)

    def _deliver(self, rows: list[tuple[int, dict[str, Any]]]) -> float | None:
        """Post one batch. None when it is settled; else the least seconds to wait before a retry."""
        try:
            response = self._transport.post_json(self._reports_url, {"reports": [r for _, r in rows]}, self._timeout)
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
        LOG.warning("the server rejected %d report(s) with HTTP %d; dropped them: %s", len(seqs), status, why[:500])

    def _refresh_schema(self) -> None:
        if self._source.refresh(self._transport, self._endpoint, self._timeout):
            self._schema_attempt = 0
            self._schema_due = time.monotonic() + self._schema_refresh
        else:
            delay = retry.backoff_delay(self._schema_attempt, base=self._base, cap=self._cap, rng=self._rng)
            self._schema_attempt += 1
            self._schema_due = time.monotonic() + delay

    def _pause(self, seconds: float) -> None:
        """The default sleep: waits out a backoff, persisting new records meanwhile; stop() ends it."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := deadline - time.monotonic()) > 0:
            self.wake.wait(left)
            self.wake.clear()
            self._drain()
            self._notify()

    def _notify(self) -> None:
        with self.progress:
            self.progress.notify_all()


def _is_acknowledgement(body: Any) -> bool:
    """Whether ``body`` is the aggregator's answer to a stored batch: ``{"accepted": a, "duplicates": d}``."""
    return isinstance(body, dict) and all(type(body.get(k)) is int for k in ("accepted", "duplicates"))


def _rejected_indices(response: Response, size: int) -> dict[int, str]:
    """The batch positions a 400 names in ``details[].index``, with the server's reason for each."""
    details = response.body.get("details") if isinstance(response.body, dict) else None
    found: dict[int, str] = {}
    for detail in details if isinstance(details, list) else ():
        index = detail.get("index") if isinstance(detail, dict) else None
        if type(index) is int and 0 <= index < size:
            found[index] = f"[{index}] {detail.get('field', '')}: {detail.get('message', '')}"
    return found


def _error_text(response: Response) -> str:
    body = response.body
    return str(body.get("error", "")) if isinstance(body, dict) else ""
