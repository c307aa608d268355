"""Forming shuffled batches and delivering them to the aggregator (DESIGN.md, "Relay").

A batch is formed when ``--min-batch`` requests are stored, or when the oldest stored hour ended
``--max-wait`` seconds ago: the oldest hours' requests first, at most ``--max-batch`` requests and
``--max-batch-bytes`` bytes framed, in a uniformly random order (Fisher–Yates, ``random.shuffle``,
drawing from the operating system's CSPRNG through :class:`secrets.SystemRandom`). The order is
recorded with the members before the first send (:meth:`~.store.RelayStore.form_batch`), and the
batch is sent, framed as ``application/ohttp-batch``, until the aggregator answers 2xx; every
retry, after a restart too, sends the same bytes, and no other batch is formed meanwhile.

Network errors, 408, 429 and 5xx are retried after a backoff (doubling from
:data:`BACKOFF_FIRST_SECONDS` to :data:`BACKOFF_MAX_SECONDS`, with jitter), never sooner than the
aggregator's ``Retry-After``. Any other answer (401, 403, 413, 415: a wrong token, a body limit
below the batch, a gateway missing) is an operator's to mend: the relay keeps the batch, stops
sending, and says so in its log and on ``/metrics`` until it is restarted. Requests older than
``--max-age`` are discarded and counted, since the aggregator may have deleted their key.

Only one forwarder runs per store: it holds an exclusive lock on ``<db>.forwarder-lock`` (a second
relay started on the same file by mistake serves, but does not forward).
"""

from __future__ import annotations

import fcntl
import logging
import random
import secrets
import threading
import time
from collections.abc import Callable

import requests

from ..shared import ohttp
from ..shared.checks import parse_digits
from .metrics import RelayMetrics
from .settings import HOUR, RelaySettings
from .store import RelayStore

log = logging.getLogger(__name__)

# Seconds between two looks at the store while nothing is in flight.
TICK_SECONDS = 1.0
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 300.0
# A Retry-After beyond an hour is more likely a mistake than a plan; the relay looks again then.
MAX_RETRY_AFTER = 3600
# Seconds to connect, and to wait for the answer once the batch is sent (decrypting 100,000
# requests and storing their reports takes the gateway a while).
CONNECT_SECONDS = 10.0
ANSWER_SECONDS = 600.0
# The write-ahead log is truncated at least this often (see :mod:`.store`).
CHECKPOINT_SECONDS = 3600.0


def hour_of(now: float) -> int:
    """Hours since the epoch (UTC) at ``now``: all that is kept of a request's arrival."""
    return int(now // HOUR)


def retryable(status: int) -> bool:
    """Whether a batch answered ``status`` may be taken if sent again unchanged."""
    return status in (408, 429) or status >= 500


def retry_after(value: str | None) -> float:
    """The aggregator's ``Retry-After`` in seconds (delay-seconds only; 0 if absent or a date)."""
    seconds = parse_digits((value or "").strip(), 10)
    return float(min(seconds or 0, MAX_RETRY_AFTER))


class Forwarder:
    def __init__(self, settings: RelaySettings, store: RelayStore, metrics: RelayMetrics) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.shuffle: Callable[[list[int]], None] = secrets.SystemRandom().shuffle
        self.session = requests.Session()
        self.url = f"{settings.aggregator}/api/v1/relay/batches"
        self.jitter = random.Random()  # the backoff's jitter: no secret
        self.batch: bytes | None = None  # the formed batch, framed, while it is in flight
        self.members = 0
        self.attempt = 0
        self.stopped: int | None = None  # the status that stopped sending
        self.last_checkpoint = 0.0

    def step(self) -> float:
        """One look: discard what is too old, form a batch if it is time, send the batch in
        flight; the seconds to wait before the next look."""
        now = time.time()
        # Only a request's hour is kept: one of hour h may be as old as now minus h's start, so it
        # goes once that reaches --max-age (up to an hour early, never late).
        discarded = self.store.discard_before(hour_of(now - self.settings.max_age) + 1)
        if discarded:
            self.metrics.discarded.inc(discarded)
            log.warning("relay: discarded %d request(s) older than --max-age (%d s)", discarded, self.settings.max_age)
            self.batch = None  # it may have gone with them; read it again
            self.metrics.in_flight.set(0)
        if now - self.last_checkpoint >= CHECKPOINT_SECONDS:
            self.store.checkpoint()
            self.last_checkpoint = now
        if self.stopped is not None:
            return TICK_SECONDS
        if self.batch is None and not self._load_batch(now):
            return TICK_SECONDS
        return self._send()

    def _load_batch(self, now: float) -> bool:
        """The batch in flight from the store (one formed before a restart), else a new one when
        it is time; whether there is one."""
        members = self.store.formed()
        if not members and self._due(now):
            self.store.form_batch(self.settings.max_batch, self.settings.max_batch_bytes, self.shuffle)
            members = self.store.formed()
        if not members:
            return False
        self.batch, self.members, self.attempt = ohttp.frame_batch(members), len(members), 0
        self.metrics.in_flight.set(self.members)
        return True

    def _due(self, now: float) -> bool:
        if self.store.usage.requests >= self.settings.min_batch:
            return True
        oldest = self.store.waiting_since()
        return oldest is not None and (oldest + 1) * HOUR + self.settings.max_wait <= now

    def _send(self) -> float:
        assert self.batch is not None
        try:
            response = self.session.post(self.url, data=self.batch, timeout=(CONNECT_SECONDS, ANSWER_SECONDS),
                                         allow_redirects=False,
                                         headers={"Authorization": f"Bearer {self.settings.token}",
                                                  "Content-Type": ohttp.BATCH_MEDIA_TYPE})
        except requests.RequestException as exc:
            self.metrics.failures.labels("network").inc()
            log.warning("relay: sending a batch of %d failed (%s); retrying", self.members, type(exc).__name__)
            return self._backoff(0.0)
        status = response.status_code
        if 200 <= status < 300:
            deleted = self.store.delete_formed()
            self.store.checkpoint()
            self.last_checkpoint = time.time()
            self.metrics.batches_sent.inc()
            self.metrics.forwarded.inc(deleted)
            self.metrics.in_flight.set(0)
            log.info("relay: the aggregator took a batch of %d request(s): HTTP %d, %s", deleted, status,
                     _summary(response))
            self.batch = None
            return 0.0  # more may be due at once
        self.metrics.failures.labels(str(status)).inc()
        if retryable(status):
            log.warning("relay: the aggregator answered a batch of %d with HTTP %d; retrying", self.members, status)
            return self._backoff(retry_after(response.headers.get("Retry-After")))
        self.stopped = status
        self.metrics.stopped.set(1)
        self.metrics.stopped_status.set(status)
        log.error("relay: the aggregator answered HTTP %d to a batch of %d request(s) (a wrong --token, a "
                  "batch over its LDP_MAX_RELAY_BODY, or no gateway at %s?). Sending has STOPPED; the batch and "
                  "every stored request are kept. Mend it and restart the relay.", status, self.members, self.url)
        return TICK_SECONDS

    def _backoff(self, floor: float) -> float:
        delay = min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2 ** min(self.attempt, 30))
        self.attempt += 1
        return max(floor, self.jitter.uniform(delay / 2, delay))

    def run(self, stop: threading.Event) -> None:
        """Forward until ``stop`` is set, once this process holds the store's forwarder lock."""
        with open(f"{self.settings.db}.forwarder-lock", "a+b") as lock:
            warned = False
            while True:
                try:
                    fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not warned:
                        log.warning("relay: another process forwards from %s; this one waits", self.settings.db)
                        warned = True
                    if stop.wait(TICK_SECONDS):
                        return
            delay = 0.0
            while not stop.wait(delay):
                try:
                    delay = self.step()
                except Exception:  # noqa: BLE001 - a full disk, a locked file: log it, keep the thread, look again
                    log.exception("relay: forwarding failed; trying again")
                    delay = self._backoff(0.0)


def _summary(response: requests.Response) -> str:
    """The gateway's counts, as numbers only (nothing the answer holds reaches the log as text)."""
    try:
        body = response.json()
        return ", ".join(f"{field} {int(body[field])}" for field in ("accepted", "duplicates", "refused"))
    except (ValueError, TypeError, KeyError):
        return "without the gateway's counts"
