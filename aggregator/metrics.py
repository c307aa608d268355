"""Prometheus metrics: reports accepted, rejected and duplicate; batch sizes; refresh durations.

Each app has its own ``CollectorRegistry`` (tests build many apps in one process). Under
``ldp-telemetry serve --workers N`` every worker process counts its own requests; when
``PROMETHEUS_MULTIPROC_DIR`` is set (``serve`` sets it for N > 1) prometheus-client keeps the
values in files there and ``/metrics`` sums them over all workers. Without it, each scrape
sees only the worker that answered.
"""

from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess, values

# Why a request of a relay batch is refused (:mod:`.http.gateway`), in the order its steps run.
RELAY_REASONS = ("key", "decrypt", "request", "report")
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.accepted = Counter("ldp_reports_accepted", "Reports answered as new (stored and counted once, less "
                                "those ldp_reports_duplicate_late finds stored when it counts them).",
                                registry=self.registry)
        self.duplicates = Counter("ldp_reports_duplicate", "Reports whose id was already stored or repeated in the batch.",
                                  registry=self.registry)
        self.late_duplicates = Counter(
            "ldp_reports_duplicate_late", "Reports answered as new and found already stored when counted (SQLite: "
            "a retry of a report counted before, or one sent to two workers at once): stored = accepted - these, "
            "unless a worker was killed between folding a segment in and deleting it (they are found here again).",
            registry=self.registry)
        self.rejected = Counter("ldp_reports_rejected", "Invalid reports (each rejects its whole batch).",
                                registry=self.registry)
        self.rejected_batches = Counter("ldp_batches_rejected", "POST /api/v1/reports requests rejected with a 4xx.",
                                        registry=self.registry)
        self.batch_size = Histogram("ldp_batch_size", "Reports per accepted batch.", buckets=BATCH_BUCKETS,
                                    registry=self.registry)
        self.relay_refused = Counter(
            "ldp_relay_refused", "Requests of relay batches refused alone, by the first step they failed: key (no "
            "accepted key of that id), decrypt (HPKE opening failed), request (not the one Binary HTTP request, "
            "or over LDP_MAX_BODY), report (not what POST /api/v1/reports accepts).", ["reason"],
            registry=self.registry)
        for reason in RELAY_REASONS:
            self.relay_refused.labels(reason)  # every reason shown, at 0 until one is refused
        self.discovery_left_out = Counter(
            "ldp_discovery_left_out", "Strings discovery found and did not add as candidates: no room within the "
            "10,000 candidates an attribute or LDP_MAX_CELLS.", registry=self.registry)
        self.refresh_seconds = Histogram("ldp_refresh_duration_seconds", "Duration of estimate refreshes.",
                                         registry=self.registry)
        self.transaction_seconds = Histogram("ldp_store_transaction_seconds",
                                             "Duration of database transactions, by name (each try of one the database rolled back for a retry counts on its own).",
                                             ["name"], registry=self.registry)

    def observe_transaction(self, name: str, seconds: float) -> None:
        self.transaction_seconds.labels(name).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text format and its content type: all workers' values in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def share_between_processes(directory: str) -> None:
    """Keep metric values in files under ``directory``, so ``/metrics`` sums every worker.

    Call before any :class:`Metrics` is built (``serve`` does, in the master, before forking).
    """
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    # prometheus-client picks its value class when it is first imported; pick again now.
    values.ValueClass = values.get_value_class()
